//! Which instruction-set tier the SIMD paths of every crate may use, decided once.
//!
//! Why one place: the codecs have several fast paths (block transposes here, the bit-plane
//! chunk loops, ZBX/DBX finishing, IBP's lockstep rows and BMI2 deposits), each of which
//! must agree on the CPU's features and on the two switches users and CI turn them off with:
//! `PLANEPACK_NO_SIMD=1` (portable code everywhere) and `PLANEPACK_NO_AVX512=1` (stop at
//! x86-64-v3). A fast path compiled for a tier (`#[target_feature]`) may be called only when
//! its tier function here says yes. Each answer is computed on first use and cached.

use std::sync::atomic::{AtomicU8, Ordering};

/// A yes/no decided on first use (for `static`s).
struct Decided(AtomicU8);

impl Decided {
    const fn new() -> Self {
        Decided(AtomicU8::new(0)) // 0 unknown, 1 no, 2 yes
    }

    #[inline(always)]
    fn get(&self, decide: impl FnOnce() -> bool) -> bool {
        match self.0.load(Ordering::Relaxed) {
            2 => true,
            1 => false,
            _ => {
                let yes = decide();
                self.0.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }
}

/// x86-64-v3: AVX2, FMA, BMI1, BMI2, POPCNT, LZCNT (Haswell and later, Zen and later), unless
/// `PLANEPACK_NO_SIMD` is set. Fast paths of this tier are compiled with
/// `#[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt")]` or a subset.
#[inline(always)]
pub fn x86_64_v3() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static V3: Decided = Decided::new();
        V3.get(|| {
            std::env::var_os("PLANEPACK_NO_SIMD").is_none()
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("bmi1")
                && is_x86_feature_detected!("bmi2")
                && is_x86_feature_detected!("popcnt")
                && is_x86_feature_detected!("lzcnt")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// x86-64-v3 plus AVX-512 F/BW/VL/VBMI/VBMI2 and GFNI (Ice Lake server, Sapphire Rapids,
/// Zen 4 and later), unless `PLANEPACK_NO_AVX512` (or `PLANEPACK_NO_SIMD`) is set. Fast paths
/// of this tier are compiled with those features or a subset.
#[inline(always)]
pub fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static V4: Decided = Decided::new();
        V4.get(|| {
            x86_64_v3()
                && std::env::var_os("PLANEPACK_NO_AVX512").is_none()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vbmi")
                && is_x86_feature_detected!("avx512vbmi2")
                && is_x86_feature_detected!("gfni")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Tiers as const generic arguments: code instantiated for tier `T` (the bit-plane chunk
/// coders, the block transposes) uses that tier's instructions and no higher tier's, so a
/// test of one tier tests that tier. Only the baseline ISA of the target (SSE2 on x86_64),
/// nothing detected at run time.
pub const PORTABLE: u8 = 0;
/// x86-64-v3 ([`x86_64_v3`]).
pub const X86_64_V3: u8 = 1;
/// x86-64-v3 plus AVX-512 VBMI/VBMI2 and GFNI ([`avx512`]).
pub const AVX512: u8 = 2;

/// Proof that this process may run tier `T`: a function compiled for a tier takes one, so
/// it is safe to call whatever its argument. Made by [`Tier::detect`] (which asks the CPU and
/// the switches), [`Tier::portable`] (every CPU runs the baseline), or, where the caller
/// already knows the tier runs (inside a `#[target_feature]` function of that tier), the
/// unsafe [`Tier::assume`].
#[derive(Debug, Clone, Copy)]
pub struct Tier<const T: u8>(());

impl<const T: u8> Tier<T> {
    /// The token, if this process may run tier `T` (`T <= tier()`).
    pub fn detect() -> Option<Tier<T>> {
        (T <= tier()).then_some(Tier(()))
    }

    /// The token, unchecked.
    ///
    /// # Safety
    /// This process must run tier `T` (`T <= tier()`).
    #[inline(always)]
    pub const unsafe fn assume() -> Tier<T> {
        Tier(())
    }
}

impl Tier<PORTABLE> {
    /// The baseline tier's token.
    #[inline(always)]
    pub const fn portable() -> Tier<PORTABLE> {
        Tier(())
    }
}

/// The highest tier this process may run (CPU and switches).
#[inline(always)]
pub fn tier() -> u8 {
    if avx512() {
        AVX512
    } else if x86_64_v3() {
        X86_64_V3
    } else {
        PORTABLE
    }
}

/// Every tier this process may run, lowest first: what tier tests iterate over.
pub fn tiers() -> Vec<u8> {
    (PORTABLE..=tier()).collect()
}

/// A tier's name in records and reports.
pub fn tier_label(t: u8) -> &'static str {
    match t {
        AVX512 => "avx512-vbmi2-gfni",
        X86_64_V3 => "avx2-bmi2",
        _ => "portable",
    }
}

/// The tier planepack's own fast paths run at on this machine, for records and reports:
/// `avx512-vbmi2-gfni`, `avx2-bmi2` (x86-64-v3) or `portable`.
pub fn tier_name() -> &'static str {
    tier_label(tier())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_exist_for_the_tiers_this_process_runs_only() {
        assert!(Tier::<PORTABLE>::detect().is_some());
        assert_eq!(Tier::<X86_64_V3>::detect().is_some(), tier() >= X86_64_V3);
        assert_eq!(Tier::<AVX512>::detect().is_some(), tier() >= AVX512);
        assert!(Tier::<{ AVX512 + 1 }>::detect().is_none());
        assert!(Tier::<255>::detect().is_none());
    }
}
