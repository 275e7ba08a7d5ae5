//! The trace of one training step (`planepack-trace/1`, see `docs/format-trace.md`).

use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FORMAT: &str = "planepack-trace/1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Forward,
    Backward,
}

/// One op on the compute stream, in execution order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub id: usize,
    /// aten op name without underscores (`convolution`, `nativebatchnorm`, `addmm`).
    pub name: String,
    pub phase: Phase,
    pub flops: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// Measured duration, when the trace comes from a profiler; else the platform estimates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// Forward ops only: the earlier forward ops whose outputs this op reads (ascending). Empty
    /// in a trace without edges, where a recomputation is charged its producer alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<usize>,
    /// Forward ops only: bytes of the fresh tensors it returns (0 for an in-place op, or in a
    /// trace that does not record them). A recomputation holds them while its chain runs,
    /// saved for backward or not.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub output_bytes: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// One tensor saved for the backward pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Activation {
    pub id: usize,
    pub bytes: u64,
    /// `bf16`, `fp32`, or the torch name of a non-float dtype (`bool`, `int64`).
    pub dtype: String,
    /// The forward op that wrote it.
    pub producer: usize,
    /// The last forward op that reads it (>= producer).
    pub last_forward_use: usize,
    /// The backward ops that need it first and last.
    pub first_backward_use: usize,
    pub last_backward_use: usize,
    /// The op that saved it for backward (the key for predicted compression ratios).
    pub saved_by: String,
}

/// One training step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub format: String,
    pub model: String,
    #[serde(default)]
    pub description: String,
    /// Training dtype of the step (`bf16` or `fp32`).
    pub dtype: String,
    pub batch: usize,
    pub ops: Vec<Op>,
    pub activations: Vec<Activation>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: not a trace: {1}")]
    Json(String, serde_json::Error),
    #[error("invalid trace: {0}")]
    Invalid(String),
}

impl Trace {
    /// The same step at `k` times the batch: every op's FLOPs and bytes and every activation
    /// scaled by `k` (measured op times are dropped: the platform estimates them again).
    pub fn scaled(&self, k: f64) -> Trace {
        let mut t = self.clone();
        t.batch = ((self.batch as f64) * k).round().max(1.0) as usize;
        for o in &mut t.ops {
            o.flops = (o.flops as f64 * k) as u64;
            o.bytes = (o.bytes as f64 * k) as u64;
            o.output_bytes = (o.output_bytes as f64 * k) as u64;
            o.seconds = None;
        }
        for a in &mut t.activations {
            a.bytes = (a.bytes as f64 * k) as u64;
        }
        t
    }

    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TraceError::Io(name.clone(), e))?;
        let t: Trace = serde_json::from_str(&text).map_err(|e| TraceError::Json(name, e))?;
        t.validate()?;
        Ok(t)
    }

    /// Check every index and ordering rule of the format.
    pub fn validate(&self) -> Result<(), TraceError> {
        let bad = |m: String| Err(TraceError::Invalid(m));
        if self.format != FORMAT {
            return bad(format!("format {:?}, expected {FORMAT:?}", self.format));
        }
        let n = self.ops.len();
        let mut seen_backward = false;
        for (i, op) in self.ops.iter().enumerate() {
            if op.id != i {
                return bad(format!("op {i} has id {}", op.id));
            }
            let edges_ok = op.inputs.windows(2).all(|w| w[0] < w[1])
                && op
                    .inputs
                    .iter()
                    .all(|&j| j < i && self.ops[j].phase == Phase::Forward)
                && (op.inputs.is_empty() || op.phase == Phase::Forward);
            if op.output_bytes != 0 && op.phase != Phase::Forward {
                return bad(format!("backward op {i} has output_bytes"));
            }
            if !edges_ok {
                return bad(format!(
                    "op {i}: inputs {:?} are not earlier forward ops in ascending order (or the \
                     op is a backward op)",
                    op.inputs
                ));
            }
            match op.phase {
                Phase::Backward => seen_backward = true,
                Phase::Forward if seen_backward => {
                    return bad(format!("forward op {i} after a backward op"))
                }
                Phase::Forward => {}
            }
        }
        for (i, a) in self.activations.iter().enumerate() {
            let ok = a.id == i
                && a.producer <= a.last_forward_use
                && a.last_forward_use < a.first_backward_use
                && a.first_backward_use <= a.last_backward_use
                && a.last_backward_use < n
                && self.ops[a.producer].phase == Phase::Forward
                && self.ops[a.last_forward_use].phase == Phase::Forward
                && self.ops[a.first_backward_use].phase == Phase::Backward;
            if !ok {
                return bad(format!("activation {i} ({a:?}) breaks the ordering rules"));
            }
        }
        Ok(())
    }

    /// Whether the ops carry input edges (recomputation chains can be followed).
    pub fn has_edges(&self) -> bool {
        self.ops.iter().any(|o| !o.inputs.is_empty())
    }

    /// Total bytes of all saved activations.
    pub fn activation_bytes(&self) -> u64 {
        self.activations.iter().map(|a| a.bytes).sum()
    }
}
