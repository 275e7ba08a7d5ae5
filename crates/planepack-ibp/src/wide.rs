//! Several packed rows at once with AVX2: the decode-all and gather fast path on x86_64.
//!
//! The scalar decoder spends about ten cycles per chunk on a chain of small steps (window
//! load, shift, deposit, store) that the CPU cannot overlap much within one row. Rows of a
//! group share their columns (mask, bitval, field widths), so four rows can walk their columns
//! in lockstep in the four 64-bit lanes of an AVX2 register: per lane only the participation
//! bit and the stream position differ. Each lane gathers its window, shifts out its field, and
//! the deposit `pdep(field, !mask)` (which AVX2 lacks) is done run by run: the selected bits of
//! a column form a few runs (a float's mantissa, its low exponent bits), and a run is one
//! shift and one AND, the same for all lanes. A lane whose chunk does not participate takes
//! its `W` bits whole, as in the scalar decoder. 32-bit chunks use eight 32-bit lanes, so
//! eight rows at once (`lanes`).
//!
//! Only the lockstep loop is here. Which rows go through it, the participation-bitmap checks
//! before and the length and padding checks after are the scalar code's, so both paths accept
//! and reject exactly the same rows; the tests run every layout and gather through both.

use crate::row::Columns;

/// Is the lockstep path usable on this CPU (AVX2, the x86-64-v3 tier of
/// [`planepack_core::cpu`])?
pub fn available() -> bool {
    planepack_core::cpu::x86_64_v3()
}

/// Rows narrower than this many chunks stay on the scalar path: the lockstep loop's setup and
/// a stream's extra pass to place its rows cost more than they save on short rows (KV vectors
/// of 64 BF16 values, 16 chunks, decode faster one by one).
pub const MIN_COLUMNS: usize = 32;

/// Does the lockstep path pay for rows described by `c`: AVX2 present, the CPU's bit
/// instructions chosen (portable `Columns` keep everything scalar, which is how the tests
/// compare both paths), 32- or 64-bit chunks, and rows of at least [`MIN_COLUMNS`] chunks?
///
/// The deposit tables ([`Deposits`]: 8 bytes a column and 16 a run of selected bits) are built
/// once for all `rows` rows, so the path is taken only where they are at most half of the rows'
/// bytes: a few very wide rows with many-run masks would otherwise need tables several times
/// the tensor (`docs/memory.md`).
pub fn pays(c: &Columns, rows: usize) -> bool {
    c.ops.is_bmi2()
        && available()
        && matches!(c.b(), 4 | 8)
        && c.v() >= MIN_COLUMNS
        && Deposits::bytes(c) <= rows.saturating_mul(c.row_bytes()) / 2
}

/// The deposit of every column as runs: `pdep(f, select)` is the OR over the runs of
/// `(f << shift) & mask`, `mask` being one run of consecutive set bits of `select` and `shift`
/// how far its first bit lies above the number of select bits below it.
pub struct Deposits {
    /// Runs of column `j`: `runs[first[j]..first[j + 1]]`.
    first: Vec<usize>,
    runs: Vec<(u64, u64)>,
}

impl Deposits {
    /// Runs of selected bits over all columns of `c`.
    fn runs(c: &Columns) -> usize {
        c.select
            .iter()
            .map(|&sel| (sel & !(sel << 1)).count_ones() as usize)
            .sum()
    }

    /// The bytes [`Deposits::new`] allocates for `c`.
    pub fn bytes(c: &Columns) -> usize {
        8 * (c.v() + 1) + 16 * Deposits::runs(c)
    }

    pub fn new(c: &Columns) -> Deposits {
        let mut first = Vec::with_capacity(c.v() + 1);
        let mut runs = Vec::with_capacity(Deposits::runs(c));
        for &sel in &c.select {
            first.push(runs.len());
            let (mut m, mut below) = (sel, 0u32);
            while m != 0 {
                let t = m.trailing_zeros();
                let len = (!(m >> t)).trailing_zeros();
                let mask = if len == 64 {
                    u64::MAX
                } else {
                    ((1u64 << len) - 1) << t
                };
                runs.push(((t - below) as u64, mask));
                below += len;
                m &= !mask;
            }
        }
        first.push(runs.len());
        Deposits { first, runs }
    }
}

/// One lane's row: its index (for error messages), where the packed row starts in `data`,
/// and its output.
pub struct Lane<'a> {
    pub row: usize,
    pub start: usize,
    pub out: &'a mut [u8],
}

/// Can a packed row starting at `start` go through [`decode`]? Every window it could read
/// must lie inside `data` whatever its bits say: field stream start + (columns + 2) words.
pub fn fits(data: &[u8], start: usize, c: &Columns) -> bool {
    (c.v() + 2)
        .checked_mul(c.b())
        .and_then(|n| n.checked_add(c.header_bytes()))
        .and_then(|n| n.checked_add(start))
        .is_some_and(|end| end <= data.len())
}

/// Rows decoded together for chunks of `b` bytes: four 64-bit lanes or eight 32-bit lanes.
pub fn lanes(b: usize) -> usize {
    if b == 8 {
        4
    } else {
        8
    }
}

/// Read the fields of [`lanes`]`(B)` packed rows (`B` = 8 or 4 bytes per chunk) and write
/// their chunks; returns each row's final field-stream bit position for
/// [`crate::row::packed_end`]. Every lane's row must [`fits`] and have had its bitmap checked
/// ([`crate::row::bitmap`]).
#[cfg(target_arch = "x86_64")]
pub fn decode<const B: usize>(
    data: &[u8],
    lanes: &mut [Lane],
    c: &Columns,
    dep: &Deposits,
) -> [usize; 8] {
    assert!(available() && c.b() == B && lanes.len() == self::lanes(B));
    assert!(lanes
        .iter()
        .all(|l| fits(data, l.start, c) && l.out.len() >= c.row_bytes()));
    match B {
        8 => {
            let lanes: &mut [Lane; 4] = lanes.try_into().unwrap();
            // SAFETY: AVX2 is present (asserted); every gathered address is inside `data`
            // (asserted through `fits`, see the loop).
            let p = unsafe { decode4_w64(data, lanes, c, dep) };
            [p[0], p[1], p[2], p[3], 0, 0, 0, 0]
        }
        _ => {
            // 32-bit gather offsets: the data must be addressable with them.
            assert!(data.len() <= i32::MAX as usize);
            let lanes: &mut [Lane; 8] = lanes.try_into().unwrap();
            // SAFETY: as above.
            unsafe { decode8_w32(data, lanes, c, dep) }
        }
    }
}

/// Can [`decode`] take rows of chunks of `b` bytes from `data` at all?
pub fn supports(data: &[u8], b: usize) -> bool {
    b == 8 || (b == 4 && data.len() <= i32::MAX as usize)
}

/// Four rows of 64-bit chunks, one per 64-bit lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode4_w64(
    data: &[u8],
    lanes: &mut [Lane; 4],
    c: &Columns,
    dep: &Deposits,
) -> [usize; 4] {
    // SAFETY: the caller upholds this function's contract: the CPU has the features it
    // is compiled for, and the arguments are as its documentation requires; every unsafe
    // operation below relies on exactly that.
    unsafe {
        use std::arch::x86_64::*;
        let (v, h) = (c.v(), c.header_bytes());
        let starts = lanes.each_ref().map(|l| l.start);
        // Byte offset of each lane's field stream in `data`.
        let fields = _mm256_set_epi64x(
            (starts[3] + h) as i64,
            (starts[2] + h) as i64,
            (starts[1] + h) as i64,
            (starts[0] + h) as i64,
        );
        let one = _mm256_set1_epi64x(1);
        let width = _mm256_set1_epi64x(64);
        let low = _mm256_set1_epi64x(63);
        let eight = _mm256_set1_epi64x(8);
        let base = data.as_ptr() as *const i64;
        let outs = lanes.each_mut().map(|l| l.out.as_mut_ptr());
        let mut p = _mm256_setzero_si256();
        let mut hw = _mm256_setzero_si256();
        for j in 0..v {
            if j % 64 == 0 {
                let b = participation::<8>(data, &starts, h, j);
                hw = _mm256_set_epi64x(b[3], b[2], b[1], b[0]);
            }
            let t = _mm256_and_si256(
                _mm256_srl_epi64(hw, _mm_cvtsi64_si128((j % 64) as i64)),
                one,
            );
            let part = _mm256_cmpeq_epi64(t, one);
            let n = _mm256_blendv_epi8(width, _mm256_set1_epi64x(c.field_bits[j] as i64), part);
            // The window: 64 stream bits from p, most significant first. p <= j * 64 (no field is
            // wider than 64 bits), so word p / 64 is at most word j: inside `data` by `fits`.
            let off = _mm256_add_epi64(fields, _mm256_slli_epi64::<3>(_mm256_srli_epi64::<6>(p)));
            let o = _mm256_and_si256(p, low);
            let a = _mm256_i64gather_epi64::<1>(base, off);
            let b = _mm256_i64gather_epi64::<1>(base, _mm256_add_epi64(off, eight));
            // Shifts by 64 give 0 (o = 0 takes nothing from the next word).
            let window = _mm256_or_si256(
                _mm256_sllv_epi64(a, o),
                _mm256_srlv_epi64(b, _mm256_sub_epi64(width, o)),
            );
            // The top n bits (n = 0 shifts by 64: nothing).
            let field = _mm256_srlv_epi64(window, _mm256_sub_epi64(width, n));
            let mut x = _mm256_set1_epi64x(c.bitval[j] as i64);
            for &(shift, mask) in &dep.runs[dep.first[j]..dep.first[j + 1]] {
                let moved = _mm256_sll_epi64(field, _mm_cvtsi64_si128(shift as i64));
                x = _mm256_or_si256(x, _mm256_and_si256(moved, _mm256_set1_epi64x(mask as i64)));
            }
            let x = _mm256_blendv_epi8(field, x, part);
            p = _mm256_add_epi64(p, n);
            // SAFETY: j < v, and every output holds a whole row of v chunks (asserted by the
            // caller), so bytes j * 8 .. j * 8 + 8 of each are in bounds.
            let (lo, hi) = (_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x));
            _mm_storel_epi64(outs[0].add(j * 8) as *mut __m128i, lo);
            _mm_storeh_pd(outs[1].add(j * 8) as *mut f64, _mm_castsi128_pd(lo));
            _mm_storel_epi64(outs[2].add(j * 8) as *mut __m128i, hi);
            _mm_storeh_pd(outs[3].add(j * 8) as *mut f64, _mm_castsi128_pd(hi));
        }
        let mut ends = [0u64; 4];
        _mm256_storeu_si256(ends.as_mut_ptr() as *mut __m256i, p);
        ends.map(|e| e as usize)
    }
}

/// Eight rows of 32-bit chunks, one per 32-bit lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn decode8_w32(
    data: &[u8],
    lanes: &mut [Lane; 8],
    c: &Columns,
    dep: &Deposits,
) -> [usize; 8] {
    // SAFETY: the caller upholds this function's contract: the CPU has the features it
    // is compiled for, and the arguments are as its documentation requires; every unsafe
    // operation below relies on exactly that.
    unsafe {
        use std::arch::x86_64::*;
        let (v, h) = (c.v(), c.header_bytes());
        let starts = lanes.each_ref().map(|l| l.start);
        let s = starts.map(|x| (x + h) as i32);
        let fields = _mm256_set_epi32(s[7], s[6], s[5], s[4], s[3], s[2], s[1], s[0]);
        let one = _mm256_set1_epi32(1);
        let width = _mm256_set1_epi32(32);
        let low = _mm256_set1_epi32(31);
        let four = _mm256_set1_epi32(4);
        let base = data.as_ptr() as *const i32;
        let outs = lanes.each_mut().map(|l| l.out.as_mut_ptr());
        let mut p = _mm256_setzero_si256();
        let mut hw = _mm256_setzero_si256();
        for j in 0..v {
            if j % 32 == 0 {
                let b = participation::<4>(data, &starts, h, j).map(|x| x as i32);
                hw = _mm256_set_epi32(b[7], b[6], b[5], b[4], b[3], b[2], b[1], b[0]);
            }
            let t = _mm256_and_si256(
                _mm256_srl_epi32(hw, _mm_cvtsi32_si128((j % 32) as i32)),
                one,
            );
            let part = _mm256_cmpeq_epi32(t, one);
            let n = _mm256_blendv_epi8(width, _mm256_set1_epi32(c.field_bits[j] as i32), part);
            // Words p / 32 and the next, as for 64-bit chunks; offsets fit i32 (`supports`).
            let off = _mm256_add_epi32(fields, _mm256_slli_epi32::<2>(_mm256_srli_epi32::<5>(p)));
            let o = _mm256_and_si256(p, low);
            let a = _mm256_i32gather_epi32::<1>(base, off);
            let b = _mm256_i32gather_epi32::<1>(base, _mm256_add_epi32(off, four));
            let window = _mm256_or_si256(
                _mm256_sllv_epi32(a, o),
                _mm256_srlv_epi32(b, _mm256_sub_epi32(width, o)),
            );
            let field = _mm256_srlv_epi32(window, _mm256_sub_epi32(width, n));
            let mut x = _mm256_set1_epi32(c.bitval[j] as i32);
            for &(shift, mask) in &dep.runs[dep.first[j]..dep.first[j + 1]] {
                let moved = _mm256_sll_epi32(field, _mm_cvtsi32_si128(shift as i32));
                x = _mm256_or_si256(x, _mm256_and_si256(moved, _mm256_set1_epi32(mask as i32)));
            }
            let x = _mm256_blendv_epi8(field, x, part);
            p = _mm256_add_epi32(p, n);
            let mut chunks = [0u32; 8];
            _mm256_storeu_si256(chunks.as_mut_ptr() as *mut __m256i, x);
            for (out, x) in outs.iter().zip(chunks) {
                // SAFETY: as for 64-bit chunks, bytes j * 4 .. j * 4 + 4 are in bounds.
                (out.add(j * 4) as *mut u32).write_unaligned(x);
            }
        }
        let mut ends = [0u32; 8];
        _mm256_storeu_si256(ends.as_mut_ptr() as *mut __m256i, p);
        ends.map(|e| e as usize)
    }
}

/// The next `8 * B` participation bits of each row from column `j` on (zero past its
/// bitmap), as the lane type's integers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn participation<const B: usize>(data: &[u8], starts: &[usize], h: usize, j: usize) -> [i64; 8] {
    let mut out = [0i64; 8];
    for (o, &s) in out.iter_mut().zip(starts) {
        let mut bytes = [0u8; 8];
        let chunk = &data[s + j / 8..s + (j / 8 + B).min(h)];
        bytes[..chunk.len()].copy_from_slice(chunk);
        *o = i64::from_le_bytes(bytes);
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
pub fn decode<const B: usize>(
    _data: &[u8],
    _lanes: &mut [Lane],
    _c: &Columns,
    _dep: &Deposits,
) -> [usize; 8] {
    unreachable!("`available()` is false off x86_64")
}

/// Bits a packed row saves against storing every chunk whole: the sum of `width -
/// field_bits[j]` over the chunks whose participation bit is set in `bitmap` (at least
/// `ceil(field_bits.len() / 8)` bytes). What sizing a row from its bitmap needs.
pub fn saved_bits(bitmap: &[u8], field_bits: &[u32], width: u32) -> usize {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX2 is present.
        return unsafe { saved_bits_avx2(bitmap, field_bits, width) };
    }
    saved_bits_scalar(bitmap, field_bits, width)
}

fn saved_bits_scalar(bitmap: &[u8], field_bits: &[u32], width: u32) -> usize {
    field_bits
        .iter()
        .enumerate()
        .map(|(j, &f)| (bitmap[j / 8] >> (j % 8) & 1) as usize * (width - f) as usize)
        .sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn saved_bits_avx2(bitmap: &[u8], field_bits: &[u32], width: u32) -> usize {
    // SAFETY: the caller upholds this function's contract: the CPU has the features it
    // is compiled for, and the arguments are as its documentation requires; every unsafe
    // operation below relies on exactly that.
    unsafe {
        use std::arch::x86_64::*;
        // Eight chunks per bitmap byte: one lane each, the byte's bit k selects lane k.
        let select = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        let w = _mm256_set1_epi32(width as i32);
        let mut acc = _mm256_setzero_si256();
        let whole = field_bits.len() / 8;
        for (&byte, f) in bitmap.iter().zip(field_bits.chunks_exact(8)) {
            let on = _mm256_cmpeq_epi32(
                _mm256_and_si256(_mm256_set1_epi32(byte as i32), select),
                select,
            );
            let f = _mm256_loadu_si256(f.as_ptr() as *const __m256i);
            acc = _mm256_add_epi32(acc, _mm256_and_si256(on, _mm256_sub_epi32(w, f)));
        }
        let mut lanes = [0u32; 8];
        _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, acc);
        let rest = saved_bits_scalar(&bitmap[whole..], &field_bits[whole * 8..], width);
        lanes.iter().map(|&x| x as usize).sum::<usize>() + rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bits::pdep_portable;

    #[test]
    fn saved_bits_fast_equals_scalar() {
        let mut rng = planepack_testkit::Rng(5);
        for v in 0..300 {
            let width = [16, 32, 64][v % 3];
            let fbits: Vec<u32> = (0..v).map(|_| rng.below(width as u64 + 1) as u32).collect();
            let bitmap: Vec<u8> = (0..v.div_ceil(8)).map(|_| rng.next_u64() as u8).collect();
            assert_eq!(
                saved_bits(&bitmap, &fbits, width),
                saved_bits_scalar(&bitmap, &fbits, width)
            );
        }
    }

    #[test]
    fn deposits_by_runs_equal_pdep() {
        let mut rng = planepack_testkit::Rng(11);
        for round in 0..2000 {
            let sel = match round % 4 {
                0 => rng.next_u64(),
                1 => rng.next_u64() & rng.next_u64(),
                2 => u64::MAX,
                _ => rng.next_u64() >> rng.below(64),
            };
            let mask = crate::mask::Mask {
                width: 64,
                mask: vec![!sel],
                bitval: vec![0],
            };
            let c = Columns::new(&mask);
            let dep = Deposits::new(&c);
            let f = rng.next_u64();
            let by_runs = dep.runs[dep.first[0]..dep.first[1]]
                .iter()
                .fold(0, |x, &(s, m)| x | (f << s) & m);
            assert_eq!(by_runs, pdep_portable(f, sel), "select {sel:#x}");
        }
    }
}
