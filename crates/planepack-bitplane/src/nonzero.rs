//! A block's nonzero mask (bit `i` set where element `i` is not zero), which the encoder needs
//! for every block: ZERO's test, ZVC's and ZBX's sizes and their masks.
//!
//! Why a module: the portable way ORs the block's bit planes together, which is right at any
//! width but, at the AVX2 tier, reads back the planes that the transpose has just stored one
//! 32-bit `movemask` at a time, with vector loads the CPU cannot forward those stores to (a
//! stall on every block: the first such load held 7 % of FP32 encoding's samples). There the
//! mask comes from the elements instead: compare each with zero and gather the sign bits
//! (four compares and four `movemask`s for FP32; two of each and a pack per 32 16-bit
//! elements). AVX-512's transposes keep the planes in registers, so that tier folds them, as
//! 8-bit elements do at every tier. Both ways are tested against each other.

/// The nonzero mask by OR-ing the planes (every tier, every width).
#[inline(always)]
pub(crate) fn fold<P: crate::geometry::Plane>(planes: &[P]) -> P {
    planes.iter().fold(P::ZERO, |m, &p| m | p)
}

/// The nonzero mask of 32 FP32 elements whose planes are `planes`, with tier `T`'s
/// instructions.
///
/// # Safety
/// The CPU must run tier `T` ([`planepack_core::cpu`]).
#[inline(always)]
pub(crate) unsafe fn mask32<const T: u8>(elems: &[u32; 32], planes: &[u32; 32]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if T >= planepack_core::cpu::X86_64_V3 && T < planepack_core::cpu::AVX512 {
        // SAFETY: the caller guarantees the tier's features.
        return unsafe { avx2::mask32(elems) };
    }
    let _ = elems;
    fold(planes)
}

/// The nonzero mask of 64 16-bit elements whose planes are `planes`, with tier `T`'s
/// instructions.
///
/// # Safety
/// The CPU must run tier `T`.
#[inline(always)]
pub(crate) unsafe fn mask16<const T: u8>(elems: &[u16; 64], planes: &[u64; 16]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if T >= planepack_core::cpu::X86_64_V3 && T < planepack_core::cpu::AVX512 {
        // SAFETY: the caller guarantees the tier's features.
        return unsafe { avx2::mask16(elems) };
    }
    let _ = elems;
    fold(planes)
}

/// The nonzero mask of 128 bytes whose planes are `planes` (every tier folds them).
#[inline(always)]
pub(crate) fn mask8<const T: u8>(_elems: &[u8; 128], planes: &[u128; 8]) -> u128 {
    fold(planes)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::*;

    /// [`super::mask32`] at the AVX2 tier: each register's eight compares to one byte.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub fn mask32(elems: &[u32; 32]) -> u32 {
        let zero = _mm256_setzero_si256();
        let mut is_zero = 0u32;
        for (k, v) in crate::geometry::avx2::registers(elems)
            .into_iter()
            .enumerate()
        {
            let eq = _mm256_cmpeq_epi32(v, zero);
            is_zero |= (_mm256_movemask_ps(_mm256_castsi256_ps(eq)) as u32) << (8 * k);
        }
        !is_zero
    }

    /// [`super::mask16`] at the AVX2 tier: two registers' compares packed to bytes (the pack
    /// works within 128-bit halves, so a qword permutation restores the order), one
    /// `movemask` for 32 elements.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub fn mask16(elems: &[u16; 64]) -> u64 {
        let zero = _mm256_setzero_si256();
        let mut is_zero = 0u64;
        let v = crate::geometry::avx2::registers(elems);
        for k in 0..2 {
            let a = _mm256_cmpeq_epi16(v[2 * k], zero);
            let b = _mm256_cmpeq_epi16(v[2 * k + 1], zero);
            // Bytes: a 0-7, b 0-7, a 8-15, b 8-15 -> a 0-15, b 0-15.
            let packed = _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), 0xD8);
            is_zero |= (_mm256_movemask_epi8(packed) as u32 as u64) << (32 * k);
        }
        !is_zero
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use planepack_core::transpose;

    /// The masks at every tier this CPU runs against the planes' fold, on blocks with zeros in
    /// every pattern drawn (none, all, single elements, each byte of an element alone nonzero).
    #[test]
    fn masks_from_elements_match_the_planes_fold() {
        let mut rng = planepack_testkit::Rng(5);
        for round in 0..4000 {
            let pick = |rng: &mut planepack_testkit::Rng| -> u32 {
                match round % 4 {
                    0 => rng.next_u64() as u32,
                    1 => [0, 0, 1 << rng.below(32), u32::MAX][rng.below(4) as usize],
                    2 => 0,
                    _ => (rng.below(2) as u32) << (8 * rng.below(4)),
                }
            };
            let e32: [u32; 32] = core::array::from_fn(|_| pick(&mut rng));
            let e16: [u16; 64] = core::array::from_fn(|_| pick(&mut rng) as u16);
            let p32 = transpose::portable_planes32(&e32);
            let p16 = transpose::portable_planes16(&e16);
            let (f32_, f16_) = (fold(&p32), fold(&p16));
            assert_eq!(
                f32_,
                e32.iter()
                    .enumerate()
                    .map(|(i, &x)| u32::from(x != 0) << i)
                    .sum::<u32>()
            );
            assert_eq!(
                f16_,
                e16.iter()
                    .enumerate()
                    .map(|(i, &x)| u64::from(x != 0) << i)
                    .sum::<u64>()
            );
            for (t, got) in planepack_testkit::at_every_tier!(mask32, (&e32, &p32)) {
                assert_eq!(got, f32_, "tier {t}: {e32:?}");
            }
            for (t, got) in planepack_testkit::at_every_tier!(mask16, (&e16, &p16)) {
                assert_eq!(got, f16_, "tier {t}: {e16:?}");
            }
        }
    }
}
