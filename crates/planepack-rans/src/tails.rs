//! Chunk mode 6, the tail-dictionary chunk (header flag `T`): FP32 elements whose low three
//! bytes (after the rotation: 23 mantissa bits and the sign) take at most 256 values in the
//! chunk, coded as the exponent byte's plane and a plane of one-byte indices into the
//! chunk's dictionary of those tails.
//!
//! Why: an FP32 tensor computed from lower-precision values by one exact scale (attention
//! scores of a BF16 matmul times `1/sqrt(d)` saved in FP32 under autocast, a first convolution
//! of 8-bit pixels) has a few hundred distinct mantissas at most: a BF16 value has 128, and
//! a constant factor maps each to one FP32 mantissa. Its three mantissa planes look like noise
//! to order-0 statistics (about 20 bits an element on the corpus's MiniLM attention scores),
//! while the tail as one symbol has the entropy of the BF16 mantissa (about 8 bits). OpenZL's
//! generic graph stored these tensors 22 % smaller than the byte planes did; this chunk
//! stores them about half the planes' size.
//!
//! What keeps decoding parallel: the two planes are ordinary planes (lanes in parallel), and
//! each element is then one table lookup, independent of every other element (a GPU takes
//! them an invocation each, `shaders/rans.wgsl`).

use crate::encode::{plan_plane, put_planes, PlanePlan};
use crate::lanes;
use crate::model::TableForm;
use crate::modelled::{load, rotated, unrotated};
use planepack_core::error::take;
use planepack_core::{Error, Result};

/// The chunk mode byte.
pub const CHUNK_TAILS: u8 = 6;
/// The most entries a chunk's dictionary holds (an index is one byte).
pub const MAX_TAILS: usize = 256;
/// Bytes of a dictionary entry: the low three bytes of a rotated FP32 element.
pub const TAIL_BYTES: usize = 3;

/// The least a chunk's estimated size must drop (bytes) for the encoder to code it with a
/// tail dictionary rather than as it would otherwise (informative): the estimates are within a
/// few bytes a lane of the coded sizes.
pub const MIN_SAVING_BYTES: f64 = 16.0;

/// Slots of the encoder's open-addressing set of tails: four times the most it may hold, so
/// that probes stay short (a power of two: a tail's slot is its hash's top bits).
const SET_SLOTS: usize = 4 * MAX_TAILS;
const SET_BITS: u32 = SET_SLOTS.trailing_zeros();
const EMPTY: u32 = u32::MAX;

/// Encoder scratch: the set of tails seen, the dictionary, the two planes.
#[derive(Default)]
pub(crate) struct Scratch {
    keys: Vec<u32>,
    index: Vec<u8>,
    dict: Vec<u32>,
    planes: [Vec<u8>; 2],
}

/// Plan a chunk of FP32 elements with a tail dictionary: `None` where its elements have more
/// than [`MAX_TAILS`] distinct tails (most chunks find out within a few hundred elements), else
/// its estimated size (mode byte included) and the two planes' plans; the dictionary (tails
/// increasing) and planes stay in `s` for [`encode`].
pub(crate) fn plan(
    elems: &[u8],
    rotate: bool,
    form: TableForm,
    s: &mut Scratch,
) -> Option<(f64, [PlanePlan; 2])> {
    s.keys.clear();
    s.keys.resize(SET_SLOTS, EMPTY);
    s.index.clear();
    s.index.resize(SET_SLOTS, 0);
    s.dict.clear();
    let n = elems.len() / 4;
    let [top, idx] = &mut s.planes;
    top.clear();
    idx.clear();
    top.reserve(n);
    idx.reserve(n);
    for i in 0..n {
        let t = rotated(load(elems, i, 4), 4, rotate);
        let tail = t & 0x00ff_ffff;
        let mut h = (tail.wrapping_mul(0x9e37_79b1) >> (32 - SET_BITS)) as usize;
        loop {
            let k = s.keys[h];
            if k == tail {
                break;
            }
            if k == EMPTY {
                if s.dict.len() == MAX_TAILS {
                    return None;
                }
                s.keys[h] = tail;
                s.index[h] = s.dict.len() as u8;
                s.dict.push(tail);
                break;
            }
            h = (h + 1) % SET_SLOTS;
        }
        top.push((t >> 24) as u8);
        idx.push(s.index[h]);
    }
    // The dictionary in increasing order (one stream for one chunk, whatever order the tails
    // came in), the indices renamed to match.
    let mut order: Vec<u8> = (0..s.dict.len()).map(|i| i as u8).collect();
    order.sort_unstable_by_key(|&i| s.dict[i as usize]);
    let mut rename = [0u8; MAX_TAILS];
    for (rank, &i) in order.iter().enumerate() {
        rename[i as usize] = rank as u8;
    }
    s.dict.sort_unstable();
    for i in idx.iter_mut() {
        *i = rename[*i as usize];
    }
    let (p0, e0) = plan_plane(top, form);
    let (p1, e1) = plan_plane(idx, form);
    let estimate = 2.0 + (TAIL_BYTES * s.dict.len()) as f64 + e0 + e1;
    Some((estimate, [p0, p1]))
}

/// Append the chunk [`plan`] planned: mode byte, dictionary, planes.
pub(crate) fn encode(
    s: &Scratch,
    plans: &[PlanePlan; 2],
    form: TableForm,
    lanes: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.push(CHUNK_TAILS);
    out.push((s.dict.len() - 1) as u8);
    for &t in &s.dict {
        out.extend_from_slice(&t.to_le_bytes()[..TAIL_BYTES]);
    }
    let planes = [&s.planes[0][..], &s.planes[1][..]];
    put_planes(&planes, plans, form, None, lanes, out)?;
    Ok(())
}

/// Decode a tail-dictionary chunk (its mode byte at 0) into `out` (`n` FP32 elements);
/// returns the offset after its planes. An index past the dictionary is an error.
pub(crate) fn decode(
    chunk: &[u8],
    rotate: bool,
    form: TableForm,
    s: &mut crate::decode::DecScratch,
    out: &mut [u8],
) -> Result<usize> {
    let n = out.len() / 4;
    let d = take(chunk, 1, 1, "tail count")?[0] as usize + 1;
    let entries = take(chunk, 2, TAIL_BYTES * d, "tail dictionary")?;
    let mut dict = [0u32; MAX_TAILS];
    for (slot, e) in dict.iter_mut().zip(entries.chunks_exact(TAIL_BYTES)) {
        *slot = u32::from_le_bytes([e[0], e[1], e[2], 0]);
    }
    s.planes.resize_with(2, Vec::new);
    let (top, idx) = s.planes.split_at_mut(1);
    let (top, idx) = (&mut top[0], &mut idx[0]);
    let at = 2 + TAIL_BYTES * d;
    let at = crate::decode::get_plane(chunk, at, n, form, &mut s.lanes, top, None)?;
    let idx_at = at;
    let at = crate::decode::get_plane(chunk, at, n, form, &mut s.lanes, idx, None)?;
    if idx.iter().any(|&i| i as usize >= d) {
        return Err(Error::corrupt_at(
            format!("a tail index past the {d} entries of the dictionary"),
            idx_at,
        ));
    }
    for ((o, &e), &i) in out.chunks_exact_mut(4).zip(top.iter()).zip(idx.iter()) {
        let t = (e as u32) << 24 | dict[i as usize];
        o.copy_from_slice(&unrotated(t, 4, rotate).to_le_bytes());
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk of FP32 values that are BF16 values times a constant: 128 mantissas at most,
    /// both signs, several exponents (up to the dictionary's full 256 entries, where
    /// `testkit::scaled_bf16_f32` keeps to 128); the plan finds at most 256 tails, the dictionary is
    /// increasing, and the planes rebuild every element.
    #[test]
    fn scaled_bf16_values_have_a_small_dictionary() {
        let mut rng = planepack_testkit::Rng(7);
        let elems: Vec<u8> = (0..5000)
            .flat_map(|_| {
                let b = (rng.next_u64() as u16 & 0x807f) | 0x3c00 | ((rng.below(8) as u16) << 7);
                let f = f32::from_bits((b as u32) << 16) * 0.125_f32.sqrt();
                f.to_bits().to_le_bytes()
            })
            .collect();
        for rotate in [true, false] {
            let mut s = Scratch::default();
            let (estimate, _) = plan(&elems, rotate, TableForm::Compact, &mut s).unwrap();
            assert!(s.dict.len() <= MAX_TAILS && s.dict.len() > 100);
            assert!(s.dict.windows(2).all(|w| w[0] < w[1]));
            assert!(estimate < elems.len() as f64 * 0.5, "{estimate}");
            for i in 0..elems.len() / 4 {
                let t = (s.planes[0][i] as u32) << 24 | s.dict[s.planes[1][i] as usize];
                assert_eq!(t, rotated(load(&elems, i, 4), 4, rotate));
            }
        }
        // Noise has more than 256 tails.
        let noise: Vec<u8> = (0..4000).map(|_| rng.next_u64() as u8).collect();
        assert!(plan(&noise, true, TableForm::Compact, &mut Scratch::default()).is_none());
    }
}
