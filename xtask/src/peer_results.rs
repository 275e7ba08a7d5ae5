//! What a bench run measured of the peers, as the studies compare `rans` with them: the best
//! peer per bench record and per category (`activation-study`, `rans-study`). Read from a
//! `results.json` of the bench rather than measured again: the studies then stand beside the
//! same run's peers, settings and bytes, and take minutes instead of the bench's hour.

use anyhow::Result;
use planepack_harness::{Results, SizeClass};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What the same machine's bench measured of the peers: the best peer's ratio per record
/// (dataset, dtype, size class), and per category the peer whose geomean over the category's
/// records is highest (how the bench's headline ranks codecs).
pub(crate) struct Peers {
    /// The best peer of each record (dataset, dtype, size class): its name and ratio.
    pub(crate) best: BTreeMap<(String, String, SizeClass), (String, f64)>,
    /// Per category, the peer whose geomean over its records is highest, and that geomean.
    pub(crate) category_best: BTreeMap<String, (String, f64)>,
}

pub(crate) fn peers(results: &Path) -> Result<Peers> {
    let mut best: BTreeMap<(String, String, SizeClass), (String, f64)> = BTreeMap::new();
    let mut per_codec: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut record_category: BTreeMap<(String, String, SizeClass), String> = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(results) {
        let res: Results = serde_json::from_str(&text)?;
        for r in res.records.iter().filter(|r| {
            r.codec != "raw"
                && crate::peers::PEER_CODECS
                    .iter()
                    .chain(["zstd-3", "zstd-19", "lz4"].iter())
                    .any(|p| *p == r.codec || r.codec.starts_with("blosc2"))
        }) {
            let Some(class) = r.size_class else { continue };
            record_category.insert(
                (r.dataset.clone(), r.dtype.clone(), class),
                r.category.clone(),
            );
            let e = best
                .entry((r.dataset.clone(), r.dtype.clone(), class))
                .or_insert((r.codec.clone(), 0.0));
            if r.ratio > e.1 {
                *e = (r.codec.clone(), r.ratio);
            }
            per_codec
                .entry((r.category.clone(), r.codec.clone()))
                .or_default()
                .push(r.ratio);
        }
    }
    // A peer ranks in a category only if it measured every record there (OpenZL's float
    // entropy graph takes no FP32, for one).
    let mut records: BTreeMap<String, usize> = BTreeMap::new();
    for cat in record_category.values() {
        *records.entry(cat.clone()).or_default() += 1;
    }
    let mut category_best: BTreeMap<String, (String, f64)> = BTreeMap::new();
    for ((cat, codec), ratios) in per_codec {
        if Some(&ratios.len()) != records.get(&cat) {
            continue;
        }
        let g = planepack_harness::report::geomean(&ratios);
        let e = category_best.entry(cat).or_insert((codec.clone(), 0.0));
        if g > e.1 {
            *e = (codec, g);
        }
    }
    Ok(Peers {
        best,
        category_best,
    })
}

/// `results` (a file under this machine's results folder), or where this machine has no bench
/// run of these tensors, the same file of another machine's folder (a peer's ratio does not
/// depend on the machine).
pub(crate) fn with_fallback(root: &Path, machine_dir: &Path, results: PathBuf) -> Result<PathBuf> {
    if results.exists() {
        return Ok(results);
    }
    let rel = results
        .strip_prefix(machine_dir)
        .unwrap_or(&results)
        .to_owned();
    let mut others: Vec<_> = std::fs::read_dir(root.join("bench-results"))?
        .filter_map(|d| d.ok().map(|d| d.path().join(&rel)))
        .filter(|p| p.exists())
        .collect();
    others.sort();
    Ok(others.into_iter().next().unwrap_or(results))
}
