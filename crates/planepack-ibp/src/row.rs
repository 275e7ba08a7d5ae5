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

use crate::bits::{ones, pdep_portable, pext_portable, BitOps, WordReader, WordWriter};
use crate::mask::Mask;

/// The per-column constants a codec needs, derived once from a [`Mask`].
#[derive(Debug, Clone)]
pub struct Columns {
    pub width: u32,
    /// `!mask`, limited to `W` bits: the variable bits of a participating chunk.
    pub select: Vec<u64>,
    pub mask: Vec<u64>,
    pub bitval: Vec<u64>,
    /// Field length of a participating chunk: `W - popcount(mask)`.
    pub field_bits: Vec<u32>,
    pub ops: BitOps,
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
    let mut w = [0u8; 8];
    w[..b].copy_from_slice(&row[j * b..j * b + b]);
    u64::from_le_bytes(w)
}

/// Compressed size `H + D` of a row (before the raw fallback).
pub fn packed_size(row: &[u8], c: &Columns) -> usize {
    let b = c.b();
    let mut bits = 0usize;
    for j in 0..c.v() {
        let x = chunk(row, j, b);
        bits += if x & c.mask[j] == c.bitval[j] {
            c.field_bits[j]
        } else {
            c.width
        } as usize;
    }
    c.header_bytes() + align(bits.div_ceil(8), b)
}

/// Size the row takes: `min(H + D, V*B)`.
pub fn stored_size(row: &[u8], c: &Columns) -> usize {
    packed_size(row, c).min(c.row_bytes())
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
            let f = match c.ops {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `BitOps::Bmi2` is only chosen when the CPU has BMI2.
                BitOps::Bmi2 => unsafe { crate::bits::bmi2::pext(x, c.select[j]) },
                BitOps::Portable => pext_portable(x, c.select[j]),
            };
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
    match c.ops {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `BitOps::Bmi2` is only chosen when the CPU has BMI2.
        BitOps::Bmi2 => unsafe { decode_packed_bmi2(src, c, out) },
        BitOps::Portable => decode_packed::<false>(src, c, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
fn decode_packed_bmi2(src: &[u8], c: &Columns, out: &mut [u8]) -> Result<usize, RowError> {
    decode_packed::<true>(src, c, out)
}

#[inline(always)]
fn decode_packed<const BMI2: bool>(
    src: &[u8],
    c: &Columns,
    out: &mut [u8],
) -> Result<usize, RowError> {
    let (b, v, h) = (c.b(), c.v(), c.header_bytes());
    let head = src
        .get(..h)
        .ok_or("row header runs past the end of the data")?;
    if v % 8 != 0 && head[v / 8] >> (v % 8) != 0 || head[v.div_ceil(8)..].iter().any(|&x| x != 0) {
        return Err("participation bitmap padding is not zero");
    }
    let mut r = WordReader::new(&src[h..], c.width);
    for j in 0..v {
        let x = if head[j / 8] >> (j % 8) & 1 == 1 {
            let f = r.read(c.field_bits[j]);
            let spread = if BMI2 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: instantiated with BMI2 = true only from `decode_packed_bmi2`.
                unsafe {
                    crate::bits::bmi2::pdep(f, c.select[j])
                }
                #[cfg(not(target_arch = "x86_64"))]
                pdep_portable(f, c.select[j])
            } else {
                pdep_portable(f, c.select[j])
            };
            c.bitval[j] | spread
        } else {
            r.read(c.width)
        };
        out[j * b..j * b + b].copy_from_slice(&x.to_le_bytes()[..b]);
    }
    if r.overran() {
        return Err("packed row runs past the end of the data");
    }
    if r.read_rest_of_word() != 0 {
        return Err("padding bits of the last word are not zero");
    }
    let used = h + r.bytes_used();
    if used >= c.row_bytes() {
        return Err("row marked compressed is not smaller than the raw row");
    }
    Ok(used)
}
