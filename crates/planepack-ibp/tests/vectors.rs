//! The reference format's test vectors (derived from the authors' library, see
//! `../shared/reference/ibp.md` §1.3): our bytes must equal theirs.

use planepack_ibp::bits::BitOps;
use planepack_ibp::row::{decode_row, encode_row, Columns};
use planepack_ibp::Mask;

fn words32(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Encode `row` with `mask` on every pext/pdep implementation: the row must pack into exactly
/// the reference's bytes (`hex`, as the reference prints them) and decode back. Returns the bytes.
fn check_vector(mask: &Mask, row: &[u8], hex: &[&str]) -> Vec<u8> {
    let expected_len = hex.concat().len() / 2;
    let mut last = Vec::new();
    for ops in ops() {
        let cols = Columns::with_ops(mask, ops);
        let mut out = vec![0u8; row.len()];
        let (n, packed) = encode_row(row, &cols, &mut out);
        assert!(packed);
        assert_eq!(n, expected_len);
        let got: String = out[..n].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, hex.concat());
        let mut back = vec![0u8; row.len()];
        assert_eq!(decode_row(&out[..n], true, &cols, &mut back), Ok(n));
        assert_eq!(back, row);
        last = out[..n].to_vec();
    }
    last
}

fn ops() -> Vec<BitOps> {
    let mut v = vec![BitOps::portable()];
    if BitOps::detect().is_bmi2() {
        v.push(BitOps::detect());
    }
    v
}

#[test]
fn reference_vector_w32() {
    let mask = Mask {
        width: 32,
        mask: vec![
            0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFFFF0000, 0xFF0000FF, 0, 0xFFFFFFFF, 0x80000001,
        ],
        bitval: vec![
            0x3F800000, 0x3F800000, 0x3F800000, 0x3F800000, 0x12000034, 0, 0xCAFEBABE, 0x00000001,
        ],
    };
    let x: [u32; 8] = [
        0x3F801234, 0x3F80ABCD, 0x40001111, 0x3F80FFFF, 0x12ABCD34, 0x01020304, 0xCAFEBABE,
        0x7FFFFFFF,
    ];
    let row: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = check_vector(
        &mask,
        &row,
        &[
            "fb000000", "cdab3412", "11110040", "cdabffff", "04030201", "fcffffff",
        ],
    );
    assert_eq!(
        words32(&out),
        vec![0x000000fb, 0x1234abcd, 0x40001111, 0xffffabcd, 0x01020304, 0xfffffffc]
    );
}

#[test]
fn reference_vector_w64() {
    let mask = Mask {
        width: 64,
        mask: vec![0xFFFFFFFFFFFF0000; 4],
        bitval: vec![0x3FF0000000000000; 4],
    };
    let x: [u64; 4] = [
        0x3FF0000000001234,
        0x3FF0000000005678,
        0x3FF000000000ABCD,
        0x4000000000000001,
    ];
    let row: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    check_vector(
        &mask,
        &row,
        &["0700000000000000", "0040cdab78563412", "0000010000000000"],
    );
}
