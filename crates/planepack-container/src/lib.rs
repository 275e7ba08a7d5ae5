//! planepack's file container (`.ppk`): a user's `.safetensors` or `.npy` file with every tensor
//! compressed by the codec that suits it, and enough checksums that corruption is found before
//! wrong data leaves the tool.
//!
//! Why a container of our own rather than compressing the whole file with one codec:
//!
//! * **Per-tensor codecs.** Embeddings, activations and masks want different codecs; `auto`
//!   picks per tensor by ratio or by modelled transfer time on a link ([`select`]).
//! * **Byte-for-byte round trip.** The original file's header is kept verbatim (JSON key order,
//!   padding, `__metadata__` and all), so `decompress` gives back exactly the input file, not a
//!   re-serialisation of its tensors.
//! * **Random access, bounded memory.** A tensor is stored as parts of at most 64 MiB, each
//!   with a fixed-size entry (offsets, sizes, codec, two checksums), so a reader decodes one
//!   tensor without reading the others, and neither side ever holds more than a part of any
//!   tensor, whatever its size.
//! * **Detected corruption.** The header, the original file header and the entry table are
//!   covered by one xxh3-64 checksum; every tensor by an xxh3-64 of its compressed bytes
//!   (checked before decoding) and of its raw bytes (checked after decoding). There are no
//!   unchecked bytes: no padding, and the file must end exactly where the last payload ends.
//!
//! The byte layout is specified in `docs/format-container.md`.
//!
//! Modules: [`source`] parses the input files (which bytes are header, which are tensors),
//! [`format`](mod@format) is the on-disk header and entry table, [`codecs`] maps codec ids to codecs,
//! [`select`] chooses a codec per part, [`engine`] is where codecs run (the CPU, or a GPU
//! plugged in for the codecs it has kernels for), [`write`](mod@write) compresses a file, [`read`] opens,
//! verifies and decompresses one, [`read_at`] is the positioned reads both use.

pub mod codecs;
pub mod engine;
#[doc(hidden)]
pub mod forge;
pub mod format;
pub mod read;
pub mod read_at;
pub mod select;
pub mod write;

/// The input files' headers: which bytes are header and which are tensors (the one reader of
/// them, shared with `planepack bench` and the harness).
pub use planepack_tensorfile as source;

pub use codecs::{CodecId, CodecSpec};
pub use engine::{Engine, EngineCounts};
pub use format::{Entry, Header};
pub use read::Container;
pub use read_at::ReadAt;
pub use select::{Choice, Policy};
pub use source::{Source, SourceKind, TensorSpan};
pub use write::{compress, CompressOptions, Event, TensorReport, Written};

/// What can go wrong, by whose fault: the category decides the command's exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input file is not something we can compress (not safetensors or .npy, a header
    /// that lies about offsets or dtypes, an unsupported dtype).
    #[error("{0}")]
    InvalidInput(String),
    /// A compressed file that fails a structural check or a checksum.
    #[error("{0}")]
    Corrupt(String),
    /// A codec refused to encode a tensor (for example LZ4's 4 GiB block limit).
    #[error("tensor {tensor:?}: {codec}: {source}")]
    Codec {
        tensor: String,
        codec: String,
        source: planepack_core::Error,
    },
    /// Reading an input failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Writing the output failed (a full disk): the output, not the input, is to blame.
    #[error("writing the output: {0}")]
    Output(std::io::Error),
    /// A codec broke its own rules on this tensor (a bug in planepack: it panicked, and the
    /// panic was caught).
    #[error("{0}")]
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<planepack_tensorfile::Invalid> for Error {
    fn from(e: planepack_tensorfile::Invalid) -> Error {
        Error::InvalidInput(e.0)
    }
}

/// 64-bit checksum used everywhere in the container: xxh3-64 with seed 0.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}
