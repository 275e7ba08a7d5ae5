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
use crate::model::TableForm;
use crate::{get_plane, plan_plane, put_plane, DecScratch, PlanePlan};
use planepack_core::error::take;
use planepack_core::{Error, Result};

mod encode;
pub(crate) use encode::{encode, plan, Scratch};

/// The "up" distance the encoder gives a modelled chunk of `elems` (`width`-byte elements) when
/// the tensor's shape has no rows: the distance at which pairs of neighbours most often recur,
/// or 0 (docs/format-rans.md, "Modelled chunk", encoder). For the activation study.
pub fn repeat_distance(elems: &[u8], width: usize) -> usize {
    encode::repeat_distance(elems, width, &mut Default::default())
}

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

/// `rotl(v, 1)` over `8W` bits where the stream rotates (`W` > 1), else `v`.
#[inline(always)]
pub(crate) fn rotated(v: u32, width: usize, rotate: bool) -> u32 {
    match (rotate, width) {
        (true, 2) => (v as u16).rotate_left(1) as u32,
        (true, 4) => v.rotate_left(1),
        _ => v,
    }
}

/// The inverse of [`rotated`].
#[inline(always)]
pub(crate) fn unrotated(t: u32, width: usize, rotate: bool) -> u32 {
    match (rotate, width) {
        (true, 2) => (t as u16).rotate_right(1) as u32,
        (true, 4) => t.rotate_right(1),
        _ => t,
    }
}

/// Element `i` of `elems` (`width` bytes, little-endian).
#[inline(always)]
pub(crate) fn load(elems: &[u8], i: usize, width: usize) -> u32 {
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
    /// least 1, the fewest bits for the counts (the rule of
    /// [`crate::model::Table::from_counts`], over 260 symbols at 11 bits).
    pub fn from_counts(counts: &[u32; SYMBOLS]) -> ModelTable {
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        if total == 0 {
            return ModelTable::empty();
        }
        let mut freq = [0u16; SYMBOLS];
        crate::model::normalize(counts, MODEL_SCALE, &mut freq);
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
    pub fn written_len(&self, form: TableForm) -> usize {
        if form == TableForm::Compact {
            return crate::compact::written_len(&self.freq);
        }
        let p = self.present();
        2 + match p {
            0 => 0,
            p if p <= LIST_MAX => 2 * p,
            _ => BITMAP_BYTES,
        } + 2 * p
    }

    /// Append the table: the count `P` (u16), the symbols (up to 16 increasing u16, or a
    /// 260-bit map), then each present symbol's frequency (u16) in increasing symbol order.
    pub fn write(&self, out: &mut Vec<u8>, form: TableForm) {
        if form == TableForm::Compact {
            return crate::compact::write(&self.freq, out);
        }
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
    pub fn read(input: &[u8], at: usize, form: TableForm) -> Result<(ModelTable, usize)> {
        if form == TableForm::Compact {
            let mut freq = [0u16; SYMBOLS];
            let (_, end) = crate::compact::read(input, at, &mut freq, MODEL_SCALE, true)?;
            return Ok((ModelTable::from_freq(freq), end));
        }
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

    /// The 2048 decode slots, appended to `slots`: `symbol | cum << 9 | freq << 20` (cum,
    /// below 2048, in 11 bits; freq, up to 2048, in the top 12, one shift away for the
    /// state's update). An unused table's slots hold the symbol 511, which never occurs and
    /// which the decoder refuses.
    pub fn decode_slots(&self, slots: &mut Vec<u32>) {
        let start = slots.len();
        for s in 0..SYMBOLS {
            let f = self.freq[s] as u32;
            if f > 0 {
                let e = s as u32 | (self.cum[s] as u32) << 9 | f << 20;
                slots.extend(std::iter::repeat_n(e, f as usize));
            }
        }
        if slots.len() == start {
            slots.resize(start + MODEL_SCALE as usize, UNUSED_SLOT);
        }
    }

    /// Ideal coded size in bits of `counts` under this table.
    fn cost_bits(&self, counts: &[u32; SYMBOLS]) -> f64 {
        let log2 = crate::model::log2_table();
        (0..SYMBOLS)
            .filter(|&s| counts[s] > 0)
            .map(|s| counts[s] as f64 * (MODEL_PROB_BITS as f64 - log2[self.freq[s] as usize]))
            .sum()
    }
}

/// The slot of an unused context: symbol 511, which is not in the alphabet.
const UNUSED_SLOT: u32 = 511;

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

/// One modelled chunk's decoder buffers: its decode slots, lane words and literal planes (a
/// decoder holds two, for two chunks whose lanes run together).
#[derive(Default)]
pub(crate) struct DecodeState {
    slots: Vec<u32>,
    words: Vec<u16>,
    /// Literal plane `q` (1..W) at `planes[q]`, four spare bytes after it.
    planes: Vec<Vec<u8>>,
}

/// Decode a modelled chunk into `out` (whole elements of `width`); returns the offset after
/// it in `chunk`.
pub(crate) fn decode(
    chunk: &[u8],
    width: usize,
    rotate: bool,
    form: TableForm,
    s: &mut DecScratch,
    out: &mut [u8],
) -> Result<usize> {
    decode_with(chunk, width, rotate, form, s, out, true)
}

/// [`decode`], with the SIMD lanes (where the CPU has them) or the scalar steps only.
#[allow(clippy::too_many_arguments)]
fn decode_with(
    chunk: &[u8],
    width: usize,
    rotate: bool,
    form: TableForm,
    s: &mut DecScratch,
    out: &mut [u8],
    simd: bool,
) -> Result<usize> {
    let [st, _] = &mut s.modelled;
    let mut a = parse(chunk, width, form, out.len() / width, st, &mut s.lanes)?;
    let p = a.params(st);
    run_lanes(width, rotate, &p, a.lanes(), out, simd)?;
    a.check()?;
    Ok(a.end)
}

/// Two modelled chunks (`a` and `b`, each its bytes and its output) decoded with their lanes
/// run together where both have eight lanes and the CPU has AVX2: one chunk's lanes are a
/// single chain of dependent steps (state, table read, state), two chains keep the core
/// busier (a fifth faster on flat BF16 activations). Returns each chunk's end offset.
pub(crate) fn decode_two(
    a: (&[u8], &mut [u8]),
    b: (&[u8], &mut [u8]),
    width: usize,
    rotate: bool,
    form: TableForm,
    s: &mut DecScratch,
) -> Result<(usize, usize)> {
    let [sa, sb] = &mut s.modelled;
    let mut pa = parse(a.0, width, form, a.1.len() / width, sa, &mut s.lanes)?;
    let mut pb = parse(b.0, width, form, b.1.len() / width, sb, &mut s.lanes)?;
    let (qa, qb) = (pa.params(sa), pb.params(sb));
    #[cfg(target_arch = "x86_64")]
    if width > 1 && pa.k == 8 && pb.k == 8 && planepack_core::cpu::x86_64_v3() {
        let (la, lb) = (pa.lanes(), pb.lanes());
        let common = |l: &[LaneState]| l.iter().map(|l| l.end - l.i).min().unwrap_or(0);
        let (ca, cb) = (common(la), common(lb));
        // SAFETY: the CPU has AVX2 (x86-64-v3); eight lanes each at their first element,
        // with at least `ca` (`cb`) elements; `Params`' words and planes padded as the kernel
        // needs (`parse`).
        let ok = unsafe {
            match (width, rotate) {
                (2, true) => avx2::steps_two::<2, true>((&qa, la, ca, a.1), (&qb, lb, cb, b.1)),
                (2, false) => avx2::steps_two::<2, false>((&qa, la, ca, a.1), (&qb, lb, cb, b.1)),
                (_, true) => avx2::steps_two::<4, true>((&qa, la, ca, a.1), (&qb, lb, cb, b.1)),
                (_, false) => avx2::steps_two::<4, false>((&qa, la, ca, a.1), (&qb, lb, cb, b.1)),
            }
        };
        if !ok {
            return Err(Error::corrupt("a modelled lane breaks the format's rules"));
        }
    }
    // The elements past the lanes' common length (or all of them), one chunk at a time.
    run_lanes(width, rotate, &qa, pa.lanes(), a.1, true)?;
    run_lanes(width, rotate, &qb, pb.lanes(), b.1, true)?;
    pa.check()?;
    pb.check()?;
    Ok((pa.end, pb.end))
}

/// A modelled chunk read up to its lanes: header, tables (as decode slots), lane words and
/// decoded literal planes in a [`DecodeState`], each lane's state at its first element.
struct Parsed {
    states: [LaneState; MAX_LANES],
    k: usize,
    u: usize,
    dict: u32,
    e0: u8,
    total_words: usize,
    literals: usize,
    /// The offset after the chunk's last plane.
    end: usize,
}

impl Parsed {
    fn lanes(&mut self) -> &mut [LaneState] {
        &mut self.states[..self.k]
    }

    fn params<'a>(&self, st: &'a DecodeState) -> Params<'a> {
        Params {
            slots: &st.slots,
            words: &st.words,
            total_words: self.total_words,
            planes: &st.planes,
            literals: self.literals,
            u: self.u,
            dict: self.dict,
            e0: self.e0,
        }
    }

    /// After every element: each lane read exactly its words and literals and ends at the
    /// state it started from when encoded.
    fn check(&self) -> Result<()> {
        for l in &self.states[..self.k] {
            if l.word != l.word_end || l.x != L || l.lit != l.lit_end {
                return Err(Error::corrupt(
                    "modelled lane does not end where its header says",
                ));
            }
        }
        Ok(())
    }
}

/// Read a modelled chunk of `n` elements up to its lanes into `st` (`lanes`: the plane
/// decoder's scratch, for the literal planes).
fn parse(
    chunk: &[u8],
    width: usize,
    form: TableForm,
    n: usize,
    st: &mut DecodeState,
    lanes_scratch: &mut (Vec<u32>, Vec<u16>),
) -> Result<Parsed> {
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
    st.slots.clear();
    for _ in 0..CONTEXTS {
        let (t, next) = ModelTable::read(chunk, at, form)?;
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
    // Two spare words after them: the SIMD decoder reads 32 bits at a word index up to the
    // count.
    crate::lanes::words_from_bytes(words, &mut st.words);
    at += 2 * total_words;
    st.planes.resize_with(width.max(2), Vec::new);
    for p in 1..width {
        at = get_plane(
            chunk,
            at,
            literals,
            form,
            lanes_scratch,
            &mut st.planes[p],
            None,
        )?;
        // Four spare bytes: the SIMD decoder reads 32 bits at a literal index up to the count.
        st.planes[p].extend_from_slice(&[0; 4]);
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
    Ok(Parsed {
        states,
        k,
        u,
        dict,
        e0,
        total_words,
        literals,
        end: at,
    })
}

/// [`decode_lanes`] for the element width and rotation.
fn run_lanes(
    width: usize,
    rotate: bool,
    p: &Params,
    lanes: &mut [LaneState],
    out: &mut [u8],
    simd: bool,
) -> Result<()> {
    match (width, rotate) {
        (1, _) => decode_lanes::<1, false>(p, lanes, out, simd),
        (2, true) => decode_lanes::<2, true>(p, lanes, out, simd),
        (2, false) => decode_lanes::<2, false>(p, lanes, out, simd),
        (_, true) => decode_lanes::<4, true>(p, lanes, out, simd),
        (_, false) => decode_lanes::<4, false>(p, lanes, out, simd),
    }
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
/// read, state) are independent, so the CPU overlaps them. With AVX2, each group of eight
/// lanes goes through [`avx2::steps`] for the elements they all have, and the scalar steps
/// finish the rest (and check the same rules).
fn decode_lanes<const W: usize, const R: bool>(
    p: &Params,
    lanes: &mut [LaneState],
    out: &mut [u8],
    simd: bool,
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if simd && W > 1 && planepack_core::cpu::x86_64_v3() {
        for group in lanes.chunks_exact_mut(8) {
            let common = group.iter().map(|l| l.end - l.i).min().unwrap_or(0);
            // (Lanes already stepped, by [`decode_two`], go on in the scalar steps.)
            let fresh = group.iter().all(|l| l.i == l.start);
            // SAFETY: the CPU has AVX2 (x86-64-v3); eight lanes at their first element, each
            // with at least `common` elements left; `Params`' words and planes are padded as
            // the kernel needs.
            if common > 0 && fresh && !unsafe { avx2::steps::<W, R>(p, group, common, out) } {
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
    let (f, cum) = (e >> 20, e >> 9 & (MODEL_SCALE - 1));
    l.x = f * (l.x >> MODEL_PROB_BITS) + slot - cum;
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
mod avx2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lanes::Encoder;

    fn sample(n: usize, width: usize, seed: u64) -> Vec<u8> {
        planepack_testkit::activation_like(n, width, 50, seed)
    }

    fn chunk_of(elems: &[u8], width: usize, rotate: bool, form: TableForm) -> Vec<u8> {
        chunk_with_up(elems, width, rotate, form, 50)
    }

    /// The modelled chunk of `elems` with "up" `row` elements back.
    fn chunk_with_up(
        elems: &[u8],
        width: usize,
        rotate: bool,
        form: TableForm,
        row: usize,
    ) -> Vec<u8> {
        let mut s = Scratch::default();
        let (_, tables, plans) = plan(elems, width, rotate, row, form, &mut s);
        let mut out = Vec::new();
        encode(
            width,
            &tables,
            &plans,
            form,
            &mut s,
            &mut Encoder::default(),
            &mut out,
        )
        .unwrap();
        out
    }

    /// The SIMD lanes keep a tile of eight steps before writing it where "up" reaches back
    /// eight elements or more, and write each step where it reaches less far: every "up"
    /// distance around that edge, both widths, lanes of every length modulo the tile, decode
    /// as the scalar steps do.
    #[test]
    fn simd_lanes_at_every_up_distance() {
        for width in [2usize, 4] {
            for row in 1..=12 {
                for n in [8 * 1024 + 8 * 13, 8 * 1024 + 8 * 13 + 5, 40_000] {
                    let elems = planepack_testkit::activation_like(n, width, row, row as u64);
                    let chunk = chunk_with_up(&elems, width, true, TableForm::Compact, row);
                    let mut s = DecScratch::default();
                    for simd in [true, false] {
                        let mut out = vec![0u8; elems.len()];
                        let end = decode_with(
                            &chunk,
                            width,
                            true,
                            TableForm::Compact,
                            &mut s,
                            &mut out,
                            simd,
                        )
                        .unwrap();
                        assert_eq!(end, chunk.len());
                        assert!(out == elems, "W{width} U{row} n{n} simd {simd}");
                    }
                }
            }
        }
    }

    /// Two chunks decoded together give what each gives alone, for every width, lengths
    /// that leave lanes unequal or empty, and "up" distances on both sides of the tile; and
    /// damaged pairs fail exactly where one of their chunks fails alone, else decode alike.
    #[test]
    fn two_chunks_decode_as_each_alone() {
        let mut r = 5u64;
        for width in [1usize, 2, 4] {
            for (na, nb, row) in [
                (9000, 40_000, 50),
                (40_000, 9000, 9),
                (8192, 8192, 3),
                (40_000, 7, 0),
                (1023, 9000, 12),
            ] {
                let ea = sample(na, width, na as u64);
                let eb = planepack_testkit::activation_like(nb, width, row.max(1), nb as u64 + 1);
                let ca = chunk_of(&ea, width, true, TableForm::Compact);
                let cb = chunk_with_up(&eb, width, true, TableForm::Compact, row);
                let mut s = DecScratch::default();
                let alone = |c: &[u8], len: usize, s: &mut DecScratch| {
                    let mut o = vec![0u8; len];
                    decode_with(c, width, true, TableForm::Compact, s, &mut o, true).map(|e| (e, o))
                };
                // Both chunks together: their ends and outputs.
                let two = |a: &[u8], b: &[u8], s: &mut DecScratch| {
                    let mut oa = vec![0u8; ea.len()];
                    let mut ob = vec![0u8; eb.len()];
                    let ends = decode_two(
                        (a, &mut oa),
                        (b, &mut ob),
                        width,
                        true,
                        TableForm::Compact,
                        s,
                    );
                    ends.map(|e| (e, oa, ob))
                };
                let (ends, oa, ob) = two(&ca, &cb, &mut s).unwrap();
                assert_eq!(ends, (ca.len(), cb.len()));
                assert!(oa == ea && ob == eb, "W{width} {na} {nb} U{row}");
                for _ in 0..100 {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    let (mut ba, mut bb) = (ca.clone(), cb.clone());
                    let hit = if r.is_multiple_of(2) {
                        &mut ba
                    } else {
                        &mut bb
                    };
                    let at = (r >> 8) as usize % hit.len();
                    hit[at] ^= 1 << ((r >> 4) % 8);
                    let (ra, rb) = (alone(&ba, ea.len(), &mut s), alone(&bb, eb.len(), &mut s));
                    match (ra, rb, two(&ba, &bb, &mut s)) {
                        (Ok((xa, ya)), Ok((xb, yb)), Ok((e, oa, ob))) => {
                            assert!(e == (xa, xb) && oa == ya && ob == yb, "W{width} byte {at}")
                        }
                        (Ok(_), Ok(_), Err(e)) => {
                            panic!("W{width} byte {at}: pair fails alone: {e}")
                        }
                        (_, _, Ok(_)) => {
                            panic!("W{width} byte {at}: a chunk fails, the pair decodes")
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// The SIMD lanes and the scalar steps decode every valid chunk alike, and agree on
    /// thousands of damaged ones: the same bytes or both an error.
    #[test]
    fn simd_and_scalar_lanes_agree() {
        let mut r = 77u64;
        for width in [1usize, 2, 4] {
            for (rotate, form) in [(true, TableForm::Compact), (false, TableForm::Wide)] {
                for n in [1usize, 7, 1023, 8192, 9000, 40_000] {
                    let elems = sample(n, width, n as u64 + width as u64);
                    let chunk = chunk_of(&elems, width, rotate, form);
                    let mut s = DecScratch::default();
                    for simd in [true, false] {
                        let mut out = vec![0u8; elems.len()];
                        let end = decode_with(&chunk, width, rotate, form, &mut s, &mut out, simd)
                            .unwrap();
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
                        let ra = decode_with(&bad, width, rotate, form, &mut s, &mut a, true);
                        let rb = decode_with(&bad, width, rotate, form, &mut s, &mut b, false);
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
