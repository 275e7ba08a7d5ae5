//! Chunk mode 5, the difference chunk (stream version 5): the steps between neighbouring
//! elements, coded as byte planes.
//!
//! Why: smooth values (an image fed to a first convolution, a log-sum-exp along the sequence,
//! log-probabilities of one row) change little from one element to the next, which order-0
//! statistics of the elements' own bytes cannot see: their low mantissa bytes look like
//! noise, the steps between them do not. `cargo xtask activation-study` estimated what such
//! chunks would save before this mode existed (its "differences" column).
//!
//! The transform: each element's bits are mapped to an integer in the floats' order (a
//! negative float's bits inverted, a positive one's sign bit set, so that nearby floats of
//! either sign are nearby integers), each minus its left neighbour's (the chunk's first minus
//! 0) modulo `2^(8W)`, then zigzag-folded (a step's sign to bit 0) so that small steps either
//! way have few high bits. The steps are written as the `W` byte planes of a dense chunk
//! (most significant first). Only integer arithmetic: every bit pattern, NaN payloads and
//! -0.0 included, comes back exactly.
//!
//! What keeps decoding parallel: after the planes (lanes in parallel, as any chunk), the
//! elements are a prefix sum of the steps, which a GPU runs as a scan over the chunk
//! (`shaders/rans.wgsl`), a CPU in one pass.

use crate::encode::{plan_plane, put_planes, PlanePlan};
use crate::model::TableForm;
use crate::planes::split;
use planepack_core::Result;

/// The chunk mode byte.
pub const CHUNK_DIFFERENCE: u8 = 5;
/// The stream version that allows difference chunks (every earlier mode allowed too).
pub const VERSION_DIFFERENCE: u8 = 5;

/// The least a chunk's estimated size must drop (bytes) for the encoder to code it as steps
/// rather than as it would otherwise (informative): the estimates are within a few bytes a
/// lane of the coded sizes, and a difference chunk decodes at the planes' speed plus one pass.
pub const MIN_SAVING_BYTES: f64 = 16.0;

/// An element's bits `v` (`bits` wide) as an integer in the floats' order.
#[inline(always)]
pub fn order(v: u32, bits: u32) -> u32 {
    let mask = u32::MAX >> (32 - bits);
    let sign = 1u32 << (bits - 1);
    if v & sign != 0 {
        v ^ mask
    } else {
        v | sign
    }
}

/// The inverse of [`order`].
#[inline(always)]
pub fn unorder(o: u32, bits: u32) -> u32 {
    let mask = u32::MAX >> (32 - bits);
    let sign = 1u32 << (bits - 1);
    if o & sign != 0 {
        o ^ sign
    } else {
        o ^ mask
    }
}

/// A step `d` (modulo `2^bits`) zigzag-folded: `2d` for a step in the lower half, its bits
/// inverted for one in the upper half (a negative step).
#[inline(always)]
pub fn zigzag(d: u32, bits: u32) -> u32 {
    let mask = u32::MAX >> (32 - bits);
    let neg = d >> (bits - 1) & 1;
    ((d << 1) & mask) ^ (neg.wrapping_neg() & mask)
}

/// The inverse of [`zigzag`].
#[inline(always)]
pub fn unzigzag(z: u32, bits: u32) -> u32 {
    let mask = u32::MAX >> (32 - bits);
    (z >> 1) ^ ((z & 1).wrapping_neg() & mask)
}

/// The chunk's elements (`width` 2 or 4 bytes, little-endian) as folded steps, in `out`
/// (little-endian elements of the same width).
pub(crate) fn forward(elems: &[u8], width: usize, out: &mut Vec<u8>) {
    let n = elems.len() / width * width;
    out.clear();
    out.resize(n, 0);
    forward_elems(&elems[..n], width, out);
}

planepack_core::with_avx2! {
    /// [`forward`] into `out`, as long as `elems`.
    fn forward_elems(elems: &[u8], width: usize, out: &mut [u8]) = forward_any;
}

/// [`forward`] into `out` (as long as `elems`, whole elements): each step from the element
/// and the one before it (the first from 0), so that the loop vectorises.
#[inline(always)]
fn forward_any(elems: &[u8], width: usize, out: &mut [u8]) {
    match width {
        2 => {
            let (e, o) = (elems.as_chunks::<2>().0, out.as_chunks_mut::<2>().0);
            let ord = |x: [u8; 2]| order(u16::from_le_bytes(x) as u32, 16);
            let step =
                |a: u32, b: u32| (zigzag(b.wrapping_sub(a) & 0xffff, 16) as u16).to_le_bytes();
            if let (Some(&f), Some(d)) = (e.first(), o.first_mut()) {
                *d = step(0, ord(f));
            }
            for (d, w) in o.iter_mut().skip(1).zip(e.windows(2)) {
                *d = step(ord(w[0]), ord(w[1]));
            }
        }
        _ => {
            let (e, o) = (elems.as_chunks::<4>().0, out.as_chunks_mut::<4>().0);
            let ord = |x: [u8; 4]| order(u32::from_le_bytes(x), 32);
            let step = |a: u32, b: u32| zigzag(b.wrapping_sub(a), 32).to_le_bytes();
            if let (Some(&f), Some(d)) = (e.first(), o.first_mut()) {
                *d = step(0, ord(f));
            }
            for (d, w) in o.iter_mut().skip(1).zip(e.windows(2)) {
                *d = step(ord(w[0]), ord(w[1]));
            }
        }
    }
}

planepack_core::with_avx2! {
    /// The inverse of [`forward`], in place: folded steps to elements.
    ///
    /// In blocks of [`INVERSE_BLOCK`] elements and three passes each: unfold (vectorised), the
    /// running sum (the only serial part: one add a element, where a single fused loop waited
    /// on the unfold and the mask in every step, about a quarter of a difference-heavy chunk's
    /// decode), then back from the floats' order (vectorised).
    /// One copy of the loops per width, on u16 and u32 arrays: a version generic over the width
    /// (u32 sums cut to the element's bits) decoded the CNN batch 10-25 % slower (its byte copies
    /// no longer vectorise).
    pub(crate) fn inverse(data: &mut [u8], width: usize) = inverse_any;
}

/// [`inverse`]'s loops, inlined into whichever function calls them.
#[inline(always)]
fn inverse_any(data: &mut [u8], width: usize) {
    match width {
        2 => {
            let mut acc = 0u16;
            let mut t = [0u16; INVERSE_BLOCK];
            for block in data.as_chunks_mut::<2>().0.chunks_mut(INVERSE_BLOCK) {
                let t = &mut t[..block.len()];
                for (d, e) in t.iter_mut().zip(block.iter()) {
                    *d = unzigzag(u16::from_le_bytes(*e) as u32, 16) as u16;
                }
                for d in t.iter_mut() {
                    acc = acc.wrapping_add(*d);
                    *d = acc;
                }
                for (e, d) in block.iter_mut().zip(t.iter()) {
                    *e = (unorder(*d as u32, 16) as u16).to_le_bytes();
                }
            }
        }
        _ => {
            let mut acc = 0u32;
            let mut t = [0u32; INVERSE_BLOCK];
            for block in data.as_chunks_mut::<4>().0.chunks_mut(INVERSE_BLOCK) {
                let t = &mut t[..block.len()];
                for (d, e) in t.iter_mut().zip(block.iter()) {
                    *d = unzigzag(u32::from_le_bytes(*e), 32);
                }
                for d in t.iter_mut() {
                    acc = acc.wrapping_add(*d);
                    *d = acc;
                }
                for (e, d) in block.iter_mut().zip(t.iter()) {
                    *e = unorder(*d, 32).to_le_bytes();
                }
            }
        }
    }
}

/// Elements [`inverse`] takes a pass at a time (its scratch stays in L1).
const INVERSE_BLOCK: usize = 1024;

/// Encoder scratch: a chunk's steps and their planes.
#[derive(Default)]
pub(crate) struct Scratch {
    steps: Vec<u8>,
    planes: Vec<Vec<u8>>,
}

/// Plan a chunk as steps: their planes (kept in `s`), each plane's plan and the chunk's
/// estimated size (mode byte included), by the planes' own estimates.
pub(crate) fn plan(
    elems: &[u8],
    width: usize,
    form: TableForm,
    s: &mut Scratch,
) -> (f64, Vec<PlanePlan>) {
    forward(elems, width, &mut s.steps);
    s.planes.resize_with(width, Vec::new);
    split(&s.steps, width, false, &mut s.planes);
    let mut estimate = 1.0;
    let plans = s
        .planes
        .iter()
        .map(|p| {
            let (plan, size) = plan_plane(p, form);
            estimate += size;
            plan
        })
        .collect();
    (estimate, plans)
}

/// Append the chunk [`plan`] planned (mode byte and planes).
pub(crate) fn encode(
    s: &Scratch,
    plans: &[PlanePlan],
    form: TableForm,
    lanes: &mut crate::lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.push(CHUNK_DIFFERENCE);
    let planes: Vec<&[u8]> = s.planes.iter().map(|p| &p[..]).collect();
    put_planes(&planes, plans, form, None, lanes, out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_zigzag_invert_on_every_16_bit_value() {
        for v in 0..=u16::MAX as u32 {
            assert_eq!(unorder(order(v, 16), 16), v);
            assert_eq!(unzigzag(zigzag(v, 16), 16), v);
            assert!(order(v, 16) <= 0xffff && zigzag(v, 16) <= 0xffff);
        }
        for v in [
            0,
            1,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0x7fc0_0001,
            0x3f80_0000,
        ] {
            assert_eq!(unorder(order(v, 32), 32), v);
            assert_eq!(unzigzag(zigzag(v, 32), 32), v);
        }
    }

    #[test]
    fn order_is_the_floats_order() {
        let xs = [
            -3.5f32,
            -1.0,
            -f32::MIN_POSITIVE,
            -0.0,
            0.0,
            1e-40,
            1.0,
            2.5,
            f32::MAX,
        ];
        for w in xs.windows(2) {
            assert!(
                order(w[0].to_bits(), 32) < order(w[1].to_bits(), 32),
                "{w:?}"
            );
        }
        // Small steps are small either way across zero: -0.0 to +0.0 is one step.
        let d = order(0.0f32.to_bits(), 32).wrapping_sub(order((-0.0f32).to_bits(), 32));
        assert_eq!(zigzag(d, 32), 2);
    }

    #[test]
    fn forward_and_inverse_round_trip() {
        for width in [2usize, 4] {
            let data: Vec<u8> = (0..4099u32)
                .flat_map(|i| (i.wrapping_mul(2_654_435_761) ^ (i << 7)).to_le_bytes())
                .take(4099 / width * width)
                .collect();
            let mut z = Vec::new();
            forward(&data, width, &mut z);
            assert_eq!(z.len(), data.len());
            inverse(&mut z, width);
            assert_eq!(z, data);
        }
    }
}
