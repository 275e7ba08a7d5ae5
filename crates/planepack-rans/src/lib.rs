//! The byte-plane rANS codec: planepack's entropy stage, built to be decoded on a GPU.
//!
//! Why it exists: the bit-plane codec and IBP have no entropy stage, so on real tensors they
//! send 7-29 % more bytes than CPU entropy coders (ZipNN, Blosc2 shuffle + zstd) and 3x more
//! on sparse features. What those coders exploit is simple: a float's exponent byte has a
//! few bits of entropy, its mantissa bytes are near noise, and many tensors are mostly zeros.
//! This codec models exactly that, with nothing a GPU cannot decode in parallel:
//!
//! * **Byte planes.** Each element is rotated left by one bit (the sign moves to the lowest
//!   bit, so the top byte of BF16/FP32 is the whole exponent; ZipNN and DietGPU split the
//!   same way; the encoder skips the rotation for a tensor where a sample says it costs) and
//!   split into its bytes, most significant first. Each plane of a chunk is
//!   stored raw, as one constant byte, or rANS-coded with its own order-0 table, whichever
//!   is smallest.
//! * **Zero elements out.** Where a chunk has many all-zero elements, a nonzero mask (one bit
//!   per element) is coded as a plane of its own and only the nonzero elements' planes
//!   follow: sparse features cost little more than the mask's entropy.
//! * **Independent chunks and lanes.** A tensor is cut into chunks (64 KiB by default;
//!   [`Rans::chunk_log2`]); each plane of a chunk is coded by up to 32 independent rANS
//!   lanes ([`lanes`]), so a GPU workgroup (or CPU core) takes a chunk and an invocation (or
//!   SIMD lane) takes a lane.
//!
//! The stream format is `docs/format-rans.md`. Every decoder rule there is checked here:
//! a damaged stream is an error, never a panic, an out-of-bounds access or a hang.

pub mod lanes;
pub mod model;
pub mod modelled;

use model::{histogram, Table};
use planepack_core::codec::check_output_len;
use planepack_core::error::{stream_header, take};
use planepack_core::{Codec, ElemType, Error, Result};
use rayon::prelude::*;

/// Stream magic.
pub const MAGIC: [u8; 4] = *b"PPRA";
/// Format version: 2 when a chunk is modelled (mode 3), else 1 (the streams of the first
/// version, byte for byte). Decoders read both.
pub const VERSION: u8 = 2;
/// Bytes of the stream header.
pub const HEADER_BYTES: usize = 16;
/// Chunk sizes the format allows: 2^12 (4 KiB) to 2^20 (1 MiB) bytes.
pub const CHUNK_LOG2_RANGE: std::ops::RangeInclusive<u8> = 12..=20;
/// Default chunk: 64 KiB (see `bench-results/rans-study.md` for the measurement).
pub const DEFAULT_CHUNK_LOG2: u8 = 16;

/// Chunk modes (the modelled chunk's is [`modelled::CHUNK_MODELLED`]).
pub const CHUNK_RAW: u8 = 0;
pub const CHUNK_DENSE: u8 = 1;
pub const CHUNK_SPARSE: u8 = 2;
/// Plane kinds.
pub const PLANE_RAW: u8 = 0;
pub const PLANE_CONST: u8 = 1;
pub const PLANE_RANS: u8 = 2;

/// The least fraction of a chunk's estimated planes size a modelled chunk must save for the
/// encoder to write it (informative: decoders take either).
pub const MODELLED_MIN_GAIN: f64 = 0.01;

/// Which parts of the model the encoder may use (all, by default; the study turns them off
/// one at a time to show what each buys). Decoders take any stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rans {
    /// log2 of the chunk size in bytes, in [`CHUNK_LOG2_RANGE`].
    pub chunk_log2: u8,
    /// Try the zero mask on chunks with at least one zero element in eight.
    pub zero_mask: bool,
    /// Rotate the sign bit to the bottom before splitting where a sample of the tensor says
    /// the planes come out smaller (off: never, plain byte planes).
    pub rotate: bool,
    /// Code repeated rows as references to earlier ones ([`RowMap`]; needs a shape).
    pub rows: bool,
    /// Try the modelled chunk ([`modelled`]: runs, repeated values, neighbours' magnitudes)
    /// and keep it where it is smaller.
    pub modelled: bool,
}

impl Default for Rans {
    fn default() -> Self {
        Rans {
            chunk_log2: DEFAULT_CHUNK_LOG2,
            zero_mask: true,
            rotate: true,
            rows: true,
            modelled: true,
        }
    }
}

/// Repeated rows (flag bit 1): the tensor's rows of `row_bytes`, of which `copies` lists
/// each row that repeats an earlier one, with the earlier row it repeats. Only the other rows
/// (the originals, in order) are coded in the chunks. Sparse GNN features, deduplicated
/// documents and padded batches repeat whole rows, which an order-0 model cannot see and an
/// LZ coder can; a row map costs a bit per row and 4 bytes per repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMap {
    pub row_bytes: usize,
    /// (row, the earlier original row it equals), rows increasing.
    pub copies: Vec<(u32, u32)>,
}

/// The parsed stream header (and row map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Format version: 1, or 2 (modelled chunks allowed).
    pub version: u8,
    /// Element width in bytes: 1, 2 or 4.
    pub width: usize,
    pub chunk_log2: u8,
    /// Whether the encoder rotated elements (flag bit 0).
    pub rotate: bool,
    pub raw_len: usize,
    pub rows: Option<RowMap>,
    /// Where the chunk table starts (after the header and the row map).
    pub table_at: usize,
}

impl Header {
    /// Elements coded in the chunks: every whole element, less those of copied rows.
    pub fn elements(&self) -> usize {
        let copied = self
            .rows
            .as_ref()
            .map_or(0, |m| m.copies.len() * m.row_bytes);
        (self.raw_len - copied) / self.width
    }
    pub fn chunk_elements(&self) -> usize {
        (1usize << self.chunk_log2) / self.width
    }
    pub fn chunks(&self) -> usize {
        self.elements().div_ceil(self.chunk_elements())
    }
    pub fn tail_len(&self) -> usize {
        self.raw_len % self.width
    }
}

/// Parse and check the header: magic, version, width, chunk size, flags, and that the
/// stream is long enough for the chunk table it implies (so a lying `raw_len` is refused
/// before anything is allocated for it).
pub fn parse_header(input: &[u8]) -> Result<Header> {
    // Version 2 (modelled chunks) or 1; anything else is refused as version 2 would be.
    let version = if input.get(4) == Some(&1) { 1 } else { VERSION };
    let h = stream_header(input, HEADER_BYTES, MAGIC, version, "rANS")?;
    let width = h[5] as usize;
    if !matches!(width, 1 | 2 | 4) {
        return Err(Error::corrupt_at(format!("element width {width}"), 5));
    }
    let chunk_log2 = h[6];
    if !CHUNK_LOG2_RANGE.contains(&chunk_log2) {
        return Err(Error::corrupt_at(format!("chunk size 2^{chunk_log2}"), 6));
    }
    if h[7] & !3 != 0 {
        return Err(Error::corrupt_at("unknown flags", 7));
    }
    let raw_len = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let raw_len = usize::try_from(raw_len).map_err(|_| Error::corrupt_at("raw length", 8))?;
    let (rows, table_at) = if h[7] & 2 != 0 {
        let (m, end) = parse_rows(input, width, raw_len)?;
        (Some(m), end)
    } else {
        (None, HEADER_BYTES)
    };
    let header = Header {
        version,
        width,
        chunk_log2,
        rotate: h[7] & 1 == 1,
        raw_len,
        rows,
        table_at,
    };
    // Every chunk takes at least a 4-byte length and a 1-byte mode.
    let min = header
        .chunks()
        .checked_mul(5)
        .and_then(|c| c.checked_add(table_at + header.tail_len()));
    if min.is_none_or(|m| m > input.len()) {
        return Err(Error::corrupt_at(
            "raw length needs more chunks than the stream holds",
            8,
        ));
    }
    Ok(header)
}

/// The row map after the header: u64 row length `R` (a multiple of the width, dividing the
/// data), a bitmap of copied rows (bit `r % 8` of byte `r / 8`), and for each copied row in
/// order a u32 index of the earlier, not copied, row it equals.
fn parse_rows(input: &[u8], width: usize, raw_len: usize) -> Result<(RowMap, usize)> {
    let at = HEADER_BYTES;
    let r = u64::from_le_bytes(take(input, at, 8, "row length")?.try_into().unwrap());
    let row_bytes = usize::try_from(r).unwrap_or(0);
    if row_bytes == 0 || row_bytes % width != 0 || !raw_len.is_multiple_of(row_bytes) {
        return Err(Error::corrupt_at(format!("row length {r}"), at));
    }
    let n = raw_len / row_bytes;
    let bits = take(input, at + 8, n.div_ceil(8), "row bitmap")?;
    if !n.is_multiple_of(8) && bits.last().is_some_and(|&b| b >> (n % 8) != 0) {
        return Err(Error::corrupt_at("row bitmap padding", at + 8));
    }
    let copied = |i: usize| bits[i / 8] >> (i % 8) & 1 == 1;
    let count: usize = bits.iter().map(|b| b.count_ones() as usize).sum();
    let src_at = at + 8 + n.div_ceil(8);
    let srcs = take(input, src_at, 4 * count, "row sources")?;
    let mut copies = Vec::with_capacity(count);
    for (k, row) in (0..n).filter(|&i| copied(i)).enumerate() {
        let src = u32::from_le_bytes(srcs[4 * k..4 * k + 4].try_into().unwrap());
        if src as usize >= row || copied(src as usize) {
            return Err(Error::corrupt_at(
                format!("row {row} copies row {src}, which is not an earlier original"),
                src_at + 4 * k,
            ));
        }
        copies.push((row as u32, src));
    }
    Ok((RowMap { row_bytes, copies }, src_at + 4 * count))
}

/// Byte offset and length of each chunk's payload, checked to tile the stream exactly.
pub fn chunk_spans(input: &[u8], h: &Header) -> Result<Vec<(usize, usize)>> {
    let n = h.chunks();
    let table = take(input, h.table_at, 4 * n, "chunk table")?;
    let mut at = h.table_at + 4 * n;
    let mut spans = Vec::with_capacity(n);
    for (i, l) in table.chunks_exact(4).enumerate() {
        let len = u32::from_le_bytes(l.try_into().unwrap()) as usize;
        if len == 0 || at.checked_add(len).is_none_or(|e| e > input.len()) {
            return Err(Error::corrupt_at(
                format!("chunk {i} length {len}"),
                h.table_at + 4 * i,
            ));
        }
        spans.push((at, len));
        at += len;
    }
    let expected = at + h.tail_len();
    if expected != input.len() {
        return Err(if expected < input.len() {
            Error::TrailingBytes {
                extra: input.len() - expected,
            }
        } else {
            Error::corrupt("stream ends inside its tail")
        });
    }
    Ok(spans)
}

/// Split `elems` (whole elements of `width` bytes) into planes, most significant byte first,
/// after rotating each element left by one bit when `rotate`.
fn split(elems: &[u8], width: usize, rotate: bool, planes: &mut [Vec<u8>]) {
    let n = elems.len() / width;
    for p in planes.iter_mut() {
        p.clear();
        p.resize(n, 0);
    }
    // Indexed stores into planes sized up front (not pushes), so the loops vectorise.
    match width {
        1 => planes[0].copy_from_slice(&elems[..n]),
        2 => {
            let [p0, p1] = planes else {
                unreachable!("two planes for 16-bit elements")
            };
            for ((e, a), b) in elems.chunks_exact(2).zip(p0.iter_mut()).zip(p1.iter_mut()) {
                let v = u16::from_le_bytes([e[0], e[1]]);
                let t = if rotate { v.rotate_left(1) } else { v };
                *a = (t >> 8) as u8;
                *b = t as u8;
            }
        }
        _ => {
            let [p0, p1, p2, p3] = planes else {
                unreachable!("four planes for 32-bit elements")
            };
            let (p0, p1, p2, p3) = (&mut p0[..n], &mut p1[..n], &mut p2[..n], &mut p3[..n]);
            for (i, e) in elems.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                let t = if rotate { v.rotate_left(1) } else { v };
                p0[i] = (t >> 24) as u8;
                p1[i] = (t >> 16) as u8;
                p2[i] = (t >> 8) as u8;
                p3[i] = t as u8;
            }
        }
    }
}

/// All elements from their planes (the inverse of [`split`]), one loop per width so that it
/// vectorises.
fn join_all(planes: &[Vec<u8>], width: usize, rotate: bool, out: &mut [u8]) {
    let n = out.len() / width;
    match width {
        1 => out.copy_from_slice(&planes[0][..n]),
        2 => {
            let (p0, p1) = (&planes[0][..n], &planes[1][..n]);
            for ((o, &a), &b) in out.chunks_exact_mut(2).zip(p0).zip(p1) {
                let t = (a as u16) << 8 | b as u16;
                let v = if rotate { t.rotate_right(1) } else { t };
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => {
            let (p0, p1, p2, p3) = (
                &planes[0][..n],
                &planes[1][..n],
                &planes[2][..n],
                &planes[3][..n],
            );
            for (i, o) in out.chunks_exact_mut(4).enumerate() {
                let t = (p0[i] as u32) << 24
                    | (p1[i] as u32) << 16
                    | (p2[i] as u32) << 8
                    | p3[i] as u32;
                let v = if rotate { t.rotate_right(1) } else { t };
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// A sparse chunk's elements: `nz` holds the nonzero elements (joined from their planes) in
/// order; each goes where the mask has its next set bit, zeros elsewhere. The mask's
/// population equals the number of elements in `nz` (checked by the caller).
fn expand(nz: &[u8], mask: &[u8], width: usize, out: &mut [u8]) {
    let mut done = 0; // elements of `out` written
    let mut k = 0; // elements of `nz` used
    #[cfg(target_arch = "x86_64")]
    if width > 1 && planepack_core::cpu::avx512() {
        // SAFETY: AVX-512 (F, BW, VBMI2) is present; the kernel reads the mask's first bytes,
        // the `nz` elements its set bits ask for (never more than `nz` holds, since the mask's
        // population equals its length) and writes whole groups of `out`.
        (done, k) = unsafe { avx512::expand(nz, mask, width, out) };
    } else if width > 1 && planepack_core::cpu::x86_64_v3() {
        // SAFETY: x86-64-v3 includes SSSE3; the kernel reads whole 16-byte loads of `nz` only
        // where they lie inside it, reads the mask bytes of the groups it expands and writes
        // those groups of `out`.
        (done, k) = unsafe { v3::expand(nz, mask, width, out) };
    }
    // Branch-free: zeros and nonzeros are interleaved at random in ReLU outputs, so a branch
    // per element would mispredict half the time. Each element reads the next nonzero one
    // (clamped at the last) and keeps it only if its mask bit is set.
    if nz.is_empty() {
        out[done * width..].fill(0);
        return;
    }
    let last = nz.len() / width - 1;
    for (i, e) in out.chunks_exact_mut(width).enumerate().skip(done) {
        let bit = mask[i / 8] >> (i % 8) & 1;
        let src = &nz[k.min(last) * width..][..width];
        for (o, &b) in e.iter_mut().zip(src) {
            *o = b & bit.wrapping_neg();
        }
        k += bit as usize;
    }
}

#[cfg(target_arch = "x86_64")]
mod v3 {
    use std::arch::x86_64::*;

    /// Shuffle controls for 8 16-bit elements: entry `m` moves the next `popcount(m)`
    /// elements of a 16-byte load to the positions of `m`'s set bits, zeros elsewhere
    /// (0x80 makes PSHUFB write a zero).
    const CTL16: [[u8; 16]; 256] = {
        let mut t = [[0x80u8; 16]; 256];
        let mut m = 0;
        while m < 256 {
            let (mut i, mut k) = (0, 0u8);
            while i < 8 {
                if m >> i & 1 == 1 {
                    t[m][2 * i] = 2 * k;
                    t[m][2 * i + 1] = 2 * k + 1;
                    k += 1;
                }
                i += 1;
            }
            m += 1;
        }
        t
    };

    /// The same for 4 32-bit elements, entry `m` for a 4-bit mask.
    const CTL32: [[u8; 16]; 16] = {
        let mut t = [[0x80u8; 16]; 16];
        let mut m = 0;
        while m < 16 {
            let (mut i, mut k) = (0, 0u8);
            while i < 4 {
                if m >> i & 1 == 1 {
                    let mut b = 0;
                    while b < 4 {
                        t[m][4 * i + b] = 4 * k + b as u8;
                        b += 1;
                    }
                    k += 1;
                }
                i += 1;
            }
            m += 1;
        }
        t
    };

    /// Expand groups of 8 (16-bit) or 4 (32-bit) elements while a 16-byte load at the next
    /// nonzero element stays inside `nz`; returns (elements of `out` written, elements of
    /// `nz` used), where the scalar loop goes on.
    ///
    /// # Safety
    /// The CPU must have SSSE3.
    #[target_feature(enable = "ssse3,popcnt")]
    pub unsafe fn expand(nz: &[u8], mask: &[u8], width: usize, out: &mut [u8]) -> (usize, usize) {
        let n = out.len() / width;
        let per = 16 / width;
        let mut k = 0usize;
        let mut g = 0;
        while (g + 1) * per <= n && k * width + 16 <= nz.len() {
            let m = if width == 2 {
                mask[g] as usize
            } else {
                (mask[g / 2] >> (4 * (g % 2)) & 15) as usize
            };
            let ctl = if width == 2 { &CTL16[m] } else { &CTL32[m] };
            let src = &nz[k * width..k * width + 16];
            let dst = &mut out[g * 16..g * 16 + 16];
            // SAFETY: 16-byte unaligned loads and store of slices checked to be 16 bytes.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr() as *const __m128i);
                let c = _mm_loadu_si128(ctl.as_ptr() as *const __m128i);
                _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, _mm_shuffle_epi8(v, c));
            }
            k += m.count_ones() as usize;
            g += 1;
        }
        (g * per, k)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// Expand whole groups of 32 (16-bit) or 16 (32-bit) elements; returns (elements of `out`
    /// written, elements of `nz` used).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VBMI2; the mask's population over the groups
    /// expanded must not exceed the elements in `nz`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    pub unsafe fn expand(nz: &[u8], mask: &[u8], width: usize, out: &mut [u8]) -> (usize, usize) {
        let n = out.len() / width;
        let per = 64 / width; // elements per 64-byte vector
        let groups = n / per;
        let mut k = 0usize;
        for g in 0..groups {
            let bytes = &mask[g * per / 8..][..per / 8];
            let dst = out.as_mut_ptr().wrapping_add(g * 64);
            let src = nz.as_ptr().wrapping_add(k * width);
            if width == 2 {
                let m = u32::from_le_bytes(bytes.try_into().unwrap());
                // SAFETY: reads popcount(m) u16 from `src`, inside `nz`; writes 64 bytes of
                // `out` at group g < groups.
                unsafe {
                    let v = _mm512_maskz_expandloadu_epi16(m, src as *const i16);
                    _mm512_storeu_si512(dst as *mut __m512i, v);
                }
                k += m.count_ones() as usize;
            } else {
                let m = u16::from_le_bytes(bytes.try_into().unwrap());
                // SAFETY: as above, with u32 elements.
                unsafe {
                    let v = _mm512_maskz_expandloadu_epi32(m, src as *const i32);
                    _mm512_storeu_si512(dst as *mut __m512i, v);
                }
                k += m.count_ones() as usize;
            }
        }
        (groups * per, k)
    }
}

/// Zero elements among `elems` (whole elements of `width` bytes), compared as integers so the
/// loop vectorises.
fn count_zeros(elems: &[u8], width: usize) -> usize {
    match width {
        2 => elems
            .chunks_exact(2)
            .filter(|e| u16::from_le_bytes([e[0], e[1]]) == 0)
            .count(),
        4 => elems
            .chunks_exact(4)
            .filter(|e| u32::from_le_bytes([e[0], e[1], e[2], e[3]]) == 0)
            .count(),
        _ => elems.iter().filter(|&&b| b == 0).count(),
    }
}

/// The zero mask (bit `i` set where element `i` is nonzero) and the nonzero elements in
/// order. Branch-free: every element is stored at the next nonzero slot and the slot kept
/// only if the element is nonzero, since zeros and nonzeros alternate at random in ReLU
/// outputs.
fn take_zeros_out(elems: &[u8], width: usize, mask: &mut Vec<u8>, nonzero: &mut Vec<u8>) {
    let n = elems.len() / width;
    mask.clear();
    mask.resize(n.div_ceil(8), 0);
    nonzero.clear();
    nonzero.resize(elems.len(), 0);
    let k = match width {
        2 => take_zeros_out_w::<2>(elems, mask, nonzero),
        4 => take_zeros_out_w::<4>(elems, mask, nonzero),
        _ => take_zeros_out_w::<1>(elems, mask, nonzero),
    };
    nonzero.truncate(k);
}

/// [`take_zeros_out`] for `W`-byte elements (a constant width, so each store is one move);
/// returns the bytes of `nonzero` used.
fn take_zeros_out_w<const W: usize>(elems: &[u8], mask: &mut [u8], nonzero: &mut [u8]) -> usize {
    let mut k = 0;
    for (bits, group) in mask.iter_mut().zip(elems.chunks(8 * W)) {
        for (i, e) in group.chunks_exact(W).enumerate() {
            let e: &[u8; W] = e.try_into().expect("W bytes");
            let nz = e.iter().fold(0, |a, &b| a | b) != 0;
            nonzero[k..k + W].copy_from_slice(e);
            k += W * nz as usize;
            *bits |= (nz as u8) << i;
        }
    }
    k
}

/// Samples [`rotation_pays`] takes, evenly spaced over the tensor, and their size: 32 KiB in
/// all, enough for order-0 statistics and a small cost next to coding the tensor.
const ROTATION_SAMPLES: usize = 4;
const ROTATION_SAMPLE_BYTES: usize = 8 << 10;

/// Do the byte planes of `body` (whole elements of `width` > 1 bytes) cost fewer bits with
/// the sign rotated to the bottom? Rotation puts a float's whole exponent in the top plane,
/// which usually pays (BF16, FP16 and most FP32 tensors), but not always: in FP32 tensors
/// whose values sit near a few exponents, the sign joined to the top mantissa bits can code
/// better. Decided per stream (the format's flag `R`) from the order-0 entropy of the planes
/// of up to [`ROTATION_SAMPLES`] samples of [`ROTATION_SAMPLE_BYTES`], each way; ties rotate.
fn rotation_pays(body: &[u8], width: usize, planes: &mut Vec<Vec<u8>>) -> bool {
    let sample = ROTATION_SAMPLE_BYTES / width * width;
    let slots = body.len().div_ceil(sample);
    if slots == 0 {
        return true;
    }
    let picks = slots.min(ROTATION_SAMPLES);
    planes.resize_with(width, Vec::new);
    let mut bits = [0.0f64; 2];
    for k in 0..picks {
        let at = k * slots / picks * sample;
        let chunk = &body[at..body.len().min(at + sample)];
        for (cost, rotate) in bits.iter_mut().zip([false, true]) {
            split(chunk, width, rotate, planes);
            *cost += planes
                .iter()
                .map(|p| entropy_bits(&histogram(p)))
                .sum::<f64>();
        }
    }
    bits[1] <= bits[0]
}

/// Order-0 entropy of a histogram, in bits: `sum c log2(n / c)`.
fn entropy_bits(counts: &[u32; 256]) -> f64 {
    let n: f64 = counts.iter().map(|&c| c as f64).sum();
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| c as f64 * (n / c as f64).log2())
        .sum()
}

/// Per-thread encoder scratch.
#[derive(Default)]
struct EncScratch {
    modelled: modelled::Scratch,
    /// A chunk coded as planes while its modelled form is kept aside.
    planes: Vec<Vec<u8>>,
    sparse_planes: Vec<Vec<u8>>,
    lanes: lanes::Encoder,
    dense: Vec<u8>,
    sparse: Vec<u8>,
    mask: Vec<u8>,
    nonzero: Vec<u8>,
}

/// How a plane will be written, chosen from its histogram alone.
// One per byte plane of a chunk, on the stack: boxing the table would allocate per plane.
#[allow(clippy::large_enum_variant)]
pub(crate) enum PlanePlan {
    Const(u8),
    Raw,
    Rans(Table),
}

/// A plane's kind and its estimated size in bytes (exact for raw and constant planes; for a
/// coded plane the table's cost in bits plus the table and lane headers, which the coder
/// meets to within a few bytes a lane).
pub(crate) fn plan_plane(symbols: &[u8]) -> (PlanePlan, f64) {
    let counts = histogram(symbols);
    let present = counts.iter().filter(|&&c| c > 0).count();
    if present <= 1 {
        return (PlanePlan::Const(symbols.first().copied().unwrap_or(0)), 2.0);
    }
    let table = Table::from_counts(&counts);
    let estimate = table.cost_bits(&counts) / 8.0
        + (table.written_len() + lanes::lane_header(lanes::lanes_for(symbols.len()))) as f64;
    if estimate < symbols.len() as f64 {
        (PlanePlan::Rans(table), 1.0 + estimate)
    } else {
        (PlanePlan::Raw, 1.0 + symbols.len() as f64)
    }
}

/// Append plane `symbols` as planned (raw after all if coding it came out no smaller).
pub(crate) fn put_plane(
    symbols: &[u8],
    plan: &PlanePlan,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    match plan {
        PlanePlan::Const(v) => {
            out.push(PLANE_CONST);
            out.push(*v);
            return Ok(());
        }
        PlanePlan::Rans(table) => {
            let start = out.len();
            out.push(PLANE_RANS);
            table.write(out);
            enc.encode(table, symbols, out)?;
            if out.len() - start < 1 + symbols.len() {
                return Ok(());
            }
            out.truncate(start);
        }
        PlanePlan::Raw => {}
    }
    out.push(PLANE_RAW);
    out.extend_from_slice(symbols);
    Ok(())
}

/// Append `planes` to `out`, each as planned.
fn put_planes(
    planes: &[&[u8]],
    plans: &[PlanePlan],
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    for (p, plan) in planes.iter().zip(plans) {
        put_plane(p, plan, enc, out)?;
    }
    Ok(())
}

impl Rans {
    fn check(&self) -> Result<()> {
        if CHUNK_LOG2_RANGE.contains(&self.chunk_log2) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "chunk size 2^{} (the format takes 2^12 to 2^20)",
                self.chunk_log2
            )))
        }
    }

    /// Encode one chunk of whole elements (rows of `row` elements; 0: unknown), appending
    /// mode and planes to `out`; returns whether the chunk is modelled (mode 3).
    fn encode_chunk(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        row: usize,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        if !self.modelled {
            self.encode_chunk_planes(elems, width, rotate, s, out)?;
            return Ok(false);
        }
        let best_plane_estimate = self.plane_estimate(elems, width, rotate, s);
        let (estimate, tables, plans) = modelled::plan(elems, width, rotate, row, &mut s.modelled);
        // Modelled only where it saves at least MODELLED_MIN_GAIN: it decodes at about half
        // the planes' speed, so a fraction of a percent is not worth it. (The estimates are
        // within a few bytes a lane of the coded sizes, so no chunk is coded twice.)
        if estimate <= best_plane_estimate * (1.0 - MODELLED_MIN_GAIN) {
            modelled::encode(
                elems,
                width,
                &tables,
                &plans,
                &mut s.modelled,
                &mut s.lanes,
                out,
            )?;
            return Ok(true);
        }
        self.encode_chunk_planes(elems, width, rotate, s, out)?;
        Ok(false)
    }

    /// The estimated size of the chunk as byte planes: the smaller of the dense and sparse
    /// layouts' estimates (what [`Rans::encode_chunk_planes`] decides by).
    fn plane_estimate(&self, elems: &[u8], width: usize, rotate: bool, s: &mut EncScratch) -> f64 {
        s.planes.resize_with(width, Vec::new);
        split(elems, width, rotate, &mut s.planes);
        let dense = 1.0 + s.planes.iter().map(|p| plan_plane(p).1).sum::<f64>();
        let n = elems.len() / width;
        let zeros = count_zeros(elems, width);
        if self.zero_mask && zeros > 0 && zeros >= n / 8 {
            take_zeros_out(elems, width, &mut s.mask, &mut s.nonzero);
            s.sparse_planes.resize_with(width + 1, Vec::new);
            s.sparse_planes[0].clone_from(&s.mask);
            split(&s.nonzero, width, rotate, &mut s.sparse_planes[1..]);
            let sparse = 5.0 + s.sparse_planes.iter().map(|p| plan_plane(p).1).sum::<f64>();
            return dense.min(sparse);
        }
        dense
    }

    /// Encode one chunk as byte planes (dense or sparse, or raw), appending to `out`.
    fn encode_chunk_planes(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        s.planes.resize_with(width, Vec::new);
        split(elems, width, rotate, &mut s.planes);
        let (dense_plans, dense_sizes): (Vec<_>, Vec<_>) =
            s.planes.iter().map(|p| plan_plane(p)).unzip();
        let dense_estimate = 1.0 + dense_sizes.iter().sum::<f64>();
        let dense_planes: Vec<&[u8]> = s.planes.iter().map(|p| &p[..]).collect();
        let n = elems.len() / width;
        let zeros = count_zeros(elems, width);
        let mut sparse_plan = None;
        if self.zero_mask && zeros > 0 && zeros >= n / 8 {
            take_zeros_out(elems, width, &mut s.mask, &mut s.nonzero);
            s.sparse_planes.resize_with(width + 1, Vec::new);
            s.sparse_planes[0].clone_from(&s.mask);
            split(&s.nonzero, width, rotate, &mut s.sparse_planes[1..]);
            let (plans, sizes): (Vec<_>, Vec<_>) =
                s.sparse_planes.iter().map(|p| plan_plane(p)).unzip();
            sparse_plan = Some((plans, 5.0 + sizes.iter().sum::<f64>()));
        }
        let mut head = [CHUNK_SPARSE, 0, 0, 0, 0];
        head[1..].copy_from_slice(&((n - zeros) as u32).to_le_bytes());
        let sparse_planes: Vec<&[u8]> = s.sparse_planes.iter().map(|p| &p[..]).collect();
        // Code only the layout the estimates favour, unless they are too close to call (then
        // both, and the smaller is kept): the estimates are within a few bytes a lane.
        // One layout to code: straight into `out` (no copy of the chunk).
        let only = match &sparse_plan {
            None => Some(true),
            Some((_, sparse_estimate)) => {
                let margin = 64.0 + dense_estimate.min(*sparse_estimate) / 100.0;
                if *sparse_estimate <= dense_estimate - margin {
                    Some(false)
                } else if dense_estimate <= *sparse_estimate - margin {
                    Some(true)
                } else {
                    None
                }
            }
        };
        let start = out.len();
        match (only, &sparse_plan) {
            (Some(true), _) | (None, None) => {
                out.push(CHUNK_DENSE);
                put_planes(&dense_planes, &dense_plans, &mut s.lanes, out)?;
            }
            (Some(false), Some((sparse_plans, _))) => {
                out.extend_from_slice(&head);
                put_planes(&sparse_planes, sparse_plans, &mut s.lanes, out)?;
            }
            (_, Some((sparse_plans, _))) => {
                // Too close to call: both, and the shorter is kept (dense on a tie).
                s.dense.clear();
                s.dense.push(CHUNK_DENSE);
                put_planes(&dense_planes, &dense_plans, &mut s.lanes, &mut s.dense)?;
                s.sparse.clear();
                s.sparse.extend_from_slice(&head);
                put_planes(&sparse_planes, sparse_plans, &mut s.lanes, &mut s.sparse)?;
                let best = if s.sparse.len() < s.dense.len() {
                    &s.sparse
                } else {
                    &s.dense
                };
                out.extend_from_slice(best);
            }
            (Some(false), None) => unreachable!("no sparse layout to prefer"),
        }
        if out.len() - start > elems.len() {
            out.truncate(start);
            out.push(CHUNK_RAW);
            out.extend_from_slice(elems);
        }
        Ok(())
    }
}

/// Per-thread decoder scratch.
#[derive(Default)]
pub(crate) struct DecScratch {
    pub(crate) modelled: modelled::DecodeState,
    pub(crate) planes: Vec<Vec<u8>>,
    mask: Vec<u8>,
    /// A sparse chunk's nonzero elements, joined.
    nonzero: Vec<u8>,
    /// Decode table and lane words.
    pub(crate) lanes: (Vec<u32>, Vec<u16>),
}

/// Read a plane of `n` symbols at `at` into `dst`; returns the offset after it.
pub(crate) fn get_plane(
    chunk: &[u8],
    at: usize,
    n: usize,
    s: &mut (Vec<u32>, Vec<u16>),
    dst: &mut Vec<u8>,
) -> Result<usize> {
    dst.clear();
    dst.resize(n, 0);
    let kind = take(chunk, at, 1, "plane kind")?[0];
    match kind {
        PLANE_RAW => {
            dst.copy_from_slice(take(chunk, at + 1, n, "raw plane")?);
            Ok(at + 1 + n)
        }
        PLANE_CONST => {
            let v = take(chunk, at + 1, 1, "constant plane")?[0];
            dst.fill(v);
            Ok(at + 2)
        }
        PLANE_RANS => {
            let (table, pos) = Table::read(chunk, at + 1)?;
            table.decode_slots(&mut s.0);
            let slots: &[u32; model::PROB_SCALE as usize] =
                s.0.as_slice().try_into().expect("4096 slots");
            lanes::decode(chunk, pos, slots, &mut s.1, dst)
        }
        k => Err(Error::corrupt_at(format!("plane kind {k}"), at)),
    }
}

/// Decode one chunk payload into `out` (whole elements).
fn decode_chunk(chunk: &[u8], h: &Header, s: &mut DecScratch, out: &mut [u8]) -> Result<()> {
    let n = out.len() / h.width;
    let mode = chunk[0];
    s.planes.resize_with(h.width, Vec::new);
    let end = match mode {
        CHUNK_RAW => {
            out.copy_from_slice(take(chunk, 1, out.len(), "raw chunk")?);
            1 + out.len()
        }
        CHUNK_DENSE => {
            let mut at = 1;
            for p in s.planes.iter_mut() {
                at = get_plane(chunk, at, n, &mut s.lanes, p)?;
            }
            join_all(&s.planes, h.width, h.rotate, out);
            at
        }
        CHUNK_SPARSE => {
            let nnz = u32::from_le_bytes(take(chunk, 1, 4, "nonzero count")?.try_into().unwrap())
                as usize;
            if nnz > n {
                return Err(Error::corrupt_at(
                    "more nonzero elements than the chunk has",
                    1,
                ));
            }
            let mut at = get_plane(chunk, 5, n.div_ceil(8), &mut s.lanes, &mut s.mask)?;
            let ones: usize = s.mask.iter().map(|b| b.count_ones() as usize).sum();
            let pad_ok = n.is_multiple_of(8) || s.mask.last().is_none_or(|&b| b >> (n % 8) == 0);
            if ones != nnz || !pad_ok {
                return Err(Error::corrupt_at(
                    "zero mask disagrees with the nonzero count",
                    5,
                ));
            }
            for p in s.planes.iter_mut() {
                at = get_plane(chunk, at, nnz, &mut s.lanes, p)?;
            }
            s.nonzero.resize(nnz * h.width, 0);
            join_all(&s.planes, h.width, h.rotate, &mut s.nonzero);
            expand(&s.nonzero, &s.mask, h.width, out);
            at
        }
        modelled::CHUNK_MODELLED if h.version >= 2 => {
            modelled::decode(chunk, h.width, h.rotate, s, out)?
        }
        m => return Err(Error::corrupt_at(format!("chunk mode {m}"), 0)),
    };
    if end != chunk.len() {
        return Err(Error::corrupt("chunk length disagrees with its planes"));
    }
    Ok(())
}

impl Rans {
    /// Encode with rows of `row` elements (0: no shape), `rows` the repeated ones.
    fn encode_rows(
        &self,
        input: &[u8],
        elem: ElemType,
        row: usize,
        rows: Option<RowMap>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.check()?;
        let width = elem.size();
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        let version_at = out.len();
        out.push(1);
        out.push(width as u8);
        out.push(self.chunk_log2);
        let flags_at = out.len();
        out.push(if rows.is_some() { 2 } else { 0 });
        out.extend_from_slice(&(input.len() as u64).to_le_bytes());
        let originals: Vec<u8>;
        let input_body = match &rows {
            Some(m) => {
                let n = input.len() / m.row_bytes;
                out.extend_from_slice(&(m.row_bytes as u64).to_le_bytes());
                let mut bits = vec![0u8; n.div_ceil(8)];
                for &(r, _) in &m.copies {
                    bits[r as usize / 8] |= 1 << (r % 8);
                }
                out.extend_from_slice(&bits);
                for &(_, src) in &m.copies {
                    out.extend_from_slice(&src.to_le_bytes());
                }
                originals = input
                    .chunks_exact(m.row_bytes)
                    .enumerate()
                    .filter(|(i, _)| bits[i / 8] >> (i % 8) & 1 == 0)
                    .flat_map(|(_, row)| row.iter().copied())
                    .collect();
                &originals[..]
            }
            None => input,
        };
        let body = input_body.len() / width * width;
        let chunk_bytes = (1usize << self.chunk_log2) / width * width;
        let n_chunks = body.div_ceil(chunk_bytes);
        let table_at = out.len();
        out.resize(table_at + 4 * n_chunks, 0);
        let mut s = EncScratch::default();
        // The format never rotates single bytes; wider elements are rotated where a sample
        // says the planes come out smaller that way.
        let rotate =
            self.rotate && width > 1 && rotation_pays(&input_body[..body], width, &mut s.planes);
        // (For single bytes the flag means nothing; it is set as this encoder always did.)
        out[flags_at] |= u8::from(if width == 1 { self.rotate } else { rotate });
        for (i, c) in input_body[..body].chunks(chunk_bytes).enumerate() {
            let at = out.len();
            if self.encode_chunk(c, width, rotate, row, &mut s, out)? {
                out[version_at] = VERSION;
            }
            let len = (out.len() - at) as u32;
            out[table_at + 4 * i..table_at + 4 * i + 4].copy_from_slice(&len.to_le_bytes());
        }
        out.extend_from_slice(&input_body[body..]);
        debug_assert!(out.len() - start <= self.max_compressed_len(input.len(), elem));
        Ok(())
    }

    fn decode_impl(&self, compressed: &[u8], out: &mut [u8], parallel: bool) -> Result<()> {
        let h = parse_header(compressed)?;
        check_output_len(h.raw_len, out)?;
        let spans = chunk_spans(compressed, &h)?;
        let body = h.elements() * h.width;
        let tail_at = h.raw_len - h.tail_len();
        out[tail_at..].copy_from_slice(&compressed[compressed.len() - h.tail_len()..]);
        // The originals' rows are decoded to the front, then moved to their places.
        let elems = &mut out[..body];
        let chunk_bytes = h.chunk_elements() * h.width;
        let work = |(span, o): (&(usize, usize), &mut [u8]), s: &mut DecScratch| {
            decode_chunk(&compressed[span.0..span.0 + span.1], &h, s, o)
        };
        if parallel {
            spans
                .par_iter()
                .zip(elems.par_chunks_mut(chunk_bytes))
                .try_for_each_init(DecScratch::default, |s, x| work(x, s))?;
        } else {
            let mut s = DecScratch::default();
            spans
                .iter()
                .zip(elems.chunks_mut(chunk_bytes))
                .try_for_each(|x| work(x, &mut s))?;
        }
        if let Some(m) = &h.rows {
            place_rows(m, out);
        }
        Ok(())
    }
}

/// Move the originals from the front of `out` to their rows (last first, so nothing is
/// overwritten before it moves), then fill every copied row from its source.
fn place_rows(m: &RowMap, out: &mut [u8]) {
    let r = m.row_bytes;
    let n = out.len() / r;
    let mut compact = n - m.copies.len();
    let mut copies = m.copies.iter().rev().peekable();
    for row in (0..n).rev() {
        if copies.peek().is_some_and(|c| c.0 as usize == row) {
            copies.next();
            continue;
        }
        compact -= 1;
        if compact != row {
            out.copy_within(compact * r..(compact + 1) * r, row * r);
        }
    }
    for &(row, src) in &m.copies {
        let (row, src) = (row as usize, src as usize);
        out.copy_within(src * r..(src + 1) * r, row * r);
    }
}

/// Rows of `row_bytes` that repeat an earlier row: (row, first row with the same bytes).
fn find_copies(input: &[u8], row_bytes: usize) -> Vec<(u32, u32)> {
    let mut first: std::collections::HashMap<&[u8], u32> = std::collections::HashMap::new();
    let mut copies = Vec::new();
    for (i, row) in input.chunks_exact(row_bytes).enumerate() {
        match first.entry(row) {
            std::collections::hash_map::Entry::Occupied(e) => copies.push((i as u32, *e.get())),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(i as u32);
            }
        }
    }
    copies
}

impl Codec for Rans {
    fn name(&self) -> String {
        if *self == Rans::default() {
            "rans".into()
        } else {
            format!(
                "rans-c{}{}{}{}{}",
                self.chunk_log2,
                if self.zero_mask { "" } else { "-nozero" },
                if self.rotate { "" } else { "-norotate" },
                if self.rows { "" } else { "-norows" },
                if self.modelled { "" } else { "-nomodel" }
            )
        }
    }

    fn max_compressed_len(&self, raw_len: usize, elem: ElemType) -> usize {
        let chunk = (1usize << self.chunk_log2.clamp(12, 20)).max(elem.size());
        // A row map (rows of at least 16 bytes) adds 8 bytes and a bit per row; each copied
        // row it lists saves at least 12 bytes more than it costs.
        HEADER_BYTES + raw_len + 5 * raw_len.div_ceil(chunk) + 5 + 8 + raw_len.div_ceil(16 * 8)
    }

    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()> {
        self.encode_rows(input, elem, 0, None, out)
    }

    /// With a shape, rows (the last dimension) that repeat earlier rows are coded as
    /// references (see [`RowMap`]).
    fn encode_shaped(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let row_bytes = shape.last().copied().unwrap_or(0) * elem.size();
        if self.rows
            && shape.len() >= 2
            && row_bytes >= 16
            && input.len().is_multiple_of(row_bytes)
            && input.len() > row_bytes
        {
            let copies = find_copies(input, row_bytes);
            if !copies.is_empty() {
                let map = RowMap { row_bytes, copies };
                return self.encode_rows(input, elem, row_bytes / elem.size(), Some(map), out);
            }
        }
        let row = if shape.len() >= 2 {
            shape.last().copied().unwrap_or(0)
        } else {
            0
        };
        self.encode_rows(input, elem, row, None, out)
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        Ok(parse_header(compressed)?.raw_len)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_impl(compressed, out, false)
    }

    fn decode_parallel(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_impl(compressed, out, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `out` for a mask and its nonzero elements, one element at a time.
    fn reference(nz: &[u8], mask: &[u8], width: usize, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n * width];
        let mut k = 0;
        for i in 0..n {
            if mask[i / 8] >> (i % 8) & 1 == 1 {
                out[i * width..][..width].copy_from_slice(&nz[k * width..][..width]);
                k += 1;
            }
        }
        out
    }

    /// Every zero expansion this CPU has (the SIMD kernels alone and the dispatching
    /// function) against the reference, for densities from empty to full and every length
    /// around the kernels' group sizes.
    #[test]
    fn zero_expansion_kernels_match_the_reference() {
        let mut seed = 3u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for width in [2usize, 4] {
            for n in (0..80usize).chain([511, 512, 513, 4095]) {
                for density in [0u32, 10, 50, 90, 100] {
                    let mut mask = vec![0u8; n.div_ceil(8)];
                    let mut nz = Vec::new();
                    for i in 0..n {
                        if next() % 100 < density {
                            mask[i / 8] |= 1 << (i % 8);
                            nz.extend((0..width).map(|_| next() as u8 | 1));
                        }
                    }
                    let want = reference(&nz, &mask, width, n);
                    let mut out = vec![0xAAu8; n * width];
                    expand(&nz, &mask, width, &mut out);
                    assert_eq!(out, want, "width {width} n {n} density {density}");
                    #[cfg(target_arch = "x86_64")]
                    {
                        type Kernel = unsafe fn(&[u8], &[u8], usize, &mut [u8]) -> (usize, usize);
                        let mut kernels: Vec<(&str, Kernel)> = Vec::new();
                        if planepack_core::cpu::x86_64_v3() {
                            kernels.push(("v3", v3::expand));
                        }
                        if planepack_core::cpu::avx512() {
                            kernels.push(("avx512", avx512::expand));
                        }
                        for (name, kernel) in kernels {
                            let mut out = vec![0xAAu8; n * width];
                            // SAFETY: the CPU has the kernel's features (checked above); the
                            // mask's population equals nz's element count.
                            let (done, k) = unsafe { kernel(&nz, &mask, width, &mut out) };
                            let ones = (0..done).filter(|i| mask[i / 8] >> (i % 8) & 1 == 1);
                            assert_eq!(k, ones.count(), "{name}");
                            assert_eq!(out[..done * width], want[..done * width], "{name}");
                        }
                    }
                }
            }
        }
    }
}
