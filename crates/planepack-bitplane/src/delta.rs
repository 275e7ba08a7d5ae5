//! DBX's planes from BX's: a borrow ripple, and for FP32 at the AVX2 tier a parallel prefix.
//!
//! Below AVX-512 the encoder makes DBX's planes (the planes of `e[i + 1] - e[i]`) from BX's
//! by a borrow that ripples from plane 0 up ([`delta_planes`]): for FP32 a chain of 32
//! dependent steps, each storing its plane alone, which DBX's vector sizer then
//! loads 32 bytes at a time, a load the CPU cannot forward from those narrower stores. As a
//! Kogge-Stone prefix over the planes in four AVX2 registers (five steps of the borrow's
//! generate and propagate words) it is half the instructions, none of them a chain, and the
//! planes leave as whole registers: FP32 encode +3-4 % at the AVX2 tier. 16-bit planes (64
//! bits: four to a register) keep the ripple. Tested against the ripple.

/// DBX's planes: the planes of `e[i + 1] - e[i]` (wrapping, `W` bits; zero for the last
/// element) computed from the elements' planes, not by transposing the differences. Element
/// `i + 1`'s bits are the planes shifted down by one, and the subtraction is the schoolbook one
/// with a borrow plane rippling from the lowest plane up: a few word operations per plane in
/// place of a second transpose (on AVX2, 32 mask extractions on one port for BF16 blocks;
/// BF16 encode +10-17 %, FP32 +10 % on one AVX2 core).
#[inline(always)]
pub(crate) fn delta_planes<G: crate::geometry::Geometry>(planes: &G::Planes) -> G::Planes {
    use crate::geometry::Plane;
    let top = G::Plane::ONE << (G::N as u32 - 1);
    let mut out = G::zero_planes();
    let mut borrow = G::Plane::ZERO;
    for (d, &p) in out.as_mut().iter_mut().zip(planes.as_ref()) {
        let (next, this) = (p >> 1, p & !top);
        let diff = next ^ this;
        *d = diff ^ borrow;
        borrow = (!next & this) | (!diff & borrow);
    }
    out
}

/// DBX's planes of an FP32 block from its planes, with tier `T`'s instructions.
///
/// # Safety
/// The CPU must run tier `T` ([`planepack_core::cpu`]).
#[inline(always)]
pub(crate) unsafe fn planes32<const T: u8>(planes: &[u32; 32]) -> [u32; 32] {
    #[cfg(target_arch = "x86_64")]
    if T >= planepack_core::cpu::X86_64_V3 {
        // SAFETY: the caller guarantees the tier's features.
        return unsafe { avx2::delta_planes32(planes) };
    }
    delta_planes::<crate::geometry::W32>(planes)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::*;

    /// The 32 lanes of `r` (plane `8k + j` in lane `j` of register `k`) moved `S` planes up
    /// (`S` of 1, 2 or 4), zeros in.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn up<const S: i32>(r: &[__m256i; 4]) -> [__m256i; 4] {
        let mut out = [_mm256_setzero_si256(); 4];
        let mut below = _mm256_setzero_si256();
        for k in 0..4 {
            // [below's high half, r's low half], then per half the pair shifted S lanes.
            let t = _mm256_permute2x128_si256::<0x03>(r[k], below);
            out[k] = match S {
                1 => _mm256_alignr_epi8::<12>(r[k], t),
                2 => _mm256_alignr_epi8::<8>(r[k], t),
                _ => t,
            };
            below = r[k];
        }
        out
    }

    /// The borrow ripple ([`super::delta_planes`]) for 32 FP32 planes as a parallel
    /// prefix over the planes in four registers. Plane `p` of `e[i + 1] - e[i]` is
    /// `diff ^ borrow`, with `diff = next ^ this` (the two elements' bits `p`) and the borrow
    /// into plane `p` generated at some plane `q < p` (`this & !next`) and propagated through
    /// every plane between (`!diff`).
    #[target_feature(enable = "avx2")]
    #[inline]
    pub fn delta_planes32(planes: &[u32; 32]) -> [u32; 32] {
        let p = crate::geometry::avx2::registers(planes);
        let low31 = _mm256_set1_epi32(0x7fff_ffff);
        let ones = _mm256_set1_epi32(-1);
        let mut diff = [_mm256_setzero_si256(); 4];
        let mut g = [_mm256_setzero_si256(); 4];
        let mut pr = [_mm256_setzero_si256(); 4];
        for k in 0..4 {
            let next = _mm256_srli_epi32::<1>(p[k]);
            let this = _mm256_and_si256(p[k], low31);
            diff[k] = _mm256_xor_si256(next, this);
            g[k] = _mm256_andnot_si256(next, this);
            pr[k] = _mm256_xor_si256(diff[k], ones);
        }
        // Kogge-Stone: after the step of span s, (g, pr) of plane p are the borrow out of
        // planes p - 2s + 1 ..= p and whether it propagates through all of them.
        macro_rules! step {
            ($gs:expr, $ps:expr) => {{
                let (gs, ps) = ($gs, $ps);
                for k in 0..4 {
                    g[k] = _mm256_or_si256(g[k], _mm256_and_si256(pr[k], gs[k]));
                    pr[k] = _mm256_and_si256(pr[k], ps[k]);
                }
            }};
        }
        step!(up::<1>(&g), up::<1>(&pr));
        step!(up::<2>(&g), up::<2>(&pr));
        step!(up::<4>(&g), up::<4>(&pr));
        let z = _mm256_setzero_si256();
        step!([z, g[0], g[1], g[2]], [z, pr[0], pr[1], pr[2]]);
        step!([z, z, g[0], g[1]], [z, z, pr[0], pr[1]]);
        // The borrow into plane p is g of plane p - 1.
        let borrow = up::<1>(&g);
        let mut out = [0u32; 32];
        for k in 0..4 {
            // SAFETY: 32 bytes at plane 8k of the 128-byte array.
            unsafe {
                _mm256_storeu_si256(
                    out.as_mut_ptr().add(8 * k) as *mut __m256i,
                    _mm256_xor_si256(diff[k], borrow[k]),
                )
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use planepack_core::transpose;

    /// The prefix at every tier this CPU runs against the ripple, on blocks whose borrows run
    /// far (small steps, runs of equal elements) and on random and extreme ones.
    #[test]
    fn prefix_matches_the_ripple() {
        let mut rng = planepack_testkit::Rng(17);
        for round in 0..4000 {
            let mut e = [0u32; 32];
            let mut x = rng.next_u64() as u32;
            for v in e.iter_mut() {
                *v = match round % 4 {
                    0 => rng.next_u64() as u32,
                    1 => [0, u32::MAX, 0x8000_0000, 1][rng.below(4) as usize],
                    2 => {
                        x = x.wrapping_add((rng.below(3) as u32).wrapping_sub(1));
                        x
                    }
                    _ => x ^ (rng.below(2) as u32) << rng.below(32),
                };
            }
            let planes = transpose::portable_planes32(&e);
            let ripple = delta_planes::<crate::geometry::W32>(&planes);
            for (t, got) in planepack_testkit::at_every_tier!(planes32, (&planes)) {
                assert_eq!(got, ripple, "tier {t}: {e:?}");
            }
        }
    }
}
