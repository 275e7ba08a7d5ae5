//! Stream version 6: plane 0 coded with the exponent of the element one row up as context.
//!
//! Why: in a KV cache or a feature map, an element's magnitude is much like that of the
//! element in the same channel one token (or one image row) earlier, and plane 0 of a rotated
//! float is its exponent. An order-0 table per chunk cannot see that; a table per context of
//! the element `U` positions back (`U` the row length) can. Measured on the corpus's KV caches
//! (`[1, 3, 1024, 64]`, `U` = 64; 64 KiB chunks): 5-6 % of plane 0's bytes, about 1 % of the
//! raw tensor, tables included; on production-size transformer activations and KV caches
//! 0.7-1.1 % of raw, on CNN activations 2 % (`bench-results/activation-study-workloads.md`).
//!
//! What keeps decoding parallel: where a row plane's lane count `k` divides `U`, the element
//! `U` positions back is `U / k` symbols earlier in the same lane, already decoded by that
//! lane: the lanes stay independent, each symbol one table lookup (from one of eight tables).
//! Where `U` has no divisor of 8 or more up to the plane's lane count (a prime row length, as
//! a 1433-word vocabulary), one lane would decode the whole plane serially: from version 7 a
//! row plane may then have any `k <= U / 4` lanes, and decoders go round by round (symbol
//! `i - U` is at least four rounds before symbol `i`); a GPU decoder takes up to `U / k`
//! rounds, a multiple of four, between barriers. A
//! chunk's first `U` elements have no element above them in the chunk and use a context of
//! their own, so chunks stay independent too. The eight tables are stored once per stream, and
//! a chunk's plane 0 uses them only where that is smaller than its own order-0 table.
//!
//! The format is `docs/format-rans.md` ("Row contexts", version 6).

use crate::contexts::{add_histograms, count_chunks, merged, ChunkCounts};
use crate::lanes::{lanes_for, Prepared};
use crate::model::{Table, TableForm};
use planepack_core::error::take;
use planepack_core::{Error, Result};

/// The stream version that allows row-context planes (kind [`PLANE_ROW_CONTEXT`]).
pub const VERSION_ROW_CONTEXT: u8 = 6;
/// The stream version that allows a row plane whose lane count does not divide `U` (at most
/// `U / 4` lanes, decoded round by round: [`lanes_allowed`]).
pub const VERSION_ROW_LANES: u8 = 7;
/// The plane kind of a chunk's plane 0 coded with the stream's row tables.
pub const PLANE_ROW_CONTEXT: u8 = 4;
/// Row tables a stream may hold: seven by the exponent one row up, one for the first row.
pub const ROW_CONTEXTS: usize = 8;
/// `rctx(e) = clamp((e >> S) - (E0 >> S), ROW_CTX_BELOW, ROW_CTX_ABOVE) - ROW_CTX_BELOW`.
pub const ROW_CTX_BELOW: i32 = -3;
pub const ROW_CTX_ABOVE: i32 = 3;
/// The context of an element with no element `U` positions back in its chunk.
pub const ROW_FIRST: usize = 7;
/// The largest shift `S`.
pub const MAX_SHIFT: u8 = 7;
/// The longest row section: `U`, `S`, the table set and eight wide tables of 256 symbols.
pub const MAX_SECTION_BYTES: usize = 6 + ROW_CONTEXTS * (1 + 32 + 2 * 256);
/// What a context maps to when it has no table (a row plane using it is corrupt).
pub const ROW_ABSENT: u8 = u8::MAX;

const _: () = assert!((ROW_CTX_ABOVE - ROW_CTX_BELOW + 1) as usize == ROW_FIRST);

/// The context of an element whose element one row up has plane-0 byte `up`.
#[inline(always)]
pub fn row_context(up: u8, e0: u8, shift: u8) -> usize {
    (((up >> shift) as i32 - (e0 >> shift) as i32).clamp(ROW_CTX_BELOW, ROW_CTX_ABOVE)
        - ROW_CTX_BELOW) as usize
}

/// Lanes the encoder gives a row plane of `m` symbols with row distance `u`: a divisor of `u`
/// (so that the element one row up is in the same lane) of at most [`lanes_for`]`(m)`, the
/// largest multiple of 8 among them where there is one (the SIMD decoders take lanes in
/// eights), else the largest, unless that is below `min(8, lanes_for(m))` and `u` is at
/// least four times that: then that many lanes, which do not divide `u` (version 7; four
/// rounds or more between a GPU decoder's barriers). [`lanes_divide`] says which.
pub fn row_lanes(m: usize, u: usize) -> usize {
    let most = lanes_for(m);
    let divisors = (1..=most).filter(|d| u.is_multiple_of(*d));
    let eights = divisors.clone().filter(|d| d % 8 == 0).max();
    let divisor = eights.or_else(|| divisors.max()).unwrap_or(1);
    let across = most.min(8);
    if divisor < across && u >= 4 * across {
        across
    } else {
        divisor
    }
}

/// Whether `k` lanes of a row plane with row distance `u` are independent (`k` divides `u`);
/// else the plane needs [`VERSION_ROW_LANES`].
pub fn lanes_divide(k: usize, u: usize) -> bool {
    u.is_multiple_of(k)
}

/// Whether a row plane may have `k` lanes with row distance `u` in a stream of `version`: `k`
/// divides `u`, or (from [`VERSION_ROW_LANES`]) is at most a quarter of it (so a decoder may
/// take four rounds, a 32-bit word of each lane's symbols, between synchronisations).
pub fn lanes_allowed(k: usize, u: usize, version: u8) -> bool {
    lanes_divide(k, u) || (version >= VERSION_ROW_LANES && 4 * k <= u)
}

/// [`crate::Rans::PLANES`] with row planes: what tests of the row planes alone encode with.
pub const ROW_PLANES_ONLY: crate::Rans = crate::Rans {
    row_contexts: true,
    ..crate::Rans::PLANES
};

/// A stream's row section: the row distance `U`, the shift `S`, and a table per context that
/// occurs. `e0` is the context section's `E0` (written there, not here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowTables {
    pub e0: u8,
    pub distance: u32,
    pub shift: u8,
    pub tables: [Option<Table>; ROW_CONTEXTS],
}

impl RowTables {
    /// Bytes [`RowTables::write`] takes.
    pub fn written_len(&self, form: TableForm) -> usize {
        6 + self
            .tables
            .iter()
            .flatten()
            .map(|t| t.written_len(form))
            .sum::<usize>()
    }

    /// Append the section: `U` (u32), `S`, a byte with bit `c` set for each table present,
    /// the tables in context order.
    pub fn write(&self, out: &mut Vec<u8>, form: TableForm) {
        out.extend_from_slice(&self.distance.to_le_bytes());
        out.push(self.shift);
        out.push(
            self.tables
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_some())
                .fold(0u8, |m, (c, _)| m | 1 << c),
        );
        for t in self.tables.iter().flatten() {
            t.write(out, form);
        }
    }

    /// `stream` (a version-6 or 7 stream: no sign tables) with row context `c`'s table taken
    /// out of its row section: what the tests of the decoders' absent-table rule start from
    /// (a row plane's element whose row context has no table is corrupt, whatever its lanes
    /// do). `None` if the stream has no such table, or its section is not written as this
    /// encoder writes it.
    pub fn without_table(stream: &[u8], c: usize) -> Option<Vec<u8>> {
        let h = crate::parse_header(stream).ok()?;
        if h.sign_contexts.is_some() {
            return None;
        }
        let tables = h.row_contexts.as_deref()?;
        tables.tables.get(c)?.as_ref()?;
        let (end, form) = (h.table_at, h.tables);
        let write = |t: &Self, out: &mut Vec<u8>| t.write(out, form);
        crate::header::section_edited(stream, end, tables, |t| t.tables[c] = None, write)
    }

    /// Read the section at `at` (`U` at least 1, `S` at most 7, at least one table unless
    /// `empty_allowed` (version 8), every table rule checked); returns it and the offset
    /// after it.
    pub fn read(
        input: &[u8],
        at: usize,
        e0: u8,
        empty_allowed: bool,
        form: TableForm,
    ) -> Result<(RowTables, usize)> {
        let head = take(input, at, 6, "row tables")?;
        let distance = u32::from_le_bytes(head[..4].try_into().unwrap());
        let (shift, present) = (head[4], head[5]);
        if distance == 0 {
            return Err(Error::corrupt_at("row distance 0", at));
        }
        if shift > MAX_SHIFT {
            return Err(Error::corrupt_at(
                format!("row context shift {shift}"),
                at + 4,
            ));
        }
        if present == 0 && !empty_allowed {
            return Err(Error::corrupt_at("row table set without a table", at + 5));
        }
        let mut pos = at + 6;
        let mut tables: [Option<Table>; ROW_CONTEXTS] = Default::default();
        for (c, t) in tables.iter_mut().enumerate() {
            if present >> c & 1 == 1 {
                let (table, next) = Table::read(input, pos, form)?;
                *t = Some(table);
                pos = next;
            }
        }
        let tables = RowTables {
            e0,
            distance,
            shift,
            tables,
        };
        Ok((tables, pos))
    }

    /// The decoder's form for a stream of `version`: every present table's 4096 decode slots
    /// back to back, and per context the index of its table's slots ([`ROW_ABSENT`] where it
    /// has none).
    pub fn decoder(&self, version: u8) -> RowDecoder {
        let (slots, by_context) = Table::stacked_slots(&self.tables, ROW_ABSENT);
        RowDecoder {
            slots,
            e0: self.e0,
            shift: self.shift,
            distance: self.distance as usize,
            by_context,
            version,
            signs: None,
        }
    }
}

/// The row tables as a decoder reads them (built once per stream).
#[derive(Debug, Clone)]
pub struct RowDecoder {
    /// 4096 decode slots per present table, in context order.
    pub slots: Vec<u32>,
    pub e0: u8,
    pub shift: u8,
    /// `U`.
    pub distance: usize,
    /// Per context, its table's index in `slots` (in units of 4096), or [`ROW_ABSENT`].
    pub by_context: [u8; ROW_CONTEXTS],
    /// The stream's version: which lane counts a row plane may have ([`lanes_allowed`]).
    pub version: u8,
    /// Version 8: the sign tables, whose planes take the row distance and lane rules.
    pub signs: Option<crate::sign_contexts::SignDecoder>,
}

impl RowDecoder {
    /// Per plane-0 byte one row up, its table's index in `slots`, or [`ROW_ABSENT`].
    pub fn table_of(&self) -> [u8; 256] {
        std::array::from_fn(|e| self.by_context[row_context(e as u8, self.e0, self.shift)])
    }
}

/// Each symbol's table (index into the tables the encoder prepared, in context order) of a
/// row plane `top` with row distance `u`, into `sel`.
pub(crate) fn row_selectors(top: &[u8], u: usize, context_of: &[u8; 256], sel: &mut Vec<u8>) {
    sel.clear();
    sel.resize(top.len(), ROW_FIRST as u8);
    if u < top.len() {
        for (s, &up) in sel[u..].iter_mut().zip(top) {
            *s = context_of[up as usize];
        }
    }
}

/// The encoder's side: the tables, each (context, symbol)'s cost in bits, and each chunk's
/// counts by context as the tables were counted.
pub(crate) struct RowEncoder {
    pub tables: RowTables,
    /// Per plane-0 byte one row up, its context.
    pub context_of: [u8; 256],
    /// `cost[c * 256 + s]`: bits symbol `s` costs in context `c` (infinite where absent).
    pub cost: Vec<f32>,
    pub prepared: Prepared,
    chunk_counts: ChunkCounts<ROW_CONTEXTS>,
}

impl RowEncoder {
    fn new(tables: RowTables, chunk_counts: Vec<[u32; 256]>) -> RowEncoder {
        let context_of =
            std::array::from_fn(|e| row_context(e as u8, tables.e0, tables.shift) as u8);
        let cost = crate::model::cost_table(&tables.tables);
        let by_context: Vec<Option<&Table>> = tables.tables.iter().map(Option::as_ref).collect();
        let prepared = Prepared::new(&by_context);
        RowEncoder {
            tables,
            context_of,
            cost,
            prepared,
            chunk_counts: ChunkCounts(chunk_counts),
        }
    }

    /// Chunk `index`'s plane-0 histogram, from the counts kept for it (every element is
    /// counted in one context), if they were kept and count `n` elements.
    pub fn chunk_top_counts(&self, index: usize, n: usize) -> Option<[u32; 256]> {
        self.chunk_counts.plane_counts(index, n)
    }

    /// Bits chunk `index`'s plane 0 costs coded with the tables (infinite where a symbol has
    /// no frequency in its context's table: then it is not a row plane), if its counts were
    /// kept and agree with `top_counts`, its plane-0 histogram; else `None`.
    pub fn chunk_bits(&self, index: usize, top_counts: &[u32; 256]) -> Option<f64> {
        self.chunk_counts.bits(index, top_counts, &self.cost)
    }
}

/// Tensors smaller than this never get row tables (eight tables of up to a few hundred bytes
/// would take what they save). Under cargo-fuzz, 256 bytes, so the fuzz targets reach them.
#[cfg(not(fuzzing))]
pub const MIN_TENSOR_BYTES: usize = 64 << 10;
#[cfg(fuzzing)]
pub const MIN_TENSOR_BYTES: usize = 256;
/// How many times their own size the tables must save over the whole tensor.
#[cfg(not(fuzzing))]
const TABLES_PAY_TIMES: f64 = 2.0;
#[cfg(fuzzing)]
const TABLES_PAY_TIMES: f64 = f64::NEG_INFINITY;

/// Count the plane-0 bytes of the whole (rotated) elements of `width` bytes (2 or 4) in
/// `part`, a chunk or a sample, by row context (distance `u`) into `h` (eight histograms): an
/// element's context is `context_of` the plane-0 byte `u` elements back in `part`, the first
/// `u` elements' [`ROW_FIRST`].
pub(crate) fn count_rows(
    part: &[u8],
    width: usize,
    rotate: bool,
    u: usize,
    context_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    match (width, rotate) {
        (2, false) => count_elements::<2, false>(part, u, context_of, h),
        (2, true) => count_elements::<2, true>(part, u, context_of, h),
        (_, false) => count_elements::<4, false>(part, u, context_of, h),
        (_, true) => count_elements::<4, true>(part, u, context_of, h),
    }
}

/// [`count_rows`] for elements of `W` bytes (rotated if `R`), read straight from `part` (no
/// plane-0 copy), in four interleaved sets of the eight histograms, so that runs of one
/// exponent (most of a float tensor's plane 0) do not make each increment wait on the store
/// before it; folded at the end.
fn count_elements<const W: usize, const R: bool>(
    chunk: &[u8],
    u: usize,
    context_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    const SET: usize = ROW_CONTEXTS * 256;
    let elems: &[[u8; W]] = chunk.as_chunks::<W>().0;
    let top = |e: &[u8; W]| crate::contexts::top_two(e, W, R).0 as usize;
    // Each context's first counter; every context is below ROW_FIRST (at most 7 * 256 +
    // 255 < SET below).
    let offset: [u16; 256] =
        std::array::from_fn(|e| ((context_of[e] as usize).min(ROW_FIRST) * 256) as u16);
    let mut sets = [[0u32; SET]; 4];
    let first = u.min(elems.len());
    for (i, e) in elems[..first].iter().enumerate() {
        sets[i % 4][ROW_FIRST * 256 + top(e)] += 1;
    }
    let (quads, rest) = elems[first..].as_chunks::<4>();
    let (up_quads, up_rest) = elems[..elems.len() - first].as_chunks::<4>();
    for (q, up) in quads.iter().zip(up_quads) {
        for (set, (e, a)) in sets.iter_mut().zip(q.iter().zip(up)) {
            set[offset[top(a)] as usize | top(e)] += 1;
        }
    }
    for (e, a) in rest.iter().zip(up_rest) {
        sets[0][offset[top(a)] as usize | top(e)] += 1;
    }
    let [mut all, b, c, d] = sets;
    for (((x, y), z), w) in all.iter_mut().zip(&b).zip(&c).zip(&d) {
        *x += y + z + w;
    }
    h.clear();
    h.extend(all.as_chunks::<256>().0.iter().copied());
}

fn entropy(counts: &[u32; 256]) -> f64 {
    crate::encode::entropy_bits(counts)
}

/// The tensor's row tables, if coding plane 0 by the element one row up pays (the encoder's
/// informative rule, docs/format-rans.md): a tensor of at least [`MIN_TENSOR_BYTES`] of 2- or
/// 4-byte elements with rows of `row` elements (`0 < row` and the row shorter than a chunk);
/// `e0` the context section's `E0` where the stream has one, else the most frequent plane-0
/// byte of the nonzero elements of the rotation samples (ties: the lowest). The shift `S` is 0
/// for 4-byte elements; for 2-byte ones 0 or 3 (BF16's exponent is plane 0, FP16's its top
/// five bits), whichever codes the samples' planes 0 in fewer bits. The tables are every
/// context's counts over the whole body; they are kept if the chunks' planes 0 coded with
/// them, where that is smaller than each chunk's own table, save at least twice the section.
///
/// Returns the encoder, with the tables and each chunk's counts ([`ROW_CONTEXTS`] histograms
/// a chunk).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_tables(
    body: &[u8],
    width: usize,
    rotate: bool,
    row: usize,
    e0: Option<u8>,
    chunk_bytes: usize,
    form: TableForm,
    parallel: bool,
) -> Option<RowEncoder> {
    RowSetup::new(body, width, rotate, row, e0, chunk_bytes)?.count_and_keep(
        body,
        width,
        rotate,
        chunk_bytes,
        form,
        parallel,
    )
}

/// What [`plan_tables`] decides before it counts the body: the row distance, `E0` and the
/// shift, and with them each plane-0 byte's context.
#[derive(Clone)]
pub(crate) struct RowSetup {
    pub row: usize,
    pub e0: u8,
    pub shift: u8,
    pub context_of: [u8; 256],
}

impl RowSetup {
    /// The setup of [`plan_tables`], if the tensor can have row tables at all.
    pub(crate) fn new(
        body: &[u8],
        width: usize,
        rotate: bool,
        row: usize,
        e0: Option<u8>,
        chunk_bytes: usize,
    ) -> Option<RowSetup> {
        if !possible(body, width, row, chunk_bytes) {
            return None;
        }
        let samples = crate::encode::rotation_samples(body.len(), width);
        let e0 = e0.unwrap_or_else(|| samples_e0(body, width, rotate));
        let context_table = |shift: u8| -> [u8; 256] {
            std::array::from_fn(|e| row_context(e as u8, e0, shift) as u8)
        };
        let shift = if width == 2 {
            // The shift whose contexts leave the samples' planes 0 the fewest bits.
            let bits = |shift: u8| {
                let table = context_table(shift);
                let mut h = Vec::new();
                let mut all = vec![[0u32; 256]; ROW_CONTEXTS];
                for r in &samples {
                    count_rows(&body[r.clone()], width, rotate, row, &table, &mut h);
                    add_histograms(&mut all, &h);
                }
                all.iter().map(entropy).sum::<f64>()
            };
            if bits(3) < bits(0) {
                3
            } else {
                0
            }
        } else {
            0
        };
        Some(RowSetup {
            row,
            e0,
            shift,
            context_of: context_table(shift),
        })
    }

    /// [`plan_tables`]'s counting pass and last step.
    pub(crate) fn count_and_keep(
        self,
        body: &[u8],
        width: usize,
        rotate: bool,
        chunk_bytes: usize,
        form: TableForm,
        parallel: bool,
    ) -> Option<RowEncoder> {
        let (chunk_counts, all) =
            count_chunks::<ROW_CONTEXTS>(body, chunk_bytes, parallel, |chunk, h| {
                count_rows(chunk, width, rotate, self.row, &self.context_of, h)
            });
        self.kept(chunk_counts, &all, form, parallel)
    }

    /// [`plan_tables`]'s last step: the encoder of the whole body's counts `all` (and each
    /// chunk's, [`ROW_CONTEXTS`] histograms a chunk), if the chunks save enough with it (the
    /// chunks priced on rayon's threads if `parallel`).
    pub(crate) fn kept(
        self,
        chunk_counts: Vec<[u32; 256]>,
        all: &[[u32; 256]; ROW_CONTEXTS],
        form: TableForm,
        parallel: bool,
    ) -> Option<RowEncoder> {
        let tables: [Option<Table>; ROW_CONTEXTS] = std::array::from_fn(|c| {
            all[c]
                .iter()
                .any(|&n| n > 0)
                .then(|| Table::from_counts(&all[c]))
        });
        let tables = RowTables {
            e0: self.e0,
            distance: self.row as u32,
            shift: self.shift,
            tables,
        };
        let section = tables.written_len(form) as f64;
        let enc = RowEncoder::new(tables, chunk_counts);
        // What the chunks would save: each chunk's plane 0 under its own table (entropy,
        // table, lanes) against the row tables (cross entropy, lanes), where smaller.
        let saving = enc.chunk_counts.savings(parallel, |chunk| {
            let sum = merged(chunk);
            let own = Table::from_counts(&sum);
            let own_bytes = own.cost_bits(&sum) / 8.0 + own.written_len(form) as f64;
            own_bytes - crate::model::cost_table_bits(&enc.cost, chunk) / 8.0
        });
        (saving >= TABLES_PAY_TIMES * section).then_some(enc)
    }
}

/// Whether a tensor can have row tables: at least [`MIN_TENSOR_BYTES`] of 2- or 4-byte
/// elements, rows shorter than a chunk.
fn possible(body: &[u8], width: usize, row: usize, chunk_bytes: usize) -> bool {
    matches!(width, 2 | 4)
        && body.len() >= MIN_TENSOR_BYTES
        && row > 0
        && row < chunk_bytes / width
        && u32::try_from(row).is_ok()
}

/// The most frequent plane-0 byte of the nonzero elements of the rotation samples (ties:
/// the lowest): the row tables' `E0` where the stream has no context section.
pub(crate) fn samples_e0(body: &[u8], width: usize, rotate: bool) -> u8 {
    let mut h = [0u64; 256];
    for r in crate::encode::rotation_samples(body.len(), width) {
        for e in body[r].chunks_exact(width) {
            if e.iter().any(|&b| b != 0) {
                h[crate::contexts::top_two(e, width, rotate).0 as usize] += 1;
            }
        }
    }
    (0..256)
        .max_by_key(|&e| (h[e], std::cmp::Reverse(e)))
        .unwrap_or(0) as u8
}

/// A chunk's context counts and row counts in one pass over its elements: `h` becomes the
/// [`crate::contexts::CONTEXTS`] histograms `count_elements` of the context count makes
/// (plane 1 by the plane-0 byte's context `ctx_of`), then the [`ROW_CONTEXTS`] ones
/// [`count_rows`] makes (plane 0 by the row context `setup.context_of` of the element
/// `setup.row` back). The same counts as the two passes (tested), each element read once:
/// the two passes were a quarter of encoding a transformer's activations.
pub(crate) fn count_with_contexts(
    chunk: &[u8],
    width: usize,
    rotate: bool,
    setup: &RowSetup,
    ctx_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    let (u, row_of) = (setup.row, &setup.context_of);
    match (width, rotate) {
        (2, false) => count_both::<2, false>(chunk, u, ctx_of, row_of, h),
        (2, true) => count_both::<2, true>(chunk, u, ctx_of, row_of, h),
        (_, false) => count_both::<4, false>(chunk, u, ctx_of, row_of, h),
        (_, true) => count_both::<4, true>(chunk, u, ctx_of, row_of, h),
    }
}

/// [`count_with_contexts`] for elements of `W` bytes, in 16-bit counters where a chunk is
/// short enough that none can overflow (each of the four sets takes every fourth element;
/// the default chunk's sets then take 28 KiB, inside the first-level cache), else 32-bit.
fn count_both<const W: usize, const R: bool>(
    chunk: &[u8],
    u: usize,
    ctx_of: &[u8; 256],
    row_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    if chunk.len() / W <= 4 * u16::MAX as usize {
        count_both_in::<W, R, u16>(chunk, u, ctx_of, row_of, h)
    } else {
        count_both_in::<W, R, u32>(chunk, u, ctx_of, row_of, h)
    }
}

fn count_both_in<const W: usize, const R: bool, C>(
    chunk: &[u8],
    u: usize,
    ctx_of: &[u8; 256],
    row_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) where
    C: Copy + Default + std::ops::AddAssign + From<u8> + Into<u32>,
{
    use crate::contexts::CONTEXTS;
    // A set: the context histograms, then the row histograms.
    const SET: usize = (CONTEXTS + ROW_CONTEXTS) * 256;
    let elems: &[[u8; W]] = chunk.as_chunks::<W>().0;
    let two = |e: &[u8; W]| crate::contexts::top_two(e, W, R);
    // Each context's first counter in a set, looked up once per plane-0 byte (as the two
    // passes clamp them).
    let ctx_at: [u16; 256] =
        std::array::from_fn(|e| ((ctx_of[e] as usize).min(CONTEXTS - 1) * 256) as u16);
    let row_at: [u16; 256] =
        std::array::from_fn(|e| ((CONTEXTS + (row_of[e] as usize).min(ROW_FIRST)) * 256) as u16);
    const FIRST_AT: usize = (CONTEXTS + ROW_FIRST) * 256;
    let one = C::from(1);
    let mut sets = [[C::default(); SET]; 4];
    let first = u.min(elems.len());
    for (i, e) in elems[..first].iter().enumerate() {
        let (p0, p1) = two(e);
        let set = &mut sets[i % 4];
        set[ctx_at[p0 as usize] as usize | p1 as usize] += one;
        set[FIRST_AT + p0 as usize] += one;
    }
    let (quads, rest) = elems[first..].as_chunks::<4>();
    let (up_quads, up_rest) = elems[..elems.len() - first].as_chunks::<4>();
    for (q, up) in quads.iter().zip(up_quads) {
        for (set, (e, a)) in sets.iter_mut().zip(q.iter().zip(up)) {
            let (p0, p1) = two(e);
            set[ctx_at[p0 as usize] as usize | p1 as usize] += one;
            set[row_at[two(a).0 as usize] as usize | p0 as usize] += one;
        }
    }
    for (e, a) in rest.iter().zip(up_rest) {
        let (p0, p1) = two(e);
        sets[0][ctx_at[p0 as usize] as usize | p1 as usize] += one;
        sets[0][row_at[two(a).0 as usize] as usize | p0 as usize] += one;
    }
    h.clear();
    h.resize(CONTEXTS + ROW_CONTEXTS, [0; 256]);
    for (c, hist) in h.iter_mut().enumerate() {
        for (s, n) in hist.iter_mut().enumerate() {
            let at = c * 256 + s;
            *n = sets.iter().map(|set| set[at].into()).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass count of the context and row histograms equals the two passes', for both
    /// widths, rotated or not, every row distance (inside, at and past the chunk's length),
    /// lengths around the four sets' quads, and a chunk long enough for 32-bit counters.
    #[test]
    fn one_pass_counts_equal_the_two_passes() {
        use crate::contexts::{context_table, count_elements, CONTEXTS};
        let mut x = 11u32;
        // Elements with runs and few exponents, as activations have (and some noise).
        let bytes: Vec<u8> = (0..4 * 262_200)
            .map(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                match i % 7 {
                    0 | 1 => 0x3f,
                    2 => 0x40 + (x >> 30) as u8,
                    _ => (x >> 24) as u8,
                }
            })
            .collect();
        let ctx_of = context_table(0x7e);
        for width in [2usize, 4] {
            for rotate in [false, true] {
                for (elems, u) in [
                    (0usize, 1usize),
                    (1, 1),
                    (3, 2),
                    (4, 4),
                    (5, 1),
                    (1003, 3),
                    (1003, 64),
                    (1003, 1003),
                    (1003, 2000),
                    (32768, 384),
                    (262_200, 1536),
                ] {
                    let chunk = &bytes[..elems * width];
                    let setup = RowSetup {
                        row: u,
                        e0: 0x7e,
                        shift: 0,
                        context_of: std::array::from_fn(|e| row_context(e as u8, 0x7e, 0) as u8),
                    };
                    let mut both = Vec::new();
                    count_with_contexts(chunk, width, rotate, &setup, &ctx_of, &mut both);
                    let (mut ctx, mut rows) = (Vec::new(), Vec::new());
                    if width == 2 {
                        count_elements::<2>(chunk, rotate, &ctx_of, &mut ctx);
                    } else {
                        count_elements::<4>(chunk, rotate, &ctx_of, &mut ctx);
                    }
                    count_rows(chunk, width, rotate, u, &setup.context_of, &mut rows);
                    assert_eq!(both.len(), CONTEXTS + ROW_CONTEXTS);
                    let at = format!("width {width} rotate {rotate} elems {elems} u {u}");
                    assert!(both[..CONTEXTS] == ctx[..], "contexts, {at}");
                    assert!(both[CONTEXTS..] == rows[..], "rows, {at}");
                }
            }
        }
    }

    /// Every lane count the encoder picks is within the plane's and divides the distance, or
    /// is `min(8, lanes_for(m))`, a quarter of the distance or less, where no divisor of 8
    /// or more (or of the plane's count, if smaller) is.
    #[test]
    fn row_lanes_divide_the_distance_or_take_eight_across() {
        for m in [1usize, 100, 1024, 5000, 8192, 32768, 65536] {
            for u in 1..300usize {
                let k = row_lanes(m, u);
                let most = lanes_for(m);
                assert!((1..=most).contains(&k), "m {m} u {u} k {k}");
                if !lanes_divide(k, u) {
                    assert_eq!(k, most.min(8), "m {m} u {u}");
                    assert!(u >= 4 * k, "m {m} u {u}");
                    assert!((1..=most).all(|d| u % d != 0 || d < k), "m {m} u {u}");
                    assert!(lanes_allowed(k, u, VERSION_ROW_LANES));
                    assert!(!lanes_allowed(k, u, VERSION_ROW_CONTEXT));
                }
            }
        }
        assert_eq!(row_lanes(32768, 64), 32);
        assert_eq!(row_lanes(32768, 112), 16);
        assert_eq!(row_lanes(32768, 28), 28);
        assert_eq!(row_lanes(32768, 7), 7);
        // A prime row length (a 1433-word vocabulary): eight lanes across rows, not one.
        assert_eq!(row_lanes(40960, 1433), 8);
        assert_eq!(row_lanes(4096, 1433), 4);
        assert_eq!(row_lanes(32768, 31), 31);
        assert!(!lanes_allowed(9, 35, VERSION_ROW_LANES));
        assert!(lanes_allowed(9, 36, VERSION_ROW_LANES));
    }

    /// The section reads back as written, and its rules are enforced.
    #[test]
    fn row_tables_read_back_and_refuse_broken_sections() {
        let mut counts = [0u32; 256];
        counts[120] = 30;
        counts[121] = 10;
        let mut tables: [Option<Table>; ROW_CONTEXTS] = Default::default();
        tables[2] = Some(Table::from_counts(&counts));
        tables[ROW_FIRST] = Some(Table::from_counts(&counts));
        let t = RowTables {
            e0: 121,
            distance: 64,
            shift: 3,
            tables,
        };
        for form in [TableForm::Wide, TableForm::Compact] {
            let mut out = vec![0xee];
            t.write(&mut out, form);
            assert_eq!(out.len(), 1 + t.written_len(form));
            let (back, end) = RowTables::read(&out, 1, 121, false, form).unwrap();
            assert_eq!((back, end), (t.clone(), out.len()));
            for cut in 1..out.len() {
                assert!(RowTables::read(&out[..cut], 1, 121, false, form).is_err());
            }
            let mut bad = out.clone();
            bad[1..5].copy_from_slice(&0u32.to_le_bytes());
            assert!(RowTables::read(&bad, 1, 121, false, form).is_err());
            let mut bad = out.clone();
            bad[5] = 8;
            assert!(RowTables::read(&bad, 1, 121, false, form).is_err());
            let mut bad = out.clone();
            bad[6] = 0;
            assert!(RowTables::read(&bad, 1, 121, false, form).is_err());
        }
    }

    /// The contexts are the spec's clamp, for every byte, reference and shift.
    #[test]
    fn row_context_is_the_clamped_shifted_difference() {
        for shift in 0..=MAX_SHIFT {
            for e0 in 0..=255u8 {
                for up in 0..=255u8 {
                    let d = (up >> shift) as i32 - (e0 >> shift) as i32;
                    let c = row_context(up, e0, shift);
                    assert!(c < ROW_FIRST);
                    assert_eq!(c as i32, d.clamp(-3, 3) + 3);
                }
            }
        }
    }
}
