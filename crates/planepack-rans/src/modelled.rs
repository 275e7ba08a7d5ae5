//! Chunk mode 3, the modelled chunk: runs, repeated values and neighbours' magnitudes, coded
//! so that a GPU still decodes a chunk's lanes in parallel.
//!
//! Why: the byte planes' order-0 statistics cannot see that a CNN activation repeats its left
//! or upper neighbour over flat image regions, that ReLU6 clamps many values to exactly 6.0,
//! or that neighbouring activations have similar magnitudes. On real activations at
//! production size, CPU coders that model runs and repeated values (OpenZL) stored 9-10 %
//! fewer bytes than the planes (`bench-results/activation-study.md`). Here every element
//! becomes one symbol of a 260-letter alphabet:
//!
//! * `0` zero, `1` equal to the element on its left, `2` equal to the element one row up
//!   (`U` elements back), `3` equal to the chunk's dictionary value `D` (its most frequent
//!   other value: ReLU6's 6.0);
//! * `4 + e`: a literal whose top plane byte (the exponent, for rotated BF16 and FP32) is
//!   `e`; its lower bytes go to the literal planes, coded as ordinary planes.
//!
//! Each symbol is coded with one of 8 tables chosen by its context: the left element's
//! exponent relative to the chunk's most frequent one (or "zero / lane start"), which carries
//! both runs (a repeat after a repeat) and magnitude (a small value after a small value).
//!
//! What keeps decoding parallel: the chunk's elements are split into `k` contiguous lanes (not
//! interleaved as a plane's lanes are), each an independent rANS stream whose contexts and
//! references never leave the lane: the first element of a lane has context 0 and cannot be
//! "equal to left", and "equal to up" is allowed only where the element `U` back lies in the
//! same lane. So a lane is decoded by one invocation (or SIMD lane) start to end, and no
//! dependency chain is longer than one lane of one chunk. The literal planes are decoded
//! first by the plane decoder; each lane knows where its literals start from the literal
//! counts of the lanes before it (stored per lane).
//!
//! The format is `docs/format-rans.md` (version 2, "Modelled chunk"). Probabilities are
//! 11-bit here (a decode slot packs symbol, frequency and cumulative frequency into 32 bits,
//! and 8 tables of 2048 slots are 64 KiB).

use crate::lanes::{L, MAX_LANES};
use crate::{get_plane, plan_plane, put_plane, DecScratch, PlanePlan};
use planepack_core::error::take;
use planepack_core::{Error, Result};

/// The chunk mode byte.
pub const CHUNK_MODELLED: u8 = 3;
/// Context tables per chunk.
pub const CONTEXTS: usize = 8;
/// Alphabet size: four classes and 256 literal top bytes.
pub const SYMBOLS: usize = 260;
/// Probability precision of the context tables.
pub const MODEL_PROB_BITS: u32 = 11;
/// Sum of a context table's frequencies.
pub const MODEL_SCALE: u32 = 1 << MODEL_PROB_BITS;
/// A context table with at most this many symbols lists them (u16 each); larger ones use a
/// 260-bit map (33 bytes).
pub const LIST_MAX: usize = 16;
const BITMAP_BYTES: usize = SYMBOLS.div_ceil(8);

/// A literal neighbour's context: `CTX_LITERAL + clamp(e - E0, CTX_LOW, CTX_HIGH)`.
pub const CTX_LOW: i32 = -2;
pub const CTX_HIGH: i32 = 3;
pub const CTX_LITERAL: i32 = 4;

pub const SYM_ZERO: u16 = 0;
pub const SYM_LEFT: u16 = 1;
pub const SYM_UP: u16 = 2;
pub const SYM_DICT: u16 = 3;
pub const SYM_LITERAL: u16 = 4;

/// Fixed bytes of a modelled chunk before its tables: mode, `U` (u32), `D` (W bytes), `E0`,
/// `k`.
fn head_len(width: usize) -> usize {
    1 + 4 + width + 1 + 1
}

/// Bytes of a lane's header: initial state (u32), word count (u16), literal count (u32).
pub const LANE_HEADER: usize = 10;

/// The context of an element whose left neighbour (in its lane) has symbol `left` (None at
/// the lane's start): 0 for a lane start or a zero, 1 for a repeat (left, up, dictionary),
/// else `4 + clamp(e - E0, -2, 3)` for a literal of top byte `e`. A function of the symbol
/// alone, not of the value, so that a decoder's state chain (state, table, symbol, context,
/// state) never waits for a value to be gathered.
#[inline(always)]
pub fn context(left: Option<u16>, e0: u8) -> usize {
    match left {
        None | Some(SYM_ZERO) => 0,
        Some(SYM_LEFT | SYM_UP | SYM_DICT) => 1,
        Some(s) => {
            let d = (s - SYM_LITERAL) as i32 - e0 as i32;
            (d.clamp(CTX_LOW, CTX_HIGH) + CTX_LITERAL) as usize
        }
    }
}

/// The top plane byte of element `v`: byte `W - 1` of `rotl(v, 1)` (of `v` itself for single
/// bytes or without rotation).
#[inline(always)]
pub fn top_byte(v: u32, width: usize, rotate: bool) -> u8 {
    (rotated(v, width, rotate) >> (8 * (width - 1))) as u8
}

/// `rotl(v, 1)` over `8W` bits where the stream rotates (`W` > 1), else `v`.
#[inline(always)]
fn rotated(v: u32, width: usize, rotate: bool) -> u32 {
    match (rotate, width) {
        (true, 2) => (v as u16).rotate_left(1) as u32,
        (true, 4) => v.rotate_left(1),
        _ => v,
    }
}

#[inline(always)]
fn unrotated(t: u32, width: usize, rotate: bool) -> u32 {
    match (rotate, width) {
        (true, 2) => (t as u16).rotate_right(1) as u32,
        (true, 4) => t.rotate_right(1),
        _ => t,
    }
}

#[inline(always)]
fn load(elems: &[u8], i: usize, width: usize) -> u32 {
    match width {
        1 => elems[i] as u32,
        2 => u16::from_le_bytes([elems[2 * i], elems[2 * i + 1]]) as u32,
        _ => u32::from_le_bytes(elems[4 * i..4 * i + 4].try_into().unwrap()),
    }
}

#[inline(always)]
fn store(out: &mut [u8], i: usize, width: usize, v: u32) {
    out[i * width..i * width + width].copy_from_slice(&v.to_le_bytes()[..width]);
}

/// A context table: 11-bit frequencies of the 260 symbols (0 for absent ones).
#[derive(Clone)]
pub struct ModelTable {
    pub freq: [u16; SYMBOLS],
    pub cum: [u16; SYMBOLS],
}

impl ModelTable {
    /// An unused context (no symbols).
    fn empty() -> ModelTable {
        ModelTable {
            freq: [0; SYMBOLS],
            cum: [0; SYMBOLS],
        }
    }

    /// Frequencies for `counts` (empty counts give an unused table): every present symbol at
    /// least 1, the rest in proportion, the remainder to the most frequent symbol (ties: the
    /// lowest); where the floor of 1 overshoots, one at a time from the largest frequencies.
    /// (The rule of [`crate::model::Table::from_counts`], over 260 symbols at 11 bits.)
    pub fn from_counts(counts: &[u32; SYMBOLS]) -> ModelTable {
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        if total == 0 {
            return ModelTable::empty();
        }
        let mut freq = [0u16; SYMBOLS];
        let mut sum = 0i64;
        for s in 0..SYMBOLS {
            if counts[s] > 0 {
                let f = ((counts[s] as u64 * MODEL_SCALE as u64) / total).max(1);
                freq[s] = f as u16;
                sum += f as i64;
            }
        }
        let mut diff = MODEL_SCALE as i64 - sum;
        while diff != 0 {
            let mut top = 0usize;
            let mut best = 0u16;
            for (s, &f) in freq.iter().enumerate() {
                let ok = f > 1 || (diff > 0 && f > 0);
                if ok && f > best {
                    top = s;
                    best = f;
                }
            }
            if diff > 0 {
                freq[top] += diff as u16;
                diff = 0;
            } else {
                freq[top] -= 1;
                diff += 1;
            }
        }
        ModelTable::from_freq(freq)
    }

    fn from_freq(freq: [u16; SYMBOLS]) -> ModelTable {
        let mut cum = [0u16; SYMBOLS];
        let mut c = 0u32;
        for s in 0..SYMBOLS {
            cum[s] = c as u16;
            c += freq[s] as u32;
        }
        ModelTable { freq, cum }
    }

    fn present(&self) -> usize {
        self.freq.iter().filter(|&&f| f > 0).count()
    }

    /// Bytes [`ModelTable::write`] takes.
    pub fn written_len(&self) -> usize {
        let p = self.present();
        2 + match p {
            0 => 0,
            p if p <= LIST_MAX => 2 * p,
            _ => BITMAP_BYTES,
        } + 2 * p
    }

    /// Append the table: the count `P` (u16), the symbols (up to 16 increasing u16, or a
    /// 260-bit map), then each present symbol's frequency (u16) in increasing symbol order.
    pub fn write(&self, out: &mut Vec<u8>) {
        let p = self.present();
        out.extend_from_slice(&(p as u16).to_le_bytes());
        let present = (0..SYMBOLS).filter(|&s| self.freq[s] > 0);
        if p == 0 {
            return;
        }
        if p <= LIST_MAX {
            for s in present.clone() {
                out.extend_from_slice(&(s as u16).to_le_bytes());
            }
        } else {
            let mut bits = [0u8; BITMAP_BYTES];
            for s in present.clone() {
                bits[s / 8] |= 1 << (s % 8);
            }
            out.extend_from_slice(&bits);
        }
        for s in present {
            out.extend_from_slice(&self.freq[s].to_le_bytes());
        }
    }

    /// Read a table at `at`; returns it and the offset after it. Every rule is checked.
    pub fn read(input: &[u8], at: usize) -> Result<(ModelTable, usize)> {
        let p = u16::from_le_bytes(
            take(input, at, 2, "context table size")?
                .try_into()
                .unwrap(),
        ) as usize;
        let mut pos = at + 2;
        if p == 0 {
            return Ok((ModelTable::empty(), pos));
        }
        if p > SYMBOLS {
            return Err(Error::corrupt_at("context table has too many symbols", at));
        }
        let mut symbols = Vec::with_capacity(p);
        if p <= LIST_MAX {
            let list = take(input, pos, 2 * p, "context table symbols")?;
            for s in list.chunks_exact(2) {
                let s = u16::from_le_bytes([s[0], s[1]]) as usize;
                if s >= SYMBOLS || symbols.last().is_some_and(|&l| l >= s) {
                    return Err(Error::corrupt_at(
                        "context table symbols not increasing below 260",
                        pos,
                    ));
                }
                symbols.push(s);
            }
            pos += 2 * p;
        } else {
            let bits = take(input, pos, BITMAP_BYTES, "context table bitmap")?;
            if bits[BITMAP_BYTES - 1] >> (SYMBOLS % 8) != 0 {
                return Err(Error::corrupt_at("context table bitmap padding", pos));
            }
            symbols.extend((0..SYMBOLS).filter(|&s| bits[s / 8] >> (s % 8) & 1 == 1));
            if symbols.len() != p {
                return Err(Error::corrupt_at(
                    "context table bitmap disagrees with its count",
                    pos,
                ));
            }
            pos += BITMAP_BYTES;
        }
        let raw = take(input, pos, 2 * p, "context table frequencies")?;
        let mut freq = [0u16; SYMBOLS];
        let mut sum = 0u32;
        for (&s, f) in symbols.iter().zip(raw.chunks_exact(2)) {
            let f = u16::from_le_bytes([f[0], f[1]]);
            if f == 0 {
                return Err(Error::corrupt_at("context table frequency 0", pos));
            }
            freq[s] = f;
            sum += f as u32;
        }
        if sum != MODEL_SCALE {
            return Err(Error::corrupt_at(
                format!("context table frequencies sum to {sum}, not {MODEL_SCALE}"),
                pos,
            ));
        }
        Ok((ModelTable::from_freq(freq), pos + 2 * p))
    }

    /// The 2048 decode slots, appended to `slots`: `symbol | (freq - 1) << 9 | cum << 20`
    /// (all zero for an unused table: its frequency-1 field reads as a symbol that never
    /// occurs, which the decoder refuses).
    pub fn decode_slots(&self, slots: &mut Vec<u32>) {
        let start = slots.len();
        for s in 0..SYMBOLS {
            let f = self.freq[s] as u32;
            if f > 0 {
                let e = s as u32 | (f - 1) << 9 | (self.cum[s] as u32) << 20;
                slots.extend(std::iter::repeat_n(e, f as usize));
            }
        }
        if slots.len() == start {
            slots.resize(start + MODEL_SCALE as usize, UNUSED_SLOT);
        }
    }

    /// Ideal coded size in bits of `counts` under this table.
    fn cost_bits(&self, counts: &[u32; SYMBOLS]) -> f64 {
        (0..SYMBOLS)
            .filter(|&s| counts[s] > 0)
            .map(|s| counts[s] as f64 * (MODEL_PROB_BITS as f64 - (self.freq[s] as f64).log2()))
            .sum()
    }
}

/// The slot of an unused context: symbol 511, which is not in the alphabet.
const UNUSED_SLOT: u32 = 511;

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
    values: Vec<u32>,
    words: Vec<u16>,
    counter: ValueCounter,
}

/// Occurrences of nonzero values (the dictionary candidates): an open-addressing table with
/// linear probing, key 0 meaning empty, sized for the chunk and reused (a general hash map
/// with SipHash took a third of the encoder's time).
#[derive(Default)]
struct ValueCounter {
    slots: Vec<(u32, u32)>,
    bits: u32,
}

impl ValueCounter {
    /// Empty, with room for `n` distinct values at most half full.
    fn reset(&mut self, n: usize) {
        let size = (2 * n.max(1)).next_power_of_two();
        self.bits = size.trailing_zeros();
        self.slots.clear();
        self.slots.resize(size, (0, 0));
    }

    /// Count one more `v` (nonzero).
    #[inline(always)]
    fn add(&mut self, v: u32) {
        let mask = self.slots.len() - 1;
        let mut at = (v.wrapping_mul(0x9e37_79b1) >> (32 - self.bits.max(1))) as usize & mask;
        loop {
            let e = &mut self.slots[at];
            if e.0 == v {
                e.1 += 1;
                return;
            }
            if e.0 == 0 {
                *e = (v, 1);
                return;
            }
            at = (at + 1) & mask;
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

/// Lanes the encoder gives a modelled chunk of `n` elements: one per 1024 elements, at most 8
/// (a lane's first element has no context and its first row no "equal to up", so fewer,
/// longer lanes code smaller: 8 lanes of 4096 BF16 elements came out 0.3 % smaller than 16 on
/// CNN activations; eight also fill one AVX2 register, and a chunk's 8 lanes give a GPU
/// 8192 invocations per 64 MiB part). Decoders accept 1 to 32.
pub fn lanes_for(n: usize) -> usize {
    (n / 1024).clamp(1, 8)
}

/// Lane `j` of `n` elements in `k` contiguous lanes: its element range. Lanes are
/// `4 ceil(n / 4k)` elements long (the last shorter, or empty), so every lane starts on a
/// 4-byte boundary of the output whatever the element width: a GPU invocation that decodes a
/// lane writes whole words that no other lane touches.
#[inline(always)]
pub fn lane_range(j: usize, n: usize, k: usize) -> std::ops::Range<usize> {
    let per = 4 * n.div_ceil(4 * k.max(1));
    (j * per).min(n)..((j + 1) * per).min(n)
}

/// Classify `elems` (whole elements of `width` bytes) with rows of `row` elements (0: no
/// "equal to up").
fn classify(elems: &[u8], width: usize, rotate: bool, row: usize, s: &mut Scratch) {
    let n = elems.len() / width;
    let c = &mut s.c;
    let v = &mut s.values;
    v.clear();
    v.extend((0..n).map(|i| load(elems, i, width)));
    let k = lanes_for(n);
    let u = if row > 0 && row < n { row } else { 0 };
    // Pass 1: zero, left and up (D is not known yet); the dictionary is the most frequent
    // value among what is left, the reference exponent the most frequent top byte of it.
    c.symbols.clear();
    c.symbols.resize(n, SYM_LITERAL);
    let rest = &mut s.counter;
    // The dictionary candidates are counted on every 4th element of long chunks (a value
    // worth a symbol of its own is at least a few percent of them; the table of a quarter
    // of the elements stays in cache).
    let sample = if n >= 4096 { 3 } else { 0 };
    rest.reset(n / (sample + 1) + 1);
    let mut tops = [0u32; 256];
    for j in 0..k {
        let r = lane_range(j, n, k);
        for i in r.clone() {
            let x = v[i];
            let sym = if x == 0 {
                SYM_ZERO
            } else if i > r.start && x == v[i - 1] {
                SYM_LEFT
            } else if u > 0 && i >= r.start + u && x == v[i - u] {
                SYM_UP
            } else {
                if i & sample == 0 {
                    rest.add(x);
                }
                tops[top_byte(x, width, rotate) as usize] += 1;
                SYM_LITERAL
            };
            c.symbols[i] = sym;
        }
    }
    let dict = rest.most_frequent();
    let e0 = (0..256)
        .max_by_key(|&e| (tops[e], std::cmp::Reverse(e)))
        .unwrap_or(0) as u8;
    // Pass 2: the dictionary, the literal symbols and planes, the contexts and counts.
    c.u = u;
    c.dict = dict;
    c.e0 = e0;
    c.lanes = k;
    c.contexts.clear();
    c.contexts.resize(n, 0);
    c.counts.clear();
    c.counts.resize(CONTEXTS, [0; SYMBOLS]);
    c.literal_planes.resize_with(width - 1, Vec::new);
    for p in c.literal_planes.iter_mut() {
        p.clear();
    }
    c.lane_literals.clear();
    for j in 0..k {
        let r = lane_range(j, n, k);
        let mut literals = 0u32;
        for i in r.clone() {
            let x = v[i];
            let mut sym = c.symbols[i];
            if sym == SYM_LITERAL {
                if dict != 0 && x == dict {
                    sym = SYM_DICT;
                } else {
                    let t = rotated(x, width, rotate);
                    sym = SYM_LITERAL + (t >> (8 * (width - 1))) as u16;
                    for (p, plane) in c.literal_planes.iter_mut().enumerate() {
                        plane.push((t >> (8 * (width - 2 - p))) as u8);
                    }
                    literals += 1;
                }
                c.symbols[i] = sym;
            }
            let ctx = context((i > r.start).then(|| c.symbols[i - 1]), e0);
            c.contexts[i] = ctx as u8;
            c.counts[ctx][sym as usize] += 1;
        }
        c.lane_literals.push(literals);
    }
}

/// Estimated size in bytes of the modelled chunk of what [`classify`] left in `s`, and the
/// tables and literal-plane plans it would use.
fn estimate(s: &Scratch, width: usize) -> (f64, Vec<ModelTable>, Vec<(PlanePlan, f64)>) {
    let c = &s.c;
    let tables: Vec<ModelTable> = c.counts.iter().map(ModelTable::from_counts).collect();
    let mut bytes = head_len(width) as f64 + (c.lanes * LANE_HEADER) as f64;
    for (t, counts) in tables.iter().zip(&c.counts) {
        bytes += t.written_len() as f64 + t.cost_bits(counts) / 8.0;
    }
    let plans: Vec<(PlanePlan, f64)> = c.literal_planes.iter().map(|p| plan_plane(p)).collect();
    bytes += plans.iter().map(|p| p.1).sum::<f64>();
    (bytes, tables, plans)
}

/// Estimate the modelled chunk of `elems`: (estimated bytes, and the state [`encode`] needs).
pub(crate) fn plan(
    elems: &[u8],
    width: usize,
    rotate: bool,
    row: usize,
    s: &mut Scratch,
) -> (f64, Vec<ModelTable>, Vec<(PlanePlan, f64)>) {
    classify(elems, width, rotate, row, s);
    estimate(s, width)
}

/// Append the modelled chunk planned last by [`plan`] on `elems` to `out`.
pub(crate) fn encode(
    elems: &[u8],
    width: usize,
    tables: &[ModelTable],
    plans: &[(PlanePlan, f64)],
    s: &mut Scratch,
    planes: &mut crate::lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    let c = &s.c;
    let n = elems.len() / width;
    let k = c.lanes;
    out.push(CHUNK_MODELLED);
    out.extend_from_slice(&(c.u as u32).to_le_bytes());
    out.extend_from_slice(&c.dict.to_le_bytes()[..width]);
    out.push(c.e0);
    out.push(k as u8);
    for t in tables {
        t.write(out);
    }
    // Each lane backwards from its last element; its words come out last-first.
    let rcp: Vec<[u64; SYMBOLS]> = tables
        .iter()
        .map(|t| {
            let mut r = [0u64; SYMBOLS];
            for (r, &f) in r.iter_mut().zip(&t.freq) {
                if f > 0 {
                    *r = (1u64 << 52).div_ceil(f as u64);
                }
            }
            r
        })
        .collect();
    let heads_at = out.len();
    out.resize(heads_at + k * LANE_HEADER, 0);
    let mut lane_words = Vec::with_capacity(k);
    s.words.clear();
    for j in 0..k {
        let r = lane_range(j, n, k);
        let start = s.words.len();
        let mut x = L;
        for i in r.rev() {
            let ctx = c.contexts[i] as usize;
            let sym = c.symbols[i] as usize;
            let t = &tables[ctx];
            let f = t.freq[sym] as u32;
            debug_assert!(f > 0);
            if x as u64 >= (f as u64) << (32 - MODEL_PROB_BITS) {
                s.words.push(x as u16);
                x >>= 16;
            }
            let q = ((x as u128 * rcp[ctx][sym] as u128) >> 52) as u32;
            x = (q << MODEL_PROB_BITS) + (x - q * f) + t.cum[sym] as u32;
        }
        let words = s.words.len() - start;
        if words > u16::MAX as usize {
            return Err(Error::Unsupported(
                "a modelled lane would need more than 65535 words".into(),
            ));
        }
        s.words[start..].reverse();
        lane_words.push((start, words));
        let h = heads_at + j * LANE_HEADER;
        out[h..h + 4].copy_from_slice(&x.to_le_bytes());
        out[h + 4..h + 6].copy_from_slice(&(words as u16).to_le_bytes());
        out[h + 6..h + 10].copy_from_slice(&c.lane_literals[j].to_le_bytes());
    }
    for (start, words) in lane_words {
        for w in &s.words[start..start + words] {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    for (p, (plan, _)) in c.literal_planes.iter().zip(plans) {
        put_plane(p, plan, planes, out)?;
    }
    Ok(())
}

/// Decoder buffers.
#[derive(Default)]
pub(crate) struct DecodeState {
    slots: Vec<u32>,
    words: Vec<u16>,
}

/// Decode a modelled chunk into `out` (whole elements of `width`); returns the offset after
/// it in `chunk`.
pub(crate) fn decode(
    chunk: &[u8],
    width: usize,
    rotate: bool,
    s: &mut DecScratch,
    out: &mut [u8],
) -> Result<usize> {
    decode_with(chunk, width, rotate, s, out, true)
}

/// [`decode`], with the SIMD lanes (where the CPU has them) or the scalar steps only.
fn decode_with(
    chunk: &[u8],
    width: usize,
    rotate: bool,
    s: &mut DecScratch,
    out: &mut [u8],
    simd: bool,
) -> Result<usize> {
    let n = out.len() / width;
    let head = take(chunk, 0, head_len(width), "modelled chunk header")?;
    let u = u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize;
    let mut d = [0u8; 4];
    d[..width].copy_from_slice(&head[5..5 + width]);
    let dict = u32::from_le_bytes(d);
    let e0 = head[5 + width];
    let k = head[6 + width] as usize;
    if !(1..=MAX_LANES).contains(&k) {
        return Err(Error::corrupt_at(format!("{k} lanes"), 6 + width));
    }
    let mut at = head_len(width);
    let st = &mut s.modelled;
    st.slots.clear();
    for _ in 0..CONTEXTS {
        let (t, next) = ModelTable::read(chunk, at)?;
        t.decode_slots(&mut st.slots);
        at = next;
    }
    let heads = take(chunk, at, k * LANE_HEADER, "modelled lane headers")?;
    at += k * LANE_HEADER;
    let mut lanes = [(0u32, 0usize, 0usize); MAX_LANES];
    let mut total_words = 0usize;
    let mut literals = 0usize;
    for (j, h) in heads.chunks_exact(LANE_HEADER).enumerate() {
        let x = u32::from_le_bytes(h[0..4].try_into().unwrap());
        let w = u16::from_le_bytes([h[4], h[5]]) as usize;
        let z = u32::from_le_bytes(h[6..10].try_into().unwrap()) as usize;
        if x < L {
            return Err(Error::corrupt_at("lane state below 2^16", at));
        }
        let r = lane_range(j, n, k);
        if z > r.len() {
            return Err(Error::corrupt_at("more literals than lane elements", at));
        }
        lanes[j] = (x, w, z);
        total_words += w;
        literals += z;
    }
    let words = take(chunk, at, 2 * total_words, "modelled lane words")?;
    st.words.clear();
    st.words.extend(
        words
            .chunks_exact(2)
            .map(|w| u16::from_le_bytes([w[0], w[1]])),
    );
    let total_words = st.words.len();
    // Two spare words: the SIMD decoder reads 32 bits at a word index up to the count.
    st.words.extend_from_slice(&[0, 0]);
    at += 2 * total_words;
    s.planes.resize_with(width.max(2), Vec::new);
    for p in 1..width {
        at = get_plane(chunk, at, literals, &mut s.lanes, &mut s.planes[p])?;
        // Four spare bytes: the SIMD decoder reads 32 bits at a literal index up to the count.
        s.planes[p].extend_from_slice(&[0; 4]);
    }
    // Each lane's words and literals start where the previous lane's end.
    let mut states = [LaneState::default(); MAX_LANES];
    let (mut word_at, mut lit_at) = (0usize, 0usize);
    for (j, &(x0, w, z)) in lanes[..k].iter().enumerate() {
        let r = lane_range(j, n, k);
        states[j] = LaneState {
            x: x0,
            word: word_at,
            word_end: word_at + w,
            lit: lit_at,
            lit_end: lit_at + z,
            i: r.start,
            start: r.start,
            end: r.end,
            left: 0,
            left_sym: NONE,
        };
        word_at += w;
        lit_at += z;
    }
    let p = Params {
        slots: &st.slots,
        words: &st.words,
        total_words,
        planes: &s.planes,
        literals,
        u,
        dict,
        e0,
    };
    let states = &mut states[..k];
    match (width, rotate) {
        (1, _) => decode_lanes::<1, false>(&p, states, out, simd)?,
        (2, true) => decode_lanes::<2, true>(&p, states, out, simd)?,
        (2, false) => decode_lanes::<2, false>(&p, states, out, simd)?,
        (_, true) => decode_lanes::<4, true>(&p, states, out, simd)?,
        (_, false) => decode_lanes::<4, false>(&p, states, out, simd)?,
    }
    for l in states.iter() {
        if l.word != l.word_end || l.x != L || l.lit != l.lit_end {
            return Err(Error::corrupt(
                "modelled lane does not end where its header says",
            ));
        }
    }
    Ok(at)
}

/// No left neighbour (a lane's first element).
const NONE: u16 = u16::MAX;

/// What every lane of a chunk reads.
struct Params<'a> {
    slots: &'a [u32],
    /// Every lane's words, then two spare words.
    words: &'a [u16],
    total_words: usize,
    /// Plane `q` (1..W) of the literals, then four spare bytes.
    planes: &'a [Vec<u8>],
    literals: usize,
    u: usize,
    dict: u32,
    e0: u8,
}

/// One lane's decoder: state, cursors and its left neighbour.
#[derive(Clone, Copy, Default)]
struct LaneState {
    x: u32,
    word: usize,
    word_end: usize,
    lit: usize,
    lit_end: usize,
    /// Next element, and the lane's elements.
    i: usize,
    start: usize,
    end: usize,
    left: u32,
    left_sym: u16,
}

/// Decode every lane, one element of each in turn: the lanes' dependency chains (state, table
/// read, state) are independent, so the CPU overlaps them. With AVX2, groups of eight lanes
/// go through [`avx2::steps`] for the elements they all have, and the scalar steps finish
/// the rest (and check the same rules).
fn decode_lanes<const W: usize, const R: bool>(
    p: &Params,
    lanes: &mut [LaneState],
    out: &mut [u8],
    simd: bool,
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if simd && W > 1 && planepack_core::cpu::x86_64_v3() {
        // Two groups of eight at a time where there are (their chains overlap), then one.
        let whole = lanes.len() / 8 * 8;
        let (pairs, single) = lanes[..whole].split_at_mut(whole / 16 * 16);
        for group in pairs.chunks_exact_mut(16) {
            let common = group.iter().map(|l| l.end - l.i).min().unwrap_or(0);
            // SAFETY: the CPU has AVX2 (x86-64-v3); 16 lanes each with at least `common`
            // elements left; `Params`' words and planes are padded as the kernel needs.
            if common > 0 && !unsafe { avx2::steps::<W, R, 2>(p, group, common, out) } {
                return Err(Error::corrupt("a modelled lane breaks the format's rules"));
            }
        }
        for group in single.chunks_exact_mut(8) {
            let common = group.iter().map(|l| l.end - l.i).min().unwrap_or(0);
            // SAFETY: as above, eight lanes.
            if common > 0 && !unsafe { avx2::steps::<W, R, 1>(p, group, common, out) } {
                return Err(Error::corrupt("a modelled lane breaks the format's rules"));
            }
        }
    }
    let longest = lanes.iter().map(|l| l.end - l.i).max().unwrap_or(0);
    for _ in 0..longest {
        for l in lanes.iter_mut() {
            if l.i < l.end {
                step::<W, R>(p, l, out)?;
            }
        }
    }
    Ok(())
}

/// Decode one element of a lane.
#[inline(always)]
fn step<const W: usize, const R: bool>(
    p: &Params,
    l: &mut LaneState,
    out: &mut [u8],
) -> Result<()> {
    let i = l.i;
    let ctx = context((l.left_sym != NONE).then_some(l.left_sym), p.e0);
    let slot = l.x & (MODEL_SCALE - 1);
    let e = p.slots[ctx << MODEL_PROB_BITS | slot as usize];
    let sym = (e & 511) as u16;
    let f = (e >> 9 & 2047) + 1;
    l.x = f * (l.x >> MODEL_PROB_BITS) + slot - (e >> 20);
    if l.x < L {
        if l.word == l.word_end {
            return Err(Error::corrupt(format!(
                "modelled lane starved at element {i}"
            )));
        }
        l.x = l.x << 16 | p.words[l.word] as u32;
        l.word += 1;
    }
    let v = match sym {
        SYM_ZERO => 0,
        SYM_LEFT if l.left_sym != NONE => l.left,
        SYM_UP if p.u > 0 && i >= l.start + p.u => load(out, i - p.u, W),
        SYM_DICT => p.dict,
        s if s >= SYM_LITERAL && (s as usize) < SYMBOLS => {
            if l.lit == l.lit_end {
                return Err(Error::corrupt(format!(
                    "lane has more literals than its count at element {i}"
                )));
            }
            let mut t = ((s - SYM_LITERAL) as u32) << (8 * (W - 1));
            for q in 1..W {
                t |= (p.planes[q][l.lit] as u32) << (8 * (W - 1 - q));
            }
            l.lit += 1;
            unrotated(t, W, R)
        }
        SYM_LEFT | SYM_UP => {
            return Err(Error::corrupt(format!(
                "element {i} copies an element outside its lane"
            )))
        }
        _ => return Err(Error::corrupt(format!("element {i} in an unused context"))),
    };
    store(out, i, W, v);
    l.left = v;
    l.left_sym = sym;
    l.i += 1;
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::SYM_LITERAL;
    use super::{LaneState, Params, L, MODEL_PROB_BITS, MODEL_SCALE, SYMBOLS, SYM_DICT};
    use std::arch::x86_64::*;

    /// Eight lanes' decoder state, one lane per 32-bit element.
    struct Group {
        x: __m256i,
        word: __m256i,
        word_end: __m256i,
        lit: __m256i,
        lit_end: __m256i,
        i: __m256i,
        start: __m256i,
        left: __m256i,
        /// The left neighbour's symbol (0 at a lane's start, as a zero).
        prev: __m256i,
        has_left: __m256i,
        err: __m256i,
    }

    /// What every step reads, as vectors.
    struct Consts {
        e0: __m256i,
        last_word: __m256i,
        last_lit: __m256i,
        u: __m256i,
        has_u: __m256i,
        dict: __m256i,
    }

    #[target_feature(enable = "avx2")]
    fn load(lanes: &[LaneState]) -> Group {
        let get = |f: &dyn Fn(&LaneState) -> i32| {
            let mut a = [0i32; 8];
            for (v, l) in a.iter_mut().zip(lanes.iter()) {
                *v = f(l);
            }
            // SAFETY: an 8 x i32 array read as one vector.
            unsafe { _mm256_loadu_si256(a.as_ptr() as *const __m256i) }
        };
        Group {
            x: get(&|l| l.x as i32),
            word: get(&|l| l.word as i32),
            word_end: get(&|l| l.word_end as i32),
            lit: get(&|l| l.lit as i32),
            lit_end: get(&|l| l.lit_end as i32),
            i: get(&|l| l.i as i32),
            start: get(&|l| l.start as i32),
            left: get(&|l| l.left as i32),
            prev: get(&|l| match l.left_sym {
                super::NONE => 0,
                s => s as i32,
            }),
            has_left: get(&|l| if l.left_sym == super::NONE { 0 } else { -1 }),
            err: _mm256_setzero_si256(),
        }
    }

    #[target_feature(enable = "avx2")]
    fn store(g: &Group, lanes: &mut [LaneState]) -> bool {
        let mut a = [[0u32; 8]; 8];
        for (dst, v) in a
            .iter_mut()
            .zip([g.x, g.word, g.lit, g.i, g.left, g.prev, g.has_left, g.err])
        {
            // SAFETY: an 8 x u32 array written as one vector.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, v) };
        }
        for (j, l) in lanes.iter_mut().enumerate() {
            l.x = a[0][j];
            l.word = a[1][j] as usize;
            l.lit = a[2][j] as usize;
            l.i = a[3][j] as usize;
            l.left = a[4][j];
            l.left_sym = if a[6][j] == 0 {
                super::NONE
            } else {
                a[5][j] as u16
            };
        }
        a[7].iter().all(|&e| e == 0)
    }

    /// Decode `steps` elements of each lane of `groups` (one or more groups of eight lanes)
    /// in lockstep, one lane per AVX2 element, the groups' steps interleaved so that their
    /// dependency chains (two gathers a step) overlap: the scalar `step`'s arithmetic and
    /// rules, with every branch a mask. Returns false if a lane broke a rule (the caller
    /// reports the stream corrupt; the states are then meaningless).
    ///
    /// # Safety
    /// The CPU must have AVX2. `lanes` must be `8 * G` lanes, each with at least `steps`
    /// elements left; `p.words` must hold `p.total_words + 2` words and each literal plane
    /// `p.literals + 4` bytes; `W` is 2 or 4.
    #[target_feature(enable = "avx2")]
    pub unsafe fn steps<const W: usize, const R: bool, const G: usize>(
        p: &Params,
        lanes: &mut [LaneState],
        steps: usize,
        out: &mut [u8],
    ) -> bool {
        debug_assert!(lanes.len() == 8 * G && (W == 2 || W == 4));
        let c = Consts {
            e0: _mm256_set1_epi32(p.e0 as i32 + SYM_LITERAL as i32),
            last_word: _mm256_set1_epi32(p.total_words as i32),
            last_lit: _mm256_set1_epi32(p.literals as i32),
            u: _mm256_set1_epi32(p.u as i32),
            has_u: if p.u > 0 {
                _mm256_set1_epi32(-1)
            } else {
                _mm256_setzero_si256()
            },
            dict: _mm256_set1_epi32(p.dict as i32),
        };
        let mut gs: [Group; G] = std::array::from_fn(|g| load(&lanes[8 * g..8 * g + 8]));
        for _ in 0..steps {
            for g in gs.iter_mut() {
                // SAFETY: the caller's contract, passed on.
                unsafe { step::<W, R>(p, &c, g, out) };
            }
        }
        let mut ok = true;
        for (g, chunk) in gs.iter().zip(lanes.chunks_exact_mut(8)) {
            ok &= store(g, chunk);
        }
        ok
    }

    /// One element of each of a group's eight lanes.
    ///
    /// # Safety
    /// As for [`steps`].
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn step<const W: usize, const R: bool>(
        p: &Params,
        c: &Consts,
        g: &mut Group,
        out: &mut [u8],
    ) {
        let ones = _mm256_set1_epi32(-1);
        let one = _mm256_set1_epi32(1);
        let two = _mm256_set1_epi32(2);
        let low8 = _mm256_set1_epi32(0xff);
        let elem_mask = _mm256_set1_epi32(if W == 2 { 0xffff } else { -1 });
        let table = p.slots.as_ptr() as *const i32;
        let wbase = p.words.as_ptr() as *const i32;
        let obase = out.as_ptr() as *const i32;
        // Context from the left symbol: 0 (none or zero), 1 (a repeat), or
        // 4 + clamp(e - E0, -2, 3) for a literal of top byte e = symbol - 4.
        let d = _mm256_max_epi32(
            _mm256_min_epi32(
                _mm256_sub_epi32(g.prev, c.e0),
                _mm256_set1_epi32(super::CTX_HIGH),
            ),
            _mm256_set1_epi32(super::CTX_LOW),
        );
        let lit_ctx = _mm256_add_epi32(d, _mm256_set1_epi32(super::CTX_LITERAL));
        let literal_left = _mm256_cmpgt_epi32(g.prev, _mm256_set1_epi32(SYM_DICT as i32));
        let ctx = _mm256_blendv_epi8(_mm256_min_epu32(g.prev, one), lit_ctx, literal_left);
        let slot = _mm256_and_si256(g.x, _mm256_set1_epi32((MODEL_SCALE - 1) as i32));
        let idx = _mm256_or_si256(_mm256_slli_epi32::<{ MODEL_PROB_BITS as i32 }>(ctx), slot);
        // SAFETY: ctx < 8 and slot < 2048: idx < 16384 = slots.len().
        let e = unsafe { _mm256_i32gather_epi32::<4>(table, idx) };
        let sym = _mm256_and_si256(e, _mm256_set1_epi32(511));
        let f = _mm256_add_epi32(
            _mm256_and_si256(_mm256_srli_epi32::<9>(e), _mm256_set1_epi32(2047)),
            one,
        );
        let y = _mm256_sub_epi32(
            _mm256_add_epi32(
                _mm256_mullo_epi32(f, _mm256_srli_epi32::<{ MODEL_PROB_BITS as i32 }>(g.x)),
                slot,
            ),
            _mm256_srli_epi32::<20>(e),
        );
        let need = _mm256_cmpeq_epi32(_mm256_min_epu32(y, _mm256_set1_epi32((L - 1) as i32)), y);
        // A lane that needs a word it does not have.
        g.err = _mm256_or_si256(
            g.err,
            _mm256_andnot_si256(_mm256_cmpgt_epi32(g.word_end, g.word), need),
        );
        let widx = _mm256_min_epu32(g.word, c.last_word);
        // SAFETY: widx <= total_words, and 32 bits at word widx are words widx and widx + 1,
        // both below total_words + 2 = words.len().
        let w = _mm256_and_si256(
            unsafe { _mm256_i32gather_epi32::<2>(wbase, widx) },
            _mm256_set1_epi32(0xffff),
        );
        g.x = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32::<16>(y), w), need);
        g.word = _mm256_sub_epi32(g.word, need);
        // The element.
        let is_left = _mm256_cmpeq_epi32(sym, one);
        let is_up = _mm256_cmpeq_epi32(sym, two);
        let is_dict = _mm256_cmpeq_epi32(sym, _mm256_set1_epi32(SYM_DICT as i32));
        let is_lit = _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(SYM_DICT as i32));
        g.err = _mm256_or_si256(
            g.err,
            _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(SYMBOLS as i32 - 1)),
        );
        g.err = _mm256_or_si256(g.err, _mm256_andnot_si256(g.has_left, is_left));
        // Up: U > 0 and i - start >= U.
        let up_ok = _mm256_and_si256(
            c.has_u,
            _mm256_cmpgt_epi32(_mm256_sub_epi32(g.i, g.start), _mm256_sub_epi32(c.u, one)),
        );
        g.err = _mm256_or_si256(g.err, _mm256_andnot_si256(up_ok, is_up));
        let up_take = _mm256_and_si256(is_up, up_ok);
        let up_val = if _mm256_testz_si256(up_take, up_take) == 1 {
            _mm256_setzero_si256()
        } else {
            // SAFETY: masked lanes only: i - U >= start >= 0, and 32 bits at element i - U
            // lie in elements i - U .. i (W = 2) or are that element (W = 4), before i < n.
            unsafe {
                let at =
                    _mm256_mullo_epi32(_mm256_sub_epi32(g.i, c.u), _mm256_set1_epi32(W as i32));
                _mm256_and_si256(
                    _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), obase, at, up_take),
                    elem_mask,
                )
            }
        };
        // Literals: the top byte from the symbol, the rest from the planes.
        g.err = _mm256_or_si256(
            g.err,
            _mm256_andnot_si256(_mm256_cmpgt_epi32(g.lit_end, g.lit), is_lit),
        );
        let lidx = _mm256_min_epu32(g.lit, c.last_lit);
        let mut t = _mm256_sll_epi32(
            _mm256_sub_epi32(sym, _mm256_set1_epi32(SYM_LITERAL as i32)),
            _mm_cvtsi32_si128(8 * (W as i32 - 1)),
        );
        for q in 1..W {
            let base = p.planes[q].as_ptr() as *const i32;
            // SAFETY: lidx <= literals, and 32 bits at byte lidx lie within the plane's
            // literals + 4 bytes.
            let b = _mm256_and_si256(unsafe { _mm256_i32gather_epi32::<1>(base, lidx) }, low8);
            t = _mm256_or_si256(
                t,
                _mm256_sll_epi32(b, _mm_cvtsi32_si128(8 * (W - 1 - q) as i32)),
            );
        }
        let lit_val = if R {
            let hi = _mm_cvtsi32_si128(8 * W as i32 - 1);
            _mm256_and_si256(
                _mm256_or_si256(_mm256_srli_epi32::<1>(t), _mm256_sll_epi32(t, hi)),
                elem_mask,
            )
        } else {
            t
        };
        let mut v = _mm256_and_si256(g.left, is_left);
        v = _mm256_or_si256(v, _mm256_and_si256(up_val, is_up));
        v = _mm256_or_si256(v, _mm256_and_si256(c.dict, is_dict));
        v = _mm256_or_si256(v, _mm256_and_si256(lit_val, is_lit));
        g.lit = _mm256_sub_epi32(g.lit, is_lit);
        let mut vals = [0u32; 8];
        let mut idxs = [0u32; 8];
        // SAFETY: 8 x u32 arrays written as vectors.
        unsafe {
            _mm256_storeu_si256(vals.as_mut_ptr() as *mut __m256i, v);
            _mm256_storeu_si256(idxs.as_mut_ptr() as *mut __m256i, g.i);
        }
        let o = out.as_mut_ptr();
        for (&at, &val) in idxs.iter().zip(&vals) {
            // SAFETY: every lane's element index is below its end <= n = out.len() / W (the
            // caller's contract: each lane has `steps` elements left), so the W bytes at
            // at * W are inside `out`.
            unsafe {
                let dst = o.add(at as usize * W);
                if W == 2 {
                    (dst as *mut u16).write_unaligned(val as u16);
                } else {
                    (dst as *mut u32).write_unaligned(val);
                }
            }
        }
        g.i = _mm256_add_epi32(g.i, one);
        g.left = v;
        g.prev = sym;
        g.has_left = ones;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::Encoder;

    fn sample(n: usize, width: usize, seed: u64) -> Vec<u8> {
        planepack_testkit::activation_like(n, width, 50, seed)
    }

    fn chunk_of(elems: &[u8], width: usize, rotate: bool) -> Vec<u8> {
        let mut s = Scratch::default();
        let (_, tables, plans) = plan(elems, width, rotate, 50, &mut s);
        let mut out = Vec::new();
        encode(
            elems,
            width,
            &tables,
            &plans,
            &mut s,
            &mut Encoder::default(),
            &mut out,
        )
        .unwrap();
        out
    }

    /// The SIMD lanes and the scalar steps decode every valid chunk alike, and agree on
    /// thousands of damaged ones: the same bytes or both an error.
    #[test]
    fn simd_and_scalar_lanes_agree() {
        let mut r = 77u64;
        for width in [1usize, 2, 4] {
            for rotate in [true, false] {
                for n in [1usize, 7, 1023, 8192, 9000, 40_000] {
                    let elems = sample(n, width, n as u64 + width as u64);
                    let chunk = chunk_of(&elems, width, rotate);
                    let mut s = DecScratch::default();
                    for simd in [true, false] {
                        let mut out = vec![0u8; elems.len()];
                        let end =
                            decode_with(&chunk, width, rotate, &mut s, &mut out, simd).unwrap();
                        assert_eq!(end, chunk.len());
                        assert!(out == elems, "W{width} R{rotate} n{n} simd {simd}");
                    }
                    for _ in 0..200 {
                        r ^= r << 13;
                        r ^= r >> 7;
                        r ^= r << 17;
                        let mut bad = chunk.clone();
                        let at = (r >> 8) as usize % bad.len();
                        bad[at] ^= 1 << (r % 8);
                        let mut a = vec![0u8; elems.len()];
                        let mut b = vec![0u8; elems.len()];
                        let ra = decode_with(&bad, width, rotate, &mut s, &mut a, true);
                        let rb = decode_with(&bad, width, rotate, &mut s, &mut b, false);
                        match (ra, rb) {
                            (Ok(x), Ok(y)) => assert!(x == y && a == b, "W{width} n{n} byte {at}"),
                            (Err(_), Err(_)) => {}
                            (x, y) => panic!("W{width} n{n} byte {at}: simd {x:?}, scalar {y:?}"),
                        }
                    }
                }
            }
        }
    }
}
