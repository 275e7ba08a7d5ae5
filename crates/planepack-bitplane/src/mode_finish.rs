//! The last step of ZBX and DBX blocks: packed nonzeros back to the positions their mask
//! names, and DBX's running sum of deltas.
//!
//! Why a module: done one element at a time, ZBX's expansion is a loop over the mask's set
//! bits whose length changes from block to block, and DBX's running sum is a chain of 32 (FP32)
//! or 64 (16-bit) dependent adds; both were visible shares of the decoder's time. AVX-512 has
//! the first as one instruction (`vpexpand`, VBMI2) and does the second as a log-step scan in
//! two registers, so where the CPU has them (Ice Lake and later, Zen 4 and later) a block
//! takes a few instructions (the scan made FP32 and BF16 decoding 10 % faster); elsewhere the
//! loops stay. Both versions are tested against each other.

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
        /// [`expand_portable`] for this element width, with AVX-512 VBMI2 at that tier.
        ///
        /// # Safety
        /// The CPU must run tier `T` ([`planepack_core::cpu`]).
        #[inline(always)]
        pub(crate) unsafe fn $name<const T: u8>(mask: $mask, packed: &[$t; $n]) -> [$t; $n] {
            #[cfg(target_arch = "x86_64")]
            if T >= planepack_core::cpu::AVX512 {
                // SAFETY: the caller guarantees the tier's features.
                return unsafe { avx512::$fast(mask, packed) };
            }
            expand_portable(mask as u128, packed)
        }
    };
}
expand_fn!(expand32, u32, 32, u32, expand32);
expand_fn!(expand16, u16, 64, u64, expand16);
expand_fn!(expand8, u8, 128, u128, expand8);

/// DBX's elements: `base`, then `base` plus each prefix sum of `deltas` (wrapping); the last
/// delta is not used. With AVX-512 a log-step scan, else one add per element.
pub(crate) fn accumulate_portable<T: Copy + Default, const N: usize>(
    base: T,
    deltas: &[T; N],
    add: impl Fn(T, T) -> T,
) -> [T; N] {
    let mut e = [T::default(); N];
    let mut acc = base;
    for (x, &d) in e.iter_mut().zip(deltas) {
        *x = acc;
        acc = add(acc, d);
    }
    e
}

/// [`accumulate_portable`] for 32-bit elements, with AVX-512 at that tier.
///
/// # Safety
/// The CPU must run tier `T` ([`planepack_core::cpu`]).
#[inline(always)]
pub(crate) unsafe fn accumulate32<const T: u8>(base: u32, deltas: &[u32; 32]) -> [u32; 32] {
    #[cfg(target_arch = "x86_64")]
    if T >= planepack_core::cpu::AVX512 {
        // SAFETY: the caller guarantees the tier's features.
        return unsafe { avx512::accumulate32(base, deltas) };
    }
    accumulate_portable(base, deltas, u32::wrapping_add)
}

/// [`accumulate_portable`] for 16-bit elements, with AVX-512 at that tier.
///
/// # Safety
/// The CPU must run tier `T`.
#[inline(always)]
pub(crate) unsafe fn accumulate16<const T: u8>(base: u16, deltas: &[u16; 64]) -> [u16; 64] {
    #[cfg(target_arch = "x86_64")]
    if T >= planepack_core::cpu::AVX512 {
        // SAFETY: the caller guarantees the tier's features.
        return unsafe { avx512::accumulate16(base, deltas) };
    }
    accumulate_portable(base, deltas, u16::wrapping_add)
}

/// [`accumulate_portable`] for 8-bit elements (no vector version).
///
/// # Safety
/// None beyond the other widths' signature (every tier runs the loop).
#[inline(always)]
pub(crate) unsafe fn accumulate8<const T: u8>(base: u8, deltas: &[u8; 128]) -> [u8; 128] {
    accumulate_portable(base, deltas, u8::wrapping_add)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Inclusive prefix sums of sixteen 32-bit lanes.
    #[inline(always)]
    unsafe fn scan32(x: __m512i) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let z = _mm512_setzero_si512();
            let x = _mm512_add_epi32(x, _mm512_alignr_epi32::<15>(x, z));
            let x = _mm512_add_epi32(x, _mm512_alignr_epi32::<14>(x, z));
            let x = _mm512_add_epi32(x, _mm512_alignr_epi32::<12>(x, z));
            _mm512_add_epi32(x, _mm512_alignr_epi32::<8>(x, z))
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    #[inline]
    pub unsafe fn accumulate32(base: u32, deltas: &[u32; 32]) -> [u32; 32] {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let p = deltas.as_ptr();
            let s0 = scan32(_mm512_loadu_si512(p as *const _));
            let s1 = _mm512_add_epi32(
                scan32(_mm512_loadu_si512(p.add(16) as *const _)),
                _mm512_permutexvar_epi32(_mm512_set1_epi32(15), s0),
            );
            // Exclusive: element i is base plus the sum of deltas before it.
            let b = _mm512_set1_epi32(base as i32);
            let e0 = _mm512_add_epi32(_mm512_alignr_epi32::<15>(s0, _mm512_setzero_si512()), b);
            let e1 = _mm512_add_epi32(_mm512_alignr_epi32::<15>(s1, s0), b);
            let mut out = [0u32; 32];
            _mm512_storeu_si512(out.as_mut_ptr() as *mut _, e0);
            _mm512_storeu_si512(out.as_mut_ptr().add(16) as *mut _, e1);
            out
        }
    }

    /// Thirty-two 16-bit lanes moved up by `k` (lanes below `k` zero).
    #[inline(always)]
    unsafe fn up16(x: __m512i, k: i16) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let idx = _mm512_sub_epi16(
                _mm512_set_epi16(
                    31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                    11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
                ),
                _mm512_set1_epi16(k),
            );
            _mm512_maskz_permutexvar_epi16(!((1u32 << k) - 1), idx, x)
        }
    }

    /// Inclusive prefix sums of thirty-two 16-bit lanes.
    #[inline(always)]
    unsafe fn scan16(x: __m512i) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let x = _mm512_add_epi16(x, up16(x, 1));
            let x = _mm512_add_epi16(x, up16(x, 2));
            let x = _mm512_add_epi16(x, up16(x, 4));
            let x = _mm512_add_epi16(x, up16(x, 8));
            _mm512_add_epi16(x, up16(x, 16))
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    #[inline]
    pub unsafe fn accumulate16(base: u16, deltas: &[u16; 64]) -> [u16; 64] {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let p = deltas.as_ptr();
            let s0 = scan16(_mm512_loadu_si512(p as *const _));
            let last = _mm512_permutexvar_epi16(_mm512_set1_epi16(31), s0);
            let s1 = _mm512_add_epi16(scan16(_mm512_loadu_si512(p.add(32) as *const _)), last);
            let b = _mm512_set1_epi16(base as i16);
            let e0 = _mm512_add_epi16(up16(s0, 1), b);
            // Lane 0 of the upper half takes the lower half's total.
            let e1 = _mm512_add_epi16(_mm512_mask_mov_epi16(up16(s1, 1), 1, last), b);
            let mut out = [0u16; 64];
            _mm512_storeu_si512(out.as_mut_ptr() as *mut _, e0);
            _mm512_storeu_si512(out.as_mut_ptr().add(32) as *mut _, e1);
            out
        }
    }

    /// ZBX's expansion for one element width: the block is two 512-bit halves, the low
    /// half's mask bits take the first packed elements, the high half's continue where those
    /// end. Each load reads 512 bits inside `packed`: the second starts at most half way in.
    macro_rules! expand_fn {
        ($name:ident, $t:ty, $n:expr, $mask:ty, $half:ty, $expand:ident) => {
            #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
            #[inline]
            pub unsafe fn $name(mask: $mask, packed: &[$t; $n]) -> [$t; $n] {
                // SAFETY: the caller upholds this function's contract: the CPU has the features it
                // is compiled for, and the arguments are as its documentation requires; every unsafe
                // operation below relies on exactly that.
                unsafe {
                    let lo = mask as $half;
                    let hi = (mask >> <$half>::BITS) as $half;
                    let p = packed.as_ptr();
                    let a = $expand(lo, _mm512_loadu_si512(p as *const _));
                    let b = $expand(
                        hi,
                        _mm512_loadu_si512(p.add(lo.count_ones() as usize) as *const _),
                    );
                    let mut out = [0 as $t; $n];
                    _mm512_storeu_si512(out.as_mut_ptr() as *mut _, a);
                    _mm512_storeu_si512(out.as_mut_ptr().add($n / 2) as *mut _, b);
                    out
                }
            }
        };
    }
    expand_fn!(expand32, u32, 32, u32, u16, _mm512_maskz_expand_epi32);
    expand_fn!(expand16, u16, 64, u64, u32, _mm512_maskz_expand_epi16);
    expand_fn!(expand8, u8, 128, u128, u64, _mm512_maskz_expand_epi8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tier this CPU runs agrees with the loop, for masks from
    /// empty to full and packed values that make misplacement visible.
    #[test]
    fn expand_matches_the_loop() {
        let mut rng = planepack_testkit::Rng(11);
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
            let want32 = expand_portable(mask as u32 as u128, &p32);
            for (t, got) in planepack_testkit::at_every_tier!(expand32, (mask as u32, &p32)) {
                assert_eq!(got, want32, "tier {t}");
            }
            let want16 = expand_portable(mask as u64 as u128, &p16);
            for (t, got) in planepack_testkit::at_every_tier!(expand16, (mask as u64, &p16)) {
                assert_eq!(got, want16, "tier {t}");
            }
            let want8 = expand_portable(mask, &p8);
            for (t, got) in planepack_testkit::at_every_tier!(expand8, (mask, &p8)) {
                assert_eq!(got, want8, "tier {t}");
            }
        }
    }

    #[test]
    fn accumulate_matches_the_loop() {
        let mut rng = planepack_testkit::Rng(12);
        for _ in 0..3000 {
            let d32: [u32; 32] = core::array::from_fn(|_| rng.next_u64() as u32);
            let d16: [u16; 64] = core::array::from_fn(|_| rng.next_u64() as u16);
            let (b32, b16) = (rng.next_u64() as u32, rng.next_u64() as u16);
            let want32 = accumulate_portable(b32, &d32, u32::wrapping_add);
            for (t, got) in planepack_testkit::at_every_tier!(accumulate32, (b32, &d32)) {
                assert_eq!(got, want32, "tier {t}");
            }
            let want16 = accumulate_portable(b16, &d16, u16::wrapping_add);
            for (t, got) in planepack_testkit::at_every_tier!(accumulate16, (b16, &d16)) {
                assert_eq!(got, want16, "tier {t}");
            }
        }
    }
}
