//! A block's last planes when they are all raw, eight at a time (x86_64 with AVX-512).
//!
//! Why: in real tensors a block's low planes are noise, so its symbols end in a run of raw
//! ones (FP32 activations: 25 of 32 planes on average, in 95 % of the blocks with planes).
//! [`crate::symbols::PlaneDecoder`] recognises the case without reading anything: the planes
//! left, all raw, would end exactly where the block's length field says its payload ends.
//! Then every symbol's position is known, and the planes can be read like a table: per eight
//! symbols one 64-byte load (two for 64-bit planes, whose symbols span up to 72 bits), a byte
//! permutation that gives each symbol a 64-bit lane holding its bytes, a per-lane shift (a
//! funnel shift for 64-bit planes), a mask of the code bits, and a prefix XOR across lanes
//! that turns symbols into planes (each plane is its symbol XOR the plane above). The code
//! bits are checked once at the end: if one is not set the tail was a coincidence, and the
//! caller decodes symbol by symbol as usual, over planes this wrote only below `left`.
//!
//! The scalar version of the same reading is [`crate::symbols::PlaneDecoder`]'s
//! `raw_tail`; the tests decode with and without this one and compare, and the chunk decoder
//! tiers are compared on corrupt streams.

use crate::geometry::Plane;

/// Plane types whose raw tails have a vector reader.
pub(crate) trait RawTail: Plane {
    /// Is there a vector reader for this plane type?
    const FAST: bool;

    /// Read `left` raw symbols of `p_bits`-bit planes starting at bit `pos` of `data` into
    /// `planes[left - 1]` down to `planes[0]`, the first XOR-ed with `prev`. Returns whether
    /// every code bit was set; the planes are right only then.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VL/VBMI/VBMI2; `1 <= left <= planes.len()`; `p_bits`
    /// at most the plane width; `pos <= 8 * data.len()`.
    unsafe fn read(
        data: &[u8],
        pos: usize,
        p_bits: u32,
        left: usize,
        prev: Self,
        planes: &mut [Self],
    ) -> bool;
}

impl RawTail for u128 {
    const FAST: bool = false;
    unsafe fn read(_: &[u8], _: usize, _: u32, _: usize, _: u128, _: &mut [u128]) -> bool {
        unreachable!("no vector tail for 128-bit planes")
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod portable {
    macro_rules! slow {
        ($t:ty) => {
            impl super::RawTail for $t {
                const FAST: bool = false;
                unsafe fn read(_: &[u8], _: usize, _: u32, _: usize, _: $t, _: &mut [$t]) -> bool {
                    unreachable!("vector tails need x86_64")
                }
            }
        };
    }
    slow!(u32);
    slow!(u64);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::RawTail;
    use crate::geometry::Plane;
    use std::arch::x86_64::*;

    /// The bytes of `data` from `byte` on, at most 64 (zeros after the end).
    #[inline(always)]
    unsafe fn load_from(data: &[u8], byte: usize) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let n = data.len().saturating_sub(byte);
            if n == 0 {
                return _mm512_setzero_si512();
            }
            let k = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
            _mm512_maskz_loadu_epi8(k, data.as_ptr().add(byte) as *const i8)
        }
    }

    /// Byte indices `(t >> 3) + j` for byte `j` of each 64-bit lane: a byte permutation by
    /// them gives every lane the eight bytes from the one holding its bit offset `t`.
    #[inline(always)]
    unsafe fn windows(t: __m512i) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            // `vpshufb` within 128-bit lanes: every byte of a qword takes the qword's byte 0.
            let spread = _mm512_set_epi64(
                0x0808_0808_0808_0808,
                0,
                0x0808_0808_0808_0808,
                0,
                0x0808_0808_0808_0808,
                0,
                0x0808_0808_0808_0808,
                0,
            );
            _mm512_add_epi8(
                _mm512_shuffle_epi8(_mm512_srli_epi64::<3>(t), spread),
                _mm512_set1_epi64(0x0706_0504_0302_0100),
            )
        }
    }

    /// Prefix XOR across the eight 64-bit lanes, starting from `carry`.
    #[inline(always)]
    unsafe fn prefix_xor(x: __m512i, carry: __m512i) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let zero = _mm512_setzero_si512();
            let x = _mm512_xor_si512(x, _mm512_alignr_epi64::<7>(x, zero));
            let x = _mm512_xor_si512(x, _mm512_alignr_epi64::<6>(x, zero));
            let x = _mm512_xor_si512(x, _mm512_alignr_epi64::<4>(x, zero));
            _mm512_xor_si512(x, carry)
        }
    }

    /// For the eight symbols from `first` of a tail of `left`: the first plane index their
    /// reversed store starts at, the lane permutation, and the write mask (symbol `i` goes to
    /// plane `left - 1 - i`; lanes past the tail are not written).
    #[inline(always)]
    unsafe fn placement(first: usize, left: usize) -> (usize, __m512i, u8) {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let top = left - first; // planes still to write, > 0
            let lowest = top.saturating_sub(8);
            let n = top - lowest; // lanes written
            let idx = _mm512_sub_epi64(
                _mm512_set1_epi64((n - 1) as i64),
                _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
            );
            (lowest, idx, ((1u32 << n) - 1) as u8)
        }
    }

    /// Symbols' bit offsets from the byte holding `pos`, for eight in a row of length `len`.
    #[inline(always)]
    unsafe fn offsets(pos: usize, len: usize) -> __m512i {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            _mm512_add_epi64(
                _mm512_mul_epu32(
                    _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
                    _mm512_set1_epi64(len as i64),
                ),
                _mm512_set1_epi64((pos & 7) as i64),
            )
        }
    }

    /// The loop both plane widths share. Per eight symbols starting with symbol `first` at bit
    /// `at`, `symbols(at)` gives each lane's code bit (bit 0 of the first vector) and the bits
    /// after it (the second); here the code bits are checked, the planes built by prefix XOR
    /// from `prev`, and `store(lowest, lanes, mask)` writes the reversed lanes to the planes
    /// from `lowest` on. Returns whether every code bit was set.
    #[inline(always)]
    unsafe fn read_tail(
        pos: usize,
        len: usize,
        all: u64,
        left: usize,
        prev: u64,
        symbols: impl Fn(usize) -> (__m512i, __m512i),
        mut store: impl FnMut(usize, __m512i, u8),
    ) -> bool {
        // SAFETY: the caller upholds this function's contract: the CPU has the features it
        // is compiled for, and the arguments are as its documentation requires; every unsafe
        // operation below relies on exactly that.
        unsafe {
            let all = _mm512_set1_epi64(all as i64);
            let seven = _mm512_set1_epi64(7);
            let one = _mm512_set1_epi64(1);
            let mut carry = _mm512_set1_epi64(prev as i64);
            let mut codes = 0xFFu8;
            let mut first = 0;
            while first < left {
                let (code, bits) = symbols(pos + first * len);
                let (lowest, idx, mask) = placement(first, left);
                codes &= _mm512_test_epi64_mask(code, one) | !mask;
                let x = prefix_xor(_mm512_and_si512(bits, all), carry);
                carry = _mm512_permutexvar_epi64(seven, x);
                store(lowest, _mm512_permutexvar_epi64(idx, x), mask);
                first += 8;
            }
            codes == 0xFF
        }
    }

    impl RawTail for u32 {
        const FAST: bool = true;

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2")]
        #[inline]
        unsafe fn read(
            data: &[u8],
            pos: usize,
            p_bits: u32,
            left: usize,
            prev: u32,
            planes: &mut [u32],
        ) -> bool {
            // SAFETY: the caller upholds this function's contract: the CPU has the features it
            // is compiled for, and the arguments are as its documentation requires; every unsafe
            // operation below relies on exactly that.
            unsafe {
                debug_assert!((1..=planes.len()).contains(&left) && p_bits <= 32);
                let len = 1 + p_bits as usize;
                let symbols = |at: usize| {
                    // Eight symbols of at most 33 bits from a bit offset below 8: 37 bytes.
                    let t = offsets(at, len);
                    let w = _mm512_permutexvar_epi8(windows(t), load_from(data, at >> 3));
                    let v = _mm512_srlv_epi64(w, _mm512_and_si512(t, _mm512_set1_epi64(7)));
                    (v, _mm512_srli_epi64::<1>(v))
                };
                let dst = planes.as_mut_ptr();
                let store = |lowest: usize, lanes: __m512i, mask: u8| {
                    let lanes = _mm512_cvtepi64_epi32(lanes);
                    _mm256_mask_storeu_epi32(dst.add(lowest) as *mut i32, mask, lanes);
                };
                let all = u32::ones(p_bits) as u64;
                read_tail(pos, len, all, left, prev as u64, symbols, store)
            }
        }
    }

    impl RawTail for u64 {
        const FAST: bool = true;

        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2")]
        #[inline]
        unsafe fn read(
            data: &[u8],
            pos: usize,
            p_bits: u32,
            left: usize,
            prev: u64,
            planes: &mut [u64],
        ) -> bool {
            // SAFETY: the caller upholds this function's contract: the CPU has the features it
            // is compiled for, and the arguments are as its documentation requires; every unsafe
            // operation below relies on exactly that.
            unsafe {
                debug_assert!((1..=planes.len()).contains(&left) && p_bits <= 64);
                let len = 1 + p_bits as usize;
                let symbols = |at: usize| {
                    // Eight symbols of at most 65 bits from a bit offset below 8, each read as
                    // 16 bytes from its first: up to 73 bytes.
                    let byte = at >> 3;
                    let (src0, src1) = (load_from(data, byte), load_from(data, byte + 64));
                    let t = offsets(at, len);
                    let idx = windows(t);
                    let lo = _mm512_permutex2var_epi8(src0, idx, src1);
                    let eight = _mm512_set1_epi8(8);
                    let hi = _mm512_permutex2var_epi8(src0, _mm512_add_epi8(idx, eight), src1);
                    let bit = _mm512_and_si512(t, _mm512_set1_epi64(7));
                    // The code bit, and the 64 bits after it: (hi:lo) >> (bit + 1).
                    let after = _mm512_add_epi64(bit, _mm512_set1_epi64(1));
                    (
                        _mm512_srlv_epi64(lo, bit),
                        _mm512_shrdv_epi64(lo, hi, after),
                    )
                };
                let dst = planes.as_mut_ptr();
                let store = |lowest: usize, lanes: __m512i, mask: u8| {
                    _mm512_mask_storeu_epi64(dst.add(lowest) as *mut i64, mask, lanes);
                };
                read_tail(pos, len, u64::ones(p_bits), left, prev, symbols, store)
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use crate::symbols::{decode_planes, encode_planes, Count};
    use planepack_core::bitio::{BitReader, SliceBitWriter};
    use planepack_testkit::Rng;

    /// Decode with and without the vector tail; both must agree (result, planes, position).
    fn check<P: super::RawTail + std::fmt::Debug>(
        buf: &[u8],
        start: usize,
        end: usize,
        q: usize,
        p_bits: u32,
    ) {
        let mut a = vec![P::ZERO; q];
        let mut b = vec![P::ZERO; q];
        let mut ra = BitReader::at(buf, start);
        let mut rb = BitReader::at(buf, start);
        let x = decode_planes::<P, { planepack_core::cpu::PORTABLE }>(&mut ra, &mut a, p_bits, end);
        // SAFETY: the caller checked that the CPU has the features.
        let y = unsafe { crate::decode_planes_v4::<P>(&mut rb, &mut b, p_bits, end) };
        assert_eq!(x, y, "p_bits {p_bits} start {start}");
        if x.is_ok() {
            assert_eq!(a, b, "p_bits {p_bits} start {start}");
            assert_eq!(ra.pos(), rb.pos());
        }
    }

    /// Planes whose symbols end in raw runs of every length, at every bit offset, as coded
    /// and with a bit flipped (which can make a tail look raw by its length and not be).
    #[test]
    fn vector_tail_matches_single_steps() {
        if !crate::simd_has_v4() {
            eprintln!("skipped: this CPU has no AVX-512 VBMI2");
            return;
        }
        let mut rng = Rng(5);
        for round in 0..20_000 {
            let wide = round % 2 == 0;
            let q = if wide { 16 } else { 32 };
            let p_bits = if wide {
                2 + rng.below(63) as u32
            } else {
                2 + rng.below(31) as u32
            };
            let all = if p_bits == 64 {
                u64::MAX
            } else {
                (1u64 << p_bits) - 1
            };
            // Top planes of any kind, then noise from a random plane down.
            let noise_from = rng.below(q as u64 + 1) as usize;
            let mut planes = vec![0u64; q];
            let mut prev = 0;
            for (b, p) in planes.iter_mut().enumerate().rev() {
                *p = if b < noise_from {
                    rng.next_u64() & all
                } else {
                    match rng.below(5) {
                        0 => prev,
                        1 => 0,
                        2 => all,
                        3 => prev ^ (1 << rng.below(p_bits as u64)),
                        _ => rng.next_u64() & all,
                    }
                };
                prev = *p;
            }
            let start = rng.below(64) as usize;
            let mut buf = vec![0u8; 1300];
            let mut count = Count::default();
            {
                let mut w = SliceBitWriter::new(&mut buf[start / 8..]);
                w.put(0, (start % 8) as u32);
                if wide {
                    encode_planes(&planes, p_bits, &mut w);
                    encode_planes(&planes, p_bits, &mut count);
                } else {
                    let narrow: Vec<u32> = planes.iter().map(|&p| p as u32).collect();
                    encode_planes(&narrow, p_bits, &mut w);
                    encode_planes(&narrow, p_bits, &mut count);
                }
            }
            let end = start + count.0 as usize;
            // Room after the block for the decoder's in-bounds proof (which the vector tail
            // needs), as for every block but the last few of a chunk.
            let mut buf = buf[..start / 8 + 8 * q + 80].to_vec();
            if round % 3 == 0 {
                let i = rng.below(buf.len() as u64) as usize;
                buf[i] ^= 1 << rng.below(8);
            }
            if wide {
                check::<u64>(&buf, start, end, q, p_bits);
            } else {
                check::<u32>(&buf, start, end, q, p_bits);
            }
        }
    }
}
