//! ZBX's last step: the packed nonzero elements back to the positions their mask names.
//!
//! Why a module: done one element at a time this is a loop over the mask's set bits whose
//! length changes from block to block, and on 16-bit data (64 elements, a third of the blocks
//! ZBX) it was a visible share of the decoder's time. AVX-512 VBMI2 has the operation as one
//! instruction (`vpexpand`), so where the CPU has it (Ice Lake and later, Zen 4 and later) a
//! block takes two; elsewhere the loop stays. Both are tested against each other.

/// Write `packed[j]` to the position of the `j`-th set bit of `mask` (lowest first), zeros
/// elsewhere. `packed` beyond `mask.count_ones()` is ignored.
pub(crate) fn expand_portable<T: Copy + Default, const N: usize>(
    mask: u128,
    packed: &[T; N],
) -> [T; N] {
    let mut out = [T::default(); N];
    let mut m = mask;
    for &v in packed {
        if m == 0 {
            break;
        }
        out[m.trailing_zeros() as usize] = v;
        m &= m - 1;
    }
    out
}

macro_rules! expand_fn {
    ($name:ident, $t:ty, $n:expr, $mask:ty, $fast:ident) => {
        /// [`expand_portable`] for this element width, with AVX-512 VBMI2 where present.
        #[inline(always)]
        pub(crate) fn $name(mask: $mask, packed: &[$t; $n]) -> [$t; $n] {
            #[cfg(target_arch = "x86_64")]
            if avx512::available() {
                // SAFETY: the features were checked at run time.
                return unsafe { avx512::$fast(mask, packed) };
            }
            expand_portable(mask as u128, packed)
        }
    };
}
expand_fn!(expand32, u32, 32, u32, expand32);
expand_fn!(expand16, u16, 64, u64, expand16);
expand_fn!(expand8, u8, 128, u128, expand8);

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// AVX-512 F/BW/VBMI2 present and `PLANEPACK_NO_SIMD` unset (cached).
    #[inline(always)]
    pub fn available() -> bool {
        use std::sync::atomic::{AtomicU8, Ordering};
        static STATE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 no, 2 yes
        match STATE.load(Ordering::Relaxed) {
            2 => true,
            1 => false,
            _ => {
                let yes = std::env::var_os("PLANEPACK_NO_SIMD").is_none()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vbmi2");
                STATE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }

    // Each block is two 512-bit halves: the low half's mask bits take the first packed
    // elements, the high half's continue where those end.

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    #[inline]
    pub unsafe fn expand32(mask: u32, packed: &[u32; 32]) -> [u32; 32] {
        let lo = mask as u16;
        let hi = (mask >> 16) as u16;
        // Each load reads 512 bits inside `packed`: the second starts at most 16 in.
        let p = packed.as_ptr();
        let a = _mm512_maskz_expand_epi32(lo, _mm512_loadu_si512(p as *const _));
        let b = _mm512_maskz_expand_epi32(
            hi,
            _mm512_loadu_si512(p.add(lo.count_ones() as usize) as *const _),
        );
        let mut out = [0u32; 32];
        _mm512_storeu_si512(out.as_mut_ptr() as *mut _, a);
        _mm512_storeu_si512(out.as_mut_ptr().add(16) as *mut _, b);
        out
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    #[inline]
    pub unsafe fn expand16(mask: u64, packed: &[u16; 64]) -> [u16; 64] {
        let lo = mask as u32;
        let hi = (mask >> 32) as u32;
        // Each load reads 512 bits inside `packed`: the second starts at most 32 in.
        let p = packed.as_ptr();
        let a = _mm512_maskz_expand_epi16(lo, _mm512_loadu_si512(p as *const _));
        let b = _mm512_maskz_expand_epi16(
            hi,
            _mm512_loadu_si512(p.add(lo.count_ones() as usize) as *const _),
        );
        let mut out = [0u16; 64];
        _mm512_storeu_si512(out.as_mut_ptr() as *mut _, a);
        _mm512_storeu_si512(out.as_mut_ptr().add(32) as *mut _, b);
        out
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    #[inline]
    pub unsafe fn expand8(mask: u128, packed: &[u8; 128]) -> [u8; 128] {
        let lo = mask as u64;
        let hi = (mask >> 64) as u64;
        // Each load reads 512 bits inside `packed`: the second starts at most 64 in.
        let p = packed.as_ptr();
        let a = _mm512_maskz_expand_epi8(lo, _mm512_loadu_si512(p as *const _));
        let b = _mm512_maskz_expand_epi8(
            hi,
            _mm512_loadu_si512(p.add(lo.count_ones() as usize) as *const _),
        );
        let mut out = [0u8; 128];
        _mm512_storeu_si512(out.as_mut_ptr() as *mut _, a);
        _mm512_storeu_si512(out.as_mut_ptr().add(64) as *mut _, b);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatching versions (AVX-512 where present) agree with the loop, for masks from
    /// empty to full and packed values that make misplacement visible.
    #[test]
    fn expand_matches_the_loop() {
        let mut rng = planepack_core::testdata::Rng(11);
        for round in 0..3000 {
            let density = round % 9;
            let mut mask = 0u128;
            for i in 0..128 {
                if rng.below(8) < density as u64 {
                    mask |= 1 << i;
                }
            }
            let p32: [u32; 32] = core::array::from_fn(|i| 1000 + i as u32);
            let p16: [u16; 64] = core::array::from_fn(|i| 100 + i as u16);
            let p8: [u8; 128] = core::array::from_fn(|i| 1 + i as u8);
            assert_eq!(
                expand32(mask as u32, &p32),
                expand_portable(mask as u32 as u128, &p32)
            );
            assert_eq!(
                expand16(mask as u64, &p16),
                expand_portable(mask as u64 as u128, &p16)
            );
            assert_eq!(expand8(mask, &p8), expand_portable(mask, &p8));
        }
    }
}
