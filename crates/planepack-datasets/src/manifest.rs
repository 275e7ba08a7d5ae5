//! `datasets/manifest.toml`: provenance and checksums of every committed dataset.

use crate::{load, sha256_hex, Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::Path;

/// The whole manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(rename = "dataset")]
    pub datasets: Vec<Dataset>,
}

/// A registry package a dataset was made from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Source {
    pub package: String,
    pub registry: String,
    pub version: String,
    pub license: String,
}

/// One dataset file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dataset {
    pub name: String,
    /// Path relative to `datasets/`.
    pub file: String,
    /// activations, kv-cache, embedding, gnn, weights.
    pub category: String,
    pub description: String,
    pub models: Vec<String>,
    /// What published dataset this stands in for, if it is a substitute.
    #[serde(default)]
    pub substitute_for: Option<String>,
    /// Script (relative to `datasets/`) that rebuilds the file, and how.
    pub recipe: String,
    /// Whether two runs of the recipe give identical bytes; if not, `why_not_reproducible`.
    pub reproducible: bool,
    #[serde(default)]
    pub why_not_reproducible: Option<String>,
    pub dtypes: Vec<String>,
    pub tensors: usize,
    pub bytes: u64,
    pub sha256: String,
    #[serde(rename = "source")]
    pub sources: Vec<Source>,
}

impl Manifest {
    /// Read `manifest.toml` in `dir`.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join("manifest.toml");
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io { path, source })?;
        toml::from_str(&text).map_err(|e| Error::Manifest(e.to_string()))
    }
}

impl Dataset {
    /// Check the file against the manifest: size, SHA-256, and that it loads with the stated
    /// number of tensors and dtypes.
    pub fn verify(&self, dir: &Path) -> Result<()> {
        let fail = |msg: String| Error::Verify {
            dataset: self.name.clone(),
            msg,
        };
        let path = dir.join(&self.file);
        let bytes = std::fs::read(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        if bytes.len() as u64 != self.bytes {
            return Err(fail(format!(
                "{} bytes, manifest says {}",
                bytes.len(),
                self.bytes
            )));
        }
        let sha = sha256_hex(&bytes);
        if sha != self.sha256 {
            return Err(fail(format!("sha256 {sha}, manifest says {}", self.sha256)));
        }
        let tensors = load(&path)?;
        if tensors.len() != self.tensors {
            return Err(fail(format!(
                "{} tensors, manifest says {}",
                tensors.len(),
                self.tensors
            )));
        }
        let found: BTreeSet<&str> = tensors.iter().map(|t| t.dtype.as_str()).collect();
        let stated: BTreeSet<&str> = self.dtypes.iter().map(String::as_str).collect();
        if found != stated {
            return Err(fail(format!("dtypes {found:?}, manifest says {stated:?}")));
        }
        for t in &tensors {
            let size = crate::dtype_size(&t.dtype).unwrap_or(1);
            if t.numel() * size != t.data.len() {
                return Err(fail(format!(
                    "tensor {} has {} bytes for shape {:?}",
                    t.name,
                    t.data.len(),
                    t.shape
                )));
            }
        }
        Ok(())
    }
}
