//! Block-scaled chunks (mode 4, stream version 3): FP32 elements that are, block by block, one
//! scale times small integers, exactly.
//!
//! Why: block-quantized models are dequantized to FP32 to be used. GGUF's Q8_0 stores blocks of
//! 32 values as an FP16 scale `d` and 32 int8 `q`; dequantized, `x = d * q` is exact in FP32
//! (an 11-bit significand times a 7-bit integer fits in 24 bits). Byte planes see 23 mantissa
//! bits of noise per element (SmolLM2's token table: rANS 1.69x); the same bytes are a scale per
//! block and a byte per element (about 4x). OpenZL's generic graphs found part of it (2.22x).
//!
//! The format defines the element as the *exact* product, computed in integers
//! ([`product`]): no float rounding mode, no flush of subnormals, nothing a GPU could do
//! differently; a product that is not exact, or not a normal number, makes the stream corrupt.
//! Decoding is a gather and a multiply per element, as parallel as a copy. The scales are
//! coded as a dense chunk's byte planes, the integers as one byte plane.

use super::*;

/// Chunk mode of a block-scaled chunk.
pub const CHUNK_SCALED: u8 = 4;
/// The stream version that allows it.
pub const VERSION_SCALED: u8 = 3;
/// log2 of the block length in elements the format allows: 4 to 2^20 elements (at least 4,
/// so a chunk's scale planes fit in a quarter of a plane's space in a GPU decoder's scratch).
pub const BLOCK_LOG2_RANGE: std::ops::RangeInclusive<u8> = 2..=20;
/// The block this encoder tries: 32 elements (GGUF's Q8_0 and Q4_0 blocks).
pub const ENCODER_BLOCK_LOG2: u8 = 5;
/// The largest integer magnitude this encoder expects in a block: symmetric int8 quantization
/// (`d = amax / 127`, as Q8_0), so a block's scale is its largest magnitude over 127.
pub const ENCODER_QMAX: f64 = 127.0;

/// The FP32 element `scale * q`, computed exactly in integers: `q = 0` gives +0.0; otherwise
/// `scale` must be a normal number and the product exact (its significand fits 24 bits) and
/// normal, else `None` (the stream is corrupt). Sign: the scale's sign xor `q < 0`.
#[inline]
pub fn product(scale: u32, q: i8) -> Option<u32> {
    if q == 0 {
        return Some(0);
    }
    let e = (scale >> 23) & 0xff;
    if e == 0 || e == 255 {
        return None;
    }
    let p = ((scale & 0x7f_ffff) | 0x80_0000) * u32::from(q.unsigned_abs());
    // p is in [2^23, 2^31): it has 24 to 31 significant bits, `sh` of them past 24.
    let sh = 8 - p.leading_zeros();
    if p & ((1 << sh) - 1) != 0 || e + sh > 254 {
        return None;
    }
    let sign = (scale >> 31) ^ u32::from(q < 0);
    Some(sign << 31 | (e + sh) << 23 | ((p >> sh) & 0x7f_ffff))
}

/// Per-thread encoder scratch: the blocks' scales (little-endian FP32 bytes) and the integers.
#[derive(Default)]
pub(crate) struct Scratch {
    scales: Vec<u8>,
    quotients: Vec<u8>,
    /// A block expanded back from its factors, to compare with the original.
    check: Vec<u8>,
    scale_planes: Vec<Vec<u8>>,
}

/// Factor `elems` (FP32, little-endian) into blocks of `block` elements: a scale per block
/// (its largest magnitude over [`ENCODER_QMAX`]; an all-zero block repeats the previous scale)
/// and an integer per element whose [`product`] is the element. False as soon as a block
/// does not factor (most tensors fail on their first block, so the trial costs nothing there).
fn factor(elems: &[u8], block: usize, s: &mut Scratch) -> bool {
    #[cfg(target_arch = "x86_64")]
    if planepack_core::cpu::x86_64_v3() {
        // SAFETY: the CPU has the x86-64-v3 features (checked just above).
        return unsafe { factor_v3(elems, block, s) };
    }
    factor_impl(elems, block, s)
}

/// [`factor`] compiled for x86-64-v3 (its loops in 8 lanes instead of SSE2's 4).
///
/// # Safety
/// The CPU must have AVX2 and LZCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,lzcnt")]
unsafe fn factor_v3(elems: &[u8], block: usize, s: &mut Scratch) -> bool {
    factor_impl(elems, block, s)
}

#[inline(always)]
fn factor_impl(elems: &[u8], block: usize, s: &mut Scratch) -> bool {
    s.scales.clear();
    s.quotients.clear();
    let mut prev = 1.0f32.to_bits();
    for blk in elems.chunks(4 * block) {
        let word = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap());
        let amax = blk
            .chunks_exact(4)
            .map(|b| word(b) & 0x7fff_ffff)
            .max()
            .unwrap_or(0);
        let scale = if amax == 0 {
            prev
        } else {
            if amax >= 0x7f80_0000 {
                return false;
            }
            let s = f64::from(f32::from_bits(amax)) / ENCODER_QMAX;
            let sf = s as f32;
            if f64::from(sf) != s || !sf.is_normal() {
                return false;
            }
            sf.to_bits()
        };
        // The integer is the element over the scale, rounded: a guess in f32 (exact when the
        // element factors: |q| <= 128 is far inside f32's precision), which the decoder's own
        // expansion then confirms bit for bit. (Rounding by truncating x + 0.5 away from
        // zero, not `round`, a libm call on the baseline x86-64 target; no branch per
        // element, so the loops vectorise.)
        let inv = (1.0 / f64::from(f32::from_bits(scale))) as f32;
        let start = s.quotients.len();
        s.quotients.resize(start + blk.len() / 4, 0);
        let mut out_of_range = false;
        for (q, b) in s.quotients[start..].iter_mut().zip(blk.chunks_exact(4)) {
            let r = f32::from_bits(word(b)) * inv;
            let qi = (r + 0.5f32.copysign(r)) as i32;
            out_of_range |= !(-128..=127).contains(&qi);
            *q = qi as u8;
        }
        s.check.resize(blk.len(), 0);
        if out_of_range
            || !expand_block(scale, &s.quotients[start..], &mut s.check)
            || s.check != blk
        {
            return false;
        }
        s.scales.extend_from_slice(&scale.to_le_bytes());
        prev = scale;
    }
    true
}

/// A planned scaled chunk: its estimated size and each plane's plan (4 scale planes, then
/// the integers').
pub(crate) struct Plan {
    pub estimate: f64,
    plans: Vec<PlanePlan>,
    form: TableForm,
}

/// Plan `elems` (FP32) as a scaled chunk, if every block factors; the planes stay in `s` for
/// [`encode`].
pub(crate) fn plan(elems: &[u8], rotate: bool, form: TableForm, s: &mut Scratch) -> Option<Plan> {
    if !factor(elems, 1 << ENCODER_BLOCK_LOG2, s) {
        return None;
    }
    s.scale_planes.resize_with(4, Vec::new);
    split(&s.scales, 4, rotate, &mut s.scale_planes);
    let mut estimate = 2.0;
    let mut plans = Vec::with_capacity(5);
    for p in s.scale_planes.iter().chain([&s.quotients]) {
        let (plan, size) = plan_plane(p, form);
        estimate += size;
        plans.push(plan);
    }
    Some(Plan {
        estimate,
        plans,
        form,
    })
}

/// Append the chunk [`plan`] planned: mode, block size, scale planes, integer plane.
pub(crate) fn encode(
    plan: &Plan,
    s: &Scratch,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.push(CHUNK_SCALED);
    out.push(ENCODER_BLOCK_LOG2);
    let planes: Vec<&[u8]> = s
        .scale_planes
        .iter()
        .map(|p| &p[..])
        .chain([&s.quotients[..]])
        .collect();
    put_planes(&planes, &plan.plans, plan.form, None, enc, out).map(|_| ())
}

/// Decode a scaled chunk into `out` (whole FP32 elements); returns the chunk's length.
pub(crate) fn decode(
    chunk: &[u8],
    h: &Header,
    s: &mut DecScratch,
    out: &mut [u8],
) -> Result<usize> {
    if h.width != 4 {
        return Err(Error::corrupt_at(
            format!("a scaled chunk in a stream of {}-byte elements", h.width),
            0,
        ));
    }
    let b = take(chunk, 1, 1, "block size")?[0];
    if !BLOCK_LOG2_RANGE.contains(&b) {
        return Err(Error::corrupt_at(format!("block of 2^{b} elements"), 1));
    }
    let n = out.len() / 4;
    let blocks = n.div_ceil(1 << b);
    // The scales (in the scratch the sparse chunk keeps its nonzero elements in), then the
    // integers (in the mask's).
    s.nonzero.resize(4 * blocks, 0);
    let at = get_joined(
        chunk,
        2,
        blocks,
        4,
        h.rotate,
        h.tables,
        &mut s.planes,
        &mut s.lanes,
        None,
        None,
        &mut s.nonzero,
    )?;
    let at = get_plane(chunk, at, n, h.tables, &mut s.lanes, &mut s.mask, None)?;
    if !expand_all(&s.nonzero, &s.mask, 1 << b, out) {
        return Err(Error::corrupt(
            "a scaled element that is not an exact normal product",
        ));
    }
    Ok(at)
}

/// Expand every block (`scales` little-endian FP32, `qs` an integer per element, blocks of
/// `block`) into `out`; false if any element is not an exact normal product.
fn expand_all(scales: &[u8], qs: &[u8], block: usize, out: &mut [u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if planepack_core::cpu::x86_64_v3() {
        // SAFETY: the CPU has the x86-64-v3 features (checked just above).
        return unsafe { expand_all_v3(scales, qs, block, out) };
    }
    expand_all_impl(scales, qs, block, out)
}

/// [`expand_all`] compiled for x86-64-v3.
///
/// # Safety
/// The CPU must have AVX2 and LZCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,lzcnt")]
unsafe fn expand_all_v3(scales: &[u8], qs: &[u8], block: usize, out: &mut [u8]) -> bool {
    expand_all_impl(scales, qs, block, out)
}

#[inline(always)]
fn expand_all_impl(scales: &[u8], qs: &[u8], block: usize, out: &mut [u8]) -> bool {
    let mut ok = true;
    for ((o, q), sb) in out
        .chunks_mut(4 * block)
        .zip(qs.chunks(block))
        .zip(scales.chunks_exact(4))
    {
        ok &= expand_block(u32::from_le_bytes(sb.try_into().unwrap()), q, o);
    }
    ok
}

/// Write the [`product`]s of one block's `scale` and integers `qs` into `out` (4 bytes each);
/// false if any is not an exact normal product (the values written are then meaningless).
/// The same rule as `product`, with the scale's fields taken apart once per block and no
/// branch per element, so that a block costs a few operations an element.
#[inline(always)]
fn expand_block(scale: u32, qs: &[u8], out: &mut [u8]) -> bool {
    let e = (scale >> 23) & 0xff;
    let m = (scale & 0x7f_ffff) | 0x80_0000;
    let abnormal = u32::from(e.wrapping_sub(1) >= 254);
    let mut bad = 0u32;
    for (o, &q) in out.chunks_exact_mut(4).zip(qs) {
        let q = q as i8;
        let p = m * u32::from(q.unsigned_abs());
        // (For q = 0, p = 0: `sh` comes out 0 and the element is masked to +0.0 below.)
        let sh = 8u32.saturating_sub(p.leading_zeros());
        let inexact = p & ((1 << sh) - 1);
        let v = (scale ^ (u32::from(q < 0) << 31)) & 0x8000_0000
            | (e + sh) << 23
            | ((p >> sh) & 0x7f_ffff);
        let live = u32::from(q != 0);
        bad |= live & (u32::from(inexact != 0) | u32::from(e + sh > 254) | abnormal);
        o.copy_from_slice(&(v * live).to_le_bytes());
    }
    bad == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer product against f64 arithmetic, for every integer and scales around the
    /// edges (smallest and largest normals, every significand pattern's low bits).
    #[test]
    fn product_is_the_exact_product_or_none() {
        let scales = [
            0x0080_0000u32, // smallest normal
            0x0080_0001,
            0x3f80_0000, // 1.0
            0x3f80_0001,
            0x3c00_4000,
            0xbc01_0000, // negative
            0x7f7f_ffff, // largest
            0x7f00_0000,
            0x3fff_ffff,
            0x0000_0001, // subnormal: never a scale
            0x7f80_0000, // infinity
            0x7fc0_0000, // NaN
        ];
        for scale in scales {
            for q in i8::MIN..=i8::MAX {
                let got = product(scale, q);
                let s = f32::from_bits(scale);
                let exact = f64::from(s) * f64::from(q);
                let want = if q == 0 {
                    Some(0)
                } else if !s.is_normal() {
                    None
                } else {
                    let f = exact as f32;
                    (f64::from(f) == exact && f.is_normal()).then(|| f.to_bits())
                };
                assert_eq!(got, want, "scale {scale:#x} q {q}");
            }
        }
    }

    /// The block expansion the decoder uses gives `product`'s elements and refuses exactly
    /// where `product` does.
    #[test]
    fn expand_block_agrees_with_product() {
        let scales = [
            0x0080_0000u32,
            0x3f80_0001,
            0xbc01_0000,
            0x7f7f_ffff,
            0x7f00_0000,
            0x3c00_4000,
            0x0000_0001,
            0x7fc0_0000,
        ];
        for scale in scales {
            for q in 0..=255u8 {
                let mut out = [0u8; 4];
                let ok = expand_block(scale, &[q], &mut out);
                let want = product(scale, q as i8);
                assert_eq!(ok, want.is_some(), "scale {scale:#x} q {q}");
                if let Some(v) = want {
                    assert_eq!(u32::from_le_bytes(out), v, "scale {scale:#x} q {q}");
                }
            }
        }
    }

    /// A Q8_0-style block factors with the block's largest magnitude over 127; -0.0, a NaN
    /// and an inexact element do not.
    #[test]
    fn factor_takes_exact_blocks_only() {
        let d = f32::from_bits(0x3a83_0000) as f64; // an FP16-representable scale
        let block: Vec<f32> = (0..32)
            .map(|i| (d * f64::from(i * 8 - 127)) as f32)
            .collect();
        let bytes: Vec<u8> = block.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut s = Scratch::default();
        assert!(factor(&bytes, 32, &mut s));
        assert_eq!(s.quotients[0] as i8, -127);
        for bad in [-0.0f32, f32::NAN, f32::from_bits(block[3].to_bits() + 1)] {
            let mut b = bytes.clone();
            b[12..16].copy_from_slice(&bad.to_le_bytes());
            assert!(!factor(&b, 32, &mut s), "{bad}");
        }
    }
}
