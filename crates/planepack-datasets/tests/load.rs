//! The loader reads every committed dataset and agrees with the manifest; hand-made files
//! check dtype, shape and byte order.

use planepack_datasets::{datasets_dir, load, parse_npy, parse_safetensors, Manifest};

#[test]
fn every_dataset_matches_the_manifest() {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).expect("datasets/manifest.toml");
    assert!(!manifest.datasets.is_empty());
    for d in &manifest.datasets {
        d.verify(&dir).unwrap_or_else(|e| panic!("{e}"));
        let tensors = load(&dir.join(&d.file)).unwrap();
        for t in &tensors {
            assert!(
                !t.shape.is_empty() || t.data.len() == t.dtype_bytes(),
                "{}: {}",
                d.name,
                t.name
            );
        }
    }
}

#[test]
fn npy_header_and_data() {
    // A 2x3 little-endian float32 array, written by hand (format version 1.0).
    let values = [1.0f32, -0.0, f32::NAN, f32::INFINITY, 1e-40, 3.5];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bytes = npy_v1("'<f4'", "(2, 3)", &data);
    let t = parse_npy(&bytes, "x".into()).unwrap();
    assert_eq!(t.dtype, "F32");
    assert_eq!(t.shape, vec![2, 3]);
    let back: Vec<u32> = t
        .data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(back, values.map(f32::to_bits));
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
fn npy_rejects_big_endian_and_garbage() {
    let bytes = npy_v1("'>f4'", "(1,)", &[0, 0, 0, 0]);
    assert!(parse_npy(&bytes, "x".into()).is_err());
    assert!(parse_npy(b"not an npy file", "x".into()).is_err());
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
    let t = parse_safetensors(&bytes).unwrap();
    assert_eq!(t.len(), 2);
    let a_t = t.iter().find(|t| t.name == "a").unwrap();
    assert_eq!(
        (a_t.dtype.as_str(), a_t.shape.clone(), a_t.data.clone()),
        ("F32", vec![2, 1], a)
    );
    assert!(parse_safetensors(&bytes[..bytes.len() - 1]).is_err());
}

/// Tensor by tensor from the header agrees with the whole-file loader on every dataset.
#[test]
fn tensor_file_reads_what_load_reads() {
    use planepack_datasets::TensorFile;
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).expect("datasets/manifest.toml");
    for d in &manifest.datasets {
        let path = dir.join(&d.file);
        let all = load(&path).unwrap();
        let mut f = TensorFile::open(&path).unwrap();
        assert_eq!(f.entries().len(), all.len(), "{}", d.name);
        for (i, t) in all.iter().enumerate() {
            assert_eq!(&f.read(i).unwrap(), t, "{} tensor {i}", d.name);
        }
        assert!(f.read(all.len()).is_err());
    }
}

/// Damaged headers: the streaming reader never panics, accepts whatever the safetensors crate
/// accepts with the same tensors, and rejects what it rejects (it keeps tensors of a dtype it
/// does not know the size of, where the crate refuses the name).
#[test]
fn tensor_file_checks_headers_like_the_safetensors_crate() {
    use planepack_datasets::{dtype_size, TensorFile};
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
        std::fs::write(&path, bytes).unwrap();
        let whole = load(&path);
        let streamed = TensorFile::open(&path).and_then(|mut f| {
            (0..f.entries().len())
                .map(|i| f.read(i))
                .collect::<Result<Vec<_>, _>>()
        });
        match (whole, streamed) {
            (Ok(w), Ok(s)) => assert_eq!(w, s, "{what}"),
            (Err(_), Err(_)) => {}
            (Ok(_), Err(e)) => panic!("{what}: the crate accepts, the stream says {e}"),
            (Err(e), Ok(s)) => assert!(
                s.iter().any(|t| dtype_size(&t.dtype).is_none()),
                "{what}: the stream accepts, the crate says {e}"
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
    // Offsets that overlap or leave a hole, hand-written.
    for header in [
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#,
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}"#,
        r#"{"a":{"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,4]}}"#,
    ] {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&[1, 2, 3, 4]);
        check(&bytes, header);
        std::fs::write(&path, &bytes).unwrap();
        assert!(TensorFile::open(&path).is_err(), "{header}");
    }
}

/// `.npy` streamed: header and data as the whole-file parser reads them; cut files rejected.
#[test]
fn tensor_file_reads_npy() {
    use planepack_datasets::TensorFile;
    let mut bytes = npy_v1("'<u2'", "(3,)", &[1, 0, 2, 0, 3, 0]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, &bytes).unwrap();
    let mut f = TensorFile::open(&path).unwrap();
    assert_eq!(f.read(0).unwrap(), parse_npy(&bytes, "x".into()).unwrap());
    for len in 0..bytes.len() {
        std::fs::write(&path, &bytes[..len]).unwrap();
        assert!(TensorFile::open(&path).is_err(), "cut to {len}");
        assert!(
            parse_npy(&bytes[..len], "x".into()).is_err(),
            "cut to {len}"
        );
    }
    bytes.push(0);
    std::fs::write(&path, &bytes).unwrap();
    assert!(TensorFile::open(&path).is_err(), "a byte too many");
}

/// Found by the `tensor_files` fuzz target (and issue 17): a version-3 `.npy` header that
/// claims 4 GiB in a 33-byte file is refused before anything is allocated for it.
#[test]
fn npy_header_longer_than_the_file_is_refused() {
    let mut bytes = b"\x93NUMPY\x03\x00".to_vec();
    bytes.extend_from_slice(&0xFFFF_FF00u32.to_le_bytes());
    bytes.extend_from_slice(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }");
    let err = parse_npy(&bytes, "x".into()).unwrap_err();
    assert!(err.contains("past the end"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, &bytes).unwrap();
    assert!(planepack_datasets::TensorFile::open(&path).is_err());
}

/// Found by the `tensor_files` fuzz target: a `.npy` header of nested brackets made the header
/// parser backtrack exponentially (16 `{` took 100 s, the 169-byte reproducer years); both
/// readers refuse it at once.
#[test]
fn deeply_nested_npy_header_is_refused_quickly() {
    let dict = "{".repeat(60);
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(dict.as_bytes());
    let t = std::time::Instant::now();
    let err = parse_npy(&bytes, "x".into()).unwrap_err();
    assert!(err.contains("nests"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.npy");
    std::fs::write(&path, &bytes).unwrap();
    assert!(planepack_datasets::TensorFile::open(&path).is_err());
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
}
