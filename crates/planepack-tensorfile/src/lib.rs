//! Which bytes of a tensor file are header and which are each tensor's: the one reader of
//! safetensors and `.npy` headers in planepack.
//!
//! Both formats are "a header, then the tensors' bytes back to back": safetensors (an 8-byte
//! little-endian header length, a JSON header, the data region) and NumPy `.npy` (magic,
//! version, a Python-literal header, one array's data). The container keeps the header
//! verbatim (the *preamble*) and compresses each tensor's byte range on its own; `planepack
//! bench`, the harness and the Python package read the same files. They all parse with this
//! crate, so a file one command accepts is a file every command accepts, by one set of rules
//! (two parsers once disagreed on deeply nested JSON).
//!
//! Parsing needs only the preamble and the file's total length ([`Source::parse`]), so a writer
//! reads a few kilobytes to plan a 2 GB file, and a reader can describe a container's tensors
//! from the preamble it stores. [`TensorFile`] does that for a file on disk and then reads
//! tensors, or ranges of them, on request.
//!
//! The rules: the `safetensors` crate's for the JSON header (known dtypes, offsets sorted and
//! contiguous, sizes that match the shapes, at most 100 MB), brackets nested at most
//! [`MAX_JSON_NESTING`] deep, and the data region ending exactly at the end of the file; for
//! `.npy`, numpy's header format with brackets nested at most [`npy::MAX_HEADER_NESTING`] deep,
//! C order, little-endian numeric dtypes, and data filling the rest of the file exactly.

mod file;
pub mod npy;
mod safetensors_header;

pub use file::TensorFile;

/// The largest header we accept, as the safetensors crate does (100 MB).
pub const MAX_PREAMBLE: u64 = 100_000_000;

/// How deep brackets may nest in a safetensors JSON header. A valid header nests three deep
/// (the object, a tensor's object, its shape); JSON parsers recurse on nesting, and serde_json
/// refuses past 128 only where it builds values, not where it skips unknown fields, so a
/// header of millions of `[` would otherwise reach a parser's stack.
pub const MAX_JSON_NESTING: usize = 16;

/// How many leading bytes [`Source::preamble_len_of`] needs to find the preamble's length.
pub const PROBE_LEN: usize = 12;

/// A file this crate does not accept, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// Reading a tensor file failed: its bytes could not be read, or they are not a valid file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Invalid(#[from] Invalid),
}

pub type Result<T> = std::result::Result<T, Invalid>;

/// The format of a tensor file (the discriminants are the container format's source ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Safetensors = 1,
    Npy = 2,
}

/// One tensor's place in the file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TensorSpan {
    pub name: String,
    /// The dtype as safetensors spells it (`BF16`, `F32`, `I64`, ...); `.npy` arrays are
    /// given the safetensors name of their NumPy type.
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Bits per element of the dtype.
    pub dtype_bits: usize,
    /// Absolute byte offset in the file.
    pub offset: u64,
    pub len: u64,
}

/// A parsed file: its kind, its preamble length and its tensors in file order (by data
/// offsets, then name: empty tensors share an offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub kind: SourceKind,
    pub preamble_len: u64,
    pub file_len: u64,
    pub tensors: Vec<TensorSpan>,
}

fn invalid(m: impl Into<String>) -> Invalid {
    Invalid(m.into())
}

impl Source {
    /// The kind of file and the length of its preamble, from its first [`PROBE_LEN`] bytes (or
    /// fewer, for a short file).
    pub fn preamble_len_of(head: &[u8], file_len: u64) -> Result<(SourceKind, u64)> {
        if head.starts_with(b"\x93NUMPY") {
            let len = npy::preamble_len(head)?;
            if len > file_len {
                return Err(invalid(".npy header is longer than the file"));
            }
            return Ok((SourceKind::Npy, len));
        }
        let Some(n) = head.get(..8) else {
            return Err(invalid(
                "not a safetensors or .npy file: shorter than a safetensors header length",
            ));
        };
        let n = u64::from_le_bytes(n.try_into().unwrap());
        if n > MAX_PREAMBLE {
            return Err(invalid(format!(
                "not a safetensors or .npy file: header length {n} exceeds the {MAX_PREAMBLE}-byte limit"
            )));
        }
        if n + 8 > file_len {
            return Err(invalid(format!(
                "not a safetensors file, or a truncated one: header of {n} bytes but the file has {file_len}"
            )));
        }
        Ok((SourceKind::Safetensors, 8 + n))
    }

    /// Parse a preamble (the file's first `preamble.len()` bytes) of a file of `file_len`
    /// bytes. `npy_name` names the single array of a `.npy` file.
    pub fn parse(
        kind: SourceKind,
        preamble: &[u8],
        file_len: u64,
        npy_name: &str,
    ) -> Result<Source> {
        // The length the header states for itself must be the preamble's: a stored header
        // that disagrees would decompress into a file its format rejects.
        let head = &preamble[..preamble.len().min(PROBE_LEN)];
        let (stated_kind, stated_len) = Source::preamble_len_of(head, file_len)?;
        if stated_kind != kind || stated_len != preamble.len() as u64 {
            return Err(invalid(format!(
                "the header states {stated_len} bytes of header, there are {}",
                preamble.len()
            )));
        }
        let data_len = file_len
            .checked_sub(preamble.len() as u64)
            .ok_or_else(|| invalid("header is longer than the file"))?;
        let tensors = match kind {
            SourceKind::Safetensors => safetensors_header::spans(preamble, data_len)?,
            SourceKind::Npy => vec![npy::span(preamble, data_len, npy_name)?],
        };
        Ok(Source {
            kind,
            preamble_len: preamble.len() as u64,
            file_len,
            tensors,
        })
    }

    /// Parse a whole file held in memory.
    pub fn parse_bytes(bytes: &[u8], npy_name: &str) -> Result<Source> {
        let head = &bytes[..bytes.len().min(PROBE_LEN)];
        let (kind, pre) = Source::preamble_len_of(head, bytes.len() as u64)?;
        Source::parse(kind, &bytes[..pre as usize], bytes.len() as u64, npy_name)
    }
}

/// Bits per element of a safetensors dtype name (sub-byte types included), or None for a
/// name the safetensors format does not define.
pub fn dtype_bits(dtype: &str) -> Option<usize> {
    serde_json::from_value::<safetensors::Dtype>(serde_json::Value::String(dtype.to_owned()))
        .ok()
        .map(|d| d.bitsize())
}
