//! Order-0 frequency tables: how counts become 12-bit frequencies, how a table is written and
//! read back, and the 4096-slot decode table built from it.
//!
//! Why 12 bits: on the exponent planes of real tensors the coder then stays within about 0.01
//! bit per symbol of the entropy (reference `entropy.md`, section 9), a decode table is 4096
//! entries (16 KiB as u32 on the CPU, 4 KiB of symbols + 1 KiB of (freq, cum) on a GPU), and
//! with 16-bit renormalisation words one read per symbol is always enough.

use planepack_core::error::take;
use planepack_core::{Error, Result};

/// Probability precision: frequencies sum to `1 << PROB_BITS`.
pub const PROB_BITS: u32 = 12;
/// Sum of every table's frequencies.
pub const PROB_SCALE: u32 = 1 << PROB_BITS;
/// A decode slot ([`Table::decode_slots`]) holds its symbol in the low byte, the symbol's
/// start `cum` from this bit and its frequency less one from [`SLOT_FREQ_SHIFT`] (on top, so
/// that the decoders' dependency chain takes it with one shift); `PROB_BITS` bits each. The
/// GPU kernels read the same entries (`shaders/rans.wgsl`, from planepack-gpu's constants).
pub const SLOT_CUM_SHIFT: u32 = 8;
/// See [`SLOT_CUM_SHIFT`].
pub const SLOT_FREQ_SHIFT: u32 = 32 - PROB_BITS;
const _: () = assert!(SLOT_CUM_SHIFT >= 8 && SLOT_CUM_SHIFT + PROB_BITS <= SLOT_FREQ_SHIFT);
/// Tables with at most this many symbols list them; larger ones use a 256-bit bitmap.
pub const LIST_MAX: usize = 32;

/// How a stream writes its frequency tables: `Wide` (u16 frequencies, a symbol list or map;
/// every stream without flag bit 2) or `Compact` (`crate::compact`; flag bit 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableForm {
    Wide,
    Compact,
}

/// A normalised table: `freq[s]` is 0 for absent symbols, and the present ones sum to 4096.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub freq: [u16; 256],
    /// Cumulative frequency below each symbol.
    pub cum: [u16; 256],
}

/// Bits each symbol costs under each of `tables` (`PROB_BITS - log2 freq`): entry
/// `t * 256 + s` for symbol `s` of table `t`, infinite where the table is absent or the
/// symbol has no frequency. What the encoder prices a context, row or sign plane by.
pub(crate) fn cost_table(tables: &[Option<Table>]) -> Vec<f32> {
    let mut cost = vec![f32::INFINITY; tables.len() * 256];
    for (c, t) in tables.iter().enumerate() {
        if let Some(t) = t {
            for s in 0..256 {
                if t.freq[s] > 0 {
                    cost[c * 256 + s] = (PROB_BITS as f64 - log2_int(t.freq[s].into())) as f32;
                }
            }
        }
    }
    cost
}

/// Bits `counts` (a histogram per table, in the tables' order) cost under a [`cost_table`].
pub(crate) fn cost_table_bits(cost: &[f32], counts: &[[u32; 256]]) -> f64 {
    let mut bits = 0.0f64;
    for (c, h) in counts.iter().enumerate() {
        for (s, &n) in h.iter().enumerate() {
            if n > 0 {
                bits += n as f64 * cost[c * 256 + s] as f64;
            }
        }
    }
    bits
}

impl Table {
    /// Frequencies for `counts` (not all zero): every present symbol gets at least 1, and
    /// the table codes the counted symbols in the fewest bits ([`normalize`]), a
    /// deterministic function of the counts.
    pub fn from_counts(counts: &[u32; 256]) -> Table {
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        assert!(total > 0, "a table needs at least one symbol");
        let mut freq = [0u16; 256];
        normalize(counts, PROB_SCALE, &mut freq);
        Table::from_freq(freq)
    }

    fn from_freq(freq: [u16; 256]) -> Table {
        let mut cum = [0u16; 256];
        let mut c = 0u32;
        for s in 0..256 {
            cum[s] = c as u16;
            c += freq[s] as u32;
        }
        Table { freq, cum }
    }

    /// Number of symbols present.
    pub fn present(&self) -> usize {
        self.freq.iter().filter(|&&f| f > 0).count()
    }

    /// Bytes [`Table::write`] takes.
    pub fn written_len(&self, form: TableForm) -> usize {
        if form == TableForm::Compact {
            return crate::compact::written_len(&self.freq);
        }
        let p = self.present();
        1 + if p <= LIST_MAX { p } else { 32 } + 2 * p
    }

    /// Append the table in `form`. Wide: `present - 1` (u8), the symbols (a list of up to 32
    /// increasing bytes, or a 32-byte bitmap, bit `s % 8` of byte `s / 8`), then each present
    /// symbol's frequency as u16 LE in increasing symbol order.
    pub fn write(&self, out: &mut Vec<u8>, form: TableForm) {
        if form == TableForm::Compact {
            return crate::compact::write(&self.freq, out);
        }
        let p = self.present();
        out.push((p - 1) as u8);
        if p <= LIST_MAX {
            out.extend((0..256).filter(|&s| self.freq[s] > 0).map(|s| s as u8));
        } else {
            let mut bits = [0u8; 32];
            for s in (0..256).filter(|&s| self.freq[s] > 0) {
                bits[s / 8] |= 1 << (s % 8);
            }
            out.extend_from_slice(&bits);
        }
        for s in (0..256).filter(|&s| self.freq[s] > 0) {
            out.extend_from_slice(&self.freq[s].to_le_bytes());
        }
    }

    /// Read a table at `at`; returns it and the offset after it. Every rule of the format is
    /// checked: symbols increasing, bitmap population equal to the count, each frequency at
    /// least 1, frequencies summing to exactly 4096.
    pub fn read(input: &[u8], at: usize, form: TableForm) -> Result<(Table, usize)> {
        if form == TableForm::Compact {
            let mut freq = [0u16; 256];
            let (_, end) = crate::compact::read(input, at, &mut freq, PROB_SCALE, false)?;
            return Ok((Table::from_freq(freq), end));
        }
        let p = take(input, at, 1, "table size")?[0] as usize + 1;
        let mut pos = at + 1;
        let mut symbols = Vec::with_capacity(p);
        if p <= LIST_MAX {
            let list = take(input, pos, p, "table symbols")?;
            for w in list.windows(2) {
                if w[0] >= w[1] {
                    return Err(Error::corrupt_at("table symbols not increasing", pos));
                }
            }
            symbols.extend(list.iter().map(|&s| s as usize));
            pos += p;
        } else {
            let bits = take(input, pos, 32, "table bitmap")?;
            symbols.extend((0..256).filter(|&s| bits[s / 8] >> (s % 8) & 1 == 1));
            if symbols.len() != p {
                return Err(Error::corrupt_at(
                    "table bitmap disagrees with its count",
                    pos,
                ));
            }
            pos += 32;
        }
        let raw = take(input, pos, 2 * p, "table frequencies")?;
        let mut freq = [0u16; 256];
        let mut sum = 0u32;
        for (s, f) in symbols.iter().zip(raw.chunks_exact(2)) {
            let f = u16::from_le_bytes([f[0], f[1]]);
            if f == 0 {
                return Err(Error::corrupt_at("table frequency 0", pos));
            }
            freq[*s] = f;
            sum += f as u32;
        }
        if sum != PROB_SCALE {
            return Err(Error::corrupt_at(
                format!("table frequencies sum to {sum}, not {PROB_SCALE}"),
                pos,
            ));
        }
        Ok((Table::from_freq(freq), pos + 2 * p))
    }

    /// The decode table: for each of the 4096 slots, `symbol | cum << 8 | (freq - 1) << 20`
    /// ([`SLOT_CUM_SHIFT`], [`SLOT_FREQ_SHIFT`]).
    pub fn decode_slots(&self, slots: &mut Vec<u32>) {
        // Each symbol's slots written eight at a time from its first, the last eight past
        // its end overwritten by the next symbol's (or cut off at the end): a plane of a few
        // thousand symbols fills these 4096 slots once, so a loop per slot was a fifth of
        // decoding it.
        // (Every slot is written, so what the buffer held is not cleared first.)
        const BLOCK: usize = 8;
        debug_assert_eq!(self.freq.iter().map(|&f| f as u32).sum::<u32>(), PROB_SCALE);
        slots.resize(PROB_SCALE as usize + BLOCK, 0);
        let mut at = 0usize;
        for s in 0..256 {
            let f = self.freq[s] as usize;
            if f > 0 {
                let e = s as u32
                    | (self.cum[s] as u32) << SLOT_CUM_SHIFT
                    | (f as u32 - 1) << SLOT_FREQ_SHIFT;
                let end = (at + f).min(PROB_SCALE as usize);
                let mut i = at;
                while i < end {
                    slots[i..i + BLOCK].copy_from_slice(&[e; BLOCK]);
                    i += BLOCK;
                }
                at = end;
            }
        }
        slots.truncate(PROB_SCALE as usize);
    }

    /// The decode slots of every present table of `tables` back to back (4096 each), and
    /// per entry of `tables` the index of its slots in units of 4096, `absent` where it has
    /// no table: a stream's context or row tables as a decoder reads them.
    pub fn stacked_slots<const N: usize>(
        tables: &[Option<Table>; N],
        absent: u8,
    ) -> (Vec<u32>, [u8; N]) {
        let mut slots = Vec::with_capacity(N * PROB_SCALE as usize);
        let mut index = [absent; N];
        let mut one = Vec::new();
        for (c, t) in tables.iter().enumerate() {
            if let Some(t) = t {
                index[c] = (slots.len() / PROB_SCALE as usize) as u8;
                t.decode_slots(&mut one);
                slots.extend_from_slice(&one);
            }
        }
        (slots, index)
    }

    /// Ideal coded size in bits of `counts` under this table (for choices, not for the
    /// stream).
    pub fn cost_bits(&self, counts: &[u32; 256]) -> f64 {
        let log2 = log2_table();
        (0..256)
            .filter(|&s| counts[s] > 0)
            .map(|s| counts[s] as f64 * (PROB_BITS as f64 - log2[self.freq[s] as usize]))
            .sum()
    }
}

/// `log2` of every integer up to [`LOG2_TABLED`] (every frequency a table holds, every count
/// of a rotation sample's plane), computed once by libm's `log2` itself, so prices read from
/// it are those computed in place, bit for bit: every plan prices each present symbol of each
/// table it weighs, and libm's `log2` was an eighth of encoding a tensor of a few KiB.
static LOG2_SMALL: std::sync::LazyLock<Box<[f64]>> =
    std::sync::LazyLock::new(|| (0..=LOG2_TABLED).map(|f| (f as f64).log2()).collect());

/// The largest integer whose `log2` [`log2_int`] looks up.
const LOG2_TABLED: u32 = 8192;

/// `(x as f64).log2()`, looked up for `x` up to [`LOG2_TABLED`] (frequencies, small counts).
#[inline]
pub(crate) fn log2_int(x: u32) -> f64 {
    match LOG2_SMALL.get(x as usize) {
        Some(&l) => l,
        None => (x as f64).log2(),
    }
}

/// `log2` of 0 to 8192 (a frequency's, of at most [`PROB_SCALE`], is inside), for loops
/// that look up many.
pub(crate) fn log2_table() -> &'static [f64] {
    &LOG2_SMALL
}

/// Byte histogram.
pub fn histogram(bytes: &[u8]) -> [u32; 256] {
    // Short planes (a small tensor's, a modelled chunk's literals) in one table: zeroing and
    // summing four costs more than the stalls it saves there.
    if bytes.len() < 1024 {
        let mut out = [0u32; 256];
        for &b in bytes {
            out[b as usize] += 1;
        }
        return out;
    }
    // Four sub-histograms break the store-to-load dependency on runs of equal bytes.
    let mut h = [[0u32; 256]; 4];
    let mut quads = bytes.chunks_exact(4);
    for q in &mut quads {
        h[0][q[0] as usize] += 1;
        h[1][q[1] as usize] += 1;
        h[2][q[2] as usize] += 1;
        h[3][q[3] as usize] += 1;
    }
    for &b in quads.remainder() {
        h[0][b as usize] += 1;
    }
    let mut out = [0u32; 256];
    for s in 0..256 {
        out[s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
    }
    out
}

/// Frequencies summing to `scale` for `counts` (not all zero), into `freq` (of the length of
/// `counts`) that code the counted symbols in the fewest bits, `sum c log2(scale / f)`, with
/// every present symbol at least 1: first `max(1, floor(count * scale / total))`, then the
/// difference to `scale` one unit at a time, a surplus each to the symbol whose code it
/// shortens most (`c log2((f + 1) / f)`), a shortfall (the floor of 1 overshot) each from
/// the symbol above 1 it lengthens least (`c log2(f / (f - 1))`); ties to the lowest symbol.
/// (The objective is concave and separable, so unit steps by the best marginal reach its
/// optimum.) Giving the whole surplus to the most frequent symbol, as this did before, cost
/// a quarter of a percent of the mantissa planes: floor shorts every symbol of a flat table.
/// The plane tables and the modelled chunk's context tables share this rule (format-rans.md,
/// informative).
pub(crate) fn normalize(counts: &[u32], scale: u32, freq: &mut [u16]) {
    let total: u64 = counts.iter().map(|&c| c as u64).sum();
    debug_assert!(total > 0 && freq.len() == counts.len());
    // floor(count * scale / total) without an integer division a symbol (which was most of
    // this function's time): in f64, where every operand and product here is an integer
    // below 2^53 and so exact, the product by the reciprocal is off by at most one, which a
    // comparison corrects. Absent symbols are skipped (most planes have runs of them).
    let (t, inv, scale_f) = (total as f64, 1.0 / total as f64, scale as f64);
    let mut sum = 0i64;
    for (f, &c) in freq.iter_mut().zip(counts) {
        if c == 0 {
            *f = 0;
            continue;
        }
        let a = c as f64 * scale_f;
        let mut q = (a * inv) as u32;
        if q as f64 * t > a {
            q -= 1;
        } else if (q + 1) as f64 * t <= a {
            q += 1;
        }
        let q = q.max(1) as u16;
        *f = q;
        sum += q as i64;
    }
    debug_assert!(counts.iter().zip(freq.iter()).all(|(&c, &f)| f as u64
        == if c > 0 {
            (c as u64 * scale as u64 / total).max(1)
        } else {
            0
        }));
    let mut diff = scale as i64 - sum;
    if diff == 0 {
        return;
    }
    // A unit more at frequency `f` saves `c log2((f + 1) / f)` bits and a unit less costs
    // `c log2(f / (f - 1))`, close to `2c / (2f + 1)` and `2c / (2f - 1)` (within 4 % at
    // f = 1, 0.4 % at 4): compared as those fractions, in integers, no logarithm a step.
    let grow = diff > 0;
    let saving = |s: usize, f: u16| Ratio::new(counts[s] as u64, 2 * f as u64 + 1, s);
    // A shortfall is taken where a unit costs least: the largest inverse.
    let inverse_cost = |s: usize, f: u16| Ratio::new(2 * f as u64 - 1, counts[s] as u64, s);
    let heap_of = |freq: &[u16], least: u16, key: &dyn Fn(usize, u16) -> Ratio| {
        (0..freq.len())
            .filter(|&s| freq[s] >= least)
            .map(|s| key(s, freq[s]))
            .collect::<std::collections::BinaryHeap<_>>()
    };
    if grow {
        // From the floors, each unit to the best saving reaches the optimum (every floor is
        // at most its optimum): the `diff` best savings over all units. Nearly always no
        // symbol's second unit is among them (the floors fall short by less than a unit
        // each), and then they are the `diff` best first units, a selection in one pass
        // (a heap a unit was 3 % of the encoder's time).
        let mut first: Vec<Ratio> = (0..freq.len())
            .filter(|&s| freq[s] > 0)
            .map(|s| saving(s, freq[s]))
            .collect();
        let d = diff as usize;
        if d <= first.len() {
            let (best, last, _) = first.select_nth_unstable_by(d - 1, |a, b| b.cmp(a));
            let second = |r: &Ratio| saving(r.symbol, freq[r.symbol] + 1);
            if best.iter().chain([&*last]).all(|r| second(r) < *last) {
                for r in best.iter().chain([&*last]) {
                    freq[r.symbol] += 1;
                }
                return;
            }
        }
        // Else one unit at a time from a heap, O(log n) a step.
        let mut heap = heap_of(freq, 1, &saving);
        while diff > 0 {
            let s = heap.pop().expect("a present symbol").symbol;
            freq[s] += 1;
            diff -= 1;
            heap.push(saving(s, freq[s]));
        }
        return;
    }
    let mut heap = heap_of(freq, 2, &inverse_cost);
    while diff < 0 {
        let s = heap.pop().expect("frequencies above 1 to take from").symbol;
        freq[s] -= 1;
        diff += 1;
        if freq[s] > 1 {
            heap.push(inverse_cost(s, freq[s]));
        }
    }
    // Where the floor of 1 overshot, some floors may have been below the optimum while
    // others gave up units: move a unit from the symbol it costs least to the one it saves
    // most while that saves bits (at a point no such move improves, the concave objective is
    // at its optimum). Tables of a few rare symbols take a move or two; bounded all the same.
    for _ in 0..4 * freq.len() {
        let present = || (0..freq.len()).filter(|&s| freq[s] > 0);
        let to = present().map(|s| saving(s, freq[s])).max();
        let from = present()
            .filter(|&s| freq[s] > 1)
            .map(|s| inverse_cost(s, freq[s]))
            .max();
        let (Some(to), Some(from)) = (to, from) else {
            break;
        };
        // Saving (c_t / (2 f_t + 1)) above cost (c_f / (2 f_f - 1)).
        if to.symbol == from.symbol || to.num * from.num <= from.den * to.den {
            break;
        }
        freq[from.symbol] -= 1;
        freq[to.symbol] += 1;
    }
}

/// `num / den` for `symbol`, ordered by value (exactly: the products fit in 64 bits), then
/// the lowest symbol first: [`normalize`]'s marginal savings and costs.
struct Ratio {
    num: u64,
    den: u64,
    symbol: usize,
}

impl Ratio {
    fn new(num: u64, den: u64, symbol: usize) -> Ratio {
        Ratio { num, den, symbol }
    }
}

impl PartialEq for Ratio {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Ratio {}

impl Ord for Ratio {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.num * other.den)
            .cmp(&(other.num * self.den))
            .then(other.symbol.cmp(&self.symbol))
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;

    /// The coded bits of `counts` under `freq` at `scale`.
    fn bits(counts: &[u32], freq: &[u16], scale: u32) -> f64 {
        counts
            .iter()
            .zip(freq)
            .filter(|(&c, _)| c > 0)
            .map(|(&c, &f)| c as f64 * (scale as f64 / f as f64).log2())
            .sum()
    }

    /// Every table sums to the scale, keeps every counted symbol (and only those), and no
    /// unit moved from one symbol to another codes the counts in noticeably fewer bits: flat tables
    /// (where the floors fall short by up to a unit a symbol), skewed ones, and tables of
    /// more rare symbols than the floor of 1 leaves room for.
    #[test]
    fn frequencies_sum_to_the_scale_and_no_unit_is_better_elsewhere() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for case in 0..300 {
            let scale = if case % 3 == 0 { 2048 } else { 4096 };
            let n = if case % 3 == 0 { 260 } else { 256 };
            let mut counts = vec![0u32; n];
            for (s, c) in counts.iter_mut().enumerate() {
                let r = next();
                *c = match case % 5 {
                    0 => 1000 + (r % 64) as u32,
                    1 => ((r % 1_000_000) as u32) >> (s % 20),
                    2 => (r % 3) as u32,
                    3 => (s == 7) as u32 * 1_000_000 + (r % 2) as u32,
                    _ => ((r % 100) < 30) as u32 * (1 + (r >> 40) as u32 % 5000),
                };
            }
            if counts.iter().all(|&c| c == 0) {
                counts[0] = 1;
            }
            let mut freq = vec![0u16; n];
            normalize(&counts, scale, &mut freq);
            assert_eq!(
                freq.iter().map(|&f| f as u32).sum::<u32>(),
                scale,
                "case {case}"
            );
            for (s, (&c, &f)) in counts.iter().zip(&freq).enumerate() {
                assert_eq!(c > 0, f > 0, "case {case} symbol {s}");
            }
            let best = bits(&counts, &freq, scale);
            // The bits a unit moved from `a` to `b` saves: what it saves `b` less what it
            // costs `a`.
            let mut worst = 0f64;
            for a in (0..n).filter(|&a| freq[a] > 1) {
                let (ca, fa) = (counts[a] as f64, freq[a] as f64);
                let cost = ca * (fa / (fa - 1.0)).log2();
                for b in (0..n).filter(|&b| b != a && counts[b] > 0) {
                    let (cb, fb) = (counts[b] as f64, freq[b] as f64);
                    worst = worst.max((cb * ((fb + 1.0) / fb).log2() - cost) / best);
                }
            }
            // (The savings are compared as fractions close to the logarithms: a hundred-
            // thousandth of the bits is the slack that leaves; the surplus to the most
            // frequent symbol, as before, lost 0.25 % on flat tables.)
            assert!(
                worst < 1e-5,
                "case {case}: a unit moved saves {worst:e} of the bits"
            );
        }
    }
}
