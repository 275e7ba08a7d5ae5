//! Turning users' files into measurement groups (shared by `cargo xtask bench` and
//! `planepack bench`).

use crate::{Group, SizeClass};
use anyhow::Result;
use planepack_container::source::TensorFile;
use planepack_container::write::parts_of;
use planepack_core::ElemType;
use planepack_datasets::{elem_of, load};
use std::path::{Path, PathBuf};

/// Raw bytes measured at once by [`Batches`]: a batch holds its tensors, their encodings and
/// a decode buffer, so about three times this. A tensor larger than this is measured in pieces
/// of at most this many bytes, cut as the container cuts parts (whole rows where a row fits).
pub const BATCH_BYTES: u64 = 64 << 20;

/// A file's tensors in measurement batches, read only when a batch is asked for, so a file
/// larger than memory can be measured: per dtype and size class, consecutive tensors (or
/// pieces of a larger one) of up to `max_bytes` together. Records of one dtype's batches are summed with
/// [`crate::Record::merge`].
pub struct Batches {
    file: TensorFile,
    name: String,
    category: String,
    /// (element type, safetensors dtype, size class, pieces) per batch: size classes in order,
    /// dtypes in first-seen order within a class.
    batches: Vec<(ElemType, String, SizeClass, Vec<Piece>)>,
}

/// A tensor, or a part of one, measured as a tensor of its own.
#[derive(Clone)]
struct Piece {
    tensor: usize,
    /// Bytes of the tensor.
    range: std::ops::Range<u64>,
    shape: Vec<usize>,
}

impl Batches {
    /// Open a file and plan its batches from the header alone.
    pub fn open(name: &str, category: &str, path: &Path, max_bytes: u64) -> Result<Self> {
        let file = TensorFile::open(path, &planepack_datasets::npy_array_name(path))?;
        // Per (dtype, size class): its batches, and the bytes in the last one.
        type Plan = (ElemType, String, SizeClass, Vec<Vec<Piece>>, u64);
        let mut plans: Vec<Plan> = Vec::new();
        for (i, t) in file.source().tensors.iter().enumerate() {
            let Some(elem) = elem_of(&t.dtype) else {
                continue;
            };
            let name = elem.name().to_owned();
            let class = SizeClass::of(t.len);
            let at = match plans.iter().position(|d| d.1 == name && d.2 == class) {
                Some(at) => at,
                None => {
                    plans.push((elem, name, class, vec![Vec::new()], 0));
                    plans.len() - 1
                }
            };
            let d = &mut plans[at];
            for part in parts_of(t, max_bytes.max(1)) {
                let piece = Piece {
                    tensor: i,
                    range: part.offset - t.offset..part.offset - t.offset + part.len,
                    shape: part.shape,
                };
                let current = d.3.last_mut().expect("never empty");
                if !current.is_empty() && d.4 + part.len > max_bytes {
                    d.3.push(vec![piece]);
                    d.4 = part.len;
                } else {
                    current.push(piece);
                    d.4 += part.len;
                }
            }
        }
        plans.sort_by_key(|p| p.2);
        let batches = plans
            .into_iter()
            .flat_map(|(elem, dtype, class, lists, _)| {
                lists
                    .into_iter()
                    .map(move |l| (elem, dtype.clone(), class, l))
            })
            .collect();
        Ok(Batches {
            file,
            name: name.to_owned(),
            category: category.to_owned(),
            batches,
        })
    }

    /// Number of batches (0 when no tensor has a dtype the codecs take).
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The dtype (as the file names it) and size class of batch `i`, without reading it.
    pub fn kind(&self, i: usize) -> Option<(&str, SizeClass)> {
        self.batches.get(i).map(|b| (b.1.as_str(), b.2))
    }

    /// Read batch `i` as a group.
    pub fn load(&mut self, i: usize) -> Result<Group> {
        let (elem, dtype, size_class, pieces) = self
            .batches
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("no batch {i}"))?
            .clone();
        let tensors = pieces
            .into_iter()
            .map(|p| {
                self.file
                    .read_range(p.tensor, p.range)
                    .map(|data| (p.shape, data))
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Group {
            dataset: self.name.clone(),
            category: self.category.clone(),
            elem,
            dtype,
            size_class,
            tensors,
        })
    }
}

/// Group a file's tensors by dtype and size class.
pub fn groups_of(name: &str, category: &str, path: &Path) -> Result<Vec<Group>> {
    let tensors = load(path)?;
    let mut out: Vec<Group> = Vec::new();
    for t in tensors {
        let Some(elem) = elem_of(&t.dtype) else {
            continue;
        };
        let dtype = elem.name().to_owned();
        let class = SizeClass::of(t.data.len() as u64);
        match out
            .iter_mut()
            .find(|g| g.dtype == dtype && g.size_class == class)
        {
            Some(g) => g.tensors.push((t.shape, t.data)),
            None => out.push(Group {
                dataset: name.to_owned(),
                category: category.to_owned(),
                elem,
                dtype,
                size_class: class,
                tensors: vec![(t.shape, t.data)],
            }),
        }
    }
    out.sort_by_key(|g| g.size_class);
    Ok(out)
}

/// The `.safetensors` and `.npy` files among `paths`, folders searched recursively (symbolic
/// links inside them not followed, so a link loop cannot recurse), sorted.
pub fn tensor_files(paths: &[PathBuf]) -> Vec<PathBuf> {
    let is_tensor_file = |p: &Path| {
        matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("safetensors" | "npy")
        )
    };
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(
                walkdir::WalkDir::new(p)
                    .follow_links(false)
                    .sort_by_file_name()
                    .into_iter()
                    .flatten()
                    .filter(|e| e.file_type().is_file() && is_tensor_file(e.path()))
                    .map(|e| e.into_path()),
            );
        } else if is_tensor_file(p) {
            files.push(p.clone());
        }
    }
    files
}
