//! The modelled chunk's encoder: each element classified (zero, left, up, dictionary,
//! literal) with its context, the tables and the size estimated from the counts, then the
//! lanes coded backwards.

use super::*;

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
pub(crate) struct ValueCounter {
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

/// Classify `elems` (whole elements of `width` bytes) with rows of `row` elements (0: no
/// "equal to up").
pub(crate) fn classify(elems: &[u8], width: usize, rotate: bool, row: usize, s: &mut Scratch) {
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
pub(crate) fn estimate(s: &Scratch, width: usize) -> (f64, Vec<ModelTable>, Vec<(PlanePlan, f64)>) {
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
