//! One row in the reference format: participation bitmap, then the packed fields.
//!
//! ```text
//! | participation bitmap: V bits LSB-first, zero-padded to H = align_B(ceil(V/8)) bytes |
//! | fields, MSB-first in W-bit little-endian words, zero-padded to a whole word           |
//! ```
//!
//! A chunk participates when `x & mask == bitval`; its field is `pext(x, !mask)`,
//! `W - popcount(mask)` bits. A chunk that does not participate stores all `W` bits. A row is
//! stored this way only if that is strictly smaller than the raw row; otherwise it is stored
//! raw and its bit in the group's row bitmask is 0.

use crate::bits::{ones, pdep_portable, BitOps, WordWriter};
use crate::mask::Mask;

/// The per-column constants a codec needs, derived once from a [`Mask`]. The fields are
/// private: the decoders' fast paths (`wide`) read with unchecked offsets that are sound only
/// because every field here is derived from the mask by [`Columns::with_ops`].
#[derive(Debug, Clone)]
pub struct Columns {
    pub(crate) width: u32,
    /// `!mask`, limited to `W` bits: the variable bits of a participating chunk.
    pub(crate) select: Vec<u64>,
    pub(crate) mask: Vec<u64>,
    pub(crate) bitval: Vec<u64>,
    /// Field length of a participating chunk: `W - popcount(mask)`.
    pub(crate) field_bits: Vec<u32>,
    pub(crate) ops: BitOps,
}

impl Columns {
    pub fn new(m: &Mask) -> Columns {
        Columns::with_ops(m, BitOps::detect())
    }

    /// Choose the pext/pdep implementation explicitly (tests compare both).
    pub fn with_ops(m: &Mask, ops: BitOps) -> Columns {
        let w = ones(m.width);
        Columns {
            width: m.width,
            select: m.mask.iter().map(|x| !x & w).collect(),
            mask: m.mask.clone(),
            bitval: m.bitval.clone(),
            field_bits: m.mask.iter().map(|x| m.width - x.count_ones()).collect(),
            ops,
        }
    }

    /// Chunk width in bits.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// The pext/pdep implementation these columns use.
    pub fn ops(&self) -> BitOps {
        self.ops
    }

    /// Chunks per row.
    pub fn v(&self) -> usize {
        self.mask.len()
    }

    /// Bytes per chunk.
    pub fn b(&self) -> usize {
        (self.width / 8) as usize
    }

    /// Bytes of a raw row.
    pub fn row_bytes(&self) -> usize {
        self.v() * self.b()
    }

    /// Bytes of the participation bitmap, `align_B(ceil(V/8))`.
    pub fn header_bytes(&self) -> usize {
        align(self.v().div_ceil(8), self.b())
    }
}

fn align(n: usize, b: usize) -> usize {
    n.div_ceil(b) * b
}

/// Read chunk `j` of a row (little-endian, `b` bytes).
#[inline(always)]
pub fn chunk(row: &[u8], j: usize, b: usize) -> u64 {
    le_word(&row[j * b..j * b + b])
}

/// `bytes` (at most 8) as a little-endian integer, through [`le_chunk`] for the chunk widths:
/// a copy of a length known only at run time compiled to a call to `memcpy` per chunk, which
/// was a fifth of the encoder's time (the mask sweep reads every chunk of every row once per
/// threshold).
#[inline(always)]
pub fn le_word(bytes: &[u8]) -> u64 {
    match bytes.len() {
        2 => le_chunk::<2>(bytes.try_into().unwrap()),
        4 => le_chunk::<4>(bytes.try_into().unwrap()),
        8 => le_chunk::<8>(bytes.try_into().unwrap()),
        n => {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(bytes);
            u64::from_le_bytes(w)
        }
    }
}

/// A chunk of `B` bytes (little-endian) as an integer: a copy of a constant length, which
/// loops over a row's chunks vectorise.
#[inline(always)]
pub(crate) fn le_chunk<const B: usize>(x: &[u8; B]) -> u64 {
    let mut w = [0u8; 8];
    w[..B].copy_from_slice(x);
    u64::from_le_bytes(w)
}

/// Compressed size `H + D` of a row (before the raw fallback).
pub fn packed_size(row: &[u8], c: &Columns) -> usize {
    // Every chunk takes `W` bits but a participating one's invariant bits.
    let bits = c.v() * c.width as usize - saved_bits(&row[..c.row_bytes()], c) as usize;
    c.header_bytes() + align(bits.div_ceil(8), c.b())
}

/// The invariant bits of `row`'s participating chunks (`row` holds `c`'s columns): what a
/// packed row saves, and the sum the encoder's threshold sweep scores masks by. Without a
/// branch per chunk, the chunk width known to the compiler, with AVX2 where the CPU has it:
/// the sweep reads every chunk of every sampled row once per threshold.
pub(crate) fn saved_bits(row: &[u8], c: &Columns) -> u32 {
    match c.b() {
        2 => saved_bits2(row, c),
        4 => saved_bits4(row, c),
        _ => saved_bits8(row, c),
    }
}

/// The invariant bits of `row`'s participating chunks of `B` bytes.
#[inline(always)]
fn saved_bits_any<const B: usize>(row: &[u8], c: &Columns) -> u32 {
    // Chunks as arrays of `B` bytes (`le_word`'s match on a slice's length kept the loop
    // scalar).
    row.as_chunks::<B>()
        .0
        .iter()
        .zip(&c.mask)
        .zip(&c.bitval)
        .zip(&c.field_bits)
        .map(|(((x, &mk), &bv), &f)| match le_chunk(x) & mk == bv {
            true => c.width - f,
            false => 0,
        })
        .sum()
}

planepack_core::with_avx2! {
    /// [`saved_bits_any`] for 16-bit chunks.
    fn saved_bits2(row: &[u8], c: &Columns) -> u32 = saved_bits_any::<2>;
}
planepack_core::with_avx2! {
    /// [`saved_bits_any`] for 32-bit chunks.
    fn saved_bits4(row: &[u8], c: &Columns) -> u32 = saved_bits_any::<4>;
}
planepack_core::with_avx2! {
    /// [`saved_bits_any`] for 64-bit chunks.
    fn saved_bits8(row: &[u8], c: &Columns) -> u32 = saved_bits_any::<8>;
}

/// Bytes a stored row occupies at the start of `src`, read from its participation bitmap alone
/// (no decoding): what a parallel decoder needs to place every row of a condensed group. The
/// checks are the structural ones of [`decode_row`]: zero bitmap padding, the row smaller than
/// raw, and inside `src`.
pub fn stored_len(src: &[u8], compressed: bool, c: &Columns) -> Result<usize, RowError> {
    let raw = c.row_bytes();
    let len = if compressed {
        let head = bitmap(src, c)?;
        // Every row of a stream is sized this way before any is decoded: no branch per chunk
        // (participation in real rows is irregular), eight chunks per step where AVX2 is.
        let bits = c.v() * c.width as usize - crate::wide::saved_bits(head, &c.field_bits, c.width);
        let len = head.len() + align(bits.div_ceil(8), c.b());
        if len >= raw {
            return Err("packed row is not smaller than the raw row");
        }
        len
    } else {
        raw
    };
    if len > src.len() {
        return Err("row runs past the end of the data");
    }
    Ok(len)
}

/// Encode one row into `out` (at least `V*B` bytes). Returns (bytes written, compressed?).
pub fn encode_row(row: &[u8], c: &Columns, out: &mut [u8]) -> (usize, bool) {
    let (b, v) = (c.b(), c.v());
    let raw = c.row_bytes();
    if packed_size(row, c) >= raw {
        out[..raw].copy_from_slice(&row[..raw]);
        return (raw, false);
    }
    let h = c.header_bytes();
    out[..h].fill(0);
    let (head, body) = out.split_at_mut(h);
    let mut w = WordWriter::new(body, c.width);
    for j in 0..v {
        let x = chunk(row, j, b);
        if x & c.mask[j] == c.bitval[j] {
            head[j / 8] |= 1 << (j % 8);
            let f = c.ops.pext(x, c.select[j]);
            w.push(f, c.field_bits[j]);
        } else {
            w.push(x, c.width);
        }
    }
    (h + w.finish(), true)
}

/// Why a compressed row was rejected.
pub type RowError = &'static str;

/// Decode one row from the start of `src` into `out` (`V*B` bytes). Returns the bytes of `src`
/// the row occupied. `src` may extend past the row (in-place slots, or the rest of a stream).
#[inline]
pub fn decode_row(
    src: &[u8],
    compressed: bool,
    c: &Columns,
    out: &mut [u8],
) -> Result<usize, RowError> {
    let raw = c.row_bytes();
    if !compressed {
        let row = src
            .get(..raw)
            .ok_or("raw row runs past the end of the data")?;
        out[..raw].copy_from_slice(row);
        return Ok(raw);
    }
    #[cfg(target_arch = "x86_64")]
    if c.ops.is_bmi2() {
        // SAFETY: a BMI2 token is only made by `BitOps::detect` on a CPU with BMI2.
        return unsafe { decode_packed_bmi2(src, c, out) };
    }
    decode_packed_portable(src, c, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn decode_packed_bmi2(src: &[u8], c: &Columns, out: &mut [u8]) -> Result<usize, RowError> {
    match c.b() {
        8 => decode_packed::<8, true>(src, c, out),
        4 => decode_packed::<4, true>(src, c, out),
        _ => decode_packed::<2, true>(src, c, out),
    }
}

fn decode_packed_portable(src: &[u8], c: &Columns, out: &mut [u8]) -> Result<usize, RowError> {
    match c.b() {
        8 => decode_packed::<8, false>(src, c, out),
        4 => decode_packed::<4, false>(src, c, out),
        _ => decode_packed::<2, false>(src, c, out),
    }
}

/// The packed fields of a row: `W`-bit words, each filled from its most significant bit.
/// `window(p)` returns 64 stream bits starting at bit `p`, most significant first (at least
/// `W` of them valid), from at most three words.
struct Fields<'a, const B: usize> {
    words: &'a [u8],
}

impl<'a, const B: usize> Fields<'a, B> {
    #[inline(always)]
    fn word(&self, k: usize) -> u64 {
        match self.words.get(k * B..k * B + B) {
            Some(w) => match B {
                8 => u64::from_le_bytes(w.try_into().unwrap()),
                4 => u32::from_le_bytes(w.try_into().unwrap()) as u64,
                _ => u16::from_le_bytes(w.try_into().unwrap()) as u64,
            },
            None => 0,
        }
    }

    /// 64 stream bits from bit `p`, most significant first (at least `W` of them valid).
    #[inline(always)]
    fn window(&self, p: usize) -> u64 {
        let k = p / (B * 8);
        let o = (p % (B * 8)) as u32;
        // Fast path: the words needed are all inside the data (one bounds check).
        let span = if B == 2 { 6 } else { 2 * B };
        if let Some(bytes) = self.words.get(k * B..k * B + span) {
            return match B {
                8 => {
                    let hi = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as u128;
                    let lo = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as u128;
                    (((hi << 64) | lo) << o >> 64) as u64
                }
                4 => {
                    let hi = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as u64;
                    let lo = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as u64;
                    ((hi << 32) | lo) << o
                }
                _ => {
                    let w = |i: usize| {
                        u16::from_le_bytes(bytes[2 * i..2 * i + 2].try_into().unwrap()) as u64
                    };
                    ((w(0) << 48) | (w(1) << 32) | (w(2) << 16)) << o
                }
            };
        }
        // Near the end: words past the data read as zero.
        match B {
            8 => {
                let (hi, lo) = (self.word(k) as u128, self.word(k + 1) as u128);
                (((hi << 64) | lo) << o >> 64) as u64
            }
            4 => ((self.word(k) << 32) | self.word(k + 1)) << o,
            _ => ((self.word(k) << 48) | (self.word(k + 1) << 32) | (self.word(k + 2) << 16)) << o,
        }
    }

    /// Field of `n` bits (1..=W) at stream bit `p`.
    #[inline(always)]
    fn get(&self, p: usize, n: u32) -> u64 {
        debug_assert!(n >= 1 && n as usize <= B * 8);
        self.window(p) >> (64 - n)
    }
}

#[inline(always)]
fn decode_packed<const B: usize, const BMI2: bool>(
    src: &[u8],
    c: &Columns,
    out: &mut [u8],
) -> Result<usize, RowError> {
    let (v, h) = (c.v(), c.header_bytes());
    let w = (B * 8) as u32;
    let head = bitmap(src, c)?;
    // Reads past the end of `src` yield zeros; the length check after the loop rejects them.
    let f = Fields::<B> { words: &src[h..] };
    let mut p = 0usize;
    let mut hw = 0u64;
    // Equal-length slices: the compiler drops the per-index bounds checks.
    let (fbits, select, bitval) = (&c.field_bits[..v], &c.select[..v], &c.bitval[..v]);
    let out = &mut out[..v * B];
    for j in 0..v {
        if j % 64 == 0 {
            // The next 64 participation bits (zero past the header).
            let mut bytes = [0u8; 8];
            let chunk = &head[j / 8..(j / 8 + 8).min(h)];
            bytes[..chunk.len()].copy_from_slice(chunk);
            hw = u64::from_le_bytes(bytes);
        }
        let x = if hw >> (j % 64) & 1 == 1 {
            let n = fbits[j];
            let field = if n == 0 { 0 } else { f.get(p, n) };
            p += n as usize;
            let spread = if BMI2 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: instantiated with BMI2 = true only from `decode_packed_bmi2`.
                unsafe {
                    crate::bits::bmi2::pdep(field, select[j])
                }
                #[cfg(not(target_arch = "x86_64"))]
                pdep_portable(field, select[j])
            } else {
                pdep_portable(field, select[j])
            };
            bitval[j] | spread
        } else {
            let x = f.get(p, w);
            p += w as usize;
            x
        };
        out[j * B..j * B + B].copy_from_slice(&x.to_le_bytes()[..B]);
    }
    packed_end::<B>(src, c, p)
}

/// The participation bitmap at the start of a packed row, with its padding checked.
#[inline(always)]
pub(crate) fn bitmap<'a>(src: &'a [u8], c: &Columns) -> Result<&'a [u8], RowError> {
    let (v, h) = (c.v(), c.header_bytes());
    let head = src
        .get(..h)
        .ok_or("row header runs past the end of the data")?;
    if v % 8 != 0 && head[v / 8] >> (v % 8) != 0 || head[v.div_ceil(8)..].iter().any(|&x| x != 0) {
        return Err("participation bitmap padding is not zero");
    }
    Ok(head)
}

/// The checks after a packed row's fields were read up to stream bit `p`; returns the bytes
/// the row occupies.
#[inline(always)]
pub(crate) fn packed_end<const B: usize>(
    src: &[u8],
    c: &Columns,
    p: usize,
) -> Result<usize, RowError> {
    let h = c.header_bytes();
    let w = (B * 8) as u32;
    let d = p.div_ceil(B * 8) * B;
    if h + d > src.len() {
        return Err("packed row runs past the end of the data");
    }
    if h + d >= c.row_bytes() {
        return Err("row marked compressed is not smaller than the raw row");
    }
    // The rest of the last word is padding and must be zero.
    let f = Fields::<B> { words: &src[h..] };
    if !p.is_multiple_of(B * 8) && f.get(p, w - (p % (B * 8)) as u32) != 0 {
        return Err("padding bits of the last word are not zero");
    }
    Ok(h + d)
}
