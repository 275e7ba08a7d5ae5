//! GPU presets: how long an op takes, and how fast the link and the codec engine are.
//!
//! Op time is a roofline estimate: `max(flops / (peak * 0.6), bytes / (hbm * 0.8)) + 4 µs`, the
//! efficiencies and the per-op launch cost being typical of well-tuned training kernels. Peaks
//! are dense tensor-core rates from the vendors' datasheets: BF16 for bf16 steps; for fp32 the
//! TF32 tensor-core rate, which PyTorch uses for convolutions by default. The estimate only has
//! to put compute and transfers on one consistent scale: overheads are ratios of times.

use crate::trace::{Op, Trace};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Platform {
    pub name: &'static str,
    pub bf16_tflops: f64,
    pub fp32_tflops: f64,
    pub hbm_gbps: f64,
    /// Usable PCIe bandwidth per direction, GB/s.
    pub pcie_gbps: f64,
    /// Compression engine throughput on raw bytes, GB/s (PlaneZip's B_CE).
    pub engine_gbps: f64,
}

pub const COMPUTE_EFFICIENCY: f64 = 0.6;
pub const MEMORY_EFFICIENCY: f64 = 0.8;
pub const LAUNCH_SECONDS: f64 = 4e-6;

/// The time model's assumptions, in one place so that `cargo xtask trace` can show how much
/// each one moves the results (its sensitivity table). [`Assumptions::default`] is the model
/// every other figure uses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Assumptions {
    /// Fraction of the dense tensor-core peak an op reaches.
    pub compute_efficiency: f64,
    /// Fraction of the HBM bandwidth a memory-bound op reaches.
    pub memory_efficiency: f64,
    /// A recomputation costs this many times its producer op (1: the producer alone, its
    /// inputs assumed resident).
    pub recompute_factor: f64,
    /// One codec engine for both directions: each direction gets half its throughput (PlaneZip
    /// does not say; 1 engine per direction otherwise).
    pub shared_engine: bool,
}

impl Default for Assumptions {
    fn default() -> Self {
        Assumptions {
            compute_efficiency: COMPUTE_EFFICIENCY,
            memory_efficiency: MEMORY_EFFICIENCY,
            recompute_factor: 1.0,
            shared_engine: false,
        }
    }
}

/// A100 40GB SXM with PlaneZip's headline setting: PCIe 4.0 at 24 GB/s, a 64 GB/s engine.
pub const A100_40GB: Platform = Platform {
    name: "A100-40GB",
    bf16_tflops: 312.0,
    fp32_tflops: 156.0,
    hbm_gbps: 1555.0,
    pcie_gbps: 24.0,
    engine_gbps: 64.0,
};

/// H100 SXM, PCIe 5.0 at about 50 GB/s usable.
pub const H100: Platform = Platform {
    name: "H100-SXM",
    bf16_tflops: 989.0,
    fp32_tflops: 495.0,
    hbm_gbps: 3350.0,
    pcie_gbps: 50.0,
    engine_gbps: 64.0,
};

/// H200 SXM, PCIe 5.0 at about 50 GB/s usable.
pub const H200: Platform = Platform {
    name: "H200-SXM",
    bf16_tflops: 989.0,
    fp32_tflops: 495.0,
    hbm_gbps: 4800.0,
    pcie_gbps: 50.0,
    engine_gbps: 64.0,
};

pub const PRESETS: [Platform; 3] = [A100_40GB, H100, H200];

impl Platform {
    /// Estimated seconds of one op of a step in `dtype`.
    pub fn op_seconds(&self, op: &Op, dtype: &str) -> f64 {
        self.op_seconds_with(op, dtype, &Assumptions::default())
    }

    /// [`Platform::op_seconds`] under other assumptions.
    pub fn op_seconds_with(&self, op: &Op, dtype: &str, a: &Assumptions) -> f64 {
        if let Some(s) = op.seconds {
            return s;
        }
        let tflops = if dtype == "fp32" {
            self.fp32_tflops
        } else {
            self.bf16_tflops
        };
        let compute = op.flops as f64 / (tflops * 1e12 * a.compute_efficiency);
        let memory = op.bytes as f64 / (self.hbm_gbps * 1e9 * a.memory_efficiency);
        compute.max(memory) + LAUNCH_SECONDS
    }

    /// Every op's time for a trace.
    pub fn op_times(&self, t: &Trace) -> Vec<f64> {
        self.op_times_with(t, &Assumptions::default())
    }

    /// [`Platform::op_times`] under other assumptions.
    pub fn op_times_with(&self, t: &Trace, a: &Assumptions) -> Vec<f64> {
        t.ops
            .iter()
            .map(|o| self.op_seconds_with(o, &t.dtype, a))
            .collect()
    }

    /// Same platform with another engine speed.
    pub fn with_engine(mut self, gbps: f64) -> Platform {
        self.engine_gbps = gbps;
        self
    }

    /// Same platform with another link speed.
    pub fn with_link(mut self, gbps: f64) -> Platform {
        self.pcie_gbps = gbps;
        self
    }
}
