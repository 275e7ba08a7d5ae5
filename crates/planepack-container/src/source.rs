//! Which bytes of an input file are header and which are tensors.
//!
//! Both input formats are "a header, then the tensors' bytes back to back": safetensors (an
//! 8-byte little-endian header length, a JSON header, the data region) and NumPy `.npy` (magic,
//! version, a Python-literal header, one array's data). The container keeps the header
//! verbatim (the *preamble*) and compresses each tensor's byte range on its own.
//!
//! Parsing needs only the preamble and the file's total length, so a writer reads a few
//! kilobytes to plan the whole file, and a reader can describe a container's tensors from the
//! preamble it stores. The safetensors header is deserialised by the `safetensors` crate (its
//! rules: known dtypes, offsets sorted and contiguous, sizes that match the shapes); we add
//! that the data region ends exactly at the end of the file, as the format requires.

use crate::format::SourceKind;
use crate::{Error, Result};

/// The largest header we accept, as the safetensors crate does (100 MB).
pub const MAX_PREAMBLE: u64 = 100_000_000;

/// One tensor's place in the original file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TensorSpan {
    pub name: String,
    /// The dtype as safetensors spells it (`BF16`, `F32`, `I64`, ...); `.npy` arrays are
    /// given the safetensors name of their NumPy type.
    pub dtype: String,
    pub shape: Vec<usize>,
    /// Bits per element of the dtype.
    pub dtype_bits: usize,
    /// Absolute byte offset in the original file.
    pub offset: u64,
    pub len: u64,
}

/// A parsed input file: its kind, its preamble length and its tensors in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub kind: SourceKind,
    pub preamble_len: u64,
    pub file_len: u64,
    pub tensors: Vec<TensorSpan>,
}

/// How many leading bytes [`Source::preamble_len_of`] needs to find the preamble's length.
pub const PROBE_LEN: usize = 12;

impl Source {
    /// The kind of file and the length of its preamble, from its first [`PROBE_LEN`] bytes (or
    /// fewer, for a short file).
    pub fn preamble_len_of(head: &[u8], file_len: u64) -> Result<(SourceKind, u64)> {
        let invalid = |m: &str| Error::InvalidInput(m.to_owned());
        if head.starts_with(b"\x93NUMPY") {
            let version = *head
                .get(6)
                .ok_or_else(|| invalid(".npy header truncated"))?;
            let len = match version {
                1 => head
                    .get(8..10)
                    .map(|b| 10 + u16::from_le_bytes([b[0], b[1]]) as u64),
                2 | 3 => head
                    .get(8..12)
                    .map(|b| 12 + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64),
                v => {
                    return Err(Error::InvalidInput(format!(
                        ".npy version {v} is not supported"
                    )))
                }
            }
            .ok_or_else(|| invalid(".npy header truncated"))?;
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
            return Err(Error::InvalidInput(format!(
                "not a safetensors or .npy file: header length {n} exceeds the {MAX_PREAMBLE}-byte limit"
            )));
        }
        if n + 8 > file_len {
            return Err(Error::InvalidInput(format!(
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
            return Err(Error::InvalidInput(format!(
                "the header states {stated_len} bytes of header, there are {}",
                preamble.len()
            )));
        }
        let data_len = file_len
            .checked_sub(preamble.len() as u64)
            .ok_or_else(|| Error::InvalidInput("header is longer than the file".into()))?;
        let tensors = match kind {
            SourceKind::Safetensors => safetensors_spans(preamble, data_len)?,
            SourceKind::Npy => vec![npy_span(preamble, data_len, npy_name)?],
        };
        Ok(Source {
            kind,
            preamble_len: preamble.len() as u64,
            file_len,
            tensors,
        })
    }
}

fn safetensors_spans(preamble: &[u8], data_len: u64) -> Result<Vec<TensorSpan>> {
    let json = preamble
        .get(8..)
        .ok_or_else(|| Error::InvalidInput("safetensors header truncated".into()))?;
    let meta = safetensors_metadata(json)?;
    let base = preamble.len() as u64;
    let names = meta.offset_keys();
    let mut spans = Vec::with_capacity(names.len());
    for name in names {
        let info = meta.info(&name).expect("a name the metadata listed");
        let (s, e) = info.data_offsets;
        spans.push(TensorSpan {
            dtype_bits: info.dtype.bitsize(),
            dtype: format!("{:?}", info.dtype),
            shape: info.shape.clone(),
            offset: base + s as u64,
            len: (e - s) as u64,
            name,
        });
    }
    if meta.data_len() as u64 != data_len {
        return Err(Error::InvalidInput(format!(
            "safetensors header describes {} data bytes but the file holds {data_len} after the header",
            meta.data_len()
        )));
    }
    Ok(spans)
}

/// The JSON header as the `safetensors` crate reads it, by its rules, without its
/// `#[serde(flatten)]`: flatten buffers the whole header as generic JSON values first (about
/// 700 bytes a tensor: 1.1 GB for a header of 1.5 million empty tensors). Same semantics: a
/// later duplicate name replaces an earlier one, `__metadata__` at most once, then the crate's
/// own `Metadata::new` checks offsets, sizes and order. Tensors that start at the same offset
/// (empty ones) are ordered by name, so the order does not depend on hashing.
fn safetensors_metadata(json: &[u8]) -> Result<safetensors::tensor::Metadata> {
    use safetensors::tensor::TensorInfo;
    use std::collections::HashMap;

    struct Header {
        metadata: Option<HashMap<String, String>>,
        tensors: HashMap<String, TensorInfo>,
    }
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Header;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a safetensors header (a JSON object)")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Header, A::Error> {
            let mut metadata = None;
            let mut tensors = HashMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == "__metadata__" {
                    if metadata.is_some() {
                        return Err(serde::de::Error::duplicate_field("__metadata__"));
                    }
                    metadata = Some(map.next_value::<Option<HashMap<String, String>>>()?);
                } else {
                    let info = map.next_value::<TensorInfo>()?;
                    tensors.insert(key, info);
                }
            }
            Ok(Header {
                metadata: metadata.flatten(),
                tensors,
            })
        }
    }
    let header = {
        let mut de = serde_json::Deserializer::from_slice(json);
        let h =
            serde::Deserializer::deserialize_map(&mut de, Visit).and_then(|h| de.end().map(|_| h));
        h.map_err(|e| {
            let msg = e.to_string();
            if msg.contains("unknown variant") {
                Error::InvalidInput(format!("unsupported dtype in safetensors header: {msg}"))
            } else {
                Error::InvalidInput(format!("not a valid safetensors header: {msg}"))
            }
        })?
    };
    let mut tensors: Vec<(String, TensorInfo)> = header.tensors.into_iter().collect();
    tensors.sort_by(|(a, x), (b, y)| (x.data_offsets, a).cmp(&(y.data_offsets, b)));
    safetensors::tensor::Metadata::new(header.metadata, tensors)
        .map_err(|e| Error::InvalidInput(format!("not a valid safetensors header: {e}")))
}

fn npy_span(preamble: &[u8], data_len: u64, name: &str) -> Result<TensorSpan> {
    let bad = |m: String| Error::InvalidInput(format!("not a valid .npy file: {m}"));
    planepack_core::npy::check_header_nesting(preamble).map_err(bad)?;
    let npy = npyz::NpyFile::new(preamble).map_err(|e| bad(e.to_string()))?;
    if npy.order() != npyz::Order::C {
        return Err(Error::InvalidInput(
            "Fortran-ordered .npy arrays are not supported".into(),
        ));
    }
    let (dtype, bytes) = match npy.dtype() {
        npyz::DType::Plain(ts) => {
            use npyz::TypeChar::*;
            let size = ts.size_field();
            let name = match (ts.type_char(), size) {
                (Float, 2) => "F16",
                (Float, 4) => "F32",
                (Float, 8) => "F64",
                (Int, 1) => "I8",
                (Int, 2) => "I16",
                (Int, 4) => "I32",
                (Int, 8) => "I64",
                (Uint, 1) => "U8",
                (Uint, 2) => "U16",
                (Uint, 4) => "U32",
                (Uint, 8) => "U64",
                (Bool, 1) => "BOOL",
                (Complex, 8) => "C64",
                _ => return Err(Error::InvalidInput(format!("unsupported .npy dtype {ts}"))),
            };
            (name, size)
        }
        other => {
            return Err(Error::InvalidInput(format!(
                "unsupported .npy dtype {other:?}"
            )))
        }
    };
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let expected = npy
        .shape()
        .iter()
        .try_fold(bytes, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad("shape overflows".into()))?;
    if expected != data_len {
        return Err(bad(format!(
            "shape {shape:?} of {dtype} needs {expected} data bytes but the file holds {data_len}"
        )));
    }
    Ok(TensorSpan {
        name: name.to_owned(),
        dtype: dtype.to_owned(),
        shape,
        dtype_bits: bytes as usize * 8,
        offset: preamble.len() as u64,
        len: data_len,
    })
}
