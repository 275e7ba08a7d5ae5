//! Reading a tensor file one tensor at a time.
//!
//! [`crate::load`] reads a whole file into memory and copies every tensor out of it: right for
//! our datasets, wrong for a user's 10 GB checkpoint, where `planepack bench` would hold the
//! file and its copies at once. [`TensorFile`] reads only the header when opened (the
//! safetensors JSON header, or the `.npy` header) and then any tensor on request, with a seek
//! and one read, so a caller holds at most the tensors it asked for.
//!
//! The header is validated as strictly as the safetensors crate does it for a whole buffer
//! (offsets that tile the data section exactly, sizes that agree with dtype and shape, a
//! bounded header), because the file length is all that is needed for those checks; a
//! test holds it equal to [`crate::load`] on every dataset.

use crate::{dtype_size, Error, Result, Tensor};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The safetensors crate's cap on the JSON header (100 MB).
const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;

/// Where one tensor lies in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    pub name: String,
    /// The dtype as spelled by safetensors (`F32`, `BF16`, ...).
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Byte offset of the tensor's data in the file.
    pub offset: u64,
    /// Bytes of data.
    pub len: u64,
}

/// An open `.safetensors` or `.npy` file whose header has been read and checked.
pub struct TensorFile {
    path: PathBuf,
    file: File,
    entries: Vec<TensorEntry>,
}

impl TensorFile {
    /// Open a file and read its header; tensors are read by [`TensorFile::read`].
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        let entries = match path.extension().and_then(|e| e.to_str()) {
            Some("safetensors") => {
                safetensors_entries(&mut file, file_len).map_err(|msg| match msg {
                    HeaderError::Io(source) => io(source),
                    HeaderError::Invalid(msg) => Error::Safetensors {
                        path: path.to_owned(),
                        msg,
                    },
                })?
            }
            Some("npy") => {
                vec![
                    npy_entry(&mut file, file_len, crate::npy_array_name(path)).map_err(|msg| {
                        match msg {
                            HeaderError::Io(source) => io(source),
                            HeaderError::Invalid(msg) => Error::Npy {
                                path: path.to_owned(),
                                msg,
                            },
                        }
                    })?,
                ]
            }
            _ => {
                return Err(Error::UnknownFormat {
                    path: path.to_owned(),
                })
            }
        };
        Ok(TensorFile {
            path: path.to_owned(),
            file,
            entries,
        })
    }

    /// The tensors, in the order of their data in the file.
    pub fn entries(&self) -> &[TensorEntry] {
        &self.entries
    }

    /// Read tensor `i` (an index into [`TensorFile::entries`]).
    pub fn read(&mut self, i: usize) -> Result<Tensor> {
        let e = self.entries.get(i).ok_or_else(|| Error::Io {
            path: self.path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such tensor"),
        })?;
        // The length was checked against the file's at open; a file that shrank since is an
        // I/O error from read_exact, not a huge allocation.
        let mut data = vec![0u8; e.len as usize];
        self.file
            .seek(SeekFrom::Start(e.offset))
            .and_then(|_| self.file.read_exact(&mut data))
            .map_err(|source| Error::Io {
                path: self.path.clone(),
                source,
            })?;
        Ok(Tensor {
            name: e.name.clone(),
            dtype: e.dtype.clone(),
            shape: e.shape.clone(),
            data,
        })
    }
}

enum HeaderError {
    Io(std::io::Error),
    Invalid(String),
}

impl From<String> for HeaderError {
    fn from(s: String) -> Self {
        HeaderError::Invalid(s)
    }
}

impl From<&str> for HeaderError {
    fn from(s: &str) -> Self {
        HeaderError::Invalid(s.to_owned())
    }
}

fn read_at(file: &mut File, offset: u64, buf: &mut [u8]) -> std::result::Result<(), HeaderError> {
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.read_exact(buf))
        .map_err(HeaderError::Io)
}

/// Parse and check a safetensors header: 8 bytes of little-endian length, then a JSON object
/// of `name: {dtype, shape, data_offsets}` (and an optional `__metadata__` of strings).
fn safetensors_entries(
    file: &mut File,
    file_len: u64,
) -> std::result::Result<Vec<TensorEntry>, HeaderError> {
    if file_len < 8 {
        return Err("shorter than the 8-byte header length".into());
    }
    let mut n = [0u8; 8];
    read_at(file, 0, &mut n)?;
    let n = u64::from_le_bytes(n);
    if n > MAX_SAFETENSORS_HEADER {
        return Err(format!("header of {n} bytes is over the 100 MB limit").into());
    }
    if n > file_len - 8 {
        return Err(format!("header of {n} bytes runs past the end of the file").into());
    }
    let mut json = vec![0u8; n as usize];
    read_at(file, 8, &mut json)?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&json).map_err(|e| format!("header is not a JSON object: {e}"))?;
    let data_start = 8 + n;
    let data_len = file_len - data_start;
    let mut entries = Vec::with_capacity(header.len());
    for (name, v) in header {
        if name == "__metadata__" {
            let ok = v
                .as_object()
                .is_some_and(|m| m.values().all(|s| s.is_string()));
            if !ok {
                return Err("__metadata__ must map strings to strings".into());
            }
            continue;
        }
        let bad = |what: &str| HeaderError::Invalid(format!("tensor {name:?}: {what}"));
        let obj = v.as_object().ok_or_else(|| bad("not an object"))?;
        let dtype = obj
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| bad("no dtype string"))?
            .to_owned();
        let shape = obj
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| bad("no shape array"))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("shape is not a list of sizes"))?;
        let offsets = obj
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .filter(|o| o.len() == 2)
            .and_then(|o| Some([o[0].as_u64()?, o[1].as_u64()?]))
            .ok_or_else(|| bad("data_offsets is not two offsets"))?;
        if obj.len() != 3 {
            return Err(bad("fields other than dtype, shape, data_offsets"));
        }
        let [begin, end] = offsets;
        if begin > end || end > data_len {
            return Err(bad("data_offsets outside the data section"));
        }
        // A dtype we do not know (the format grows: F8 and F4 variants) is kept unchecked;
        // no codec takes it, so it is never read.
        let bytes = match dtype_size(&dtype) {
            Some(elem) => shape
                .iter()
                .try_fold(elem as u64, |acc, &d| acc.checked_mul(d as u64))
                .ok_or_else(|| bad("shape overflows"))?,
            None => end - begin,
        };
        if bytes != end - begin {
            return Err(bad(&format!(
                "shape and dtype say {bytes} bytes, data_offsets {}",
                end - begin
            )));
        }
        entries.push(TensorEntry {
            name,
            dtype,
            shape,
            offset: data_start + begin,
            len: end - begin,
        });
    }
    // The tensors must tile the data section: no gaps, no overlaps, nothing after.
    entries.sort_by_key(|e| (e.offset, e.len));
    let mut at = data_start;
    for e in &entries {
        if e.offset != at {
            return Err(
                format!("tensor {:?} does not start where the previous ends", e.name).into(),
            );
        }
        at += e.len;
    }
    if at != file_len {
        return Err("the tensors do not cover the data section exactly".into());
    }
    Ok(entries)
}

/// Parse and check a `.npy` header: the data must fill the file after it exactly.
fn npy_entry(
    file: &mut File,
    file_len: u64,
    name: String,
) -> std::result::Result<TensorEntry, HeaderError> {
    let mut start = [0u8; 12];
    let have = (file_len as usize).min(12);
    read_at(file, 0, &mut start[..have])?;
    let data_offset = npy_data_offset(&start[..have])?;
    if data_offset > file_len {
        return Err("header runs past the end of the file".into());
    }
    // The header is inside the file (checked above), so reading it allocates what the file holds.
    let mut header = vec![0u8; data_offset as usize];
    read_at(file, 0, &mut header)?;
    planepack_core::npy::check_header_nesting(&header)?;
    let npy = npyz::NpyFile::new(&header[..]).map_err(|e| e.to_string())?;
    let (dtype, shape, len) = crate::npy_layout(&npy)?;
    if file_len - data_offset != len {
        return Err(format!(
            "header says {len} bytes of data, the file has {}",
            file_len - data_offset
        )
        .into());
    }
    Ok(TensorEntry {
        name,
        dtype: dtype.to_owned(),
        shape,
        offset: data_offset,
        len,
    })
}

/// Where a `.npy` file's data begins, from its first bytes: magic, version, header length.
pub(crate) fn npy_data_offset(start: &[u8]) -> std::result::Result<u64, String> {
    if start.len() < 10 || &start[..6] != b"\x93NUMPY" {
        return Err("no .npy magic".into());
    }
    match start[6] {
        1 => Ok(10 + u16::from_le_bytes([start[8], start[9]]) as u64),
        2 | 3 if start.len() >= 12 => {
            Ok(12 + u32::from_le_bytes([start[8], start[9], start[10], start[11]]) as u64)
        }
        v => Err(format!("unsupported .npy version {v}")),
    }
}
