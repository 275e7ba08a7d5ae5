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
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    let mut h = header.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    let values = [1.0f32, -0.0, f32::NAN, f32::INFINITY, 1e-40, 3.5];
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
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

#[test]
fn npy_rejects_big_endian_and_garbage() {
    let mut h = "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }".to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 0]);
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
