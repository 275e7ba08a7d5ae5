//! Finding the invariant bits: mask and bitval per column, the threshold sweep, sampling.
//!
//! Follows the reference library (`preproc_data`): for every column `j` and bit `b`, count the
//! rows with the bit set; with `N` rows and threshold `t`, the bit is invariant-one if
//! `ones > t*N` (in f32) and invariant-zero if `ones < (1-t)*N` (in f64), both strict. The
//! sweep tries t = 0.70, 0.75, ..., 0.95, summed in f32 as the reference's loop does (see
//! [`SWEEP`]), and keeps the t with the largest score, the lower t on
//! a tie; the score is the reference's estimate (bits a row saves beyond its participation
//! bits, summed over rows that save anything). No positive score leaves an empty mask.

use crate::row::Columns;
use crate::Rows;

/// Mask and bitval of one group of rows: one `W`-bit word per column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    /// Chunk width in bits: 16, 32 or 64.
    pub width: u32,
    /// Bit set = invariant bit of that column.
    pub mask: Vec<u64>,
    /// The invariant value at every masked bit; zero elsewhere.
    pub bitval: Vec<u64>,
}

impl Mask {
    /// A mask with no invariant bits (every row will be stored raw).
    pub fn empty(width: u32, columns: usize) -> Mask {
        Mask {
            width,
            mask: vec![0; columns],
            bitval: vec![0; columns],
        }
    }

    pub fn columns(&self) -> usize {
        self.mask.len()
    }

    /// Metadata bytes the decoder needs: mask and bitval at `W` bits per column.
    pub fn metadata_bytes(&self) -> usize {
        2 * self.mask.len() * (self.width / 8) as usize
    }

    /// Total invariant bits.
    pub fn invariant_bits(&self) -> u64 {
        self.mask.iter().map(|m| m.count_ones() as u64).sum()
    }
}

/// Per-column, per-bit counts of ones over a set of rows.
pub struct BitCounts {
    pub width: u32,
    pub rows: usize,
    /// `counts[j * W + b]` = rows whose chunk `j` has bit `b` set.
    pub counts: Vec<u32>,
}

/// Columns [`preprocess`] counts at once. Its counters take `4 W` bytes a column (32 bytes a
/// byte of row), so rows of more columns are counted a tile at a time and the memory of
/// finding a mask stays bounded whatever the row length (a 64 MB one-row tensor once took
/// 2 GB of counters).
pub const COUNT_TILE: usize = 1 << 16;

impl BitCounts {
    /// Count over the rows `row_ids` of `rows`.
    pub fn of(rows: &Rows, row_ids: impl Iterator<Item = usize>) -> BitCounts {
        BitCounts::of_columns(rows, row_ids, 0..rows.columns)
    }

    /// Count columns `cols` over the rows `row_ids` of `rows` (column `cols.start` is the
    /// counts' column 0).
    pub fn of_columns(
        rows: &Rows,
        row_ids: impl Iterator<Item = usize>,
        cols: std::ops::Range<usize>,
    ) -> BitCounts {
        let (w, cb) = (rows.width as usize, (rows.width / 8) as usize);
        let bytes = cols.len() * cb;
        // `acc[k * bytes + i]`: rows since the last flush whose byte `i` (of the columns' bytes)
        // has bit `k` set. Bit `t` of chunk `j` is bit `t % 8` of byte `j * cb + t / 8`, so the
        // counts are the bytes' bits, whatever the width.
        let mut acc = vec![0u8; 8 * bytes];
        let mut counts = vec![0u32; cols.len() * w];
        let flush = |acc: &mut [u8], counts: &mut [u32]| {
            for (k, by_byte) in acc.chunks_exact_mut(bytes.max(1)).enumerate() {
                for (i, c) in by_byte.iter_mut().enumerate() {
                    counts[(i / cb) * w + (i % cb) * 8 + k] += *c as u32;
                    *c = 0;
                }
            }
        };
        let (mut n, mut pending) = (0, 0);
        for r in row_ids {
            n += 1;
            count_byte_bits(&rows.row(r)[cols.start * cb..cols.end * cb], &mut acc);
            pending += 1;
            if pending == u8::MAX {
                flush(&mut acc, &mut counts);
                pending = 0;
            }
        }
        flush(&mut acc, &mut counts);
        BitCounts {
            width: rows.width,
            rows: n,
            counts,
        }
    }

    /// The mask for threshold `t`, with the reference's strict comparisons.
    pub fn mask(&self, t: f32) -> Mask {
        let w = self.width as usize;
        let columns = self.counts.len() / w;
        let mut m = Mask::empty(self.width, columns);
        let hi = t * self.rows as f32;
        let lo = (1.0 - t as f64) * self.rows as f64;
        for j in 0..columns {
            for b in 0..w {
                let ones = self.counts[j * w + b];
                if ones as f32 > hi {
                    m.mask[j] |= 1 << b;
                    m.bitval[j] |= 1 << b;
                } else if (ones as f64) < lo {
                    m.mask[j] |= 1 << b;
                }
            }
        }
        m
    }
}

/// The thresholds of the reference sweep, as its f32 loop computes them
/// (`for (float t = 0.7; t <= 1.0; t += 0.05)`): 0.69999999, 0.75, 0.80000001, 0.85000002,
/// 0.90000004, 0.95000005. The last two are not the literals `0.9f32` (0.89999998) and
/// `0.95f32` (0.94999999): with `N` rows and exactly 10 % (5 %) of them deviant, `(1 - t) * N`
/// falls just below the deviant count, so such a bit is not invariant, as in the reference.
/// The loop's seventh value, exactly 1.0, is left out: it always gives an empty mask, whose
/// score (0) never beats an earlier one.
pub const SWEEP: [f32; 6] = {
    let mut out = [0.0f32; 6];
    let mut t = 0.7f32;
    let mut i = 0;
    while i < out.len() {
        out[i] = t;
        t += 0.05;
        i += 1;
    }
    out
};

/// The reference's score of a mask on some rows: for every row, the invariant bits of its
/// participating chunks, minus one participation bit per chunk, counted when positive.
pub fn score(rows: &Rows, row_ids: impl Iterator<Item = usize>, m: &Mask) -> i64 {
    let ids: Vec<usize> = row_ids.collect();
    let mut kept = vec![0i64; ids.len()];
    add_kept(rows, &ids, 0..rows.columns, m, &mut kept);
    let v = rows.columns as i64;
    kept.into_iter().map(|saved| (saved - v).max(0)).sum()
}

planepack_core::with_avx2! {
    /// Add bit `k` of each byte of `bytes` to `acc[k * bytes.len() + i]` (eight planes of
    /// 8-bit counters, which the caller empties before they overflow): per bit, one pass of
    /// shifts and adds over the row, 32 bytes to a vector with AVX2. Counting the set bits of
    /// each chunk one by one was a third of IBP's encode, with branches on the data.
    fn count_byte_bits(bytes: &[u8], acc: &mut [u8]) = count_byte_bits_any;
}

#[inline(always)]
fn count_byte_bits_any(bytes: &[u8], acc: &mut [u8]) {
    for (k, by_byte) in acc.chunks_exact_mut(bytes.len().max(1)).enumerate() {
        for (c, &x) in by_byte.iter_mut().zip(bytes) {
            *c += (x >> k) & 1;
        }
    }
}

/// Add to `kept[i]` the invariant bits of row `ids[i]`'s chunks `cols` that participate under
/// `m` (`m`'s first column is `cols.start`; a chunk participates when its masked bits equal the
/// bitval): [`crate::row::saved_bits`], the packed row's own saving.
fn add_kept(rows: &Rows, ids: &[usize], cols: std::ops::Range<usize>, m: &Mask, kept: &mut [i64]) {
    let c = Columns::new(m);
    let b = (rows.width / 8) as usize;
    for (&r, k) in ids.iter().zip(kept) {
        *k += crate::row::saved_bits(&rows.row(r)[cols.start * b..cols.end * b], &c) as i64;
    }
}

/// Which rows build the mask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sample {
    /// Every row.
    All,
    /// The first `ceil(fraction * N)` rows, as the authors' sensitivity study does.
    Prefix(f64),
    /// `ceil(fraction * N)` rows evenly strided through the group, from a seeded offset.
    Strided { fraction: f64, seed: u64 },
}

impl Sample {
    /// The row indices this sample takes from `n` rows.
    pub fn rows(self, n: usize) -> Vec<usize> {
        let take = |f: f64| ((f * n as f64).ceil() as usize).clamp(n.min(1), n);
        match self {
            Sample::All => (0..n).collect(),
            Sample::Prefix(f) => (0..take(f)).collect(),
            Sample::Strided { fraction, seed } => {
                let k = take(fraction);
                if k == 0 {
                    return vec![];
                }
                let stride = n as f64 / k as f64;
                let offset = (seed % 1_000_003) as f64 / 1_000_003.0 * stride;
                (0..k)
                    .map(|i| ((offset + i as f64 * stride) as usize).min(n - 1))
                    .collect()
            }
        }
    }
}

/// How the threshold is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// The reference sweep over [`SWEEP`].
    Sweep,
    /// A caller's fixed threshold (the authors' KV-cache integration uses 0.8).
    Fixed(f32),
}

/// What preprocessing chose.
#[derive(Debug, Clone)]
pub struct Preprocessed {
    pub mask: Mask,
    /// The threshold used (for an empty mask after a sweep: the first swept value).
    pub threshold: f32,
    /// The reference score of the chosen mask on the sample.
    pub score: i64,
    /// Every threshold tried with its score, in sweep order.
    pub tried: Vec<(f32, i64)>,
}

/// Build the mask for `rows` from `sample` with `threshold`.
pub fn preprocess(rows: &Rows, threshold: Threshold, sample: Sample) -> Preprocessed {
    let ids = sample.rows(rows.count);
    if rows.columns > COUNT_TILE {
        return preprocess_tiled(rows, threshold, &ids);
    }
    let counts = BitCounts::of(rows, ids.iter().copied());
    Preprocessed::choose(
        rows.width,
        rows.columns,
        threshold.candidates().into_iter().map(|t| {
            let m = counts.mask(t);
            let s = score(rows, ids.iter().copied(), &m);
            (t, m, s)
        }),
    )
}

/// [`preprocess`] for rows of more than [`COUNT_TILE`] columns, in bounded memory and with the
/// same result: each tile's counts give each threshold's mask for those columns, and what a
/// row keeps under it is added to the row's total (the score needs whole rows); the winner's
/// mask is then counted again tile by tile. The per-row totals are few: rows this wide are few
/// in a tensor of bounded size.
fn preprocess_tiled(rows: &Rows, threshold: Threshold, ids: &[usize]) -> Preprocessed {
    let tiles = || {
        (0..rows.columns)
            .step_by(COUNT_TILE)
            .map(|c| c..(c + COUNT_TILE).min(rows.columns))
    };
    let thresholds = threshold.candidates();
    let n = ids.len();
    let mut kept = vec![0i64; thresholds.len() * n];
    for cols in tiles() {
        let counts = BitCounts::of_columns(rows, ids.iter().copied(), cols.clone());
        for (k, &t) in thresholds.iter().enumerate() {
            let m = counts.mask(t);
            add_kept(rows, ids, cols.clone(), &m, &mut kept[k * n..(k + 1) * n]);
        }
    }
    let v = rows.columns as i64;
    let tried = thresholds
        .iter()
        .zip(kept.chunks(n.max(1)))
        .map(|(&t, per_row)| (t, per_row.iter().map(|s| (s - v).max(0)).sum()))
        .collect();
    Preprocessed::from_scores(rows.width, rows.columns, tried, |t| {
        let mut m = Mask {
            width: rows.width,
            mask: Vec::with_capacity(rows.columns),
            bitval: Vec::with_capacity(rows.columns),
        };
        for cols in tiles() {
            let part = BitCounts::of_columns(rows, ids.iter().copied(), cols).mask(t);
            m.mask.extend(part.mask);
            m.bitval.extend(part.bitval);
        }
        m
    })
}

impl Threshold {
    /// The thresholds tried, in order.
    pub fn candidates(self) -> Vec<f32> {
        match self {
            Threshold::Sweep => SWEEP.to_vec(),
            Threshold::Fixed(t) => vec![t],
        }
    }
}

impl Preprocessed {
    /// The reference's choice among `(threshold, mask, score)` candidates in sweep order: the
    /// first with the highest score; and, as in the reference, no mask at all when the best
    /// saves nothing on the sample. (The CPU and GPU encoders both choose here.)
    pub fn choose(
        width: u32,
        columns: usize,
        scored: impl IntoIterator<Item = (f32, Mask, i64)>,
    ) -> Preprocessed {
        let mut best: Option<(f32, i64, Mask)> = None;
        let mut tried = Vec::new();
        for (t, m, s) in scored {
            tried.push((t, s));
            if best.as_ref().is_none_or(|(_, bs, _)| s > *bs) {
                best = Some((t, s, m));
            }
        }
        let (t, _, m) = best.expect("at least one threshold");
        Preprocessed::from_scores(width, columns, tried, |bt| {
            debug_assert_eq!(bt, t);
            m
        })
    }

    /// The same choice from the scores alone (`tried`, in sweep order), building only the
    /// winner's mask with `mask_of(threshold)`.
    pub fn from_scores(
        width: u32,
        columns: usize,
        tried: Vec<(f32, i64)>,
        mask_of: impl FnOnce(f32) -> Mask,
    ) -> Preprocessed {
        let mut best = 0;
        for (k, &(_, s)) in tried.iter().enumerate() {
            if s > tried[best].1 {
                best = k;
            }
        }
        let (t, s) = *tried.get(best).expect("at least one threshold");
        let mask = if s > 0 {
            mask_of(t)
        } else {
            Mask::empty(width, columns)
        };
        Preprocessed {
            mask,
            threshold: t,
            score: s,
            tried,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counts (8-bit counters flushed every 255 rows) and the scores (`row::saved_bits`)
    /// against a count and a score one chunk and one bit at a time: every width, more
    /// rows than a flush takes, a column range that starts inside the row, every threshold.
    #[test]
    fn counts_and_scores_match_one_bit_at_a_time() {
        let mut rng = planepack_testkit::Rng(5);
        for width in [16u32, 32, 64] {
            let b = (width / 8) as usize;
            let (n, columns) = (600, 13);
            // Bytes from a small alphabet (bit 6 of the upper bytes always set, so its counters
            // fill between flushes): masks at every threshold, many rows participating.
            let data: Vec<u8> = (0..n * columns * b)
                .map(|i| match i % b {
                    0 => rng.next_u64() as u8,
                    _ => [0x40, 0x40, 0x40, 0x41, 0xC0][rng.below(5) as usize],
                })
                .collect();
            let rows = Rows::new(&data, columns * b, width).unwrap();
            let ids: Vec<usize> = (0..n).filter(|r| r % 7 != 3).collect();
            let cols = 2..columns;
            let got = BitCounts::of_columns(&rows, ids.iter().copied(), cols.clone());
            assert_eq!(got.rows, ids.len());
            for (j, col) in cols.clone().enumerate() {
                for bit in 0..width as usize {
                    let ones = ids
                        .iter()
                        .filter(|&&r| crate::row::chunk(rows.row(r), col, b) >> bit & 1 == 1)
                        .count();
                    assert_eq!(
                        got.counts[j * width as usize + bit],
                        ones as u32,
                        "W={width}"
                    );
                }
            }
            let counts = BitCounts::of(&rows, ids.iter().copied());
            for t in SWEEP {
                let m = counts.mask(t);
                let expect: i64 = ids
                    .iter()
                    .map(|&r| {
                        let kept: i64 = (0..columns)
                            .map(|j| {
                                let x = crate::row::chunk(rows.row(r), j, b);
                                match x & m.mask[j] == m.bitval[j] {
                                    true => m.mask[j].count_ones() as i64,
                                    false => 0,
                                }
                            })
                            .sum();
                        (kept - columns as i64).max(0)
                    })
                    .sum();
                assert_eq!(
                    score(&rows, ids.iter().copied(), &m),
                    expect,
                    "W={width} t={t}"
                );
            }
        }
    }

    /// The tiled search for wide rows chooses exactly what counting whole rows at once does:
    /// same threshold, scores and mask, for every sample and threshold policy.
    #[test]
    fn tiled_counting_chooses_as_whole_rows_do() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for (width, rows_n) in [(16u32, 5usize), (32, 3), (64, 4)] {
            let b = (width / 8) as usize;
            let columns = 2 * COUNT_TILE + 37;
            let mut data = vec![0u8; rows_n * columns * b];
            // Low bits noisy, high bits mostly shared: masks at several thresholds differ.
            for (i, x) in data.iter_mut().enumerate() {
                let r = next();
                *x = if i % b == b - 1 {
                    (r % 97 == 0) as u8
                } else {
                    r as u8 & 0x0f
                };
            }
            let rows = Rows::new(&data, columns * b, width).unwrap();
            for (threshold, sample) in [
                (Threshold::Sweep, Sample::All),
                (Threshold::Fixed(0.8), Sample::Prefix(0.5)),
            ] {
                let ids = sample.rows(rows.count);
                let counts = BitCounts::of(&rows, ids.iter().copied());
                let whole = Preprocessed::choose(
                    width,
                    columns,
                    threshold.candidates().into_iter().map(|t| {
                        let m = counts.mask(t);
                        let s = score(&rows, ids.iter().copied(), &m);
                        (t, m, s)
                    }),
                );
                let tiled = preprocess(&rows, threshold, sample);
                assert_eq!(tiled.tried, whole.tried, "W={width}");
                assert_eq!(tiled.threshold, whole.threshold, "W={width}");
                assert!(tiled.mask == whole.mask, "W={width}: masks differ");
                assert!(
                    whole.mask.invariant_bits() > 0,
                    "W={width}: the test needs a mask"
                );
            }
        }
    }
}
