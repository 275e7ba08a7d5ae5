//! The comparison harness: every codec on every dataset, measured side by side.
//!
//! For each (dataset, dtype) group of tensors and each codec it encodes every tensor, decodes
//! it, and **compares the result with the input before any figure counts** (a mismatch aborts
//! the run). It then times encode and decode on one core (median of repeated runs after a
//! warm-up, with the spread), decode on all cores, and memcpy of the same bytes in the same
//! run, interleaved with the decode runs so that both see the same machine state. Results are
//! records (`results.json`), from which tables, the transfer model and plots are derived
//! without measuring again.

pub mod files;
pub mod ibp_study;
pub mod input;
pub mod measure;
pub mod plots;
pub mod record;
pub mod registry;
pub mod report;

pub use measure::{measure_group, Group, Settings};

/// The size classes every table splits tensors by: ratio (headers and tables amortised), CPU
/// scaling and GPU occupancy all change with a tensor's size, and offloaded tensors are
/// mostly in the largest class.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum SizeClass {
    /// Under 1 MiB.
    Small,
    /// 1 MiB to 16 MiB.
    Medium,
    /// 16 MiB and more.
    Large,
}

impl SizeClass {
    pub const ALL: [SizeClass; 3] = [SizeClass::Small, SizeClass::Medium, SizeClass::Large];

    /// The class of a tensor of `bytes` bytes.
    pub fn of(bytes: u64) -> SizeClass {
        match bytes {
            b if b < 1 << 20 => SizeClass::Small,
            b if b < 16 << 20 => SizeClass::Medium,
            _ => SizeClass::Large,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            SizeClass::Small => "< 1 MiB",
            SizeClass::Medium => "1-16 MiB",
            SizeClass::Large => ">= 16 MiB",
        }
    }
}
pub use record::{Record, Results, SCHEMA_VERSION};

/// The CPU model, as the OS reports it.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}

/// Cores the all-core figures use.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// A name for the machine the figures come from: CPU model, SIMD tier and core count (the
/// same model name has come with and without AVX-512 on our machines, so the tier is part of
/// the name).
pub fn machine_name() -> String {
    format!(
        "{} ({} cores, {})",
        cpu_model(),
        cores(),
        planepack_core::cpu::tier_name()
    )
}

/// The machine name as a folder name.
pub fn machine_slug(name: &str) -> String {
    let mut s: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    s.trim_matches('-').to_owned()
}
