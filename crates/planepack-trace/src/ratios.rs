//! Compression ratios for traced activations, predicted from measured ratios of real ones.
//!
//! The traces carry no tensor values (the models are randomly initialised, and a ratio on
//! random weights would say nothing). Instead each traced activation gets the ratio that a
//! codec achieved on the real activations of `datasets/activations/` saved by the same op in
//! the same dtype (bytes-weighted: total raw over total compressed). When no real tensor was
//! saved by that op, the op's class (convolution, matmul, norm, activation function, attention,
//! pooling, elementwise) is used, then all activations of the dtype. Non-float tensors (masks,
//! indices) get ratio 1: we have no measurement for them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The coarse class of an op name.
pub fn op_class(op: &str) -> &'static str {
    let has = |s: &str| op.contains(s);
    if has("convolution") {
        "conv"
    } else if ["addmm", "bmm", "matmul", "linear", "baddbmm"]
        .iter()
        .any(|s| has(s))
        || op == "mm"
    {
        "matmul"
    } else if has("norm") {
        "norm"
    } else if has("softmax") || has("scaleddotproduct") || has("attention") {
        "attention"
    } else if has("pool") {
        "pool"
    } else if [
        "relu",
        "hardtanh",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "threshold",
        "hardswish",
        "clamp",
    ]
    .iter()
    .any(|s| has(s))
    {
        "activation"
    } else if [
        "mul", "add", "div", "sub", "mean", "pow", "rsqrt", "neg", "exp",
    ]
    .iter()
    .any(|s| has(s))
    {
        "elementwise"
    } else {
        "other"
    }
}

/// (raw, compressed) byte totals by key: op name, `class:<c>`, or `*` for all.
pub type Totals = BTreeMap<String, (u64, u64)>;

/// Measured totals per codec, then dtype, then key.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RatioTable {
    pub totals: BTreeMap<String, BTreeMap<String, Totals>>,
}

impl RatioTable {
    /// Record one measured tensor.
    pub fn add(&mut self, codec: &str, dtype: &str, op: &str, raw: u64, compressed: u64) {
        let per = self
            .totals
            .entry(codec.to_owned())
            .or_default()
            .entry(dtype.to_owned())
            .or_default();
        for key in [
            op.to_owned(),
            format!("class:{}", op_class(op)),
            "*".to_owned(),
        ] {
            let e = per.entry(key).or_default();
            e.0 += raw;
            e.1 += compressed;
        }
    }

    pub fn codecs(&self) -> Vec<String> {
        self.totals.keys().cloned().collect()
    }

    /// Predicted ratio for an activation of `dtype` saved by `op`, and which key answered.
    pub fn predict(&self, codec: &str, dtype: &str, op: &str) -> (f64, String) {
        let Some(per) = self.totals.get(codec).and_then(|c| c.get(dtype)) else {
            return (1.0, "none".into());
        };
        for key in [
            op.to_owned(),
            format!("class:{}", op_class(op)),
            "*".to_owned(),
        ] {
            if let Some(&(raw, comp)) = per.get(&key) {
                if comp > 0 {
                    return (raw as f64 / comp as f64, key);
                }
            }
        }
        (1.0, "none".into())
    }

    /// Ratios for every activation of a trace.
    pub fn for_trace(&self, codec: &str, t: &crate::Trace) -> Vec<f64> {
        t.activations
            .iter()
            .map(|a| self.predict(codec, &a.dtype, &a.saved_by).0)
            .collect()
    }

    /// Ratios for every activation of a trace, measured on tensors of `dtype` whatever the
    /// trace's (the paper's way: FP32 activations cast to BF16, as `bf16-cast`).
    pub fn for_trace_as(&self, codec: &str, dtype: &str, t: &crate::Trace) -> Vec<f64> {
        t.activations
            .iter()
            .map(|a| self.predict(codec, dtype, &a.saved_by).0)
            .collect()
    }
}
