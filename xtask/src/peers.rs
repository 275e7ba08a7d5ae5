//! `cargo xtask peers`: ZipNN and python-blosc2 measured through their own PyPI packages, on
//! the same tensors and by the same rules as the harness, merged into `results.json`.
//!
//! Why Python: these peers are what users install (`pip install zipnn blosc2`), and ZipNN
//! exists only as a Python package. The measuring script is `xtask/peers/peers.py`; this
//! module makes a virtual environment with pinned versions (once, under `target/`), writes
//! every group's tensors as raw files with a manifest, runs the script and merges its
//! records. ZipNN pulls in PyTorch, so the first run downloads a few GB.

use anyhow::{bail, Context, Result};
use planepack_harness::{Group, Record, Settings};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The packages and versions measured (pinned so that figures can be reproduced).
const REQUIREMENTS: &[&str] = &[
    "zipnn==0.5.4",
    "blosc2==4.14.1",
    "openzl==0.3.0",
    "numpy>=1.26",
];

/// Codec names the script writes; records with these names are replaced on a rerun.
pub const PEER_CODECS: &[&str] = &[
    "zipnn",
    "pyblosc2-shuffle-zstd-5",
    "pyblosc2-shuffle-bytedelta-zstd-5",
    "pyblosc2-shuffle-bytedelta-zstd-9",
    "openzl-best",
    "openzl-generic",
    "openzl-float-compress",
    "openzl-float-entropy",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The virtual environment's Python, created and filled on first use.
pub fn python() -> Result<PathBuf> {
    let venv = root().join("target/peers-venv");
    let py = venv.join("bin/python");
    let stamp = venv.join("planepack-requirements.txt");
    let wanted = REQUIREMENTS.join("\n");
    if py.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(py);
    }
    let system = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&system)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .with_context(|| format!("running {system} (set PYTHON to another interpreter)"))?
        .success();
    if !ok {
        bail!("{system} -m venv failed (Debian: apt-get install python3-venv)");
    }
    eprintln!(
        "installing {} into {} (once; PyTorch comes with ZipNN)",
        REQUIREMENTS.join(" "),
        venv.display()
    );
    let ok = Command::new(&py)
        .args(["-m", "pip", "install", "-q"])
        .args(REQUIREMENTS)
        .status()?
        .success();
    if !ok {
        bail!("pip install {} failed", REQUIREMENTS.join(" "));
    }
    std::fs::write(&stamp, wanted)?;
    Ok(py)
}

/// Measure the peers on `groups`; returns their records.
pub fn measure(groups: &[Group], settings: Settings, device: &str) -> Result<Vec<Record>> {
    let mut input = Input::new(device)?;
    for g in groups {
        input.add(g)?;
    }
    input.run(settings)
}

/// The peers' input: every group's tensors written as raw files with a manifest, so that a
/// caller measuring batches one at a time (the workloads) can drop each batch once written.
pub struct Input {
    dir: PathBuf,
    device: String,
    groups: Vec<serde_json::Value>,
    /// Peer settings not to measure (names as the tables print them).
    skip: Vec<String>,
}

impl Input {
    pub fn new(device: &str) -> Result<Input> {
        let dir = root().join("target/peers-input");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Input {
            dir,
            device: device.to_owned(),
            groups: Vec::new(),
            skip: Vec::new(),
        })
    }

    /// Leave out these peer settings (names as the tables print them).
    pub fn skip(&mut self, names: &[&str]) {
        self.skip.extend(names.iter().map(|n| n.to_string()));
    }

    pub fn add(&mut self, g: &Group) -> Result<()> {
        let i = self.groups.len();
        let mut tensors = Vec::new();
        for (j, (shape, data)) in g.tensors.iter().enumerate() {
            let path = self.dir.join(format!("{i}-{j}.bin"));
            std::fs::write(&path, data)?;
            tensors.push(serde_json::json!({ "path": path, "shape": shape }));
        }
        self.groups.push(serde_json::json!({
            "dataset": g.dataset, "category": g.category, "dtype": g.dtype,
            "size_class": g.size_class, "device": self.device, "tensors": tensors,
        }));
        Ok(())
    }

    /// Run the script over every group added; one record per group.
    pub fn run(self, settings: Settings) -> Result<Vec<Record>> {
        let py = python()?;
        let manifest = serde_json::json!({
            "settings": {
                "min_runs": settings.min_runs,
                "min_seconds": settings.min_seconds,
                "max_runs": settings.max_runs,
            },
            "cpu": planepack_harness::cpu_model(),
            "groups": self.groups,
            "skip": self.skip,
        });
        let (input, output) = (
            self.dir.join("manifest.json"),
            self.dir.join("records.json"),
        );
        std::fs::write(&input, serde_json::to_string(&manifest)?)?;
        let script = root().join("xtask/peers/peers.py");
        let ok = Command::new(&py)
            .arg(&script)
            .arg(&input)
            .arg(&output)
            .status()?
            .success();
        if !ok {
            bail!("{} failed", script.display());
        }
        let records: Vec<Record> = serde_json::from_str(&std::fs::read_to_string(&output)?)
            .context("reading the peers' records")?;
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(records)
    }
}

/// Replace the peers' records in `records` by `fresh`, keeping the table order: each group's
/// peer records follow that group's other records.
pub fn merge(records: &mut Vec<Record>, fresh: Vec<Record>) {
    records.retain(|r| !PEER_CODECS.contains(&r.codec.as_str()));
    for f in fresh {
        let at = records
            .iter()
            .rposition(|r| {
                r.dataset == f.dataset && r.dtype == f.dtype && r.size_class == f.size_class
            })
            .map_or(records.len(), |i| i + 1);
        records.insert(at, f);
    }
}
