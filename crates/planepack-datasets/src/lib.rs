//! Real tensors for planepack's tests, benchmarks and figures.
//!
//! Two jobs: load tensors from the files users and our `datasets/` folder hold (safetensors and
//! `.npy`), and read `datasets/manifest.toml`, which says for every committed dataset where it
//! came from, how it was made and what its bytes hash to. Nothing here needs Python: the
//! generator scripts in `datasets/` are a one-off maintainer step.

mod manifest;
mod stats;
mod stream;

pub use manifest::{Dataset, Manifest, Source};
pub use stats::TensorStats;
pub use stream::{TensorEntry, TensorFile};

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
    #[error("{path}: not a valid safetensors file: {msg}")]
    Safetensors { path: PathBuf, msg: String },
    #[error("{path}: not a valid .npy file: {msg}")]
    Npy { path: PathBuf, msg: String },
    #[error("{path}: unsupported file type (expected .safetensors or .npy)")]
    UnknownFormat { path: PathBuf },
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
    match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => parse_safetensors(&bytes).map_err(|msg| Error::Safetensors {
            path: path.to_owned(),
            msg,
        }),
        Some("npy") => parse_npy(&bytes, npy_array_name(path))
            .map(|t| vec![t])
            .map_err(|msg| Error::Npy {
                path: path.to_owned(),
                msg,
            }),
        _ => Err(Error::UnknownFormat {
            path: path.to_owned(),
        }),
    }
}

/// Parse safetensors bytes into tensors, in the order of their data offsets.
pub fn parse_safetensors(bytes: &[u8]) -> std::result::Result<Vec<Tensor>, String> {
    let st = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let mut out: Vec<(usize, Tensor)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let data = view.data();
            let offset = data.as_ptr() as usize - bytes.as_ptr() as usize;
            (
                offset,
                Tensor {
                    name,
                    dtype: format!("{:?}", view.dtype()),
                    shape: view.shape().to_vec(),
                    data: data.to_vec(),
                },
            )
        })
        .collect();
    out.sort_by_key(|(o, _)| *o);
    Ok(out.into_iter().map(|(_, t)| t).collect())
}

/// A `.npy` header's dtype name, shape, and data length in bytes (checked for overflow).
pub(crate) fn npy_layout<R: std::io::Read>(
    npy: &npyz::NpyFile<R>,
) -> std::result::Result<(&'static str, Vec<usize>, u64), String> {
    let (dtype, size) = npy_dtype(npy)?;
    let shape: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()
        .ok_or("shape too large")?;
    let len = npy
        .shape()
        .iter()
        .try_fold(size as u64, |acc, &d| acc.checked_mul(d))
        .ok_or("shape overflows")?;
    Ok((dtype, shape, len))
}

/// The name of a `.npy` file's one array: its file stem (`array` if it has none in UTF-8).
pub(crate) fn npy_array_name(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("array")
        .to_owned()
}

/// Parse `.npy` bytes (little-endian numeric arrays, C order).
pub fn parse_npy(bytes: &[u8], name: String) -> std::result::Result<Tensor, String> {
    let data_offset = stream::npy_data_offset(bytes)?;
    // The header length is checked against the bytes before npyz allocates it.
    let header = usize::try_from(data_offset)
        .ok()
        .and_then(|end| bytes.get(..end))
        .ok_or("header runs past the end of the file")?;
    planepack_core::npy::check_header_nesting(header)?;
    let npy = npyz::NpyFile::new(header).map_err(|e| e.to_string())?;
    let (dtype, shape, len) = npy_layout(&npy)?;
    let data = usize::try_from(data_offset)
        .ok()
        .and_then(|at| bytes.get(at..))
        .filter(|d| d.len() as u64 == len)
        .ok_or_else(|| format!("header says {len} bytes of data, the file has others"))?;
    Ok(Tensor {
        name,
        dtype: dtype.into(),
        shape,
        data: data.to_vec(),
    })
}

/// The safetensors spelling and element size of a `.npy` array's dtype (C order, little
/// endian, numeric only).
fn npy_dtype<R: std::io::Read>(
    npy: &npyz::NpyFile<R>,
) -> std::result::Result<(&'static str, usize), String> {
    if npy.order() != npyz::Order::C {
        return Err("Fortran-ordered arrays are not supported".into());
    }
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(format!("unsupported dtype {:?}", npy.dtype()));
    };
    let s = ts.to_string();
    if s.starts_with('>') && ts.size_field() > 1 {
        return Err(format!("big-endian dtype {s} is not supported"));
    }
    let dtype = match (ts.type_char(), ts.size_field()) {
        (npyz::TypeChar::Float, 4) => "F32",
        (npyz::TypeChar::Float, 2) => "F16",
        (npyz::TypeChar::Float, 8) => "F64",
        (npyz::TypeChar::Uint, 1) => "U8",
        (npyz::TypeChar::Int, 1) => "I8",
        (npyz::TypeChar::Int, 4) => "I32",
        (npyz::TypeChar::Int, 8) => "I64",
        (npyz::TypeChar::Uint, 2) => "U16",
        (npyz::TypeChar::Int, 2) => "I16",
        (npyz::TypeChar::Bool, 1) => "BOOL",
        _ => return Err(format!("unsupported dtype {s}")),
    };
    Ok((
        dtype,
        dtype_size(dtype).expect("every dtype above has a size"),
    ))
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

/// Bytes per element of a safetensors dtype.
pub fn dtype_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "U8" | "I8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
        _ => return None,
    })
}

impl Tensor {
    /// Bytes of one element (1 for unknown dtypes).
    pub fn dtype_bytes(&self) -> usize {
        dtype_size(&self.dtype).unwrap_or(1)
    }
}
