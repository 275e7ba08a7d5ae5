//! Real tensors for planepack's tests, benchmarks and figures.
//!
//! Two jobs: load tensors from the files users and our `datasets/` folder hold (safetensors and
//! `.npy`), and read `datasets/manifest.toml`, which says for every committed dataset where it
//! came from, how it was made and what its bytes hash to. Nothing here needs Python: the
//! generator scripts in `datasets/` are a one-off maintainer step.

mod manifest;
mod stats;

pub use manifest::{Dataset, Manifest, Source};
pub use stats::TensorStats;

use planepack_core::ElemType;
use std::path::{Path, PathBuf};

/// Errors from loading files or the manifest.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not a valid safetensors or `.npy` file, by `planepack-tensorfile`'s rules (the ones
    /// every command reads files by).
    #[error("{path}: {msg}")]
    TensorFile { path: PathBuf, msg: String },
    #[error("manifest: {0}")]
    Manifest(String),
    #[error("{dataset}: {msg}")]
    Verify { dataset: String, msg: String },
}

pub type Result<T> = std::result::Result<T, Error>;

/// One tensor: its name, dtype as the file states it, shape and raw little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    /// The dtype as spelled by safetensors (`F32`, `BF16`, `I64`, ...).
    pub dtype: String,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    /// The codec element type, if the dtype is one planepack compresses.
    pub fn elem(&self) -> Option<ElemType> {
        elem_of(&self.dtype)
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// The codec element type for a safetensors dtype name.
pub fn elem_of(dtype: &str) -> Option<ElemType> {
    match dtype {
        "F32" => Some(ElemType::F32),
        "F16" => Some(ElemType::F16),
        "BF16" => Some(ElemType::BF16),
        "U8" | "I8" | "F8_E4M3" | "F8_E5M2" | "BOOL" => Some(ElemType::U8),
        _ => None,
    }
}

/// Load every tensor of a `.safetensors` or `.npy` file, in file order.
pub fn load(path: &Path) -> Result<Vec<Tensor>> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&bytes, &npy_array_name(path)).map_err(|msg| Error::TensorFile {
        path: path.to_owned(),
        msg,
    })
}

/// Every tensor of every dataset in the manifest of `dir` (the corpus: [`datasets_dir`]), in
/// manifest and file order: what the tests that cover "every dataset tensor" walk.
pub fn load_all(dir: &Path) -> Result<Vec<Tensor>> {
    let mut all = Vec::new();
    for d in &Manifest::read(dir)?.datasets {
        all.extend(load(&dir.join(&d.file))?);
    }
    Ok(all)
}

/// The tensors of a whole safetensors or `.npy` file in memory (`npy_name` names a `.npy`
/// file's one array), parsed by `planepack-tensorfile`, in file order.
pub fn parse(bytes: &[u8], npy_name: &str) -> std::result::Result<Vec<Tensor>, String> {
    let source = planepack_tensorfile::Source::parse_bytes(bytes, npy_name).map_err(|e| e.0)?;
    Ok(source
        .tensors
        .into_iter()
        .map(|t| Tensor {
            data: bytes[t.offset as usize..(t.offset + t.len) as usize].to_vec(),
            name: t.name,
            dtype: t.dtype,
            shape: t.shape,
        })
        .collect())
}

/// The name of a `.npy` file's one array: its file stem (`array` if it has none in UTF-8).
pub fn npy_array_name(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("array")
        .to_owned()
}

/// The workspace's `datasets/` folder (found from this crate's location at build time, or from
/// `PLANEPACK_DATASETS` at run time).
pub fn datasets_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("PLANEPACK_DATASETS") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets")
}

/// Lower-case hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes per element of a safetensors dtype (None for sub-byte and unknown types).
pub fn dtype_size(dtype: &str) -> Option<usize> {
    planepack_tensorfile::dtype_bits(dtype)
        .filter(|b| b % 8 == 0)
        .map(|b| b / 8)
}

impl Tensor {
    /// Bytes of one element (1 for sub-byte dtypes).
    pub fn dtype_bytes(&self) -> usize {
        dtype_size(&self.dtype).unwrap_or(1)
    }
}
