//! Stream version 8: plane 1 coded with its element's exponent context and the low bit of the
//! symbol one row up (a **sign plane**).
//!
//! Why: rotation puts a 2-byte float's sign in the low bit of plane 1, beside its top mantissa
//! bits, and in a feature map or a KV cache the sign of a channel's element is much like the
//! sign one row (image row, token) earlier: on the CNN's `[40, 192, 7, 7]` batch-norm maps the
//! sign's entropy is 0.65-0.92 bit given the sign one row up (numpy, plug-in), where OpenZL's
//! generic graph stored 10.1 bits an element and the context planes 10.6. The study's estimate
//! (`bench-results/activation-study-workloads.md`, "up-sign context"): workloads activations
//! +1.9 % -> +2.9 % over OpenZL's best graph, KV caches +3.4 %. A context by the element's own
//! exponent ([`crate::contexts`]) stays in: each symbol's table is that of the pair (exponent
//! context of its element, class of the symbol one row up: none, low bit 0, low bit 1), up to
//! 18 tables stored once per stream.
//!
//! What keeps decoding parallel: exactly a row plane's rule ([`crate::row_contexts`]): where
//! the lane count `k` divides `U`, the symbol one row up is the same lane's, `U / k` steps
//! earlier; else (`4k <= U`) another lane's, at least four rounds before. Plane 0 of the chunk
//! is decoded first, as for a context plane. The left neighbour's sign would say more
//! (activations +3.1 % against +2.9 %) but needs lanes of contiguous elements: not worth a
//! lane layout of its own.
//!
//! The format is `docs/format-rans.md` ("Sign tables", version 8).

use crate::contexts::{context, merged, ChunkCounts, ContextEncoder, CONTEXTS};
use crate::lanes::Prepared;
use crate::model::{Table, TableForm};
use planepack_core::error::take;
use planepack_core::{Error, Result};

/// The stream version that allows sign planes (kind [`PLANE_SIGN`]).
pub const VERSION_SIGN: u8 = 8;
/// The plane kind of a dense chunk's plane 1 coded with the stream's sign tables.
pub const PLANE_SIGN: u8 = 5;
/// Classes of the symbol one row up: [`SIGN_FIRST`] (none: the chunk's first row), its low
/// bit 0, its low bit 1.
pub const SIGN_CLASSES: usize = 3;
/// The class of a symbol with no symbol one row up in its chunk.
pub const SIGN_FIRST: usize = 0;
/// Sign tables a stream may hold: table `class * CONTEXTS + ctx`.
pub const SIGN_TABLES: usize = SIGN_CLASSES * CONTEXTS;
/// Bytes of the table set (a bit per table).
pub const SIGN_SET_BYTES: usize = 3;
/// The longest sign section: the table set and 18 wide tables of 256 symbols.
pub const MAX_SECTION_BYTES: usize = SIGN_SET_BYTES + SIGN_TABLES * (1 + 32 + 2 * 256);

const _: () = assert!(SIGN_TABLES <= 8 * SIGN_SET_BYTES);

/// The class of a symbol whose symbol one row up is `up` (`None`: the chunk's first row).
#[inline(always)]
pub fn sign_class(up: Option<u8>) -> usize {
    match up {
        None => SIGN_FIRST,
        Some(b) => 1 + (b & 1) as usize,
    }
}

/// The table of a symbol of exponent context `ctx` and class `class`.
#[inline(always)]
pub fn sign_table(ctx: usize, class: usize) -> usize {
    class * CONTEXTS + ctx
}

/// [`crate::Rans::PLANES`] with sign planes: what tests of the sign planes alone encode with.
pub const SIGN_PLANES_ONLY: crate::Rans = crate::Rans {
    sign_contexts: true,
    ..crate::Rans::PLANES
};

/// A stream's sign section: a table per (class, context) that occurs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignTables {
    pub tables: [Option<Table>; SIGN_TABLES],
}

impl SignTables {
    /// Bytes [`SignTables::write`] takes.
    pub fn written_len(&self, form: TableForm) -> usize {
        SIGN_SET_BYTES
            + self
                .tables
                .iter()
                .flatten()
                .map(|t| t.written_len(form))
                .sum::<usize>()
    }

    /// Append the section: the table set (bit `t` of the 24-bit little-endian set for each
    /// table present), then the tables in increasing `t`.
    pub fn write(&self, out: &mut Vec<u8>, form: TableForm) {
        let set = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_some())
            .fold(0u32, |m, (t, _)| m | 1 << t);
        out.extend_from_slice(&set.to_le_bytes()[..SIGN_SET_BYTES]);
        for t in self.tables.iter().flatten() {
            t.write(out, form);
        }
    }

    /// `stream` (a version-8 stream) with sign table `t` taken out of its sign section: what
    /// the tests of the decoders' absent-table rule start from (a sign plane's element whose
    /// table is absent is corrupt, whatever its lanes do). `None` if the stream has no such
    /// table, or its section is not written as this encoder writes it.
    pub fn without_table(stream: &[u8], t: usize) -> Option<Vec<u8>> {
        let h = crate::parse_header(stream).ok()?;
        let tables = h.sign_contexts.as_deref()?;
        tables.tables.get(t)?.as_ref()?;
        let (end, form) = (h.table_at, h.tables);
        let write = |t: &Self, out: &mut Vec<u8>| t.write(out, form);
        crate::header::section_edited(stream, end, tables, |s| s.tables[t] = None, write)
    }

    /// Read the section at `at` (at least one table, no bit past the last table, every table
    /// rule checked); returns it and the offset after it.
    pub fn read(input: &[u8], at: usize, form: TableForm) -> Result<(SignTables, usize)> {
        let head = take(input, at, SIGN_SET_BYTES, "sign tables")?;
        let set = u32::from_le_bytes([head[0], head[1], head[2], 0]);
        if set == 0 || set >> SIGN_TABLES != 0 {
            return Err(Error::corrupt_at(format!("sign table set {set:#08x}"), at));
        }
        let mut pos = at + SIGN_SET_BYTES;
        let mut tables: [Option<Table>; SIGN_TABLES] = Default::default();
        for (c, t) in tables.iter_mut().enumerate() {
            if set >> c & 1 == 1 {
                let (table, next) = Table::read(input, pos, form)?;
                *t = Some(table);
                pos = next;
            }
        }
        Ok((SignTables { tables }, pos))
    }

    /// The decoder's form: every present table's 4096 decode slots back to back, and per
    /// table its index in them ([`crate::contexts::ABSENT`] where it has none).
    pub fn decoder(&self) -> SignDecoder {
        let (slots, by_table) = Table::stacked_slots(&self.tables, crate::contexts::ABSENT);
        SignDecoder { slots, by_table }
    }
}

/// The sign tables as a decoder reads them (built once per stream).
#[derive(Debug, Clone)]
pub struct SignDecoder {
    /// 4096 decode slots per present table, in table order.
    pub slots: Vec<u32>,
    /// Per table (`class * CONTEXTS + ctx`), its index in `slots` (in units of 4096), or
    /// [`crate::contexts::ABSENT`].
    pub by_table: [u8; SIGN_TABLES],
}

impl SignDecoder {
    /// Per class, per plane-0 byte, its table's index in `slots`, or
    /// [`crate::contexts::ABSENT`], for the stream's `e0`.
    pub fn table_of(&self, e0: u8) -> [[u8; 256]; SIGN_CLASSES] {
        std::array::from_fn(|class| {
            std::array::from_fn(|e| self.by_table[sign_table(context(e as u8, e0), class)])
        })
    }
}

/// Each symbol's table (its index among the [`SIGN_TABLES`]) of a sign plane `plane` whose
/// plane 0 is `top`, with row distance `u` and reference `e0`, into `sel`: two passes of byte
/// arithmetic that vectorise (the context, then the class added).
pub(crate) fn sign_selectors(top: &[u8], plane: &[u8], u: usize, e0: u8, sel: &mut Vec<u8>) {
    const _: () = assert!(SIGN_FIRST == 0 && CONTEXTS == 6);
    crate::contexts::contexts_into(top, e0, sel);
    if u < sel.len() {
        // Class 1 + the low bit: table 6 (class + 1) + ctx... as `sign_table`.
        for (s, &up) in sel[u..].iter_mut().zip(plane) {
            *s += 6 + 6 * (up & 1);
        }
    }
}

/// The encoder's side: the tables, the stream's `E0` and row distance, each (table, symbol)'s
/// cost in bits, and each chunk's counts by table as the tables were counted.
pub(crate) struct SignEncoder {
    pub tables: SignTables,
    pub e0: u8,
    pub distance: usize,
    /// `cost[t * 256 + s]`: bits symbol `s` costs in table `t` (infinite where absent).
    pub cost: Vec<f32>,
    pub prepared: Prepared,
    chunk_counts: ChunkCounts<SIGN_TABLES>,
}

impl SignEncoder {
    fn new(tables: SignTables, e0: u8, distance: usize, chunk_counts: Vec<[u32; 256]>) -> Self {
        let cost = crate::model::cost_table(&tables.tables);
        let by_table: Vec<Option<&Table>> = tables.tables.iter().map(Option::as_ref).collect();
        let prepared = Prepared::new(&by_table);
        SignEncoder {
            tables,
            e0,
            distance,
            cost,
            prepared,
            chunk_counts: ChunkCounts(chunk_counts),
        }
    }

    /// Chunk `index`'s plane-1 histogram, from the counts kept for it (every element is
    /// counted in one table), if they were kept and count `n` elements.
    pub fn chunk_plane_counts(&self, index: usize, n: usize) -> Option<[u32; 256]> {
        self.chunk_counts.plane_counts(index, n)
    }

    /// Bits chunk `index`'s plane 1 costs coded with the tables (infinite where a symbol has
    /// no frequency in its table), if its counts were kept and agree with `counts`, its
    /// plane-1 histogram; else `None`.
    pub fn chunk_bits(&self, index: usize, counts: &[u32; 256]) -> Option<f64> {
        self.chunk_counts.bits(index, counts, &self.cost)
    }
}

/// Count plane 1 of the rotated 2-byte elements of `part` by sign table (row distance `u`,
/// contexts `ctx_of`): [`SIGN_TABLES`] histograms into `h`, as [`count_with_rows`] counts them
/// (its row counts dropped: where the encoder has no row tables to count, which the default
/// settings never leave it).
fn count_signs(part: &[u8], u: usize, ctx_of: &[u8; 256], h: &mut Vec<[u32; 256]>) {
    count_with_rows(part, u, &[0; 256], ctx_of, h);
    h.drain(..crate::row_contexts::ROW_CONTEXTS);
}

/// Whether a tensor of `width`-byte elements, `rotate`d or not, with rows of `row` elements
/// (0: no shape) may have sign tables at all: rotated 2-byte elements with rows.
pub(crate) fn possible(width: usize, rotate: bool, row: usize) -> bool {
    width == 2 && rotate && row > 0
}

/// Tensors smaller than this never get sign tables (as row tables: [`crate::row_contexts`]).
pub const MIN_TENSOR_BYTES: usize = crate::row_contexts::MIN_TENSOR_BYTES;
/// The least the sign one row up must tell of an element's sign, in the rotation samples, in
/// bits an element, before the body is counted for the tables.
#[cfg(not(fuzzing))]
const SAMPLE_MIN_BITS: f64 = 0.02;
#[cfg(fuzzing)]
const SAMPLE_MIN_BITS: f64 = f64::NEG_INFINITY;
/// How many times their own size the tables must save over the whole tensor.
#[cfg(not(fuzzing))]
const TABLES_PAY_TIMES: f64 = 2.0;
#[cfg(fuzzing)]
const TABLES_PAY_TIMES: f64 = f64::NEG_INFINITY;

/// Whether the tensor is counted for sign tables (the encoder's informative rule,
/// docs/format-rans.md): rotated 2-byte elements, at least [`MIN_TENSOR_BYTES`], rows of `row`
/// elements shorter than a chunk, and in the rotation samples the sign one row up tells at
/// least [`SAMPLE_MIN_BITS`] of the sign (`H(sign) - H(sign | class)`, counts over all
/// samples).
pub(crate) fn considered(
    body: &[u8],
    width: usize,
    rotate: bool,
    row: usize,
    chunk_bytes: usize,
) -> bool {
    if !possible(width, rotate, row)
        || body.len() < MIN_TENSOR_BYTES
        || row >= chunk_bytes / width
        || u32::try_from(row).is_err()
    {
        return false;
    }
    // The samples: the sign's counts by class.
    let mut signs = [[0u64; 2]; SIGN_CLASSES];
    for r in crate::encode::rotation_samples(body.len(), width) {
        let elems: &[[u8; 2]] = body[r].as_chunks::<2>().0;
        for (i, e) in elems.iter().enumerate() {
            let up = i.checked_sub(row).map(|j| elems[j][1] >> 7);
            signs[sign_class(up)][(e[1] >> 7) as usize] += 1;
        }
    }
    let h = |c: [u64; 2]| {
        let n = (c[0] + c[1]) as f64;
        c.iter()
            .filter(|&&x| x > 0)
            .map(|&x| -(x as f64) * (x as f64 / n).log2())
            .sum::<f64>()
    };
    let all = [
        signs[0][0] + signs[1][0] + signs[2][0],
        signs[0][1] + signs[1][1] + signs[2][1],
    ];
    let n = (all[0] + all[1]) as f64;
    let told = (h(all) - signs.iter().map(|&c| h(c)).sum::<f64>()) / n.max(1.0);
    told >= SAMPLE_MIN_BITS
}

/// The tensor's sign tables where coding plane 1 by sign table pays ([`kept`]), for a tensor
/// the caller found [`considered`], counted in a pass of their own (the encoder counts them
/// with the row tables' counts where it has those: [`count_with_rows`]). `e0` is the
/// stream's `E0` (the context section's).
pub(crate) fn plan_tables(
    body: &[u8],
    row: usize,
    e0: u8,
    contexts: Option<&ContextEncoder>,
    chunk_bytes: usize,
    form: TableForm,
    parallel: bool,
) -> Option<SignEncoder> {
    let context_of = crate::contexts::context_table(e0);
    let (chunk_counts, all) =
        crate::contexts::count_chunks::<SIGN_TABLES>(body, chunk_bytes, parallel, |chunk, h| {
            count_signs(chunk, row, &context_of, h)
        });
    kept(e0, row, chunk_counts, &all, contexts, form, parallel)
}

/// The encoder of the whole body's counts `all` (and each chunk's, [`SIGN_TABLES`] histograms
/// a chunk, by the contexts of `e0`, row distance `row`), if the chunks save enough with it:
/// per chunk, plane 1 at the smallest of raw, its own table (entropy, table) and the context
/// tables (cross entropy) against the sign tables, where positive, at least twice the
/// section (the chunks priced on rayon's threads if `parallel`).
pub(crate) fn kept(
    e0: u8,
    row: usize,
    chunk_counts: Vec<[u32; 256]>,
    all: &[[u32; 256]; SIGN_TABLES],
    contexts: Option<&ContextEncoder>,
    form: TableForm,
    parallel: bool,
) -> Option<SignEncoder> {
    let tables: [Option<Table>; SIGN_TABLES] = std::array::from_fn(|c| {
        all[c]
            .iter()
            .any(|&n| n > 0)
            .then(|| Table::from_counts(&all[c]))
    });
    let tables = SignTables { tables };
    let section = tables.written_len(form) as f64;
    let enc = SignEncoder::new(tables, e0, row, chunk_counts);
    let saving = enc.chunk_counts.savings(parallel, |chunk| {
        let sum = merged(chunk);
        let own = Table::from_counts(&sum);
        let raw = sum.iter().map(|&n| n as f64).sum::<f64>();
        let mut now = (own.cost_bits(&sum) / 8.0 + own.written_len(form) as f64).min(raw);
        if let Some(c) = contexts {
            now = now.min(c.cost_bits(&by_context(chunk)) / 8.0);
        }
        now - crate::model::cost_table_bits(&enc.cost, chunk) / 8.0
    });
    (saving >= TABLES_PAY_TIMES * section).then_some(enc)
}

/// A chunk's [`SIGN_TABLES`] counts summed over the classes: its plane-1 counts by exponent
/// context, what the context tables count.
pub(crate) fn by_context(counts: &[[u32; 256]]) -> [[u32; 256]; CONTEXTS] {
    std::array::from_fn(|ctx| merged(&[0, 1, 2].map(|class| counts[sign_table(ctx, class)])))
}

/// A chunk's row counts and sign counts in one pass over its elements (rotated, 2 bytes): `h`
/// becomes the [`crate::row_contexts::ROW_CONTEXTS`] histograms of plane 0 by the row context
/// `row_of` of the element `u` back, then the [`SIGN_TABLES`] ones of [`count_signs`] (plane
/// 1 by the exponent context `ctx_of` and the sign `u` back). The same counts as the two
/// passes (tested); where the encoder counts both, the second pass was a tenth of encoding a
/// KV cache.
pub(crate) fn count_with_rows(
    chunk: &[u8],
    u: usize,
    row_of: &[u8; 256],
    ctx_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    if chunk.len() / 2 <= 4 * u16::MAX as usize {
        count_with_rows_in::<u16>(chunk, u, row_of, ctx_of, h)
    } else {
        count_with_rows_in::<u32>(chunk, u, row_of, ctx_of, h)
    }
}

fn count_with_rows_in<C>(
    chunk: &[u8],
    u: usize,
    row_of: &[u8; 256],
    ctx_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) where
    C: Copy + Default + std::ops::AddAssign + From<u8> + Into<u32>,
{
    use crate::row_contexts::{ROW_CONTEXTS, ROW_FIRST};
    // A set: the row histograms, then the sign histograms.
    const SET: usize = (ROW_CONTEXTS + SIGN_TABLES) * 256;
    const SIGNS_AT: usize = ROW_CONTEXTS * 256;
    const CLASS: usize = CONTEXTS * 256;
    let elems: &[[u8; 2]] = chunk.as_chunks::<2>().0;
    let planes = |e: &[u8; 2]| {
        let t = u16::from_le_bytes(*e).rotate_left(1);
        ((t >> 8) as usize, (t & 0xff) as usize)
    };
    let row_at: [u16; 256] =
        std::array::from_fn(|e| ((row_of[e] as usize).min(ROW_FIRST) * 256) as u16);
    let ctx_at: [u16; 256] = std::array::from_fn(|e| (SIGNS_AT + ctx_of[e] as usize * 256) as u16);
    const FIRST_AT: usize = ROW_FIRST * 256;
    let one = C::from(1);
    let mut sets = [C::default(); 4 * SET];
    let (s0, rest) = sets.split_at_mut(SET);
    let (s1, rest) = rest.split_at_mut(SET);
    let (s2, s3) = rest.split_at_mut(SET);
    let first = u.min(elems.len());
    for e in &elems[..first] {
        let (p0, p1) = planes(e);
        s0[FIRST_AT + p0] += one;
        s0[ctx_at[p0] as usize + p1] += one;
    }
    // One element with the element one row up: its row count and its sign count.
    let count = |s: &mut [C], e: &[u8; 2], up: &[u8; 2]| {
        let (p0, p1) = planes(e);
        let (u0, _) = planes(up);
        s[row_at[u0] as usize + p0] += one;
        s[ctx_at[p0] as usize + CLASS + CLASS * (up[1] >> 7) as usize + p1] += one;
    };
    let (quads, tail) = elems[first..].as_chunks::<4>();
    let (up_quads, up_tail) = elems[..elems.len() - first].as_chunks::<4>();
    for (q, up) in quads.iter().zip(up_quads) {
        count(s0, &q[0], &up[0]);
        count(s1, &q[1], &up[1]);
        count(s2, &q[2], &up[2]);
        count(s3, &q[3], &up[3]);
    }
    for (e, up) in tail.iter().zip(up_tail) {
        count(s0, e, up);
    }
    h.clear();
    h.resize(ROW_CONTEXTS + SIGN_TABLES, [0; 256]);
    for (t, hist) in h.iter_mut().enumerate() {
        for (s, n) in hist.iter_mut().enumerate() {
            let i = t * 256 + s;
            *n = s0[i].into() + s1[i].into() + s2[i].into() + s3[i].into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BF16-like body: `rows` rows of `cols`, column `c`'s sign fixed but for every fifth
    /// row, exponents spread around 127.
    fn body(rows: usize, cols: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for r in 0..rows {
            for c in 0..cols {
                let sign = ((c % 3 == 0) ^ (r % 5 == 4)) as u16;
                let v = sign << 15 | (124 + (c % 5) as u16) << 7 | ((r * 7 + c * 13) % 128) as u16;
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// The one pass counts plane 0 as the row tables' own pass does (rows in the first chunk
    /// only, rows shorter than the 4-way interleave, 16- and 32-bit counters).
    #[test]
    fn rows_and_signs_in_one_pass_count_rows_as_their_own_pass() {
        let e0 = 126;
        let ctx_of = crate::contexts::context_table(e0);
        let row_of: [u8; 256] =
            std::array::from_fn(|e| crate::row_contexts::row_context(e as u8, e0, 0) as u8);
        for (rows, cols) in [(40usize, 24usize), (3, 5), (1, 64), (1400, 200)] {
            let data = body(rows, cols);
            let mut fused = Vec::new();
            count_with_rows(&data, cols, &row_of, &ctx_of, &mut fused);
            let mut r = Vec::new();
            crate::row_contexts::count_rows(&data, 2, true, cols, &row_of, &mut r);
            assert!(fused[..r.len()] == r[..], "{rows} rows of {cols}");
            let mut s = Vec::new();
            count_signs(&data, cols, &ctx_of, &mut s);
            assert!(fused[r.len()..] == s[..], "{rows} rows of {cols}");
        }
    }

    #[test]
    fn tables_write_and_read_back_and_refuse_damage() {
        let data = body(64, 32);
        let mut h = Vec::new();
        count_signs(&data, 32, &crate::contexts::context_table(126), &mut h);
        let tables = SignTables {
            tables: std::array::from_fn(|t| {
                h[t].iter()
                    .any(|&n| n > 0)
                    .then(|| Table::from_counts(&h[t]))
            }),
        };
        for form in [TableForm::Wide, TableForm::Compact] {
            let mut out = vec![0xee];
            tables.write(&mut out, form);
            assert_eq!(out.len(), 1 + tables.written_len(form));
            let (back, end) = SignTables::read(&out, 1, form).unwrap();
            assert_eq!((back, end), (tables.clone(), out.len()));
            for cut in 1..out.len() {
                assert!(SignTables::read(&out[..cut], 1, form).is_err());
            }
            let mut empty = out.clone();
            empty[1..4].fill(0);
            assert!(SignTables::read(&empty, 1, form).is_err());
            let mut past = out.clone();
            past[3] |= 0x80;
            assert!(SignTables::read(&past, 1, form).is_err());
        }
    }

    /// The counts are the selectors' (each symbol in the table `sign_selectors` gives it), and
    /// add up to plane 1's histogram; the first row is class none, the rest by the low bit
    /// of the symbol one row up; in 16- and 32-bit counters alike.
    #[test]
    fn counts_follow_the_selectors() {
        for (rows, cols) in [(40usize, 24usize), (1400, 200)] {
            counts_follow_the_selectors_of(rows, cols);
        }
    }

    fn counts_follow_the_selectors_of(rows: usize, cols: usize) {
        let data = body(rows, cols);
        let e0 = 126;
        let context_of = crate::contexts::context_table(e0);
        let mut h = Vec::new();
        count_signs(&data, cols, &context_of, &mut h);
        let mut planes = vec![Vec::new(), Vec::new()];
        crate::planes::split(&data, 2, true, &mut planes);
        let mut sel = Vec::new();
        sign_selectors(&planes[0], &planes[1], cols, e0, &mut sel);
        let mut by_sel = vec![[0u32; 256]; SIGN_TABLES];
        for (&t, &s) in sel.iter().zip(&planes[1]) {
            by_sel[t as usize][s as usize] += 1;
        }
        assert_eq!(h, by_sel);
        assert_eq!(merged(&h), crate::model::histogram(&planes[1]));
        for (i, &t) in sel.iter().enumerate() {
            let class = t as usize / CONTEXTS;
            let want = match i.checked_sub(cols) {
                None => SIGN_FIRST,
                Some(j) => 1 + (data[2 * j + 1] >> 7) as usize,
            };
            assert_eq!(class, want, "symbol {i}");
        }
        // The column signs tell the sign (3 rows in 5 keep the sign above): under an up
        // sign of 0 (class 1) more symbols have low bit 0 than under 1 (class 2).
        let share = |class: usize| {
            let (even, all) = (0..CONTEXTS).fold((0, 0), |(e, a), c| {
                let t = &h[sign_table(c, class)];
                (
                    e + t.iter().step_by(2).sum::<u32>(),
                    a + t.iter().sum::<u32>(),
                )
            });
            even as f64 / all as f64
        };
        assert!(share(1) > share(2) + 0.1, "{} {}", share(1), share(2));
    }
}
