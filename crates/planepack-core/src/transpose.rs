//! Bit-matrix transposes between elements and bit planes.
//!
//! A block of `N` elements of `W` bits is a `N x W` bit matrix; its transpose is `W` planes of
//! `N` bits, plane `b` holding bit `b` of every element (element `i` at bit `i`). Bit-plane
//! coding works on planes, so the encoder transposes each block once per candidate mode and
//! the decoder once per block: these functions are on the hot path of both.
//!
//! The square transposes use the recursive block-swap method (swap the off-diagonal halves,
//! then quarters, ...): `log2(n)` passes of `n/2` masked swaps, branch-free and independent of
//! the data. Non-square blocks (64 x 16, 128 x 8) are done as several square tiles.
//! The reference definition is [`planes_naive`], against which everything here is tested.
//!
//! On x86_64 faster versions are picked at run time: with AVX-512 VBMI and GFNI (Ice Lake
//! server, Sapphire Rapids, Zen 4 and later) a whole block is two byte permutations around
//! one instruction that transposes every 8x8 bit tile ([`gfni`]); with AVX2 or SSE2 the bits
//! are peeled off with `movemask`. `PLANEPACK_NO_AVX512=1` stops at AVX2 and
//! `PLANEPACK_NO_SIMD=1` keeps the portable code.

use crate::cpu::Tier;

macro_rules! square_transpose {
    ($name:ident, $t:ty, $n:expr, [$(($j:expr, $m:expr)),*]) => {
        /// Transpose a square bit matrix in place: afterwards bit `c` of row `r` is what was bit
        /// `r` of row `c`.
        #[inline]
        pub fn $name(a: &mut [$t; $n]) {
            $(
                {
                    const J: usize = $j;
                    const M: $t = $m;
                    // Rows `k` and `k + J` for every `k` whose bit `J` is clear: fixed-length
                    // inner loops the compiler unrolls and vectorizes.
                    for base in (0..$n).step_by(2 * J) {
                        let (lo, hi) = a[base..base + 2 * J].split_at_mut(J);
                        for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
                            let t = ((*x >> J) ^ *y) & M;
                            *x ^= t << J;
                            *y ^= t;
                        }
                    }
                }
            )*
        }
    };
}

square_transpose!(
    transpose32,
    u32,
    32,
    [
        (16, 0x0000_FFFF),
        (8, 0x00FF_00FF),
        (4, 0x0F0F_0F0F),
        (2, 0x3333_3333),
        (1, 0x5555_5555)
    ]
);
square_transpose!(
    transpose16,
    u16,
    16,
    [(8, 0x00FF), (4, 0x0F0F), (2, 0x3333), (1, 0x5555)]
);

/// [`transpose8`]'s steps: the bits of each mask trade places with those the shift above
/// them (2x2, then 4x4, then 8x8 blocks). The AVX2 transpose takes the same steps on every
/// qword of a register.
const TRANSPOSE8_STEPS: [(u32, u64); 3] = [
    (7, 0x00AA_00AA_00AA_00AA),
    (14, 0x0000_CCCC_0000_CCCC),
    (28, 0x0000_0000_F0F0_F0F0),
];

/// Transpose an 8x8 bit matrix held in a `u64` (row `r` is byte `r`, column `c` is bit `c`).
#[inline]
pub fn transpose8(x: u64) -> u64 {
    TRANSPOSE8_STEPS.iter().fold(x, |x, &(shift, mask)| {
        let t = (x ^ (x >> shift)) & mask;
        x ^ t ^ (t << shift)
    })
}

/// Call `$at` with the token of the tier this process runs ([`crate::cpu::tier`]).
macro_rules! at_detected_tier {
    ($at:ident, $x:expr) => {
        match crate::cpu::tier() {
            crate::cpu::AVX512 => {
                // SAFETY: `cpu::tier()` said this CPU runs the tier.
                let tier = unsafe { Tier::<{ crate::cpu::AVX512 }>::assume() };
                $at(tier, $x)
            }
            crate::cpu::X86_64_V3 => {
                // SAFETY: as above.
                let tier = unsafe { Tier::<{ crate::cpu::X86_64_V3 }>::assume() };
                $at(tier, $x)
            }
            _ => $at(Tier::portable(), $x),
        }
    };
}

/// 32 elements of 32 bits to 32 planes of 32 bits, at the tier this process runs.
#[inline]
pub fn planes32(elems: &[u32; 32]) -> [u32; 32] {
    at_detected_tier!(planes32_at, elems)
}

/// [`planes32`] with tier `T`'s instructions: GFNI, AVX2, or SSE2 (x86_64's baseline). The
/// token proves this process runs the tier.
#[inline(always)]
pub fn planes32_at<const T: u8>(_tier: Tier<T>, elems: &[u32; 32]) -> [u32; 32] {
    #[cfg(target_arch = "x86_64")]
    {
        if T >= crate::cpu::AVX512 {
            // SAFETY: `_tier` proves the CPU runs the tier, which has these features.
            return unsafe { gfni::transpose::<32, 32, 32, 32>(elems) };
        }
        if T >= crate::cpu::X86_64_V3 {
            // SAFETY: as above.
            return unsafe { avx2::transpose32(elems) };
        }
        sse2::transpose32(elems)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        portable_planes32(elems)
    }
}

/// [`planes32`] without SIMD (the reference the SIMD version is tested against).
pub fn portable_planes32(elems: &[u32; 32]) -> [u32; 32] {
    let mut a = *elems;
    transpose32(&mut a);
    a
}

/// Inverse of [`planes32`].
#[inline]
pub fn elems32(planes: &[u32; 32]) -> [u32; 32] {
    planes32(planes)
}

/// Inverse of [`planes32_at`] (a 32x32 transpose is its own inverse).
#[inline(always)]
pub fn elems32_at<const T: u8>(tier: Tier<T>, planes: &[u32; 32]) -> [u32; 32] {
    planes32_at(tier, planes)
}

/// 64 elements of 16 bits to 16 planes of 64 bits, at the tier this process runs.
#[inline]
pub fn planes16(elems: &[u16; 64]) -> [u64; 16] {
    at_detected_tier!(planes16_at, elems)
}

/// [`planes16`] with tier `T`'s instructions.
#[inline(always)]
pub fn planes16_at<const T: u8>(_tier: Tier<T>, elems: &[u16; 64]) -> [u64; 16] {
    #[cfg(target_arch = "x86_64")]
    {
        if T >= crate::cpu::AVX512 {
            // SAFETY: `_tier` proves the CPU runs the tier, which has these features.
            return unsafe { gfni::transpose::<64, 16, 64, 16>(elems) };
        }
        if T >= crate::cpu::X86_64_V3 {
            // SAFETY: as above.
            return unsafe { avx2::planes16(elems) };
        }
        sse2::planes16(elems)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        portable_planes16(elems)
    }
}

/// [`planes16`] without SIMD.
pub fn portable_planes16(elems: &[u16; 64]) -> [u64; 16] {
    let mut planes = [0u64; 16];
    for g in 0..4 {
        let mut tile: [u16; 16] = elems[g * 16..g * 16 + 16].try_into().unwrap();
        transpose16(&mut tile);
        for b in 0..16 {
            planes[b] |= (tile[b] as u64) << (16 * g);
        }
    }
    planes
}

/// Inverse of [`planes16`].
#[inline]
pub fn elems16(planes: &[u64; 16]) -> [u16; 64] {
    at_detected_tier!(elems16_at, planes)
}

/// [`elems16`] with tier `T`'s instructions (AVX2 has no faster way than SSE2's).
#[inline(always)]
pub fn elems16_at<const T: u8>(_tier: Tier<T>, planes: &[u64; 16]) -> [u16; 64] {
    #[cfg(target_arch = "x86_64")]
    {
        if T >= crate::cpu::AVX512 {
            // SAFETY: `_tier` proves the CPU runs the tier, which has these features.
            return unsafe { gfni::transpose::<16, 64, 16, 64>(planes) };
        }
        sse2::elems16(planes)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        portable_elems16(planes)
    }
}

/// [`elems16`] without SIMD.
pub fn portable_elems16(planes: &[u64; 16]) -> [u16; 64] {
    let mut elems = [0u16; 64];
    for g in 0..4 {
        let mut tile = [0u16; 16];
        for b in 0..16 {
            tile[b] = (planes[b] >> (16 * g)) as u16;
        }
        transpose16(&mut tile);
        elems[g * 16..g * 16 + 16].copy_from_slice(&tile);
    }
    elems
}

/// 128 elements of 8 bits to 8 planes of 128 bits, at the tier this process runs.
#[inline]
pub fn planes8(elems: &[u8; 128]) -> [u128; 8] {
    at_detected_tier!(planes8_at, elems)
}

/// [`planes8`] with tier `T`'s instructions (GFNI, else the portable loop).
#[inline(always)]
pub fn planes8_at<const T: u8>(_tier: Tier<T>, elems: &[u8; 128]) -> [u128; 8] {
    #[cfg(target_arch = "x86_64")]
    if T >= crate::cpu::AVX512 {
        // SAFETY: `_tier` proves the CPU runs the tier, which has these features.
        return unsafe { gfni::transpose::<128, 8, 128, 8>(elems) };
    }
    portable_planes8(elems)
}

/// [`planes8`] without SIMD.
pub fn portable_planes8(elems: &[u8; 128]) -> [u128; 8] {
    let mut planes = [0u128; 8];
    for g in 0..16 {
        let tile = u64::from_le_bytes(elems[g * 8..g * 8 + 8].try_into().unwrap());
        let t = transpose8(tile).to_le_bytes();
        for b in 0..8 {
            planes[b] |= (t[b] as u128) << (8 * g);
        }
    }
    planes
}

/// Inverse of [`planes8`].
#[inline]
pub fn elems8(planes: &[u128; 8]) -> [u8; 128] {
    at_detected_tier!(elems8_at, planes)
}

/// [`elems8`] with tier `T`'s instructions.
#[inline(always)]
pub fn elems8_at<const T: u8>(_tier: Tier<T>, planes: &[u128; 8]) -> [u8; 128] {
    #[cfg(target_arch = "x86_64")]
    if T >= crate::cpu::AVX512 {
        // SAFETY: `_tier` proves the CPU runs the tier, which has these features.
        return unsafe { gfni::transpose::<8, 128, 8, 128>(planes) };
    }
    portable_elems8(planes)
}

/// [`elems8`] without SIMD.
pub fn portable_elems8(planes: &[u128; 8]) -> [u8; 128] {
    let mut elems = [0u8; 128];
    for g in 0..16 {
        let mut t = [0u8; 8];
        for b in 0..8 {
            t[b] = (planes[b] >> (8 * g)) as u8;
        }
        let tile = transpose8(u64::from_le_bytes(t));
        elems[g * 8..g * 8 + 8].copy_from_slice(&tile.to_le_bytes());
    }
    elems
}

/// SSE2 versions (SSE2 is part of every x86_64 CPU, so no run-time detection is needed).
///
/// The idea: `movemask` collects bit 7 of 16 bytes into a 16-bit integer, and adding a vector
/// to itself shifts every byte left by one, so eight `movemask`/`add` pairs peel the eight bit
/// planes off a vector of bytes. The bytes are first regrouped (with unpack instructions) so
/// that one vector holds the same byte of 16 different rows.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::*;

    /// 16 elements of 4 bytes (in 4 vectors) to 4 vectors: byte `b` of elements 0..16.
    #[inline(always)]
    fn bytes_by_position(a: [__m128i; 4]) -> [__m128i; 4] {
        // SAFETY: SSE2 is part of every x86_64 CPU, and these intrinsics only compute on values.
        unsafe {
            let b0 = _mm_unpacklo_epi8(a[0], a[2]);
            let b1 = _mm_unpackhi_epi8(a[0], a[2]);
            let b2 = _mm_unpacklo_epi8(a[1], a[3]);
            let b3 = _mm_unpackhi_epi8(a[1], a[3]);
            let c0 = _mm_unpacklo_epi8(b0, b2);
            let c1 = _mm_unpackhi_epi8(b0, b2);
            let c2 = _mm_unpacklo_epi8(b1, b3);
            let c3 = _mm_unpackhi_epi8(b1, b3);
            let d0 = _mm_unpacklo_epi8(c0, c2);
            let d1 = _mm_unpackhi_epi8(c0, c2);
            let d2 = _mm_unpacklo_epi8(c1, c3);
            let d3 = _mm_unpackhi_epi8(c1, c3);
            [
                _mm_unpacklo_epi8(d0, d2),
                _mm_unpackhi_epi8(d0, d2),
                _mm_unpacklo_epi8(d1, d3),
                _mm_unpackhi_epi8(d1, d3),
            ]
        }
    }

    #[inline(always)]
    fn mask(x: __m128i) -> u32 {
        // SAFETY: SSE2 is part of every x86_64 CPU.
        unsafe { _mm_movemask_epi8(x) as u32 }
    }

    #[inline(always)]
    fn shl1(x: __m128i) -> __m128i {
        // SAFETY: SSE2 is part of every x86_64 CPU.
        unsafe { _mm_add_epi8(x, x) }
    }

    /// Four `u32` (little-endian, as on every x86_64) in one vector.
    #[inline(always)]
    fn load_u32x4(x: &[u32; 4]) -> __m128i {
        // SAFETY: reads exactly the 16 bytes of the referenced array.
        unsafe { _mm_loadu_si128(x.as_ptr() as *const __m128i) }
    }

    /// 32x32 bit transpose.
    #[inline]
    pub fn transpose32(rows: &[u32; 32]) -> [u32; 32] {
        let v: [__m128i; 8] =
            core::array::from_fn(|i| load_u32x4(rows[4 * i..4 * i + 4].try_into().unwrap()));
        let mut lo = bytes_by_position([v[0], v[1], v[2], v[3]]);
        let mut hi = bytes_by_position([v[4], v[5], v[6], v[7]]);
        let mut out = [0u32; 32];
        for k in (0..8).rev() {
            for b in 0..4 {
                out[8 * b + k] = mask(lo[b]) | (mask(hi[b]) << 16);
                lo[b] = shl1(lo[b]);
                hi[b] = shl1(hi[b]);
            }
        }
        out
    }

    /// 64 elements of 16 bits to 16 planes of 64 bits.
    #[inline]
    pub fn planes16(elems: &[u16; 64]) -> [u64; 16] {
        let load_u16x8 = |i: usize| -> __m128i {
            let x: &[u16; 8] = elems[8 * i..8 * i + 8].try_into().unwrap();
            // SAFETY: reads exactly the 16 bytes of the referenced array.
            unsafe { _mm_loadu_si128(x.as_ptr() as *const __m128i) }
        };
        // SAFETY: SSE2 is part of every x86_64 CPU.
        let mut lo = [unsafe { _mm_setzero_si128() }; 4];
        let mut hi = lo;
        // SAFETY: SSE2 is part of every x86_64 CPU; the loads are `load_u16x8`'s, in bounds.
        unsafe {
            let ff = _mm_set1_epi16(0xFF);
            for g in 0..4 {
                let a = load_u16x8(2 * g);
                let b = load_u16x8(2 * g + 1);
                lo[g] = _mm_packus_epi16(_mm_and_si128(a, ff), _mm_and_si128(b, ff));
                hi[g] = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
            }
        }
        let mut planes = [0u64; 16];
        for k in (0..8).rev() {
            let (mut pl, mut ph) = (0u64, 0u64);
            for g in 0..4 {
                pl |= (mask(lo[g]) as u64) << (16 * g);
                ph |= (mask(hi[g]) as u64) << (16 * g);
                lo[g] = shl1(lo[g]);
                hi[g] = shl1(hi[g]);
            }
            planes[k] = pl;
            planes[8 + k] = ph;
        }
        planes
    }

    /// 16 planes of 64 bits to 64 elements of 16 bits.
    #[inline]
    pub fn elems16(planes: &[u64; 16]) -> [u16; 64] {
        let load_u64x2 = |j: usize| -> __m128i {
            let x: &[u64; 2] = planes[2 * j..2 * j + 2].try_into().unwrap();
            // SAFETY: reads exactly the 16 bytes of the referenced array.
            unsafe { _mm_loadu_si128(x.as_ptr() as *const __m128i) }
        };
        // SAFETY: SSE2 is part of every x86_64 CPU.
        let mut y = [unsafe { _mm_setzero_si128() }; 8];
        // SAFETY: SSE2 is part of every x86_64 CPU; the loads are `load_u64x2`'s, in bounds.
        unsafe {
            // z[j]: (plane 2j byte q, plane 2j+1 byte q) for q = 0..8.
            let z: [__m128i; 8] = core::array::from_fn(|j| {
                let x = load_u64x2(j);
                _mm_unpacklo_epi8(x, _mm_unpackhi_epi64(x, x))
            });
            // w: 32-bit groups, byte q of four consecutive planes.
            let mut w = [_mm_setzero_si128(); 8];
            for i in 0..4 {
                w[2 * i] = _mm_unpacklo_epi16(z[2 * i], z[2 * i + 1]); // q 0..4
                w[2 * i + 1] = _mm_unpackhi_epi16(z[2 * i], z[2 * i + 1]); // q 4..8
            }
            // u: 64-bit groups, byte q of eight consecutive planes.
            let mut u = [_mm_setzero_si128(); 8];
            for half in 0..2 {
                let (a_lo, a_hi, b_lo, b_hi) = (
                    w[4 * half],
                    w[4 * half + 1],
                    w[4 * half + 2],
                    w[4 * half + 3],
                );
                u[4 * half] = _mm_unpacklo_epi32(a_lo, b_lo); // q0, q1
                u[4 * half + 1] = _mm_unpackhi_epi32(a_lo, b_lo); // q2, q3
                u[4 * half + 2] = _mm_unpacklo_epi32(a_hi, b_hi); // q4, q5
                u[4 * half + 3] = _mm_unpackhi_epi32(a_hi, b_hi); // q6, q7
            }
            for i in 0..4 {
                y[2 * i] = _mm_unpacklo_epi64(u[i], u[4 + i]);
                y[2 * i + 1] = _mm_unpackhi_epi64(u[i], u[4 + i]);
            }
        }
        let mut elems = [0u16; 64];
        for r in (0..8).rev() {
            for q in 0..8 {
                elems[8 * q + r] = mask(y[q]) as u16;
                y[q] = shl1(y[q]);
            }
        }
        elems
    }
}

/// AVX2 versions: the same movemask idea on 32-byte vectors, so one `movemask` yields a whole
/// 32-bit plane. Chosen at run time (`PLANEPACK_NO_SIMD=1` disables them). `#[inline]` lets
/// them inline into the other crates' AVX2-compiled block loops (the bit-plane codec's chunk
/// coders): called out of line, each block paid a call, a `vzeroupper` and its planes
/// returned through memory (bit-plane encode at the AVX2 tier +3 % BF16, +5 % FP32).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use core::arch::x86_64::*;

    /// May the AVX2 versions run ([`crate::cpu::x86_64_v3`])? (The tests ask.)
    #[cfg(test)]
    pub fn available() -> bool {
        crate::cpu::x86_64_v3()
    }

    /// 32x32 bit transpose. Caller guarantees AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub fn transpose32(rows: &[u32; 32]) -> [u32; 32] {
        // SAFETY: (all loads) each reads 32 bytes inside the 128-byte array.
        let y: [__m256i; 4] = core::array::from_fn(|k| unsafe {
            _mm256_loadu_si256(rows.as_ptr().add(8 * k) as *const __m256i)
        });
        // Per 128-bit lane (4 elements): dword j = byte j of the 4 elements.
        let group = _mm256_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
            10, 14, 3, 7, 11, 15,
        );
        // Then qword b = byte b of the 8 elements of the register.
        let pair = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let q: [__m256i; 4] = core::array::from_fn(|k| {
            _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(y[k], group), pair)
        });
        // 4x4 transpose of qwords: register b = byte b of all 32 elements.
        let t0 = _mm256_unpacklo_epi64(q[0], q[1]);
        let t1 = _mm256_unpackhi_epi64(q[0], q[1]);
        let t2 = _mm256_unpacklo_epi64(q[2], q[3]);
        let t3 = _mm256_unpackhi_epi64(q[2], q[3]);
        let by = [
            _mm256_permute2x128_si256(t0, t2, 0x20),
            _mm256_permute2x128_si256(t1, t3, 0x20),
            _mm256_permute2x128_si256(t0, t2, 0x31),
            _mm256_permute2x128_si256(t1, t3, 0x31),
        ];
        // Then the bits, in registers (`byte_planes`): the planes leave as whole registers.
        // Stored 32 bits at a time (one `movemask` a plane, as this was), a caller loading them
        // as vectors (the bit-plane encoder's sizing) waited on a failed store forward every
        // block.
        let mut out = [0u32; 32];
        for (b, x) in by.into_iter().enumerate() {
            // SAFETY: 32 bytes at dword 8b of the 128-byte array (b < 4).
            unsafe {
                _mm256_storeu_si256(out.as_mut_ptr().add(8 * b) as *mut __m256i, byte_planes(x))
            };
        }
        out
    }

    /// The eight bit planes of 32 bytes: dword k of the result is bit k of every byte (bit j
    /// from byte j). In each qword an 8x8 bit transpose (`transpose8`'s three steps) makes
    /// byte k the qword's eight bits k; a byte shuffle pairs the two qwords of each half (word
    /// k: 16 bytes' bits k) and a word interleave of the halves makes dword k.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn byte_planes(x: __m256i) -> __m256i {
        let pair = _mm256_setr_epi8(
            0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12,
            5, 13, 6, 14, 7, 15,
        );
        let words = _mm256_shuffle_epi8(transpose8x4(x), pair);
        let (lo, hi) = (
            _mm256_castsi256_si128(words),
            _mm256_extracti128_si256::<1>(words),
        );
        _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi))
    }

    /// [`super::transpose8`] on each qword of `x` (its steps, `TRANSPOSE8_STEPS`).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn transpose8x4(x: __m256i) -> __m256i {
        super::TRANSPOSE8_STEPS.iter().fold(x, |x, &(shift, mask)| {
            let s = _mm_cvtsi32_si128(shift as i32);
            let t = _mm256_and_si256(
                _mm256_xor_si256(x, _mm256_srl_epi64(x, s)),
                _mm256_set1_epi64x(mask as i64),
            );
            _mm256_xor_si256(x, _mm256_xor_si256(t, _mm256_sll_epi64(t, s)))
        })
    }

    /// 64 elements of 16 bits to 16 planes of 64 bits. Caller guarantees AVX2. (Its bit stage
    /// stays `movemask`s: done in registers as `transpose32`'s is, with the qwords joined by
    /// dword interleaves, the bit-plane encoder's BF16 batches ran 10 % slower.)
    #[target_feature(enable = "avx2")]
    #[inline]
    pub fn planes16(elems: &[u16; 64]) -> [u64; 16] {
        // SAFETY: (all loads) each reads 32 bytes inside the 128-byte array.
        let y: [__m256i; 4] = core::array::from_fn(|k| unsafe {
            _mm256_loadu_si256(elems.as_ptr().add(16 * k) as *const __m256i)
        });
        // Per lane (8 elements): low bytes, then high bytes.
        let split = _mm256_setr_epi8(
            0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14, 1, 3,
            5, 7, 9, 11, 13, 15,
        );
        // Qwords (lo e0-7, hi e0-7, lo e8-15, hi e8-15) -> (lo e0-7, lo e8-15, hi e0-7, hi e8-15).
        let q: [__m256i; 4] = core::array::from_fn(|k| {
            _mm256_permute4x64_epi64(_mm256_shuffle_epi8(y[k], split), 0xD8)
        });
        let mut lo = [
            _mm256_permute2x128_si256(q[0], q[1], 0x20),
            _mm256_permute2x128_si256(q[2], q[3], 0x20),
        ];
        let mut hi = [
            _mm256_permute2x128_si256(q[0], q[1], 0x31),
            _mm256_permute2x128_si256(q[2], q[3], 0x31),
        ];
        let mut planes = [0u64; 16];
        for k in (0..8).rev() {
            planes[k] = _mm256_movemask_epi8(lo[0]) as u32 as u64
                | (_mm256_movemask_epi8(lo[1]) as u32 as u64) << 32;
            planes[8 + k] = _mm256_movemask_epi8(hi[0]) as u32 as u64
                | (_mm256_movemask_epi8(hi[1]) as u32 as u64) << 32;
            // Four named registers, not a chained iterator over two arrays: that loop was kept
            // as one, through memory (a quarter of the AVX2 bit-plane encoder's time).
            let [l0, l1] = lo;
            let [h0, h1] = hi;
            lo = [_mm256_add_epi8(l0, l0), _mm256_add_epi8(l1, l1)];
            hi = [_mm256_add_epi8(h0, h0), _mm256_add_epi8(h1, h1)];
        }
        planes
    }
}

/// AVX-512 VBMI + GFNI versions: a block of 1024 bits is two 512-bit registers.
///
/// A `rows x cols` bit matrix (row `r` = bytes `r * cols / 8 ..`, little endian) is cut into
/// 8x8 tiles. One two-register byte permutation (`vpermi2b`) gathers each tile's eight row
/// bytes into a qword, rows in reverse order; `gf2p8affine` with the identity as its vector
/// operand then makes byte `j` of the qword the tile's column `j` (it computes, for each
/// output bit `k`, the parity of the matrix's byte `7 - k` with the input byte, so the
/// reversed rows come out in order); a second permutation puts each tile column where it
/// belongs in the transposed matrix. Both permutations are tables computed at compile time.
#[cfg(target_arch = "x86_64")]
pub mod gfni {
    use core::arch::x86_64::*;

    /// May these versions run ([`crate::cpu::avx512`])?
    #[inline(always)]
    pub fn available() -> bool {
        crate::cpu::avx512()
    }

    /// The two byte permutations for a `rows x cols` matrix (`rows * cols = 1024`):
    /// `gather[i]` is the source byte of tile-qword byte `i`, `place[d]` the tile-qword byte
    /// that becomes output byte `d`.
    const fn tables(rows: usize, cols: usize) -> ([u8; 128], [u8; 128]) {
        let (row_bytes, out_row_bytes) = (cols / 8, rows / 8);
        let mut gather = [0u8; 128];
        let mut place = [0u8; 128];
        // Tile (r, q): rows 8r..8r+8, byte column q; it goes to qword k = q * rows / 8 + r.
        let mut r = 0;
        while r < rows / 8 {
            let mut q = 0;
            while q < row_bytes {
                let k = q * out_row_bytes + r;
                let mut b = 0;
                while b < 8 {
                    gather[8 * k + b] = (row_bytes * (8 * r + 7 - b) + q) as u8;
                    // Tile column b is output row 8q + b, byte r.
                    place[out_row_bytes * (8 * q + b) + r] = (8 * k + b) as u8;
                    b += 1;
                }
                q += 1;
            }
            r += 1;
        }
        (gather, place)
    }

    /// Transpose the `ROWS x COLS` bit matrix held in `input` (1024 bits) into the
    /// `COLS x ROWS` matrix, returned as an `[O; ON]` array.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VBMI and GFNI ([`available`]).
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi,gfni")]
    #[inline]
    pub unsafe fn transpose<
        const ROWS: usize,
        const COLS: usize,
        const IN: usize,
        const ON: usize,
    >(
        input: &[impl Copy; IN],
    ) -> [<Out<ON> as Word>::T; ON]
    where
        Out<ON>: Word,
    {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let (gather, place) = const { tables(ROWS, COLS) };
            const { assert!(ROWS * COLS == 1024) };
            assert_eq!(core::mem::size_of_val(input), 128);
            let src = input.as_ptr() as *const u8;
            let (a, b) = (
                _mm512_loadu_si512(src as *const _),
                _mm512_loadu_si512(src.add(64) as *const _),
            );
            let table = |t: &[u8; 128]| t.as_ptr() as *const __m512i;
            let (gather, place) = (table(&gather), table(&place));
            // (No closures over intrinsics below: a closure would not inherit the target features.)
            let identity = _mm512_set1_epi64(0x8040_2010_0804_0201_u64 as i64);
            let t0 = _mm512_permutex2var_epi8(a, _mm512_loadu_si512(gather as *const _), b);
            let t1 = _mm512_permutex2var_epi8(a, _mm512_loadu_si512(gather.add(1) as *const _), b);
            let t0 = _mm512_gf2p8affine_epi64_epi8::<0>(identity, t0);
            let t1 = _mm512_gf2p8affine_epi64_epi8::<0>(identity, t1);
            let o0 = _mm512_permutex2var_epi8(t0, _mm512_loadu_si512(place as *const _), t1);
            let o1 = _mm512_permutex2var_epi8(t0, _mm512_loadu_si512(place.add(1) as *const _), t1);
            let mut out = [<Out<ON> as Word>::ZERO; ON];
            let dst = out.as_mut_ptr() as *mut u8;
            _mm512_storeu_si512(dst as *mut _, o0);
            _mm512_storeu_si512(dst.add(64) as *mut _, o1);
            out
        }
    }

    /// The output word type for `N` words per 1024-bit block.
    pub struct Out<const N: usize>;
    pub trait Word {
        type T: Copy;
        const ZERO: Self::T;
    }
    impl Word for Out<8> {
        type T = u128;
        const ZERO: u128 = 0;
    }
    impl Word for Out<16> {
        type T = u64;
        const ZERO: u64 = 0;
    }
    impl Word for Out<32> {
        type T = u32;
        const ZERO: u32 = 0;
    }
    impl Word for Out<64> {
        type T = u16;
        const ZERO: u16 = 0;
    }
    impl Word for Out<128> {
        type T = u8;
        const ZERO: u8 = 0;
    }
}

/// Reference definition: plane `b` bit `i` = bit `b` of `elems[i]`. Slow; for tests.
pub fn planes_naive(elems: &[u64], width: u32) -> Vec<u128> {
    (0..width)
        .map(|b| {
            elems
                .iter()
                .enumerate()
                .fold(0u128, |p, (i, &e)| p | ((((e >> b) & 1) as u128) << i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn t32(e in proptest::array::uniform32(any::<u32>())) {
            let p = planes32(&e);
            let naive = planes_naive(&e.map(|x| x as u64), 32);
            prop_assert_eq!(p.iter().map(|&x| x as u128).collect::<Vec<_>>(), naive);
            prop_assert_eq!(elems32(&p), e);
            prop_assert_eq!(portable_planes32(&e), p);
            #[cfg(target_arch = "x86_64")]
            prop_assert_eq!(sse2::transpose32(&e), p);
            #[cfg(target_arch = "x86_64")]
            if avx2::available() {
                // SAFETY: `available()` said this CPU has AVX2.
                prop_assert_eq!(unsafe { avx2::transpose32(&e) }, p);
            }
            #[cfg(target_arch = "x86_64")]
            if gfni::available() {
                // SAFETY: `available()` said this CPU has AVX-512 VBMI and GFNI.
                prop_assert_eq!(unsafe { gfni::transpose::<32, 32, 32, 32>(&e) }, p);
            }
        }

        #[test]
        fn t16(e in proptest::collection::vec(any::<u16>(), 64)) {
            let e: [u16; 64] = e.try_into().unwrap();
            let p = planes16(&e);
            let naive = planes_naive(&e.map(|x| x as u64), 16);
            prop_assert_eq!(p.iter().map(|&x| x as u128).collect::<Vec<_>>(), naive);
            prop_assert_eq!(elems16(&p), e);
            prop_assert_eq!(portable_planes16(&e), p);
            #[cfg(target_arch = "x86_64")]
            prop_assert_eq!(sse2::planes16(&e), p);
            #[cfg(target_arch = "x86_64")]
            if avx2::available() {
                // SAFETY: `available()` said this CPU has AVX2.
                prop_assert_eq!(unsafe { avx2::planes16(&e) }, p);
            }
            #[cfg(target_arch = "x86_64")]
            prop_assert_eq!(sse2::elems16(&p), e);
            prop_assert_eq!(portable_elems16(&p), e);
            #[cfg(target_arch = "x86_64")]
            if gfni::available() {
                // SAFETY: `available()` said this CPU has AVX-512 VBMI and GFNI.
                prop_assert_eq!(unsafe { gfni::transpose::<64, 16, 64, 16>(&e) }, p);
                // SAFETY: as the line above.
                prop_assert_eq!(unsafe { gfni::transpose::<16, 64, 16, 64>(&p) }, e);
            }
        }

        #[test]
        fn t8(e in proptest::collection::vec(any::<u8>(), 128)) {
            let e: [u8; 128] = e.try_into().unwrap();
            let p = planes8(&e);
            let naive = planes_naive(&e.map(|x| x as u64), 8);
            prop_assert_eq!(p.to_vec(), naive);
            prop_assert_eq!(elems8(&p), e);
            prop_assert_eq!(portable_planes8(&e), p);
            prop_assert_eq!(portable_elems8(&p), e);
        }
    }

    /// Every tier whose token this process gets transposes like the reference.
    #[test]
    fn every_tier_with_a_token() {
        fn check<const T: u8>(tier: Tier<T>) {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let e32: [u32; 32] = core::array::from_fn(|_| next() as u32);
            let e16: [u16; 64] = core::array::from_fn(|_| next() as u16);
            let e8: [u8; 128] = core::array::from_fn(|_| next() as u8);
            assert_eq!(planes32_at(tier, &e32), portable_planes32(&e32));
            assert_eq!(elems32_at(tier, &planes32_at(tier, &e32)), e32);
            assert_eq!(planes16_at(tier, &e16), portable_planes16(&e16));
            assert_eq!(elems16_at(tier, &planes16_at(tier, &e16)), e16);
            assert_eq!(planes8_at(tier, &e8), portable_planes8(&e8));
            assert_eq!(elems8_at(tier, &planes8_at(tier, &e8)), e8);
        }
        check(Tier::portable());
        if let Some(t) = Tier::<{ crate::cpu::X86_64_V3 }>::detect() {
            check(t);
        }
        if let Some(t) = Tier::<{ crate::cpu::AVX512 }>::detect() {
            check(t);
        }
    }
}
