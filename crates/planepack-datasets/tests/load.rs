//! The loader reads every committed dataset and agrees with the manifest (the header rules
//! themselves are tested in `planepack-tensorfile`).

use planepack_datasets::{datasets_dir, load, Manifest};

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
