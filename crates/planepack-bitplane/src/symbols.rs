//! Symbol coding of bit planes (BPC's table) and of the DBX base element.
//!
//! A mode that works on planes (BX, DBX, ZBX) hands [`encode_planes`] its `Q` planes of `P`
//! significant bits. Planes are visited from the top (most significant bit of the element)
//! down; each plane is XOR-ed with the plane above it (the top plane with zero), and the
//! result, the DBX symbol, is coded with the BPC table:
//!
//! | DBX symbol                              | code (stream order) | extra field            |
//! |-----------------------------------------|---------------------|------------------------|
//! | run of 2..=Q all-zero symbols           | `01`                | run-2, `bits_for(Q-1)` |
//! | one all-zero symbol                     | `001`               |                        |
//! | all `P` bits set                        | `00000`             |                        |
//! | non-zero, and the plane itself is zero  | `00001`             |                        |
//! | exactly two adjacent ones               | `00010`             | lower bit, `bits_for(P-1)` |
//! | exactly one one                         | `00011`             | its bit, `bits_for(P)` |
//! | anything else                           | `1`                 | the `P` bits           |
//!
//! When several rows apply, the first in the table order above wins (EBPC's priority, which is
//! never longer than the alternatives). The same walker computes sizes (with a counting sink)
//! and writes bits (with a [`SliceBitWriter`]), so the size the encoder compares is by construction
//! the size it writes.

use crate::geometry::Plane;
use crate::raw_tail::RawTail;
use planepack_core::bitio::{bits_for, mask64, BitReader, SliceBitWriter};

/// A prefix code: `bits` in stream order (first code bit = bit 0), `len` bits long.
#[derive(Clone, Copy)]
pub(crate) struct Code {
    pub bits: u64,
    pub len: u32,
}

/// Build a [`Code`] from its textual form, leftmost character first in the stream.
const fn code(s: &str) -> Code {
    let b = s.as_bytes();
    let mut bits = 0u64;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'1' {
            bits |= 1 << i;
        }
        i += 1;
    }
    Code {
        bits,
        len: b.len() as u32,
    }
}

const RAW: Code = code("1");
const RUN: Code = code("01");
const ZERO1: Code = code("001");
const ALL_ONES: Code = code("00000");
const ZERO_DBP: Code = code("00001");
const TWO_ONES: Code = code("00010");
const ONE_ONE: Code = code("00011");

/// Every prefix code of the format by name: (name, value in stream order, length). Read by
/// the GPU encoder's generated WGSL constants (`planepack-gpu`'s contract), so the codes are
/// written down once.
pub const CODES: [(&str, u64, u32); 11] = {
    const fn entry(name: &'static str, c: Code) -> (&'static str, u64, u32) {
        (name, c.bits, c.len)
    }
    [
        entry("RAW", RAW),
        entry("RUN", RUN),
        entry("ZERO1", ZERO1),
        entry("ALL_ONES", ALL_ONES),
        entry("ZERO_DBP", ZERO_DBP),
        entry("TWO_ONES", TWO_ONES),
        entry("ONE_ONE", ONE_ONE),
        entry("BASE0", BASE_CODES[0]),
        entry("BASE4", BASE_CODES[1]),
        entry("BASE8", BASE_CODES[2]),
        entry("BASE16", BASE_CODES[3]),
    ]
};

/// Where bits go: a counter when sizing candidates, a [`SliceBitWriter`] when emitting.
pub(crate) trait Sink {
    fn put(&mut self, value: u64, n: u32);
    /// A raw symbol of more than 55 bits: its code bit, then the plane's `p_bits` bits.
    fn put_raw_wide<P: Plane>(&mut self, p: P, p_bits: u32);
    #[inline]
    fn code(&mut self, c: Code) {
        self.put(c.bits, c.len)
    }
}

/// Counts bits without writing them.
#[derive(Default)]
pub(crate) struct Count(pub u32);

impl Sink for Count {
    #[inline]
    fn put(&mut self, _: u64, n: u32) {
        self.0 += n;
    }
    #[inline]
    fn put_raw_wide<P: Plane>(&mut self, _: P, p_bits: u32) {
        self.0 += RAW.len + p_bits;
    }
}

impl<B: AsMut<[u8]> + ?Sized> Sink for SliceBitWriter<'_, B> {
    #[inline(always)]
    fn put(&mut self, value: u64, n: u32) {
        self.put_u64(value, n)
    }
    #[inline(always)]
    fn put_raw_wide<P: Plane>(&mut self, p: P, p_bits: u32) {
        p.put_raw_wide(self, p_bits)
    }
}

/// Code `planes` (index 0 = least significant plane; each with `p_bits` significant bits).
///
/// Raw planes (most of the low planes of real data, in long stretches that predict well)
/// take a fast path: their code bit and bits in one field (planes over 55 bits through
/// [`SliceBitWriter::put_wide`], whose 128-bit shifts narrower planes need not pay; two
/// fields for 8-bit elements' planes of more than 119 bits). Every other plane emits one field
/// in the table's order of precedence; a zero symbol emits nothing unless it ends its run,
/// where it emits the run's code. With [`SliceBitWriter`] an empty field costs the same as any
/// other.
#[inline(always)]
pub(crate) fn encode_planes<P: Plane, S: Sink>(planes: &[P], p_bits: u32, sink: &mut S) {
    if p_bits <= 55 {
        encode_planes_with::<P, S, false>(planes, p_bits, sink)
    } else {
        encode_planes_with::<P, S, true>(planes, p_bits, sink)
    }
}

/// [`encode_planes`]; `WIDE`: the planes have more than 55 bits.
#[inline(always)]
fn encode_planes_with<P: Plane, S: Sink, const WIDE: bool>(
    planes: &[P],
    p_bits: u32,
    sink: &mut S,
) {
    let q = planes.len();
    let run_field = bits_for(q as u32 - 1);
    let two_field = bits_for(p_bits - 1);
    let one_field = bits_for(p_bits);
    let all = P::ones(p_bits);
    let mut run = 0u32;
    for b in (0..q).rev() {
        let dbp = planes[b];
        let above = if b + 1 < q { planes[b + 1] } else { P::ZERO };
        let dbx = dbp ^ above;
        let zero = dbx == P::ZERO;
        let low = dbx.lowest_one();
        let special =
            zero || dbx == all || dbp == P::ZERO || dbx == low || dbx == (low | (low << 1));
        if !special {
            run = 0;
            match WIDE {
                true => sink.put_raw_wide(dbx, p_bits),
                false => sink.put(RAW.bits | P::low_u64(dbx) << 1, 1 + p_bits),
            }
            continue;
        }
        run = if zero { run + 1 } else { 0 };
        let tz = dbx.trailing_zeros() as u64;
        let (v, n) = if zero {
            // The next symbol (plane b - 1) is zero too: this one does not end the run.
            let run_continues = b > 0 && planes[b - 1] == dbp;
            match (run_continues, run) {
                (true, _) => (0, 0),
                (false, 1) => (ZERO1.bits, ZERO1.len),
                (false, _) => (
                    RUN.bits | ((run - 2) as u64) << RUN.len,
                    RUN.len + run_field,
                ),
            }
        } else if dbx == all {
            (ALL_ONES.bits, 5)
        } else if dbp == P::ZERO {
            (ZERO_DBP.bits, 5)
        } else if dbx == low {
            (ONE_ONE.bits | tz << 5, 5 + one_field)
        } else {
            // Special and none of the above: exactly two adjacent ones.
            (TWO_ONES.bits | tz << 5, 5 + two_field)
        };
        sink.put(v, n);
    }
}

/// Exact size in bits of [`encode_planes`]' output, computed without branches.
///
/// The encoder sizes up to three plane codings per block and writes only one, so sizing is
/// the hotter path. It is written as independent per-plane lane operations so that the
/// compiler vectorises it (8 planes per AVX2 register for FP32): each plane's DBX symbol is
/// classified with compares only (a single one is `x == lowest(x)`, two adjacent ones are
/// `x == lowest(x) * 3`) and its cost chosen with selects. Zero symbols cost nothing there;
/// they are priced per run from a bit mask of them ([`zero_runs_size`]).
#[inline(always)]
pub(crate) fn planes_size<P: Plane>(planes: &[P], p_bits: u32) -> u32 {
    const MAX: usize = 32;
    let q = planes.len();
    debug_assert!((1..=MAX).contains(&q));
    let SymbolCosts {
        two: two_cost,
        one: one_cost,
        raw: raw_cost,
    } = SymbolCosts::new(p_bits);
    let all = P::ones(p_bits);
    let mut zero = 0u64; // bit b: the symbol of plane b is zero
    let mut total = 0;
    for b in 0..q {
        let above = if b + 1 < q { planes[b + 1] } else { P::ZERO };
        let dbp = planes[b];
        let dbx = dbp ^ above;
        let low = dbx.lowest_one();
        let mut c = raw_cost;
        c = if dbx == (low | (low << 1)) && dbx != low {
            two_cost
        } else {
            c
        };
        c = if dbx == low { one_cost } else { c };
        c = if dbp == P::ZERO { 5 } else { c };
        c = if dbx == all { 5 } else { c };
        let z = dbx == P::ZERO;
        zero |= (z as u64) << b;
        total += if z { 0 } else { c };
    }
    total + zero_runs_size(zero, q)
}

/// Bits of the symbols of `p_bits`-bit planes whose size depends on `p_bits` (the all-ones,
/// plane-zero and zero-symbol codes cost 5, 5 and 3 bits at any width).
struct SymbolCosts {
    /// Two adjacent ones: code and position.
    two: u32,
    /// A single one: code and position.
    one: u32,
    /// Raw: code bit and the plane.
    raw: u32,
}

impl SymbolCosts {
    #[inline(always)]
    fn new(p_bits: u32) -> SymbolCosts {
        SymbolCosts {
            two: 5 + bits_for(p_bits - 1),
            one: 5 + bits_for(p_bits),
            raw: 1 + p_bits,
        }
    }
}

/// Bits of the zero symbols of `q` planes, bit `b` of `zero` set where plane `b`'s symbol is
/// zero: a run ends at a zero symbol whose next lower plane is not zero and starts at one whose
/// next higher plane is not; a run that starts where it ends is a single (3 bits), any other
/// costs the run code and its length field.
#[inline(always)]
fn zero_runs_size(zero: u64, q: usize) -> u32 {
    let run_cost = 2 + bits_for(q as u32 - 1);
    let ends = zero & !(zero << 1);
    let starts = zero & !(zero >> 1);
    let runs = ends.count_ones();
    let singles = (ends & starts).count_ones();
    3 * singles + run_cost * (runs - singles)
}

/// [`planes_size`] for 32-bit planes; 32 of them (FP32 blocks) at once with AVX-512 where
/// present, in four AVX2 registers at the AVX2 tier. Why: the encoder sizes up to three
/// candidate modes per block (BX, ZBX, DBX), and one plane at a time this loop was the largest
/// share of encoding (FP32 encode +30 %).
///
/// # Safety
/// The CPU must run tier `T` ([`planepack_core::cpu`]).
#[inline(always)]
pub(crate) unsafe fn planes_size32<const T: u8>(planes: &[u32], p_bits: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if let Ok(planes) = planes.try_into() {
        if T >= planepack_core::cpu::AVX512 {
            // SAFETY: the caller guarantees the tier's features.
            return unsafe { sizing::planes_size32(planes, p_bits) };
        }
        if T >= planepack_core::cpu::X86_64_V3 {
            // SAFETY: as above.
            return unsafe { sizing::avx2::planes_size32(planes, p_bits) };
        }
    }
    planes_size(planes, p_bits)
}

/// [`planes_size32`] for 64-bit planes: 16 of them (16-bit elements).
///
/// # Safety
/// The CPU must run tier `T`.
#[inline(always)]
pub(crate) unsafe fn planes_size64<const T: u8>(planes: &[u64], p_bits: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if let Ok(planes) = planes.try_into() {
        if T >= planepack_core::cpu::AVX512 {
            // SAFETY: the caller guarantees the tier's features.
            return unsafe { sizing::planes_size64(planes, p_bits) };
        }
        if T >= planepack_core::cpu::X86_64_V3 {
            // SAFETY: as above.
            return unsafe { sizing::avx2::planes_size64(planes, p_bits) };
        }
    }
    planes_size(planes, p_bits)
}

/// [`planes_size`] for 128-bit planes (no vector version).
///
/// # Safety
/// None beyond the other widths' signature (every tier runs the loop).
#[inline(always)]
pub(crate) unsafe fn planes_size128<const T: u8>(planes: &[u128], p_bits: u32) -> u32 {
    planes_size(planes, p_bits)
}

#[cfg(target_arch = "x86_64")]
mod sizing {
    use std::arch::x86_64::*;

    /// [`super::planes_size`] of a block's planes, two registers of them: the same costs
    /// chosen by masks in the same order of precedence, zero symbols collected as a bit mask
    /// and priced per run as there. One version per plane width; they differ in lane type,
    /// plane count and intrinsics only.
    macro_rules! sizing_fn {
        ($name:ident, $t:ty, $q:expr, $set1:ident, $sub:ident, $slli:ident, $alignr:ident,
         $cmpeq:ident, $mov:ident, $reduce:ident) => {
            #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
            #[inline]
            pub unsafe fn $name(planes: &[$t; $q], p_bits: u32) -> u32 {
                // SAFETY: the caller upholds this function's contract: the CPU has the features it
                // is compiled for, and the arguments are as its documentation requires; every unsafe
                // operation below relies on exactly that.
                unsafe {
                    const HALF: usize = $q / 2;
                    let c = |v: $t| $set1(v as _);
                    let costs = super::SymbolCosts::new(p_bits);
                    let (two, one, raw) =
                        (c(costs.two as $t), c(costs.one as $t), c(costs.raw as $t));
                    let five = c(5);
                    let all = c(<$t as crate::geometry::Plane>::ones(p_bits));
                    let zero = _mm512_setzero_si512();
                    let lo = _mm512_loadu_si512(planes.as_ptr() as *const _);
                    let hi = _mm512_loadu_si512(planes.as_ptr().add(HALF) as *const _);
                    // The plane above plane b is plane b + 1 (zero above the top one).
                    let halves = [(lo, $alignr::<1>(hi, lo)), (hi, $alignr::<1>(zero, hi))];
                    let mut total = 0;
                    let mut zeros = 0u64;
                    for (half, (dbp, above)) in halves.into_iter().enumerate() {
                        let dbx = _mm512_xor_si512(dbp, above);
                        let low = _mm512_and_si512(dbx, $sub(zero, dbx));
                        let pair = _mm512_or_si512(low, $slli::<1>(low));
                        let is_low = $cmpeq(dbx, low);
                        let mut cost = $mov(raw, $cmpeq(dbx, pair) & !is_low, two);
                        cost = $mov(cost, is_low, one);
                        cost = $mov(cost, $cmpeq(dbp, zero), five);
                        cost = $mov(cost, $cmpeq(dbx, all), five);
                        let z = $cmpeq(dbx, zero);
                        total += $reduce(!z, cost) as u32;
                        zeros |= (z as u64) << (HALF * half);
                    }
                    total + super::zero_runs_size(zeros, $q)
                }
            }
        };
    }

    /// The AVX2 tier's [`super::planes_size`]: a block's planes in four registers, the same
    /// costs chosen by the same compares in the same order of precedence. Why by hand: the
    /// compiler's own vectorisation of the loop shuffled every plane above into place and
    /// picked costs in narrowed registers; sizing was a third of the AVX2 encoder's time on
    /// BF16 blocks. One version per plane width; they differ in lane type and intrinsics only.
    pub mod avx2 {
        use std::arch::x86_64::*;

        macro_rules! sizing_fn {
            ($name:ident, $t:ty, $q:expr, $set1:ident, $sub:ident, $slli:ident, $cmpeq:ident,
             $add:ident, $lanes_mask:expr) => {
                #[target_feature(enable = "avx2")]
                #[inline]
                pub fn $name(planes: &[$t; $q], p_bits: u32) -> u32 {
                    const PER: usize = 32 / size_of::<$t>();
                    let c = |v: $t| $set1(v as _);
                    let costs = super::super::SymbolCosts::new(p_bits);
                    let (two, one, raw) =
                        (c(costs.two as $t), c(costs.one as $t), c(costs.raw as $t));
                    let five = c(5);
                    let all = c(<$t as crate::geometry::Plane>::ones(p_bits));
                    let zero = _mm256_setzero_si256();
                    let regs = crate::geometry::avx2::registers(planes);
                    let mut sum = zero;
                    let mut zeros = 0u64;
                    for k in 0..4 {
                        let dbp = regs[k];
                        // The plane above plane b is plane b + 1 (zero above the top one): this
                        // register's lanes moved down by one, the next register's first lane in.
                        let next = if k < 3 { regs[k + 1] } else { zero };
                        let across = _mm256_permute2x128_si256::<0x21>(dbp, next);
                        let above = _mm256_alignr_epi8::<{ size_of::<$t>() as i32 }>(across, dbp);
                        let dbx = _mm256_xor_si256(dbp, above);
                        let low = _mm256_and_si256(dbx, $sub(zero, dbx));
                        let pair = _mm256_or_si256(low, $slli::<1>(low));
                        let is_low = $cmpeq(dbx, low);
                        let is_pair = _mm256_andnot_si256(is_low, $cmpeq(dbx, pair));
                        let mut cost = _mm256_blendv_epi8(raw, two, is_pair);
                        cost = _mm256_blendv_epi8(cost, one, is_low);
                        cost = _mm256_blendv_epi8(cost, five, $cmpeq(dbp, zero));
                        cost = _mm256_blendv_epi8(cost, five, $cmpeq(dbx, all));
                        let z = $cmpeq(dbx, zero);
                        sum = $add(sum, _mm256_andnot_si256(z, cost));
                        zeros |= ($lanes_mask(z) as u64) << (PER * k);
                    }
                    let mut lanes = [0 as $t; PER];
                    // SAFETY: stores 32 bytes into the 32-byte array.
                    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, sum) };
                    let total = lanes.iter().map(|&x| x as u32).sum::<u32>();
                    total + super::super::zero_runs_size(zeros, $q)
                }
            };
        }
        sizing_fn!(
            planes_size32,
            u32,
            32,
            _mm256_set1_epi32,
            _mm256_sub_epi32,
            _mm256_slli_epi32,
            _mm256_cmpeq_epi32,
            _mm256_add_epi32,
            |z| _mm256_movemask_ps(_mm256_castsi256_ps(z)) as u32
        );
        sizing_fn!(
            planes_size64,
            u64,
            16,
            _mm256_set1_epi64x,
            _mm256_sub_epi64,
            _mm256_slli_epi64,
            _mm256_cmpeq_epi64,
            _mm256_add_epi64,
            |z| _mm256_movemask_pd(_mm256_castsi256_pd(z)) as u32
        );
    }

    sizing_fn!(
        planes_size32,
        u32,
        32,
        _mm512_set1_epi32,
        _mm512_sub_epi32,
        _mm512_slli_epi32,
        _mm512_alignr_epi32,
        _mm512_cmpeq_epi32_mask,
        _mm512_mask_mov_epi32,
        _mm512_mask_reduce_add_epi32
    );
    sizing_fn!(
        planes_size64,
        u64,
        16,
        _mm512_set1_epi64,
        _mm512_sub_epi64,
        _mm512_slli_epi64,
        _mm512_alignr_epi64,
        _mm512_cmpeq_epi64_mask,
        _mm512_mask_mov_epi64,
        _mm512_mask_reduce_add_epi64
    );
}

/// Decodes the planes of one block, one symbol per [`PlaneDecoder::step`].
///
/// With `IN_BOUNDS` the reads skip their bounds checks: [`decode_planes`] sets it where the
/// most a block's planes can read (every plane a raw symbol of the full plane width, plus
/// one 8-byte window) lies inside the data, since each step fills at least one plane. With
/// tier `T` AVX-512 (the AVX-512 chunk decoder only) a block's all-raw tail is read by
/// [`RawTail`].
pub(crate) struct PlaneDecoder<'a, P: RawTail, const IN_BOUNDS: bool, const T: u8> {
    pub r: BitReader<'a>,
    /// Planes still to fill (they are filled from the top down).
    left: usize,
    prev: P,
    p_bits: u32,
    /// `P::ones(p_bits)`: the all-ones plane, also the mask of a raw plane.
    all: P,
    run_field: u32,
    two_field: u32,
    one_field: u32,
    /// Where the block's payload ends, by its length field.
    end: usize,
}

impl<'a, P: RawTail, const IN_BOUNDS: bool, const T: u8> PlaneDecoder<'a, P, IN_BOUNDS, T> {
    #[inline(always)]
    pub fn new(r: BitReader<'a>, planes: usize, p_bits: u32, end: usize) -> Self {
        PlaneDecoder {
            r,
            left: planes,
            prev: P::ZERO,
            p_bits,
            all: P::ones(p_bits),
            run_field: bits_for(planes as u32 - 1),
            two_field: bits_for(p_bits - 1),
            one_field: bits_for(p_bits),
            end,
        }
    }

    #[inline(always)]
    pub fn done(&self) -> bool {
        self.left == 0
    }

    /// A raw symbol at the reader (`w` is the peek there): its plane XOR the plane above.
    #[inline(always)]
    fn raw(&mut self, w: u64) -> P {
        let r = &mut self.r;
        if P::BITS <= 55 || self.p_bits <= 55 {
            r.skip(1 + self.p_bits);
            P::from_u64(w >> 1) & self.all
        } else if IN_BOUNDS && P::BITS <= 64 {
            r.skip(1);
            // SAFETY: `IN_BOUNDS` covers a full plane after the code bit of every step.
            let v = unsafe { r.peek64_unchecked() };
            r.skip(self.p_bits);
            P::from_u64(v) & self.all
        } else {
            r.skip(1);
            P::get(r, self.p_bits)
        }
    }

    /// If the planes left, all coded raw, would end exactly where the block's length field
    /// says the payload ends, they usually are (the low planes of real data are noise): read
    /// them all at their known positions with the vector reader ([`RawTail`]), which checks
    /// their code bits once at the end. Returns true if they were all raw (and decodes them),
    /// false otherwise, with the decoder unchanged (the planes it wrote lie below `left`,
    /// which later symbols overwrite). Only where the vector reader exists (tier AVX-512): read one
    /// by one, the same tail was slower than [`Self::raw_pair`].
    #[inline(always)]
    fn raw_tail(&mut self, planes: &mut [P]) -> bool {
        let len = 1 + self.p_bits as usize;
        if !(T >= planepack_core::cpu::AVX512 && P::FAST)
            || self.r.pos() + self.left * len != self.end
        {
            return false;
        }
        // SAFETY: tier `T` is AVX-512 only where the CPU has the instructions; a step runs with
        // `1 <= left <= planes.len()`; a raw code bit was just read, so the position is
        // inside the data.
        let all_raw = unsafe {
            P::read(
                self.r.data(),
                self.r.pos(),
                self.p_bits,
                self.left,
                self.prev,
                planes,
            )
        };
        if all_raw {
            self.r.skip((self.left * len) as u32);
            self.prev = planes[0];
            self.left = 0;
        }
        all_raw
    }

    /// A raw symbol at the reader (`w` is the peek there) followed by another: decode them
    /// two at a time, for 32-bit planes as long as pairs of raw symbols follow, and return
    /// true (two planes per branch and loop trip, on the commonest symbol); false, having
    /// read nothing, if the next symbol is not raw. Needs `left >= 2` and `IN_BOUNDS`: each
    /// pair's reads are those of the next two steps (and the bound leaves room for the peek
    /// after the last symbol).
    #[inline(always)]
    fn raw_pair(&mut self, w: u64, planes: &mut [P]) -> bool {
        debug_assert!(IN_BOUNDS && self.left >= 2);
        let len = 1 + self.p_bits;
        if P::BITS <= 32 {
            // One peek holds a whole symbol and the next code bit.
            let mut w = w;
            let mut any = false;
            while self.left >= 2 && (w & 1) & (w >> len) & 1 == 1 {
                let mut next = self.r.clone();
                next.skip(len);
                // SAFETY: the peeks of the next two steps.
                let w1 = unsafe { next.peek_unchecked(56) };
                self.r.skip(2 * len);
                self.put_pair(w >> 1, w1 >> 1, planes);
                // SAFETY: the peek of the step after this one, proved in bounds with `w1`'s.
                w = unsafe { self.r.peek_unchecked(56) };
                any = true;
            }
            any
        } else if P::BITS <= 64 {
            let mut next = self.r.clone();
            next.skip(len);
            // SAFETY: (all three) the reads of this step and the next.
            if unsafe { next.peek_unchecked(1) } == 0 {
                return false;
            }
            let mut x = self.r.clone();
            x.skip(1);
            next.skip(1);
            // SAFETY: the reads of this step and the next (checked above).
            let (a, b) = unsafe { (x.peek64_unchecked(), next.peek64_unchecked()) };
            self.r.skip(2 * len);
            self.put_pair(a, b, planes);
            true
        } else {
            false
        }
    }

    /// Two raw symbols' bits `a`, `b` (code bits dropped) become the next two planes.
    #[inline(always)]
    fn put_pair(&mut self, a: u64, b: u64, planes: &mut [P]) {
        let upper = (P::from_u64(a) & self.all) ^ self.prev;
        self.prev = (P::from_u64(b) & self.all) ^ upper;
        planes[self.left - 1] = upper;
        planes[self.left - 2] = self.prev;
        self.left -= 2;
    }

    /// Decode one symbol into `planes` (one 56-bit peek serves the prefix code, its field and,
    /// for planes of up to 55 bits, the raw plane itself).
    #[inline(always)]
    pub fn step(&mut self, planes: &mut [P]) -> Result<(), &'static str> {
        let r = &mut self.r;
        let w = if IN_BOUNDS {
            // SAFETY: `decode_planes` proved that every read of this block's planes is in
            // bounds.
            unsafe { r.peek_unchecked(56) }
        } else {
            r.peek(56)
        };
        let dbx = if w & 1 == 1 {
            if IN_BOUNDS && (self.raw_tail(planes) || self.left >= 2 && self.raw_pair(w, planes)) {
                return Ok(());
            }
            self.raw(w)
        } else if w & 2 != 0 {
            let run = ((w >> 2) & mask64(self.run_field)) as usize + 2;
            r.skip(2 + self.run_field);
            if run > self.left {
                return Err("zero run longer than the planes left");
            }
            for plane in &mut planes[self.left - run..self.left] {
                *plane = self.prev;
            }
            self.left -= run;
            return Ok(());
        } else if w & 4 != 0 {
            r.skip(3);
            self.left -= 1;
            planes[self.left] = self.prev;
            return Ok(());
        } else {
            match (w >> 3) & 3 {
                0 => {
                    r.skip(5);
                    self.all
                }
                2 => {
                    r.skip(5);
                    self.prev // the plane itself is zero
                }
                1 => {
                    let pos = ((w >> 5) & mask64(self.two_field)) as u32;
                    r.skip(5 + self.two_field);
                    if pos + 2 > self.p_bits {
                        return Err("two-ones position outside the plane");
                    }
                    (P::ONE | (P::ONE << 1)) << pos
                }
                _ => {
                    let pos = ((w >> 5) & mask64(self.one_field)) as u32;
                    r.skip(5 + self.one_field);
                    if pos >= self.p_bits {
                        return Err("single-one position outside the plane");
                    }
                    P::ONE << pos
                }
            }
        };
        self.left -= 1;
        self.prev = dbx ^ self.prev;
        planes[self.left] = self.prev;
        Ok(())
    }
}

/// Decode `planes.len()` planes of `p_bits` bits from `r`, filling `planes` from the top down.
/// Reading past the end is left to the caller to detect with [`BitReader::overran`].
#[inline(always)]
pub(crate) fn decode_planes<P: RawTail, const T: u8>(
    r: &mut BitReader,
    planes: &mut [P],
    p_bits: u32,
    end: usize,
) -> Result<(), &'static str> {
    // At most one step per plane, each reading at most a code bit and a full plane, and the
    // last step's 8-byte window.
    let most = planes.len() * (1 + P::BITS as usize) + 64;
    if r.pos() + most <= r.len_bits() {
        decode_planes_with::<P, true, T>(r, planes, p_bits, end)
    } else {
        decode_planes_with::<P, false, T>(r, planes, p_bits, end)
    }
}

#[inline(always)]
fn decode_planes_with<P: RawTail, const IN_BOUNDS: bool, const T: u8>(
    r: &mut BitReader,
    planes: &mut [P],
    p_bits: u32,
    end: usize,
) -> Result<(), &'static str> {
    let mut d = PlaneDecoder::<P, IN_BOUNDS, T>::new(r.clone(), planes.len(), p_bits, end);
    while !d.done() {
        d.step(planes)?;
    }
    *r = d.r;
    Ok(())
}

/// Field widths of the base-element codes `000`, `001`, `010`, `011` for element width `w`
/// (`None` = code not used at that width); `1` is always followed by the full `w` bits.
fn base_options(w: u32) -> [Option<u32>; 4] {
    match w {
        32 => [Some(0), Some(4), Some(8), Some(16)],
        16 => [Some(0), Some(4), Some(8), None],
        _ => [Some(0), Some(4), None, None],
    }
}

/// Stream-order values of the 3-bit base codes `000`, `001`, `010`, `011`.
const BASE_CODES: [Code; 4] = [code("000"), code("001"), code("010"), code("011")];

/// Does the `w`-bit value `v` equal the sign extension of its low `k` bits?
#[inline(always)]
fn fits_signed(v: u64, k: u32, w: u32) -> bool {
    if k == 0 {
        return v == 0;
    }
    let shift = 64 - k;
    let sext = (((v << shift) as i64) >> shift) as u64 & mask64(w);
    sext == v
}

/// Code the DBX base element (BPC's base code, truncated to the element width).
#[inline(always)]
pub(crate) fn encode_base<S: Sink>(v: u64, w: u32, sink: &mut S) {
    for (c, k) in BASE_CODES.iter().zip(base_options(w)) {
        if let Some(k) = k {
            if fits_signed(v, k, w) {
                sink.code(*c);
                sink.put(v & mask64(k), k);
                return;
            }
        }
    }
    sink.code(RAW);
    sink.put(v, w);
}

/// Decode the DBX base element.
#[inline(always)]
pub(crate) fn decode_base(r: &mut BitReader, w: u32) -> Result<u64, &'static str> {
    let p = r.peek(3);
    if p & 1 == 1 {
        r.skip(1);
        return Ok(r.read(w));
    }
    let idx = BASE_CODES.iter().position(|c| c.bits == p).unwrap_or(0);
    let k = base_options(w)[idx].ok_or("base code not defined for this element width")?;
    r.skip(3);
    let v = r.read(k);
    if k == 0 {
        return Ok(0);
    }
    let shift = 64 - k;
    Ok((((v << shift) as i64) >> shift) as u64 & mask64(w))
}

#[cfg(test)]
mod tests;
