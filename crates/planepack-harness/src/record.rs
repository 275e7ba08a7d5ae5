//! What one measurement is, as stored in `results.json`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One (dataset, dtype, codec) measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub dataset: String,
    pub category: String,
    /// Element type of the tensors in this group (a mixed-precision file gives one group per dtype).
    pub dtype: String,
    pub codec: String,
    pub tensors: usize,
    pub raw_bytes: u64,
    /// Everything the decoder needs: headers, tables, masks, padding.
    pub compressed_bytes: u64,
    pub ratio: f64,
    /// Single core, GB/s of raw bytes, median.
    pub encode_gbps: f64,
    /// [min, max] over the timed runs.
    pub encode_gbps_spread: [f64; 2],
    pub decode_gbps: f64,
    pub decode_gbps_spread: [f64; 2],
    /// All cores (rayon), GB/s of raw bytes, median.
    pub decode_allcore_gbps: f64,
    /// memcpy of the same bytes, single core, median, measured interleaved with decode.
    pub memcpy_gbps: f64,
    /// Where the decode figures were measured.
    pub device: String,
    /// GPU decode figures when an adapter was present (None otherwise).
    #[serde(default)]
    pub gpu_decode_gbps: Option<f64>,
    #[serde(default)]
    pub gpu_device: Option<String>,
    /// Codec-specific observations (bit-plane mode shares, IBP threshold, ...).
    #[serde(default)]
    pub notes: BTreeMap<String, serde_json::Value>,
}

impl Record {
    /// Space saving in percent, `(1 - 1/ratio) * 100`.
    pub fn saving_pct(&self) -> f64 {
        (1.0 - 1.0 / self.ratio) * 100.0
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Results {
    pub machine: String,
    pub command: String,
    pub quick: bool,
    /// `git describe` of the code that measured, if known.
    pub code_version: String,
    pub records: Vec<Record>,
}
