//! GPU decoders for planepack's formats, in WGSL through wgpu: one code base for Vulkan,
//! Metal and DX12 (NVIDIA, AMD, Intel and Apple GPUs), and for Mesa's lavapipe on CPUs.
//!
//! The CPU decoders (`planepack-bitplane`, `planepack-ibp`, `planepack-rans`) are the
//! reference: every GPU decode is tested bit-identical to them, on every dataset, on both
//! scan paths.
//!
//! * [`Gpu::new`] picks a backend and adapter (`GpuOptions`, or the environment variables
//!   `PLANEPACK_GPU_BACKEND`, `PLANEPACK_GPU_ADAPTER`, `PLANEPACK_GPU_NO_SUBGROUPS`), requests
//!   `Features::SUBGROUP` when the adapter has it, and says what it chose ([`Gpu::describe`]).
//! * A decode is prepared ([`Gpu::prepare_bitplane`], [`Gpu::prepare_ibp`],
//!   [`Gpu::prepare_rows`], [`Gpu::prepare_rans`]: host checks, upload) and then run into
//!   device memory ([`Gpu::decode_on_device`], [`Gpu::decode_all_on_device`] for many tensors
//!   in one submission), optionally into a buffer the caller owns ([`Prepared::write_into`]).
//!   Nothing is read back unless asked ([`Gpu::read_back`]); [`Gpu::decode_bitplane`] and the
//!   other `decode_*`/`gather_*` functions do both steps, for tests and the CLI.
//! * An IBP gather of a few rows uploads only those rows' bytes (and the mask, bitval and their
//!   participation bits): the rows stay compressed in host memory ([`Gpu::prepare_rows`]).
//! * The host does only what is cheap and sequential: it checks stream headers and locates
//!   chunks (2 bytes per 4 KB; 4 per 64 KiB for rANS, plus its row map) or rows (each row's
//!   participation bitmap); everything else is in the shaders ([`shaders`]).
//! * Bad input never hangs the GPU or writes outside the output: shaders bound every read and
//!   loop, and report broken rules in a status buffer that becomes [`GpuError::Corrupt`].
//! * Which prefix-sum path and how many invocations per IBP row a launch uses is a per-call
//!   [`KernelConfig`] ([`Gpu::config`] is the device's default). A subgroup kernel that meets
//!   subgroups it cannot number reports it, and the convenience decoders rerun on the
//!   workgroup-memory kernel (and keep to it on that device).
//! * Constants and uniform layouts shared with WGSL are defined once, in [`contract`]; the
//!   stages with no CPU counterpart in the codec crates have CPU twins in [`twins`].
//!
//! Modules: `device` (adapter, buffers, pipelines), `launch` (prepared launches, running,
//! status, readback), one module per codec (`bitplane`, `ibp`, `rans`), `timing`.

mod bitplane;
mod bitplane_encode;
pub mod contract;
mod device;
mod ibp;
mod ibp_encode;
mod launch;
mod rans;
mod rans_encode;
pub mod shaders;
mod timing;
pub mod twins;

pub use bitplane_encode::BitplaneEncode;
pub use contract::{ERR_LAYOUT, ERR_LOOP};
pub use device::{Gpu, GpuOptions};
pub use ibp_encode::{DeviceRows, EncodedRows, IbpPack};
pub use launch::{DeviceTensor, Prepared};
pub use rans_encode::{encode_rans_twin, EncodedRans, GPU_RANS};
pub use shaders::{Kernel, RansPhase, ScanPath};
pub use timing::{Pipelined, Timing};

/// Invocations that decode one IBP row together (at most; short rows take fewer), on a CPU
/// device (lavapipe) and on a GPU. Each invocation takes a run of whole 32-chunk groups of the
/// row, and a workgroup of 64 takes 64 / lanes rows, so one prefix sum (and its barriers) and
/// one table of the columns' popcounts serve many rows. On lavapipe one lane is fastest: the
/// invocations of a SIMD batch then walk the same columns, so the column loads are uniform and
/// the deposit's branches agree (`examples/gpu_probe.rs`, the four real tensors of at least
/// 1 MiB on an AMD EPYC host, AVX2, alternating runs: decode / copy 0.29-0.41 with 1 lane,
/// 0.27-0.33 with 2, 0.25-0.32 with 4). A GPU wants more invocations per row to keep its cores
/// busy on a few thousand rows. The GPU figure is unmeasured: set `PLANEPACK_GPU_IBP_LANES` (a
/// power of two up to 64) to tune it on a real device.
pub const IBP_LANES_CPU: u32 = 1;
pub const IBP_LANES_GPU: u32 = 16;

/// How a launch runs, chosen per call: the prefix-sum path and the invocations per IBP row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelConfig {
    pub path: ScanPath,
    /// A power of two, 1 to 64 (checked when a launch is prepared). Long rows take more, up
    /// to 64, so that no invocation loops more than `loop_budget` times.
    pub ibp_lanes: u32,
    /// The most loop iterations the host lets one invocation of a kernel make (all loops
    /// together): [`contract::LOOP_ITERATIONS_MAX`] by default. A launch that would need more
    /// is refused as unsupported; a larger budget only serves to test the kernels' canary.
    pub loop_budget: u32,
    /// Decode rANS streams plane-parallel (a workgroup per chunk and plane, three dispatches)
    /// rather than a workgroup per chunk: more workgroups for a GPU's many multiprocessors, at
    /// the cost of parsing earlier planes' tables again, which a CPU device (lavapipe) pays in
    /// full. Default: on for GPUs, off for CPU devices; `PLANEPACK_GPU_RANS_PLANES=0|1`.
    pub rans_planes: bool,
    /// Give a modelled rANS chunk's lanes decode slots (a table read a symbol; 64 KiB of
    /// scratch a chunk), where the tensor's scratch then fits the device's storage binding;
    /// else, or when false (to test that path), they search the context tables' ranks.
    pub model_slots: bool,
}

impl KernelConfig {
    pub fn with_model_slots(self, model_slots: bool) -> KernelConfig {
        KernelConfig {
            model_slots,
            ..self
        }
    }

    pub fn with_path(self, path: ScanPath) -> KernelConfig {
        KernelConfig { path, ..self }
    }

    pub fn with_ibp_lanes(self, ibp_lanes: u32) -> KernelConfig {
        KernelConfig { ibp_lanes, ..self }
    }

    pub fn with_rans_planes(self, rans_planes: bool) -> KernelConfig {
        KernelConfig {
            rans_planes,
            ..self
        }
    }

    pub fn with_loop_budget(self, loop_budget: u32) -> KernelConfig {
        KernelConfig {
            loop_budget,
            ..self
        }
    }
}

/// Refuse a launch one of whose invocations would loop `iterations` times, all loops
/// together, when that is over `budget` ([`contract::LOOP_ITERATIONS_MAX`] unless a test lifts
/// it): llvmpipe cuts such loops short without a fault. `what` names the launch. The CLI then
/// runs the CPU codec.
fn within_loop_budget(iterations: u64, budget: u32, what: &str) -> Result<()> {
    if iterations > u64::from(budget) {
        return Err(GpuError::Unsupported(format!(
            "{what}: one invocation would loop {iterations} times (more than {budget}, \
             llvmpipe's limit)"
        )));
    }
    Ok(())
}

/// Invocations per IBP row must be a power of two dividing the kernel's workgroup of 64.
fn checked_lanes(lanes: u32) -> Result<u32> {
    if lanes.is_power_of_two() && lanes <= 64 {
        Ok(lanes)
    } else {
        Err(GpuError::Unsupported(format!(
            "{lanes} invocations per IBP row (a power of two up to 64)"
        )))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter found ({0})")]
    NoAdapter(String),
    #[error("GPU device: {0}")]
    Device(String),
    /// The host-side checks of the stream failed.
    #[error("invalid stream: {0}")]
    Stream(#[from] planepack_core::Error),
    /// A shader found a broken rule: `flags` are its error bits, `at` the first failing block
    /// (bit-plane) or output row (IBP).
    #[error("corrupt stream: the GPU decoder reported {what} at {unit} {at}")]
    Corrupt {
        flags: u32,
        what: String,
        unit: &'static str,
        at: u32,
    },
    #[error("unsupported on the GPU: {0}")]
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, GpuError>;

/// A stream as the kernels read it: 32 spare zero bytes after it (the readers' windows load
/// ahead), then whole words.
fn stream_padded(bytes: &[u8]) -> Vec<u8> {
    let mut padded = Vec::with_capacity(bytes.len() + 36);
    padded.extend_from_slice(bytes);
    padded.extend_from_slice(&[0u8; 32]);
    words(&padded)
}

/// Words of `bytes`, zero-padded to a multiple of 4 and at least one word.
fn words(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(bytes.len().div_ceil(4).max(1) * 4, 0);
    v
}

fn u32_of(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| GpuError::Unsupported(format!("{what} over 4 GiB")))
}
