//! What one measurement is, as stored in `results.json`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the JSON shape shared by `results.json`, `planepack bench --json` and
/// `planepack inspect --json`. 2: records name their implementation, SIMD tier, CPU, thread
/// count and whether planepack has a GPU decoder; decode timing excludes the reference memcpy.
pub const SCHEMA_VERSION: u32 = 2;

fn schema_v1() -> u32 {
    1
}

/// One (dataset, dtype, codec) measurement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub dataset: String,
    pub category: String,
    /// Element type of the tensors in this group (a mixed-precision file gives one group per dtype).
    pub dtype: String,
    /// The size class of the group's tensors (a dataset gives one group per dtype and class);
    /// None in records from before classes.
    #[serde(default)]
    pub size_class: Option<crate::SizeClass>,
    /// The codec's name as tables print it (for a peer, the peer's setting).
    pub codec: String,
    /// The codec as the container knows it, for planepack's catalogue (what `--codec` takes);
    /// None for a peer measured through its own package. Code that needs to know which codec
    /// a record is asks this, never the name.
    #[serde(default)]
    pub spec: Option<planepack_container::CodecSpec>,
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
    /// All cores: each tensor in turn with the codec's own parallel decoder (rayon over
    /// chunks for planepack's codecs, C-Blosc2's thread pool; one core for zstd and LZ4),
    /// GB/s of raw bytes, median.
    pub decode_allcore_gbps: f64,
    /// All cores, encoding: each tensor in turn with the codec's own parallel encoder (rayon
    /// over chunks for `rans`; one core for the codecs without one), GB/s of raw bytes,
    /// median. 0 where not measured (the Python peers, records from before it existed).
    #[serde(default)]
    pub encode_allcore_gbps: f64,
    /// memcpy of the same bytes, single core, median, measured interleaved with decode.
    pub memcpy_gbps: f64,
    /// Where the decode figures were measured.
    pub device: String,
    /// GPU decode figures when an adapter was present (None otherwise).
    #[serde(default)]
    pub gpu_decode_gbps: Option<f64>,
    #[serde(default)]
    pub gpu_device: Option<String>,
    /// Measured by `cargo xtask bench` where a GPU adapter exists, for codecs with a GPU
    /// decoder: raw bytes over the time to upload the compressed bytes and decode them into
    /// device memory (no readback), tensor by tensor, medians summed.
    #[serde(default)]
    pub gpu_transfer_gbps: Option<f64>,
    /// The same device, the same run: raw bytes over the time to upload the raw bytes.
    #[serde(default)]
    pub gpu_upload_raw_gbps: Option<f64>,
    /// Who implemented the codec measured (`planepack`, `C-Blosc2 2.15.2 (blosc2-sys)`,
    /// `zipnn 0.5.4 (PyPI)`, ...).
    #[serde(default)]
    pub implementation: String,
    /// The SIMD tier the code ran at: planepack's own tier for our codecs and baselines we
    /// wrap, the library's own run-time dispatch for peers (noted as such).
    #[serde(default)]
    pub simd_tier: String,
    /// CPU model the CPU figures come from.
    #[serde(default)]
    pub cpu: String,
    /// Threads behind `decode_allcore_gbps` (the single-core figures use one).
    #[serde(default)]
    pub threads: usize,
    /// Whether planepack has a GPU decoder for this codec.
    #[serde(default)]
    pub gpu_decoder: bool,
    /// Codec-specific observations (bit-plane mode shares, IBP threshold, ...).
    #[serde(default)]
    pub notes: BTreeMap<String, serde_json::Value>,
}

impl Record {
    /// Fold in the record of the next batch of the same group and codec (a file too large to
    /// measure at once is measured in batches of tensors). Bytes add up; each rate becomes
    /// total bytes over the summed batch times (the batches' medians, and for the spread their
    /// slowest and fastest runs); the ratio is recomputed. Fails if the records are not of the
    /// same dataset, dtype, codec and device, and takes no GPU figures or notes (which a batch
    /// cannot sum).
    pub fn merge(&mut self, next: &Record) -> Result<(), String> {
        let same = self.dataset == next.dataset
            && self.dtype == next.dtype
            && self.size_class == next.size_class
            && self.codec == next.codec
            && self.spec == next.spec
            && self.device == next.device
            && self.threads == next.threads;
        if !same {
            return Err(format!(
                "cannot merge {} {} {} with {} {} {}",
                self.dataset, self.dtype, self.codec, next.dataset, next.dtype, next.codec
            ));
        }
        if self.gpu_decode_gbps.is_some()
            || next.gpu_decode_gbps.is_some()
            || self.gpu_transfer_gbps.is_some()
            || next.gpu_transfer_gbps.is_some()
            || self.notes != next.notes
        {
            // Notes that are the same for every batch (a peer's "measured_from") carry over;
            // per-batch observations cannot be summed.
            return Err("GPU figures and differing notes do not merge across batches".into());
        }
        let (a, b) = (self.raw_bytes as f64, next.raw_bytes as f64);
        let rate = |x: f64, y: f64| (a + b) / (a / x.max(1e-12) + b / y.max(1e-12));
        self.encode_gbps = rate(self.encode_gbps, next.encode_gbps);
        self.decode_gbps = rate(self.decode_gbps, next.decode_gbps);
        self.decode_allcore_gbps = rate(self.decode_allcore_gbps, next.decode_allcore_gbps);
        self.encode_allcore_gbps =
            if self.encode_allcore_gbps > 0.0 && next.encode_allcore_gbps > 0.0 {
                rate(self.encode_allcore_gbps, next.encode_allcore_gbps)
            } else {
                0.0
            };
        self.memcpy_gbps = rate(self.memcpy_gbps, next.memcpy_gbps);
        for (s, n) in [
            (&mut self.encode_gbps_spread, next.encode_gbps_spread),
            (&mut self.decode_gbps_spread, next.decode_gbps_spread),
        ] {
            *s = [rate(s[0], n[0]), rate(s[1], n[1])];
        }
        self.tensors += next.tensors;
        self.raw_bytes += next.raw_bytes;
        self.compressed_bytes += next.compressed_bytes;
        self.ratio = self.raw_bytes as f64 / self.compressed_bytes.max(1) as f64;
        Ok(())
    }

    /// Space saving in percent, `(1 - 1/ratio) * 100`.
    pub fn saving_pct(&self) -> f64 {
        (1.0 - 1.0 / self.ratio) * 100.0
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Results {
    /// [`SCHEMA_VERSION`] of the code that wrote it (1 for files from before the field).
    #[serde(default = "schema_v1")]
    pub schema_version: u32,
    pub machine: String,
    pub command: String,
    pub quick: bool,
    /// `git describe` of the code that measured, if known.
    pub code_version: String,
    pub records: Vec<Record>,
}
