//! `.npy` headers: the preamble's length, its one array, and a check before `npyz` parses it.
//!
//! Why the check: the `npyz` header parser backtracks exponentially on nested brackets: 12
//! `{` take a second, 16 take 100 s, and the `tensor_files` fuzz target found a 169-byte file
//! that would run for years. The header of a plain numeric array is a dict holding a shape
//! tuple (nesting depth 2), so anything nested deeper than [`MAX_HEADER_NESTING`] is refused
//! before parsing, which bounds the parser's work.

use crate::{invalid, Result, TensorSpan};

/// The length of a `.npy` preamble (magic, version, header length, header dict) from its first
/// bytes (at most [`crate::PROBE_LEN`] are needed).
pub(crate) fn preamble_len(head: &[u8]) -> Result<u64> {
    let version = *head
        .get(6)
        .ok_or_else(|| invalid(".npy header truncated"))?;
    match version {
        1 => head
            .get(8..10)
            .map(|b| 10 + u16::from_le_bytes([b[0], b[1]]) as u64),
        2 | 3 => head
            .get(8..12)
            .map(|b| 12 + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64),
        v => return Err(invalid(format!(".npy version {v} is not supported"))),
    }
    .ok_or_else(|| invalid(".npy header truncated"))
}

/// The one array of a `.npy` preamble whose data is `data_len` bytes: a C-ordered,
/// little-endian (or single-byte) numeric dtype, with a shape that needs exactly `data_len`
/// bytes.
pub(crate) fn span(preamble: &[u8], data_len: u64, name: &str) -> Result<TensorSpan> {
    let bad = |m: String| invalid(format!("not a valid .npy file: {m}"));
    check_header_nesting(preamble).map_err(bad)?;
    let npy = npyz::NpyFile::new(preamble).map_err(|e| bad(e.to_string()))?;
    if npy.order() != npyz::Order::C {
        return Err(invalid("Fortran-ordered .npy arrays are not supported"));
    }
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(invalid(format!("unsupported .npy dtype {:?}", npy.dtype())));
    };
    let size = ts.size_field();
    // Tensors are little-endian everywhere else (safetensors, the codecs, the Python side's
    // dtype on the way back), so a big-endian array would come back reinterpreted.
    if ts.to_string().starts_with('>') && size > 1 {
        return Err(invalid(format!(
            "big-endian .npy dtype {ts} is not supported (byte-swap it to little-endian)"
        )));
    }
    use npyz::TypeChar::*;
    let dtype = match (ts.type_char(), size) {
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
        _ => return Err(invalid(format!("unsupported .npy dtype {ts}"))),
    };
    let shape: Vec<usize> = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()
        .ok_or_else(|| bad("shape too large".into()))?;
    let expected = npy
        .shape()
        .iter()
        .try_fold(size, |a, &d| a.checked_mul(d))
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
        dtype_bits: size as usize * 8,
        offset: preamble.len() as u64,
        len: data_len,
    })
}

/// The deepest bracket nesting (`{`, `[`, `(`) accepted in a `.npy` header dict.
pub const MAX_HEADER_NESTING: usize = 4;

/// Check the header dict of a `.npy` file whose first bytes (magic, version, length, dict) are
/// `preamble`: brackets nested at most [`MAX_HEADER_NESTING`] deep, quoted text excepted.
pub fn check_header_nesting(preamble: &[u8]) -> std::result::Result<(), String> {
    let dict_at = match preamble.get(6) {
        Some(1) => 10,
        _ => 12,
    };
    let dict = preamble.get(dict_at..).unwrap_or(&[]);
    let (mut depth, mut quote) = (0usize, None::<u8>);
    for &b in dict {
        match (quote, b) {
            (Some(q), _) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(b),
            (None, b'{' | b'[' | b'(') => {
                depth += 1;
                if depth > MAX_HEADER_NESTING {
                    return Err(format!(
                        "header nests brackets deeper than {MAX_HEADER_NESTING} (not a plain array's header)"
                    ));
                }
            }
            (None, b'}' | b']' | b')') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(dict: &str) -> Vec<u8> {
        let mut f = b"\x93NUMPY\x01\x00".to_vec();
        f.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        f.extend_from_slice(dict.as_bytes());
        f
    }

    #[test]
    fn plain_headers_pass_and_deep_ones_are_refused() {
        let plain = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert!(check_header_nesting(&v1(plain)).is_ok());
        assert!(check_header_nesting(&v1("{'descr': '((((((', 'shape': (1,), }")).is_ok());
        assert!(check_header_nesting(&v1(&"{".repeat(5))).is_err());
        assert!(check_header_nesting(&v1("{'descr': [(('a', '<f4'), ((1,),))]}")).is_err());
        // A header length byte that happens to be `{` is not part of the dict.
        let mut f = b"\x93NUMPY\x03\x00{\x00\x00\x00".to_vec();
        f.extend_from_slice(b"{'shape': (1,), }");
        assert!(check_header_nesting(&f).is_ok());
    }
}
