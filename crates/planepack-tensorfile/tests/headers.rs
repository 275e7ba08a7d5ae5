//! The one tensor-file reader: hand-made files check dtype, shape and byte order; damaged
//! headers are accepted exactly when the `safetensors` crate accepts them, with the same
//! tensors; the file reader agrees with the in-memory parser on every committed dataset.

use planepack_tensorfile::{Source, TensorFile, MAX_JSON_NESTING};
use std::path::Path;

/// A tensor as parsed: (name, dtype, shape, bytes).
type Parsed = (String, String, Vec<usize>, Vec<u8>);

/// Tensors of a whole file, in file order.
fn parse(bytes: &[u8]) -> Result<Vec<Parsed>, String> {
    let s = Source::parse_bytes(bytes, "x").map_err(|e| e.0)?;
    Ok(s.tensors
        .into_iter()
        .map(|t| {
            let data = bytes[t.offset as usize..(t.offset + t.len) as usize].to_vec();
            (t.name, t.dtype, t.shape, data)
        })
        .collect())
}

/// A version 1 `.npy` file: the header dict padded to 64 bytes as NumPy writes it, then `data`.
fn npy_v1(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': {shape}, }}");
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

#[test]
fn npy_header_and_data() {
    // A 2x3 little-endian float32 array, written by hand (format version 1.0).
    let values = [1.0f32, -0.0, f32::NAN, f32::INFINITY, 1e-40, 3.5];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bytes = npy_v1("'<f4'", "(2, 3)", &data);
    let t = parse(&bytes).unwrap().remove(0);
    assert_eq!(
        (t.1.as_str(), t.2.clone(), t.3.clone()),
        ("F32", vec![2, 3], data)
    );
}

#[test]
fn npy_rejects_big_endian_fortran_and_garbage() {
    let bytes = npy_v1("'>f4'", "(1,)", &[0, 0, 0, 0]);
    assert!(parse(&bytes).unwrap_err().contains("big-endian"));
    // One byte has no order.
    assert!(parse(&npy_v1("'>u1'", "(1,)", &[7])).is_ok());
    let mut fortran = npy_v1("'<f4'", "(1,)", &[0, 0, 0, 0]);
    let at = fortran.windows(5).position(|w| w == b"False").unwrap();
    fortran[at..at + 5].copy_from_slice(b"True ");
    assert!(parse(&fortran).unwrap_err().contains("Fortran"));
    assert!(parse(b"not an npy file").is_err());
}

#[test]
fn safetensors_order_and_dtypes() {
    use safetensors::tensor::{serialize, Dtype, TensorView};
    let a: Vec<u8> = (0..8u8).collect();
    let b: Vec<u8> = vec![1, 2, 3, 4];
    let views = vec![
        ("b", TensorView::new(Dtype::BF16, vec![2], &b).unwrap()),
        ("a", TensorView::new(Dtype::F32, vec![2, 1], &a).unwrap()),
    ];
    let bytes = serialize(views, None).unwrap();
    let t = parse(&bytes).unwrap();
    assert_eq!(t.len(), 2);
    let a_t = t.iter().find(|t| t.0 == "a").unwrap();
    assert_eq!(
        (a_t.1.as_str(), a_t.2.clone(), a_t.3.clone()),
        ("F32", vec![2, 1], a)
    );
    assert!(parse(&bytes[..bytes.len() - 1]).is_err());
}

/// Damaged headers: accepted exactly when the safetensors crate accepts them, with the same
/// tensors; the file reader agrees with the in-memory parser.
#[test]
fn headers_are_checked_as_the_safetensors_crate_checks_them() {
    use safetensors::tensor::{serialize, Dtype, TensorView};
    let a: Vec<u8> = (0..24u8).collect();
    let b: Vec<u8> = (0..6u8).collect();
    let e: Vec<u8> = Vec::new();
    let views = vec![
        ("a", TensorView::new(Dtype::F32, vec![2, 3], &a).unwrap()),
        ("b", TensorView::new(Dtype::BF16, vec![3], &b).unwrap()),
        ("e", TensorView::new(Dtype::F16, vec![0, 4], &e).unwrap()),
    ];
    let meta = Some(std::collections::HashMap::from([(
        "format".to_string(),
        "pt".to_string(),
    )]));
    let good = serialize(views, meta).unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.safetensors");
    let check = |bytes: &[u8], what: &str| {
        let ours = parse(bytes);
        let theirs = safetensors::SafeTensors::deserialize(bytes).map(|st| {
            let mut v: Vec<(String, Vec<u8>)> = st
                .tensors()
                .into_iter()
                .map(|(name, view)| (name, view.data().to_vec()))
                .collect();
            v.sort();
            v
        });
        match (&ours, theirs) {
            (Ok(o), Ok(t)) => {
                let mut o: Vec<(String, Vec<u8>)> =
                    o.iter().map(|t| (t.0.clone(), t.3.clone())).collect();
                o.sort();
                assert_eq!(o, t, "{what}");
            }
            (Err(_), Err(_)) => {}
            (Ok(_), Err(e)) => panic!("{what}: we accept, the crate says {e}"),
            (Err(e), Ok(_)) => panic!("{what}: the crate accepts, we say {e}"),
        }
        std::fs::write(&path, bytes).unwrap();
        let file = TensorFile::open(&path, "x").and_then(|mut f| {
            (0..f.source().tensors.len())
                .map(|i| f.read(i))
                .collect::<Result<Vec<_>, _>>()
        });
        match (ours, file) {
            (Ok(o), Ok(f)) => {
                assert_eq!(o.into_iter().map(|t| t.3).collect::<Vec<_>>(), f, "{what}")
            }
            (Err(_), Err(_)) => {}
            (o, f) => panic!(
                "{what}: in memory {:?}, from the file {:?}",
                o.is_ok(),
                f.is_ok()
            ),
        }
    };
    check(&good, "the file as written");
    for len in 0..good.len() {
        check(&good[..len], &format!("cut to {len} bytes"));
    }
    let mut longer = good.clone();
    longer.push(0);
    check(&longer, "a byte appended");
    let mut seed = 7u64;
    for round in 0..3000 {
        let mut bad = good.clone();
        for _ in 0..1 + round % 3 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (seed >> 33) as usize % (8 + n);
            bad[at] = (seed >> 20) as u8;
        }
        check(
            &bad,
            &format!(
                "round {round}: {:?}",
                String::from_utf8_lossy(&bad[8..8 + n])
            ),
        );
    }
    // Offsets that overlap or leave a hole, a shape that overflows: hand-written.
    for header in [
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#,
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}"#,
        r#"{"a":{"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,4]}}"#,
    ] {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        check(&bytes, header);
        assert!(parse(&bytes).is_err(), "{header}");
    }
}

/// A tensor's info with deeply nested JSON in an unknown field: once accepted by `compress`
/// and refused by `bench` (two parsers); now refused by the one parser, quickly, past
/// `MAX_JSON_NESTING`, and accepted below it as the safetensors crate does.
#[test]
fn deeply_nested_json_is_refused_by_the_one_parser() {
    let file = |depth: usize| {
        let json = format!(
            r#"{{"a":{{"dtype":"U8","shape":[4],"data_offsets":[0,4],"x":{}1{}}}}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json.as_bytes());
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        bytes
    };
    assert!(parse(&file(MAX_JSON_NESTING - 2)).is_ok());
    let t = std::time::Instant::now();
    for depth in [MAX_JSON_NESTING, 10_000, 1_000_000] {
        let err = parse(&file(depth)).unwrap_err();
        assert!(err.contains("nested deeper"), "{err}");
    }
    assert!(t.elapsed().as_secs() < 5);
}

/// Found by the `tensor_files` fuzz target: a version-3 `.npy` header that claims 4 GiB in a
/// 33-byte file is refused before anything is allocated for it.
#[test]
fn npy_header_longer_than_the_file_is_refused() {
    let mut bytes = b"\x93NUMPY\x03\x00".to_vec();
    bytes.extend_from_slice(&0xFFFF_FF00u32.to_le_bytes());
    bytes.extend_from_slice(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }");
    let err = parse(&bytes).unwrap_err();
    assert!(err.contains("longer than the file"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, &bytes).unwrap();
    assert!(TensorFile::open(&path, "x").is_err());
}

/// Found by the `tensor_files` fuzz target: a `.npy` header of nested brackets made the header
/// parser backtrack exponentially (16 `{` took 100 s, the 169-byte reproducer years); it is
/// refused at once.
#[test]
fn deeply_nested_npy_header_is_refused_quickly() {
    let dict = "{".repeat(60);
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    let t = std::time::Instant::now();
    let err = parse(&bytes).unwrap_err();
    assert!(err.contains("nests"), "{err}");
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
}

/// `.npy` read from a file: header and data as the in-memory parser reads them; cut files
/// refused; ranges of a tensor read as its slices.
#[test]
fn files_read_what_bytes_parse() {
    let mut bytes = npy_v1("'<u2'", "(3,)", &[1, 0, 2, 0, 3, 0]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, &bytes).unwrap();
    let mut f = TensorFile::open(&path, "x").unwrap();
    assert_eq!(f.read(0).unwrap(), parse(&bytes).unwrap()[0].3);
    assert_eq!(f.read_range(0, 2..5).unwrap(), vec![2, 0, 3]);
    assert!(f.read_range(0, 2..7).is_err());
    assert!(f.read(1).is_err());
    for len in 0..bytes.len() {
        std::fs::write(&path, &bytes[..len]).unwrap();
        assert!(TensorFile::open(&path, "x").is_err(), "cut to {len}");
    }
    bytes.push(0);
    std::fs::write(&path, &bytes).unwrap();
    assert!(TensorFile::open(&path, "x").is_err(), "a byte too many");
}

/// Every committed dataset file: the file reader and the in-memory parser agree.
#[test]
fn every_dataset_file_reads_as_it_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets");
    let mut files = 0;
    for kind in ["activations", "embedding", "gnn", "kv", "weights"] {
        for e in std::fs::read_dir(dir.join(kind)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "safetensors") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let all = parse(&bytes).unwrap();
            let mut f = TensorFile::open(&path, "x").unwrap();
            assert_eq!(f.source().tensors.len(), all.len());
            for (i, t) in all.iter().enumerate() {
                assert_eq!(f.read(i).unwrap(), t.3, "{} tensor {i}", path.display());
            }
            files += 1;
        }
    }
    assert!(files >= 15, "{files} dataset files");
}
