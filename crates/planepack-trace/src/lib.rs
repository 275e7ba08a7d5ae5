//! What compression buys a training step under a memory budget.
//!
//! A smaller activation is not a faster step by itself: PlaneZip's argument is that
//! compression changes which activations should be kept on the GPU, swapped to host memory over
//! PCIe, or dropped and recomputed, and when each transfer must run. This crate holds the pieces
//! to test that argument on traces of real models:
//!
//! * [`trace`]: the trace of one training step (ops in execution order with FLOPs and bytes,
//!   every saved activation with its size, producer, last forward use, backward uses and the op
//!   that saved it). Format: `docs/format-trace.md`; traces in `datasets/traces/`.
//! * [`platform`]: GPU presets (A100 40GB, H100, H200) that turn FLOPs and bytes into op times.
//! * [`cost`]: PlaneZip's equation (2) per direction, with the bypass when compression does
//!   not pay.
//! * [`ratios`]: per-activation compression ratios predicted from measured ratios of our real
//!   activation datasets, by the op that saved the tensor and its dtype.
//! * [`sim`]: a discrete-event simulator of the compute stream, the two PCIe directions (one
//!   FIFO queue each) and recomputation; step time, stalls, peak memory.
//! * [`planner`]: a greedy keep/swap/drop planner under a memory budget, with deadlines (a
//!   swapped tensor is prefetched as late as possible but before its first backward use).

pub mod cost;
pub mod planner;
pub mod platform;
pub mod ratios;
pub mod sim;
pub mod trace;

pub use planner::{plan, Planned};
pub use platform::{Assumptions, Platform};
pub use sim::{simulate, Decision, Outcome, Plan, Setup};
pub use trace::{Activation, Op, Phase, Trace};
