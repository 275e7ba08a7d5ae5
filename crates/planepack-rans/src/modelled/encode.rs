//! The modelled chunk's encoder: each element classified (zero, left, up, dictionary,
//! literal) with its context, the tables and the size estimated from the counts, then the
//! lanes coded backwards.

use super::*;
use crate::model::histogram;
use crate::planes::{fit, split, take_kept};

/// How the encoder classified a chunk: parameters, each element's symbol and context, and the
/// literals' lower bytes.
#[derive(Default)]
pub(crate) struct Classified {
    u: usize,
    dict: u32,
    e0: u8,
    lanes: usize,
    symbols: Vec<u16>,
    contexts: Vec<u8>,
    counts: Vec<[u32; SYMBOLS]>,
    /// Plane `p` (0-based) holds byte `W - 2 - p` of each literal's rotated value.
    literal_planes: Vec<Vec<u8>>,
    /// Literals per lane.
    lane_literals: Vec<u32>,
}

/// Reusable encoder buffers.
#[derive(Default)]
pub(crate) struct Scratch {
    c: Classified,
    /// [`COUNT_COPIES`] sets of the context counts (one for chunks under [`LONG_CHUNK`]
    /// elements),
    /// element `i` counted in set `i % 4`.
    counts: Vec<[u32; SYMBOLS]>,
    /// Per context, each present symbol's `ceil(2^52 / freq)`.
    rcp: Vec<[u64; SYMBOLS]>,
    /// The lanes' words (the scalar coder's regions, the AVX2 coder's compacted lanes).
    words: Vec<u16>,
    /// The AVX2 coder's entries (`freq | cum << 13` per context and symbol), each round's
    /// entry indices, candidate words and emit bits.
    info: Vec<u32>,
    ids: Vec<u16>,
    stage: Vec<u16>,
    emitted: Vec<u32>,
    counter: ValueCounter,
    /// A count for every value of one or two bytes ([`most_frequent_direct`]), zero between
    /// chunks.
    direct: Vec<u32>,
    /// The literals [`classify`] samples for the dictionary.
    sampled: Vec<u32>,
    /// Bit `i % 8` of byte `i / 8`: element `i` is a literal.
    keep: Vec<u8>,
    /// The literal elements, packed together.
    packed: Vec<u8>,
    /// The packed literals' planes (the first the top bytes; the rest become the literal
    /// planes).
    split: Vec<Vec<u8>>,
    distances: Distances,
}

/// Scratch of [`repeat_distance`], reused from chunk to chunk without clearing: the last
/// position of each pair of neighbouring elements (open addressing on the pair's hash; an
/// entry of an earlier chunk's generation is empty) and the count of each distance (the
/// distances a chunk counted are listed, and only they are reset).
#[derive(Default)]
pub(crate) struct Distances {
    slots: Vec<PairSlot>,
    generation: u32,
    counts: Vec<u32>,
    counted: Vec<u32>,
}

#[derive(Default, Clone, Copy)]
struct PairSlot {
    hash: u32,
    at: u32,
    generation: u32,
}

/// The least share of a chunk's elements whose pair repeats at one distance for
/// [`repeat_distance`] to take that distance as the chunk's "up" (1 in 64): below it the
/// class saves less than the symbols' tables cost.
const MIN_REPEATS_SHARE: usize = 64;

/// Elements [`repeat_distance`] looks at before it gives up on a chunk where fewer than
/// [`PROBE_REPEATS`] sampled pairs have recurred (at any distance): noise-like chunks
/// (weights, most transformer activations) stop there, at a fraction of the chunk's cost.
const PROBE_ELEMENTS: usize = 2048;
const PROBE_REPEATS: u32 = 2;

/// log2 of the share of pairs [`repeat_distance`] follows: those whose hash has this many low
/// bits zero. The choice depends on the pair's values alone, so a pair that recurs is followed
/// at both places, and every distance is sampled alike; a quarter of the table's work and
/// size (a table of every pair of a 48 KB chunk missed the caches and halved the encoder's
/// speed on the corpus's small activations).
const SAMPLE_BITS: u32 = 2;

/// Elements [`repeat_distance`] hashes before it looks their followed pairs up.
const FOLLOW_BLOCK: usize = 256;

/// The distance at which the chunk's elements most often repeat an earlier one, for a tensor
/// whose shape gives no rows (a flat buffer, a 1-D tensor): the "up" of its modelled chunk
/// (the format stores `U` per chunk, so any distance decodes). Counted on pairs of
/// neighbouring elements (one element matches by chance too often), each pair's distance
/// to its last occurrence (pairs told apart by a 32-bit hash); pairs inside a run of one value
/// are left out (the "left" class takes those). 0 where no distance of at least 2 repeats for
/// one pair in [`MIN_REPEATS_SHARE`], or where the first [`PROBE_ELEMENTS`] show fewer than
/// [`PROBE_REPEATS`] repeats. Found on the corpus, where the tensors are flattened: a ViT's
/// patch embeddings repeat every 192 elements (the hidden size) over blank patches, a first
/// convolution every 784 (a 28 x 28 image), padded tokens' hidden states every 576.
pub(crate) fn repeat_distance(elems: &[u8], width: usize, s: &mut Distances) -> usize {
    match width {
        1 => repeat_distance_as::<1>(elems, s),
        2 => repeat_distance_as::<2>(elems, s),
        _ => repeat_distance_as::<4>(elems, s),
    }
}

/// [`repeat_distance`] of `W`-byte elements (a copy per width, as [`classify_as`]: the
/// element loads then compile to single loads).
fn repeat_distance_as<const W: usize>(elems: &[u8], s: &mut Distances) -> usize {
    let n = elems.len() / W;
    if n < 4 * MIN_REPEATS_SHARE {
        return 0;
    }
    let bits = ((2 * n) >> SAMPLE_BITS)
        .next_power_of_two()
        .trailing_zeros();
    let mask = (1usize << bits) - 1;
    if s.slots.len() <= mask {
        s.slots.resize(mask + 1, PairSlot::default());
    }
    if s.counts.len() < n {
        s.counts.resize(n, 0);
    }
    // A new generation empties every slot; on wrapping, the slots are cleared for real.
    s.generation = s.generation.wrapping_add(1);
    if s.generation == 0 {
        s.slots.fill(PairSlot::default());
        s.generation = 1;
    }
    let generation = s.generation;
    let mut repeats = 0u32;
    // In two stretches: the first PROBE_ELEMENTS, and the rest unless they showed too few
    // repeats. Each block's followed pairs are first gathered without a branch (which pair
    // is followed is its hash's coin toss, a branch mispredicted about one pair in five),
    // then looked up in the table in order.
    let probe = n.min(PROBE_ELEMENTS);
    let (slots, counts, counted) = (&mut s.slots[..], &mut s.counts[..], &mut s.counted);
    // A block's followed pairs: (position, the pair's 64-bit key); a block at a time, so that
    // they stay in L1 (the whole stretch's took a store of 16 bytes an element, and zeroing).
    let mut followed = [(0u32, 0u64); FOLLOW_BLOCK];
    for (from, to) in [(1, probe), (probe, n)] {
        if from == PROBE_ELEMENTS && repeats < PROBE_REPEATS {
            break;
        }
        let mut prev = load(elems, from - 1, W);
        for start in (from..to).step_by(FOLLOW_BLOCK) {
            let mut m = 0usize;
            for i in start..to.min(start + FOLLOW_BLOCK) {
                let v = load(elems, i, W);
                let key = ((prev as u64) << 32 | v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                followed[m] = (i as u32, key);
                m += usize::from(v != prev && (key >> 32) as u32 & ((1 << SAMPLE_BITS) - 1) == 0);
                prev = v;
            }
            for &(i, key) in &followed[..m] {
                let hash = (key >> 32) as u32;
                let mut h = (key >> (64 - bits)) as usize;
                loop {
                    let slot = &mut slots[h];
                    if slot.generation != generation {
                        *slot = PairSlot {
                            hash,
                            at: i,
                            generation,
                        };
                        break;
                    }
                    if slot.hash == hash {
                        let d = (i - slot.at) as usize;
                        if counts[d] == 0 {
                            counted.push(d as u32);
                        }
                        counts[d] += 1;
                        repeats += 1;
                        slot.at = i;
                        break;
                    }
                    h = (h + 1) & mask;
                }
            }
        }
    }
    // The most repeated distance of at least 2 (ties: the shortest); the counts reset.
    let (mut best, mut most) = (0usize, 0u32);
    for &d in &s.counted {
        let c = std::mem::take(&mut s.counts[d as usize]);
        let d = d as usize;
        if d >= 2 && (c > most || (c == most && d < best)) {
            (best, most) = (d, c);
        }
    }
    s.counted.clear();
    if (most as usize * MIN_REPEATS_SHARE) << SAMPLE_BITS >= n {
        best
    } else {
        0
    }
}

/// Occurrences of nonzero values (the dictionary candidates): an open-addressing table with
/// linear probing, key 0 meaning empty, reused from chunk to chunk (a general hash map with
/// SipHash took a third of the encoder's time). It starts small (or at the size the last
/// chunk grew it to) and doubles when half full, so it stays in L1 where a chunk's literals
/// take few values (a table sized for the worst case, 256 KB, cost the encoder a fifth of its
/// time in misses, clearing and scanning). Chunks of one- and two-byte elements count in a
/// table of every value instead ([`most_frequent_direct`]).
#[derive(Default)]
pub(crate) struct ValueCounter {
    slots: Vec<(u32, u32)>,
    bits: u32,
    len: usize,
}

/// The counter's first size, in slots (16 KB).
const COUNTER_START_BITS: u32 = 11;

impl ValueCounter {
    /// Empty, at its first size or, for at most `values` values, the smallest that holds
    /// them at half load (a short chunk's: clearing and scanning 16 KB was a tenth of its
    /// classification). What it counts does not depend on its size.
    fn reset(&mut self, values: usize) {
        let fits = (2 * values).max(64).next_power_of_two().trailing_zeros();
        // The size the last chunk grew to, where that is more than the first: a tensor's
        // chunks take alike many values, and growing the table again in every chunk was a
        // tenth of encoding FP32 activations.
        self.bits = self.bits.max(COUNTER_START_BITS).min(fits);
        self.len = 0;
        self.slots.clear();
        self.slots.resize(1 << self.bits, (0, 0));
    }

    /// Count one more `v` (nonzero).
    #[inline(always)]
    fn add(&mut self, v: u32) {
        if self.bump(v, 1) {
            self.len += 1;
            if 2 * self.len > self.slots.len() {
                self.grow();
            }
        }
    }

    /// Add `count` to `v`'s entry; whether `v` was new.
    #[inline(always)]
    fn bump(&mut self, v: u32, count: u32) -> bool {
        let mask = self.slots.len() - 1;
        let mut at = (v.wrapping_mul(0x9e37_79b1) >> (32 - self.bits)) as usize & mask;
        loop {
            let e = &mut self.slots[at];
            if e.0 == v {
                e.1 += count;
                return false;
            }
            if e.0 == 0 {
                *e = (v, count);
                return true;
            }
            at = (at + 1) & mask;
        }
    }

    /// Twice the slots, every entry moved over.
    #[cold]
    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.bits += 1;
        self.slots.resize(1 << self.bits, (0, 0));
        for (v, c) in old {
            if v != 0 {
                self.bump(v, c);
            }
        }
    }

    /// The most frequent value seen at least twice (ties: the smaller), or 0.
    fn most_frequent(&self) -> u32 {
        self.slots
            .iter()
            .filter(|e| e.1 > 1)
            .max_by_key(|e| (e.1, std::cmp::Reverse(e.0)))
            .map_or(0, |e| e.0)
    }
}

/// The most frequent of `values` (nonzero, each below `range`) seen at least twice (ties:
/// the smaller), or 0: what [`ValueCounter::most_frequent`] gives, for elements of one or two
/// bytes, counted in a table with a slot for every value (`counts`, left all zero again), with
/// no probing: the hash table's probe loop was a sixth of the classification on BF16 chunks.
fn most_frequent_direct(values: &[u32], range: usize, counts: &mut Vec<u32>) -> u32 {
    if counts.len() < range {
        counts.resize(range, 0);
    }
    let counts = &mut counts[..range];
    for &x in values {
        counts[x as usize & (range - 1)] += 1;
    }
    // Each value's count read at its first occurrence, and cleared there (later occurrences
    // read 0).
    let (mut best, mut most) = (0u32, 1u32);
    for &x in values {
        let c = std::mem::take(&mut counts[x as usize & (range - 1)]);
        if c > most || (c == most && x < best) {
            (best, most) = (x, c);
        }
    }
    best
}

/// Copies of the context counts [`classify`] counts into, in turn: a run of one symbol in one
/// context (the zeros over an image's background) would otherwise make every increment wait
/// for the one before it in memory.
const COUNT_COPIES: usize = 4;
const _: () = assert!(COUNT_COPIES.is_power_of_two());

/// Chunks of at least this many elements sample every fourth for the dictionary and count
/// their contexts in [`COUNT_COPIES`] sets; shorter ones take every element, in one set.
const LONG_CHUNK: usize = 4096;

planepack_core::with_avx2! {
    /// Classify `elems` (whole elements of `width` bytes) with rows of `row` elements (0: no
    /// "equal to up"); its loops compiled with AVX2 where the CPU has it.
    pub(crate) fn classify(elems: &[u8], width: usize, rotate: bool, row: usize, s: &mut Scratch) = classify_any;
}

#[inline(always)]
fn classify_any(elems: &[u8], width: usize, rotate: bool, row: usize, s: &mut Scratch) {
    // One loop per element width and rotation, so that loads, rotations and plane splits are
    // fixed shifts (as the decoder's `decode_lanes`).
    match (width, rotate && width > 1) {
        (1, _) => classify_as::<1, false>(elems, row, s),
        (2, false) => classify_as::<2, false>(elems, row, s),
        (2, true) => classify_as::<2, true>(elems, row, s),
        (_, false) => classify_as::<4, false>(elems, row, s),
        (_, true) => classify_as::<4, true>(elems, row, s),
    }
}

/// A `W`-byte element's value (little-endian).
#[inline(always)]
fn value<const W: usize>(x: &[u8; W]) -> u32 {
    let mut b = [0u8; 4];
    b[..W].copy_from_slice(x);
    u32::from_le_bytes(b)
}

#[inline(always)]
fn classify_as<const W: usize, const R: bool>(elems: &[u8], row: usize, s: &mut Scratch) {
    let n = elems.len() / W;
    let c = &mut s.c;
    // The elements as arrays of W bytes: compared as they are, read as a value (`value`)
    // only where one is needed (a copy of them as u32 doubled a BF16 chunk's memory traffic).
    let v = &elems.as_chunks::<W>().0[..n];
    let k = lanes_for(n);
    let u = if row > 0 && row < n { row } else { 0 };
    // Pass 1: zero, left and up (D is not known yet); the dictionary is the most frequent
    // value among what is left, the reference exponent the most frequent top byte of it.
    // Nothing here branches on the data (which element is a repeat follows the data, so a
    // branch would be mispredicted often): the symbols by selects, the dictionary's samples
    // gathered at a cursor.
    c.symbols.clear();
    c.symbols.resize(n, SYM_LITERAL);
    // The dictionary candidates are counted on every 4th element of long chunks (a value
    // worth a symbol of its own is at least a few percent of them; the table of a quarter
    // of the elements stays in cache).
    let sample = if n >= LONG_CHUNK { 3 } else { 0 };
    // The symbols lane by lane, without the dictionary: a loop with no stores but the
    // symbols', which the compiler vectorises (the lane's first element has no left
    // neighbour, its first `u` none one row up).
    for j in 0..k {
        let r = lane_range(j, n, k);
        let lane = &v[r.clone()];
        let syms = &mut c.symbols[r];
        let sym = |x: [u8; W], left: bool, up: bool| {
            if x == [0; W] {
                SYM_ZERO
            } else if left {
                SYM_LEFT
            } else if up {
                SYM_UP
            } else {
                SYM_LITERAL
            }
        };
        // Up to `edge` an element may lack a neighbour; past it the left one and the one
        // `back` elements back exist (the latter one row up where the chunk has rows).
        let back = u.max(1);
        let edge = back.min(lane.len());
        for t in 0..edge {
            let x = lane[t];
            let left = t > 0 && x == lane[t - 1];
            let up = u > 0 && t >= u && x == lane[t - u];
            syms[t] = sym(x, left, up);
        }
        if lane.len() > edge {
            for ((s, &x), (&l, &a)) in syms[edge..]
                .iter_mut()
                .zip(&lane[edge..])
                .zip(lane[edge - 1..].iter().zip(&lane[edge - back..]))
            {
                *s = sym(x, x == l, u > 0 && x == a);
            }
        }
    }
    // The dictionary candidates, the sampled literals: gathered without a branch (which
    // element is a literal follows the data), then counted in element order.
    let lits = &mut s.sampled;
    lits.clear();
    lits.resize(n.div_ceil(sample + 1), 0);
    let mut m = 0usize;
    {
        // (On plain slices: through `s` the loop reloaded the vectors' pointers at every
        // element, its stores may alias them as far as the compiler knows.)
        let (lits, symbols) = (&mut lits[..], &c.symbols[..n]);
        // (Each group's first element: `step_by` compiled to a call of `nth` an element.)
        for (xs, ys) in v.chunks(sample + 1).zip(symbols.chunks(sample + 1)) {
            lits[m] = value(&xs[0]);
            m += usize::from(ys[0] == SYM_LITERAL);
        }
    }
    let dict = if W <= 2 {
        most_frequent_direct(&lits[..m], 1 << (8 * W), &mut s.direct)
    } else {
        let counter = &mut s.counter;
        counter.reset(m);
        for &x in &lits[..m] {
            counter.add(x);
        }
        counter.most_frequent()
    };
    // Pass 2, element by element with no dependency between elements: the final symbols
    // (a pass-1 literal equal to the dictionary value is its class; a literal is never zero,
    // so a dictionary of 0, none, matches none), each literal's bit in `keep`.
    let symbols = &mut c.symbols[..n];
    let mut dicts = 0u32;
    for (sym, x) in symbols.iter_mut().zip(v) {
        let x = value(x);
        let top = (rotated(x, W, R) >> (8 * (W - 1))) as u16;
        let (literal, in_dict) = (*sym == SYM_LITERAL, x == dict);
        dicts += u32::from(literal && in_dict);
        let class = if in_dict { SYM_DICT } else { SYM_LITERAL + top };
        *sym = if literal { class } else { *sym };
    }
    let keep = &mut s.keep;
    keep.clear();
    keep.resize(n.div_ceil(8), 0);
    for (bits, group) in keep.iter_mut().zip(symbols.chunks(8)) {
        *bits = group
            .iter()
            .enumerate()
            .fold(0, |m, (i, &y)| m | u8::from(y >= SYM_LITERAL) << i);
    }
    // The literals packed together and split into planes (the top plane and the literal
    // planes); the reference exponent is the most frequent top byte of pass 1's literals
    // (ties: the smaller), those left literal and the dictionary's.
    fit(&mut s.packed, n * W);
    let literals = take_kept(&elems[..n * W], W, keep, &mut s.packed) / W;
    s.split.resize_with(W, Vec::new);
    split(&s.packed[..literals * W], W, R, &mut s.split);
    let mut tops = histogram(&s.split[0]);
    if dicts > 0 {
        tops[(rotated(dict, W, R) >> (8 * (W - 1))) as usize] += dicts;
    }
    let e0 = (0..256)
        .max_by_key(|&e| (tops[e], std::cmp::Reverse(e)))
        .unwrap_or(0) as u8;
    c.literal_planes.resize_with(W - 1, Vec::new);
    for (plane, split) in c.literal_planes.iter_mut().zip(&mut s.split[1..]) {
        std::mem::swap(plane, split);
    }
    c.lane_literals.clear();
    c.lane_literals.extend((0..k).map(|j| {
        let lane = &symbols[lane_range(j, n, k)];
        lane.iter()
            .map(|&y| u32::from(y >= SYM_LITERAL))
            .sum::<u32>()
    }));
    // Pass 3: the contexts and counts.
    c.u = u;
    c.dict = dict;
    c.e0 = e0;
    c.lanes = k;
    c.contexts.clear();
    c.contexts.resize(n, 0);
    let counts = &mut s.counts;
    // (A short chunk's counts in one copy: zeroing four costs more than its stalls there.)
    let copies = if n >= LONG_CHUNK { COUNT_COPIES } else { 1 };
    counts.clear();
    counts.resize(CONTEXTS * copies, [0; SYMBOLS]);
    // Each element's context: its left neighbour's symbol's, 0 at a lane's start.
    let (symbols, contexts) = (&c.symbols[..n], &mut c.contexts[..n]);
    let low = e0 as i16 + SYM_LITERAL as i16 + CTX_LOW as i16;
    let high = e0 as i16 + SYM_LITERAL as i16 + CTX_HIGH as i16;
    let after = |sym: u16| -> u8 {
        let literal =
            (sym as i16).clamp(low, high) - e0 as i16 - SYM_LITERAL as i16 + CTX_LITERAL as i16;
        if sym == SYM_ZERO {
            0
        } else if sym < SYM_LITERAL {
            1
        } else {
            literal as u8
        }
    };
    debug_assert!((0..SYMBOLS as u16).all(|y| after(y) as usize == context(Some(y), e0)));
    if n > 0 {
        for (ctx, &left) in contexts[1..].iter_mut().zip(&symbols[..n - 1]) {
            *ctx = after(left);
        }
    }
    for j in 0..k {
        contexts[lane_range(j, n, k).start] = 0;
    }
    // The counts, element i in copy i % copies (the elements after the last whole group of
    // copies in the first).
    let counts = counts.as_flattened_mut();
    if copies == COUNT_COPIES {
        let syms4 = symbols.chunks_exact(COUNT_COPIES);
        let ctxs4 = contexts.chunks_exact(COUNT_COPIES);
        let (sym_rest, ctx_rest) = (syms4.remainder(), ctxs4.remainder());
        for (sy, cx) in syms4.zip(ctxs4) {
            for q in 0..COUNT_COPIES {
                counts[(q * CONTEXTS + cx[q] as usize) * SYMBOLS + sy[q] as usize] += 1;
            }
        }
        for (&sy, &cx) in sym_rest.iter().zip(ctx_rest) {
            counts[cx as usize * SYMBOLS + sy as usize] += 1;
        }
    } else {
        for (&sy, &cx) in symbols.iter().zip(&*contexts) {
            counts[cx as usize * SYMBOLS + sy as usize] += 1;
        }
    }
    let counts = &s.counts;
    c.counts.clear();
    c.counts.extend_from_slice(&counts[..CONTEXTS]);
    for copy in counts[CONTEXTS..].chunks_exact(CONTEXTS) {
        for (sum, more) in c.counts.iter_mut().zip(copy) {
            for (a, b) in sum.iter_mut().zip(more) {
                *a += b;
            }
        }
    }
}

/// Estimated size in bytes of the modelled chunk of what [`classify`] left in `s`, and the
/// tables and literal-plane plans it would use.
pub(crate) fn estimate(
    s: &Scratch,
    width: usize,
    form: TableForm,
) -> (f64, Vec<ModelTable>, Vec<(PlanePlan, f64)>) {
    let c = &s.c;
    let tables: Vec<ModelTable> = c.counts.iter().map(ModelTable::from_counts).collect();
    let mut bytes = head_len(width) as f64 + (c.lanes * LANE_HEADER) as f64;
    for (t, counts) in tables.iter().zip(&c.counts) {
        bytes += t.written_len(form) as f64 + t.cost_bits(counts) / 8.0;
    }
    let plans: Vec<(PlanePlan, f64)> = c
        .literal_planes
        .iter()
        .map(|p| plan_plane(p, form))
        .collect();
    bytes += plans.iter().map(|p| p.1).sum::<f64>();
    (bytes, tables, plans)
}

/// Estimate the modelled chunk of `elems`: (estimated bytes, and the state [`encode`] needs).
/// `row` is the shape's row length, or 0 where the shape gives none: then the chunk's "up" is
/// its [`repeat_distance`].
pub(crate) fn plan(
    elems: &[u8],
    width: usize,
    rotate: bool,
    row: usize,
    form: TableForm,
    s: &mut Scratch,
) -> (f64, Vec<ModelTable>, Vec<(PlanePlan, f64)>) {
    let row = match row {
        0 => repeat_distance(elems, width, &mut s.distances),
        r => r,
    };
    classify(elems, width, rotate, row, s);
    estimate(s, width, form)
}

/// Append the modelled chunk planned last by [`plan`] (of `width`-byte elements) to `out`.
pub(crate) fn encode(
    width: usize,
    tables: &[ModelTable],
    plans: &[(PlanePlan, f64)],
    form: TableForm,
    s: &mut Scratch,
    planes: &mut crate::lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    let c = &s.c;
    let k = c.lanes;
    out.push(CHUNK_MODELLED);
    out.extend_from_slice(&(c.u as u32).to_le_bytes());
    out.extend_from_slice(&c.dict.to_le_bytes()[..width]);
    out.push(c.e0);
    out.push(k as u8);
    for t in tables {
        t.write(out, form);
    }
    code_lanes(tables, s, planepack_core::cpu::AVX512, out)?;
    for (p, (plan, _)) in s.c.literal_planes.iter().zip(plans) {
        put_plane(p, plan, form, None, planes, out)?;
    }
    Ok(())
}

/// Code the classified chunk's lanes with `tables` and append their headers (final state,
/// word count, literal count) and words: with the AVX2 kernel where `tier` allows it and the
/// CPU has it (the same bytes), else the scalar coder.
fn code_lanes(tables: &[ModelTable], s: &mut Scratch, tier: u8, out: &mut Vec<u8>) -> Result<()> {
    let k = s.c.lanes;
    debug_assert!(k <= 8);
    let mut x = [L; 8];
    // Lane j's words in decoding order: `words[j]` in `s.words`.
    let mut words: [std::ops::Range<usize>; 8] = Default::default();
    #[cfg(target_arch = "x86_64")]
    let vector = tier >= planepack_core::cpu::X86_64_V3 && planepack_core::cpu::x86_64_v3();
    #[cfg(not(target_arch = "x86_64"))]
    let vector = {
        let _ = tier;
        false
    };
    if vector {
        #[cfg(target_arch = "x86_64")]
        code_lanes_avx2(tables, s, &mut x, &mut words);
    } else {
        code_lanes_scalar(tables, s, &mut x, &mut words);
    }
    let c = &s.c;
    let heads_at = out.len();
    out.resize(heads_at + k * LANE_HEADER, 0);
    for j in 0..k {
        let count = words[j].len();
        if count > u16::MAX as usize {
            return Err(Error::Unsupported(
                "a modelled lane would need more than 65535 words".into(),
            ));
        }
        let h = heads_at + j * LANE_HEADER;
        out[h..h + 4].copy_from_slice(&x[j].to_le_bytes());
        out[h + 4..h + 6].copy_from_slice(&(count as u16).to_le_bytes());
        out[h + 6..h + 10].copy_from_slice(&c.lane_literals[j].to_le_bytes());
    }
    for r in &words[..k] {
        let at = out.len();
        out.resize(at + 2 * r.len(), 0);
        for (dst, w) in out[at..]
            .as_chunks_mut::<2>()
            .0
            .iter_mut()
            .zip(&s.words[r.clone()])
        {
            *dst = w.to_le_bytes();
        }
    }
    Ok(())
}

/// The scalar lane coder: every lane backwards from its last element, all lanes in step
/// (their state chains are independent, so the CPU overlaps them); lane j's words are
/// written down from the end of its region of `s.words`, so they end up in decoding order.
fn code_lanes_scalar(
    tables: &[ModelTable],
    s: &mut Scratch,
    x: &mut [u32; 8],
    words: &mut [std::ops::Range<usize>; 8],
) {
    let c = &s.c;
    let (n, k) = (c.symbols.len(), c.lanes);
    // floor(x / f) by a multiply, as the planes' coder does (`lanes::div_by`); entries of
    // absent symbols are left as they were (never read).
    s.rcp.resize(CONTEXTS, [0; SYMBOLS]);
    for (r, t) in s.rcp.iter_mut().zip(tables) {
        for (r, &f) in r.iter_mut().zip(&t.freq) {
            if f > 0 {
                *r = (1u64 << 52).div_ceil(f as u64);
            }
        }
    }
    let rcp = &s.rcp;
    let ranges: [std::ops::Range<usize>; 8] =
        std::array::from_fn(|j| if j < k { lane_range(j, n, k) } else { 0..0 });
    let ranges = &ranges[..k];
    let longest = ranges.iter().map(|r| r.len()).max().unwrap_or(0);
    let region = longest + 1;
    s.words.clear();
    s.words.resize(k * region, 0);
    let mut pos = [region; 8];
    for t in 0..longest {
        for (j, r) in ranges.iter().enumerate() {
            if t >= r.len() {
                continue;
            }
            let i = r.end - 1 - t;
            let ctx = c.contexts[i] as usize;
            let sym = c.symbols[i] as usize;
            let table = &tables[ctx];
            let f = table.freq[sym] as u32;
            debug_assert!(f > 0);
            // Branch-free renormalisation: the word is always stored, kept only if needed.
            let emit = (x[j] as u64 >= (f as u64) << (32 - MODEL_PROB_BITS)) as u32;
            s.words[j * region + pos[j] - 1] = x[j] as u16;
            pos[j] -= emit as usize;
            x[j] >>= emit * 16;
            let q = ((x[j] as u128 * rcp[ctx][sym] as u128) >> 52) as u32;
            x[j] = (q << MODEL_PROB_BITS) + (x[j] - q * f) + table.cum[sym] as u32;
        }
    }
    for j in 0..k {
        words[j] = j * region + pos[j]..(j + 1) * region;
    }
}

/// The AVX2 lane coder: the eight lanes (a lane past the chunk's `k`, or past its own end,
/// steps with an entry that leaves its state alone) coded round by round from the last by
/// the planes' kernel at 11-bit probabilities (`lanes::avx2::encode_ids`), each element's
/// entry its context's table's symbol; the staged words compacted per lane as the planes'
/// are. Writes what [`code_lanes_scalar`] writes (the tests compare them).
#[cfg(target_arch = "x86_64")]
fn code_lanes_avx2(
    tables: &[ModelTable],
    s: &mut Scratch,
    x: &mut [u32; 8],
    words: &mut [std::ops::Range<usize>; 8],
) {
    use crate::lanes::{avx2, grow};
    let c = &s.c;
    let (n, k) = (c.symbols.len(), c.lanes);
    // The entries: context t's symbol y at t * SYMBOLS + y, then the idle entry.
    const IDLE: usize = CONTEXTS * SYMBOLS;
    s.info.clear();
    for t in tables {
        s.info.extend(
            t.freq
                .iter()
                .zip(&t.cum)
                .map(|(&f, &cum)| f as u32 | (cum as u32) << 13),
        );
    }
    s.info.resize(IDLE, 0);
    s.info.push(MODEL_SCALE);
    // Round r holds element r of each lane (the idle entry where a lane has none).
    let rounds = lane_range(0, n, k).len();
    s.ids.clear();
    s.ids.resize(8 * rounds, IDLE as u16);
    for j in 0..k {
        let r = lane_range(j, n, k);
        let (syms, ctxs) = (&c.symbols[r.clone()], &c.contexts[r]);
        for (t, (&y, &ctx)) in syms.iter().zip(ctxs).enumerate() {
            s.ids[8 * t + j] = (ctx as usize * SYMBOLS + y as usize) as u16;
        }
    }
    grow(&mut s.stage, 8 * rounds);
    grow(&mut s.emitted, rounds);
    // SAFETY: the CPU has AVX2 and FMA (x86-64-v3, the caller checked); every id is below
    // `info.len()` and names a present symbol's entry (frequency 1 to 2048) or the idle one
    // (2048); `ids` is whole rounds of eight; the stage holds a word per id and `emitted` a
    // mask per round.
    unsafe {
        avx2::encode_ids::<MODEL_PROB_BITS>(
            &s.info,
            &s.ids,
            &mut s.stage[..8 * rounds],
            &mut s.emitted[..rounds],
            x,
        )
    };
    let stride = rounds + 8;
    grow(&mut s.words, 8 * stride);
    let mut counts = [0usize; crate::lanes::MAX_LANES];
    // SAFETY: as above; each lane's area has `rounds + 8` words.
    unsafe {
        avx2::compact(
            &s.stage[..8 * rounds],
            &s.emitted[..rounds],
            8,
            &mut s.words,
            stride,
            &mut counts,
        )
    };
    for j in 0..8 {
        words[j] = j * stride..j * stride + counts[j];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of 192 BF16 elements of which every third repeats the row before it, in noise:
    /// the repeat distance is 192 (not a multiple of it, not the runs' 1); noise and runs alone
    /// have none; chunks shorter than the rule's least length have none.
    #[test]
    fn repeat_distance_finds_the_row() {
        let mut rng = planepack_testkit::Rng(3);
        let mut noise = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.next_u64() as u8).collect() };
        let mut elems = Vec::new();
        for r in 0..40 {
            if r % 3 == 1 {
                let prev = elems[elems.len() - 384..].to_vec();
                elems.extend_from_slice(&prev);
            } else {
                elems.extend(noise(384));
            }
        }
        let mut s = Distances::default();
        assert_eq!(repeat_distance(&elems, 2, &mut s), 192);
        assert_eq!(repeat_distance(&noise(20_000), 2, &mut s), 0);
        let runs: Vec<u8> = (0..20_000u32).map(|i| (i / 50) as u8).collect();
        assert_eq!(repeat_distance(&runs, 2, &mut s), 0);
        assert_eq!(repeat_distance(&elems[..400], 2, &mut s), 0);
    }

    /// The symbols, dictionary and literal planes [`classify`] leaves, against a plain
    /// element-by-element reference of the rule (docs/format-rans.md, "Modelled chunk"), for
    /// lanes shorter and longer than a row, with and without rows, every width and rotation,
    /// on values with many repeats (so that every class occurs); then the reference exponent,
    /// contexts, counts and literals per lane, and the lanes coded at every instruction-set
    /// tier against the scalar coder (one to eight lanes, the last shorter).
    #[test]
    fn classify_matches_a_plain_reference() {
        use planepack_core::cpu;
        let mut rng = planepack_testkit::Rng(7);
        let mut next = move || (rng.next_u64() >> 32) as u32;
        // One scratch for every case: what a chunk leaves in it must not change the next.
        let mut s = Scratch::default();
        for (width, rotate) in [(1, false), (2, false), (2, true), (4, false), (4, true)] {
            for n in [1usize, 5, 63, 64, 200, 4095, 4096, 5000, 8192 + 13] {
                for row in [0usize, 1, 3, 7, 64, 300, 5000] {
                    let vals: Vec<u32> = (0..n)
                        .map(|_| match next() % 6 {
                            0 => 0,
                            1 | 2 => 0x3c00 + next() % 3,
                            _ => next(),
                        })
                        .collect();
                    let mask = if width == 4 {
                        u32::MAX
                    } else {
                        (1 << (8 * width)) - 1
                    };
                    let elems: Vec<u8> = vals
                        .iter()
                        .flat_map(|&x| (x & mask).to_le_bytes()[..width].to_vec())
                        .collect();
                    classify(&elems, width, rotate, row, &mut s);
                    let v: Vec<u32> = (0..n).map(|i| load(&elems, i, width)).collect();
                    let k = lanes_for(n);
                    let u = if row > 0 && row < n { row } else { 0 };
                    let sample = if n >= 4096 { 4 } else { 1 };
                    // The dictionary: the most frequent sampled literal seen twice or more.
                    let mut seen = std::collections::BTreeMap::<u32, u32>::new();
                    let mut first = vec![SYM_LITERAL; n];
                    for j in 0..k {
                        let r = lane_range(j, n, k);
                        for i in r.clone() {
                            let x = v[i];
                            first[i] = if x == 0 {
                                SYM_ZERO
                            } else if i > r.start && x == v[i - 1] {
                                SYM_LEFT
                            } else if u > 0 && i >= r.start + u && x == v[i - u] {
                                SYM_UP
                            } else {
                                SYM_LITERAL
                            };
                            if first[i] == SYM_LITERAL && i % sample == 0 {
                                *seen.entry(x).or_default() += 1;
                            }
                        }
                    }
                    let dict = seen
                        .iter()
                        .filter(|e| *e.1 > 1)
                        .max_by_key(|e| (*e.1, std::cmp::Reverse(*e.0)))
                        .map_or(0, |e| *e.0);
                    let c = &s.c;
                    let case = format!("width {width} rotate {rotate} n {n} row {row}");
                    assert_eq!(c.dict, dict, "{case}");
                    let mut planes = vec![Vec::new(); width - 1];
                    let mut symbols = vec![0u16; n];
                    // The reference exponent: the most frequent top byte of the first pass's
                    // literals (ties: the smaller).
                    let mut tops = [0u32; 256];
                    for i in (0..n).filter(|&i| first[i] == SYM_LITERAL) {
                        let t = rotated(v[i], width, rotate && width > 1);
                        tops[(t >> (8 * (width - 1))) as usize] += 1;
                    }
                    let e0 = (0..256).rev().max_by_key(|&e| tops[e]).unwrap() as u8;
                    assert_eq!(c.e0, e0, "{case}");
                    for i in 0..n {
                        let t = rotated(v[i], width, rotate && width > 1);
                        symbols[i] = match first[i] {
                            SYM_LITERAL if dict != 0 && v[i] == dict => SYM_DICT,
                            SYM_LITERAL => {
                                for (p, plane) in planes.iter_mut().enumerate() {
                                    plane.push((t >> (8 * (width - 2 - p))) as u8);
                                }
                                SYM_LITERAL + (t >> (8 * (width - 1))) as u16
                            }
                            other => other,
                        };
                    }
                    assert_eq!(c.symbols, symbols, "{case}");
                    assert_eq!(c.literal_planes[..width - 1], planes[..], "{case}");
                    // Each element's context (its left neighbour's symbol's, none at a lane's
                    // start), the counts by context and symbol, the literals per lane.
                    let mut counts = vec![[0u32; SYMBOLS]; CONTEXTS];
                    for j in 0..k {
                        let r = lane_range(j, n, k);
                        for i in r.clone() {
                            let left = (i > r.start).then(|| symbols[i - 1]);
                            let ctx = context(left, e0);
                            assert_eq!(c.contexts[i] as usize, ctx, "{case}, element {i}");
                            counts[ctx][symbols[i] as usize] += 1;
                        }
                        let literals = symbols[r].iter().filter(|&&y| y >= SYM_LITERAL).count();
                        assert_eq!(c.lane_literals[j] as usize, literals, "{case}, lane {j}");
                    }
                    assert_eq!(c.counts, counts, "{case}");
                    // The lanes coded at every tier: the scalar coder's bytes.
                    let (_, tables, _) = estimate(&s, width, TableForm::Compact);
                    let mut scalar = Vec::new();
                    code_lanes(&tables, &mut s, cpu::PORTABLE, &mut scalar).unwrap();
                    for tier in [cpu::X86_64_V3, cpu::AVX512] {
                        let mut coded = Vec::new();
                        code_lanes(&tables, &mut s, tier, &mut coded).unwrap();
                        assert!(coded == scalar, "{case}, tier {tier}");
                    }
                }
            }
        }
    }
}
