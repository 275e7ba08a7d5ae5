//! A check on a `.npy` file's header before a parser sees it.
//!
//! Why: the `npyz` header parser (used by both our `.npy` readers) backtracks exponentially on
//! nested brackets: 12 `{` take a second, 16 take 100 s, and the `tensor_files` fuzz target
//! found a 169-byte file that would run for years. The header of a plain numeric array is a
//! dict holding a shape tuple (nesting depth 2), so anything nested deeper than
//! [`MAX_HEADER_NESTING`] is refused before parsing, which bounds the parser's work.

/// The deepest bracket nesting (`{`, `[`, `(`) accepted in a `.npy` header dict.
pub const MAX_HEADER_NESTING: usize = 4;

/// Check the header dict of a `.npy` file whose first bytes (magic, version, length, dict) are
/// `preamble`: brackets nested at most [`MAX_HEADER_NESTING`] deep, quoted text excepted.
pub fn check_header_nesting(preamble: &[u8]) -> Result<(), String> {
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
