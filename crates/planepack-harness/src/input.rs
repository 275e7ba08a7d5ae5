//! Turning users' files into measurement groups (shared by `cargo xtask bench` and
//! `planepack bench`).

use crate::Group;
use anyhow::Result;
use planepack_datasets::{elem_of, load};
use std::path::{Path, PathBuf};

/// Group a file's tensors by dtype.
pub fn groups_of(name: &str, category: &str, path: &Path) -> Result<Vec<Group>> {
    let tensors = load(path)?;
    let mut out: Vec<Group> = Vec::new();
    for t in tensors {
        let Some(elem) = elem_of(&t.dtype) else {
            continue;
        };
        let dtype = elem.name().to_owned();
        match out.iter_mut().find(|g| g.dtype == dtype) {
            Some(g) => g.tensors.push((t.shape, t.data)),
            None => out.push(Group {
                dataset: name.to_owned(),
                category: category.to_owned(),
                elem,
                dtype,
                tensors: vec![(t.shape, t.data)],
            }),
        }
    }
    Ok(out)
}

/// The `.safetensors` and `.npy` files among `paths`, folders searched recursively, sorted.
pub fn tensor_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            entries.sort();
            files.extend(tensor_files(&entries));
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("safetensors" | "npy")
        ) {
            files.push(p.clone());
        }
    }
    files
}
