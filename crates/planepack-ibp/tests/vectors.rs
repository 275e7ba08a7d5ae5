//! The reference format's test vectors (derived from the authors' library, see
//! `../shared/reference/ibp.md` §1.3): our bytes must equal theirs.

use planepack_ibp::internals::{decode_row, encode_row};
use planepack_ibp::BitOps;
use planepack_ibp::Columns;
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

/// The next output of splitmix64 (the generator `tests/reference/ibp_reference.py` uses to
/// describe rows instead of storing them).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E3779B97F4A7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

/// The rows of a boundary case, exactly as `make_rows` of the reference script builds them.
fn boundary_rows(case: &serde_json::Value) -> (Vec<u8>, usize, u32) {
    let n = case["n"].as_u64().unwrap() as usize;
    let v = case["columns"].as_u64().unwrap() as usize;
    let w = case["width"].as_u64().unwrap() as u32;
    let base = case["base"].as_u64().unwrap();
    let mut state = case["seed"].as_u64().unwrap();
    let mut chunks = vec![0u64; n * v];
    for c in chunks.iter_mut() {
        *c = base | (splitmix64(&mut state) & 0xFFFF);
    }
    for bit in case["boundary"].as_array().unwrap() {
        let f: Vec<u64> = bit
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let (j, b, pct, value) = (f[0] as usize, f[1], f[2] as usize, f[3]);
        for i in 0..n {
            let minority = (i * 37 + j) % 100 < pct;
            let set = if minority { value == 1 } else { value == 0 };
            let c = &mut chunks[i * v + j];
            *c = if set { *c | (1 << b) } else { *c & !(1 << b) };
        }
    }
    let bytes = chunks
        .iter()
        .flat_map(|&c| c.to_le_bytes()[..(w / 8) as usize].to_vec())
        .collect();
    (bytes, v * (w / 8) as usize, w)
}

fn hex_words(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| u64::from_str_radix(h.as_str().unwrap(), 16).unwrap())
        .collect()
}

/// The threshold sweep's arithmetic and the whole encoder against a transliteration of the
/// reference's CUDA encoder (`tests/reference/ibp_reference.py`), on groups where bits have
/// exactly 5 % or 10 % deviant rows: there the reference's f32 loop thresholds (0.90000004,
/// 0.95000005) and the literals 0.9 and 0.95 give different masks. Mask, bitval, chosen
/// threshold, score and every row's bytes must equal the reference's.
#[test]
fn reference_threshold_boundaries() {
    use planepack_ibp::internals::SWEEP;
    use planepack_ibp::{preprocess, Sample, Threshold};
    use sha2::{Digest, Sha256};
    let text = include_str!("reference/boundary_vectors.json");
    let doc: serde_json::Value = serde_json::from_str(text).unwrap();
    let sweep_bits: Vec<String> = SWEEP
        .iter()
        .map(|t| format!("{:08x}", t.to_bits()))
        .collect();
    // The reference's loop also yields 1.0 (an empty mask, never chosen); we leave it out.
    let reference_sweep: Vec<String> = doc["sweep_bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reference_sweep[..6], sweep_bits[..]);
    assert_eq!(reference_sweep[6..], ["3f800000"]);
    let mut telling = 0;
    for case in doc["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let (data, row_bytes, w) = boundary_rows(case);
        let rows = planepack_ibp::Rows::new(&data, row_bytes, w).unwrap();
        let threshold = match case["threshold"].as_f64() {
            Some(t) => Threshold::Fixed(t as f32),
            None => Threshold::Sweep,
        };
        let p = preprocess(&rows, threshold, Sample::All);
        assert_eq!(p.mask.mask, hex_words(&case["mask"]), "{name}: mask");
        assert_eq!(p.mask.bitval, hex_words(&case["bitval"]), "{name}: bitval");
        assert_eq!(p.score, case["score"].as_i64().unwrap(), "{name}: score");
        assert_eq!(
            format!("{:08x}", p.threshold.to_bits()),
            case["chosen_threshold_bits"].as_str().unwrap(),
            "{name}: threshold"
        );
        for ops in ops() {
            let cols = Columns::with_ops(&p.mask, ops);
            let mut all = Vec::new();
            let mut packed_rows = 0;
            for row in data.chunks_exact(row_bytes) {
                let mut out = vec![0u8; row_bytes];
                let (n, packed) = encode_row(row, &cols, &mut out);
                packed_rows += packed as u64;
                all.extend_from_slice(&out[..n]);
            }
            let first = {
                let mut out = vec![0u8; row_bytes];
                let (n, _) = encode_row(&data[..row_bytes], &cols, &mut out);
                out[..n]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            };
            assert_eq!(first, case["first_row"].as_str().unwrap(), "{name}: row 0");
            assert_eq!(packed_rows, case["packed_rows"].as_u64().unwrap(), "{name}");
            assert_eq!(all.len() as u64, case["bytes"].as_u64().unwrap(), "{name}");
            let digest: String = Sha256::digest(&all)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(digest, case["sha256"].as_str().unwrap(), "{name}: bytes");
        }
        telling += case["differs_from_literal_sweep"].as_bool().unwrap() as usize;
    }
    // The vectors must exercise the boundary: some case's mask depends on the loop's arithmetic.
    assert!(telling > 0, "no case tells the f32 loop from the literals");
}
