//! Stream version 4: plane 1 coded with the element's exponent as context.
//!
//! Why: a float's plane-1 byte (for rotated BF16 its 7 mantissa bits and the sign, for FP32
//! the top 8 mantissa bits) is close to noise on its own, but not given the exponent in plane
//! 0: at the tails of a distribution a binade's values crowd its low end, so the mantissa's top
//! bits depend on how far the exponent is from the tensor's typical one. Measured on
//! production-size activations (`bench-results/activation-study-workloads.md`, "exponent
//! context"): 2.8 % of the stream on transformer BF16 activations, 0.3-1.3 % elsewhere.
//!
//! What keeps decoding parallel: plane 0 of a chunk is decoded before plane 1 (as always), so
//! symbol `i` of plane 1 knows its context `ctx(e_i)` from plane 0's symbol `i` before its
//! lane reaches it; a lane still decodes alone, one table lookup per symbol (from one of six
//! tables instead of one). The six tables are stored once per stream (a plane-1 table per
//! chunk per context would cost more than it saves), and a chunk's plane 1 uses them only
//! where that is smaller than its own order-0 table.
//!
//! The format is `docs/format-rans.md` ("Context tables", version 4).

use crate::model::{Table, TableForm};
use planepack_core::error::take;
use planepack_core::{Error, Result};

/// The stream version that allows context planes (kind [`PLANE_CONTEXT`]).
pub const VERSION_CONTEXT: u8 = 4;
/// The plane kind of a plane coded with the stream's context tables.
pub const PLANE_CONTEXT: u8 = 3;
/// Context tables a stream may hold.
pub const CONTEXTS: usize = 6;
/// `ctx(e) = clamp(e - E0, CTX_BELOW, CTX_ABOVE) - CTX_BELOW`.
pub const CTX_BELOW: i32 = -3;
pub const CTX_ABOVE: i32 = 2;

/// The longest context section: `E0`, the table set and six tables of 256 symbols.
pub const MAX_SECTION_BYTES: usize = 2 + CONTEXTS * (1 + 32 + 2 * 256);

/// The context of an element whose plane-0 byte is `e`, for the stream's reference `e0`.
#[inline(always)]
pub fn context(e: u8, e0: u8) -> usize {
    ((e as i32 - e0 as i32).clamp(CTX_BELOW, CTX_ABOVE) - CTX_BELOW) as usize
}

/// Every plane-0 byte's [`context`] for `e0`, as a table.
pub(crate) fn context_table(e0: u8) -> [u8; 256] {
    std::array::from_fn(|e| context(e as u8, e0) as u8)
}

/// [`context`] in byte arithmetic, for loops that vectorise: 3 - min(E0 - e, 3) at or below
/// `e0`, 3 + min(e - E0, 2) above.
#[inline(always)]
pub(crate) fn context_byte(e: u8, e0: u8) -> u8 {
    const _: () = assert!(CTX_BELOW == -3 && CTX_ABOVE == 2 && CONTEXTS == 6);
    3 - e0.saturating_sub(e).min(3) + e.saturating_sub(e0).min(2)
}

/// Each element's context ([`context`]) for the plane-0 bytes `top`, into `out`.
pub(crate) fn contexts_into(top: &[u8], e0: u8, out: &mut Vec<u8>) {
    out.clear();
    out.resize(top.len(), 0);
    for (c, &e) in out.iter_mut().zip(top) {
        *c = context_byte(e, e0);
    }
}

/// [`crate::Rans::PLANES`] with context planes: what tests of the context planes alone encode
/// with.
pub const CONTEXT_PLANES_ONLY: crate::Rans = crate::Rans {
    contexts: true,
    ..crate::Rans::PLANES
};

/// A stream's context section: the reference plane-0 byte and a table per context that
/// occurs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextTables {
    pub e0: u8,
    pub tables: [Option<Table>; CONTEXTS],
}

impl ContextTables {
    /// Tables for `counts[c]` (the plane-1 histogram of the elements of context `c`); `None`
    /// where no context has a count.
    pub fn from_counts(e0: u8, counts: &[[u32; 256]; CONTEXTS]) -> Option<ContextTables> {
        let tables: [Option<Table>; CONTEXTS] = std::array::from_fn(|c| {
            counts[c]
                .iter()
                .any(|&n| n > 0)
                .then(|| Table::from_counts(&counts[c]))
        });
        tables
            .iter()
            .any(Option::is_some)
            .then_some(ContextTables { e0, tables })
    }

    /// Bytes [`ContextTables::write`] takes.
    pub fn written_len(&self, form: TableForm) -> usize {
        2 + self
            .tables
            .iter()
            .flatten()
            .map(|t| t.written_len(form))
            .sum::<usize>()
    }

    /// Append the section: `E0`, a byte with bit `c` set for each table present, the tables
    /// in context order.
    pub fn write(&self, out: &mut Vec<u8>, form: TableForm) {
        out.push(self.e0);
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

    /// `stream` (a version-4 to 8 stream without row or sign tables) with context `c`'s table
    /// taken out of its context section: what the tests of the decoders' absent-table rule
    /// start from (a context plane's element whose context has no table is corrupt, whatever
    /// its lanes do). `None` if the stream has no such table, or its section is not written
    /// as this encoder writes it.
    pub fn without_table(stream: &[u8], c: usize) -> Option<Vec<u8>> {
        let h = crate::parse_header(stream).ok()?;
        if h.row_contexts.is_some() || h.sign_contexts.is_some() {
            return None;
        }
        let tables = h.contexts.as_deref()?;
        tables.tables.get(c)?.as_ref()?;
        let (end, form) = (h.table_at, h.tables);
        let write = |t: &Self, out: &mut Vec<u8>| t.write(out, form);
        crate::header::section_edited(stream, end, tables, |t| t.tables[c] = None, write)
    }

    /// Read the section at `at` (every table rule checked, at least one table unless
    /// `empty_allowed` (version 5), no bits past the sixth context); returns it (`None` for an
    /// empty set) and the offset after it.
    pub fn read(
        input: &[u8],
        at: usize,
        empty_allowed: bool,
        form: TableForm,
    ) -> Result<(Option<ContextTables>, usize)> {
        let head = take(input, at, 2, "context tables")?;
        let (e0, present) = (head[0], head[1]);
        if present == 0 && empty_allowed {
            return Ok((None, at + 2));
        }
        if present == 0 || present >> CONTEXTS != 0 {
            return Err(Error::corrupt_at(
                format!("context table set {present:#04x}"),
                at + 1,
            ));
        }
        let mut pos = at + 2;
        let mut tables: [Option<Table>; CONTEXTS] = Default::default();
        for (c, t) in tables.iter_mut().enumerate() {
            if present >> c & 1 == 1 {
                let (table, next) = Table::read(input, pos, form)?;
                *t = Some(table);
                pos = next;
            }
        }
        Ok((Some(ContextTables { e0, tables }), pos))
    }

    /// The decoder's form: every context's 4096 decode slots back to back (absent contexts
    /// have none) and, per plane-0 byte, the index of its table's slots (`ABSENT` where its
    /// context has no table).
    pub fn decoder(&self) -> ContextDecoder {
        let (slots, first) = Table::stacked_slots(&self.tables, ABSENT);
        ContextDecoder {
            slots,
            e0: self.e0,
            by_context: first,
        }
    }
}

/// What a plane-0 byte maps to when its context has no table: a context plane holding such an
/// element is corrupt.
pub const ABSENT: u8 = u8::MAX;

/// The context tables as a decoder reads them (built once per stream).
#[derive(Debug, Clone)]
pub struct ContextDecoder {
    /// 4096 decode slots per present table, in context order.
    pub slots: Vec<u32>,
    /// The stream's `E0`, and per context its table's index in `slots` (in units of 4096),
    /// or [`ABSENT`]: what [`ContextDecoder::table_of`] computes each element's table from.
    e0: u8,
    by_context: [u8; CONTEXTS],
}

impl ContextDecoder {
    /// Per plane-0 byte, its table's index in `slots` (in units of 4096), or [`ABSENT`].
    pub fn table_of(&self) -> [u8; 256] {
        context_table(self.e0).map(|c| self.by_context[c as usize])
    }

    /// The stream's `E0`.
    pub fn e0(&self) -> u8 {
        self.e0
    }

    /// Per context, its table's index in `slots` (in units of 4096), or [`ABSENT`].
    pub fn tables(&self) -> [u8; CONTEXTS] {
        self.by_context
    }
}

/// The encoder's side: the tables, and each (context, symbol)'s cost in bits for the plan.
pub(crate) struct ContextEncoder {
    pub tables: ContextTables,
    /// Per plane-0 byte, its context.
    pub context_of: [u8; 256],
    /// `cost[c * 256 + s]`: bits symbol `s` costs in context `c` (infinite where it cannot be
    /// coded).
    pub cost: Vec<f32>,
    /// The tables' coding constants, by context.
    pub prepared: crate::lanes::Prepared,
    /// Each chunk's plane-1 counts by context, [`CONTEXTS`] a chunk, as the tables were
    /// counted (empty where not kept).
    chunk_counts: Vec<[u32; 256]>,
}

impl ContextEncoder {
    pub fn new(tables: ContextTables) -> ContextEncoder {
        let context_of = context_table(tables.e0);
        let cost = crate::model::cost_table(&tables.tables);
        let by_context: Vec<Option<&Table>> = tables.tables.iter().map(Option::as_ref).collect();
        let prepared = crate::lanes::Prepared::new(&by_context);
        ContextEncoder {
            tables,
            context_of,
            cost,
            prepared,
            chunk_counts: Vec::new(),
        }
    }

    /// The encoder, keeping the chunks' counts that [`plan_tables`] made with the tables.
    pub fn with_chunk_counts(tables: ContextTables, chunk_counts: Vec<[u32; 256]>) -> Self {
        ContextEncoder {
            chunk_counts,
            ..ContextEncoder::new(tables)
        }
    }

    /// Chunk `index`'s per-context counts into `h` (as [`ContextEncoder::histograms`] of its
    /// planes 0 and 1, `top` and `next`), from those kept where they agree with `top`'s
    /// histogram `top_counts` (each context's total), else counted.
    pub fn chunk_histograms(
        &self,
        index: usize,
        top_counts: &[u32; 256],
        top: &[u8],
        next: &[u8],
        h: &mut Vec<[u32; 256]>,
    ) {
        let kept = self
            .chunk_counts
            .get(index * CONTEXTS..(index + 1) * CONTEXTS)
            .filter(|k| {
                let mut totals = [0u64; CONTEXTS];
                for (e, &n) in top_counts.iter().enumerate() {
                    totals[self.context_of[e] as usize] += n as u64;
                }
                k.iter()
                    .zip(totals)
                    .all(|(c, t)| c.iter().map(|&n| n as u64).sum::<u64>() == t)
            });
        match kept {
            Some(k) => {
                h.clear();
                h.extend_from_slice(k);
            }
            None => self.histograms(top, next, h),
        }
    }

    /// The plane-1 histogram per context of elements whose planes 0 and 1 are `top` and
    /// `next` (into `h`, zeroed first).
    pub fn histograms(&self, top: &[u8], next: &[u8], h: &mut Vec<[u32; 256]>) {
        let pairs: Vec<[u8; 2]> = top.iter().zip(next).map(|(&e, &s)| [e, s]).collect();
        count_by_context(&pairs, |p| (p[0], p[1]), &self.context_of, h);
    }

    /// Bits a plane costs coded with the context tables, from its per-context histogram.
    pub fn cost_bits(&self, h: &[[u32; 256]]) -> f64 {
        crate::model::cost_table_bits(&self.cost, h)
    }
}

/// Tensors smaller than this never get context tables: the tables (up to 3 KiB) would take
/// most of what they save. (Under cargo-fuzz, 256 bytes and no saving asked for anywhere, so
/// the fuzz targets' small inputs reach the context planes.)
#[cfg(not(fuzzing))]
pub const MIN_TENSOR_BYTES: usize = 1 << 20;
#[cfg(fuzzing)]
pub const MIN_TENSOR_BYTES: usize = 256;
/// The share of a sample's order-0 plane bits the contexts must save for the encoder to count
/// the whole tensor: 1.5 % (on 32 KiB of samples the conditional entropy's estimate is low by
/// up to about 0.7 % of the bits, from six tables of 256 symbols fitted to few elements).
#[cfg(not(fuzzing))]
pub const SAMPLE_MIN_SAVING: f64 = 0.015;
#[cfg(fuzzing)]
pub const SAMPLE_MIN_SAVING: f64 = f64::NEG_INFINITY;
/// How many times their own size the tables must save over the whole tensor.
#[cfg(not(fuzzing))]
const TABLES_PAY_TIMES: f64 = 2.0;
#[cfg(fuzzing)]
const TABLES_PAY_TIMES: f64 = f64::NEG_INFINITY;

/// Count the pairs (plane-0 byte, plane-1 byte) of `items`, `pair(item)` each, into `h`:
/// `h[context_of[e]][s]`, six histograms (`h` zeroed first, [`CONTEXTS`] long after). Four
/// interleaved sets of them, so that runs of equal pairs (common: an activation's few
/// exponents, a mantissa byte of zero) do not wait on the store to the same counter, folded
/// into one at the end. Each context's offset among the counters is looked up once per
/// plane-0 byte, and items are taken four at a time as arrays (no index checks in the loop).
#[inline(always)]
fn count_by_context<T>(
    items: &[T],
    pair: impl Fn(&T) -> (u8, u8),
    context_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    const SET: usize = CONTEXTS * 256;
    let offset: [u16; 256] =
        std::array::from_fn(|e| ((context_of[e] as usize).min(CONTEXTS - 1) * 256) as u16);
    let at = |item: &T| {
        let (e, s) = pair(item);
        // At most 5 * 256 + 255 < SET.
        offset[e as usize] as usize | s as usize
    };
    let mut sets = [[0u32; SET]; 4];
    let (quads, rest) = items.as_chunks::<4>();
    for q in quads {
        for (set, item) in sets.iter_mut().zip(q) {
            set[at(item)] += 1;
        }
    }
    for item in rest {
        sets[0][at(item)] += 1;
    }
    let [mut all, b, c, d] = sets;
    for (((x, y), z), w) in all.iter_mut().zip(&b).zip(&c).zip(&d) {
        *x += y + z + w;
    }
    h.clear();
    h.extend(all.as_chunks::<256>().0.iter().copied());
}

/// [`count_by_context`] over the whole elements of `W` bytes in `part` (`W` a constant, so
/// that each element's bytes are read at fixed offsets).
pub(crate) fn count_elements<const W: usize>(
    part: &[u8],
    rotate: bool,
    context_of: &[u8; 256],
    h: &mut Vec<[u32; 256]>,
) {
    let elems: &[[u8; W]] = part.as_chunks::<W>().0;
    if rotate {
        count_by_context(elems, |e| top_two(e, W, true), context_of, h);
    } else {
        count_by_context(elems, |e| top_two(e, W, false), context_of, h);
    }
}

/// Planes 0 and 1 of a (rotated) element of `width` bytes (2 or 4).
#[inline(always)]
pub(crate) fn top_two(e: &[u8], width: usize, rotate: bool) -> (u8, u8) {
    if width == 2 {
        let v = u16::from_le_bytes([e[0], e[1]]);
        let t = if rotate { v.rotate_left(1) } else { v };
        ((t >> 8) as u8, t as u8)
    } else {
        let v = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let t = if rotate { v.rotate_left(1) } else { v };
        ((t >> 24) as u8, (t >> 16) as u8)
    }
}

fn entropy(counts: &[u32; 256]) -> f64 {
    crate::encode::entropy_bits(counts)
}

/// The tensor's context tables, if plane 1 with the exponent as context pays (the encoder's
/// informative rule, docs/format-rans.md): a tensor of at least [`MIN_TENSOR_BYTES`] of 2- or
/// 4-byte elements whose rotation samples save [`SAMPLE_MIN_SAVING`] of their plane bits,
/// and whose whole plane 1 then saves, against one order-0 table, at least twice the
/// tables' size. `E0` is the samples' most frequent plane-0 byte of nonzero elements (ties:
/// the lowest); the tables are every context's plane-1 counts over the whole body, so every
/// element of every chunk can be coded with them.
///
/// [`sample_saving`] takes the samples' step (and `E0`); this counts the body with that `E0`
/// and returns, with the tables, each chunk's counts (chunks of `chunk_bytes` of `body`,
/// [`CONTEXTS`] histograms a chunk), for [`ContextEncoder::with_chunk_counts`].
pub(crate) fn plan_tables(
    e0: u8,
    body: &[u8],
    width: usize,
    rotate: bool,
    chunk_bytes: usize,
    form: TableForm,
    parallel: bool,
) -> Option<(ContextTables, Vec<[u32; 256]>)> {
    let table = context_table(e0);
    let (chunk_counts, ctx) = count_chunks::<CONTEXTS>(body, chunk_bytes, parallel, |chunk, h| {
        if width == 2 {
            count_elements::<2>(chunk, rotate, &table, h);
        } else {
            count_elements::<4>(chunk, rotate, &table, h);
        }
    });
    kept(e0, &ctx, chunk_counts, form)
}

/// [`plan_tables`]'s first step, where the tensor qualifies and its rotation samples say the
/// contexts save enough for the whole body to be counted: `E0`, and the bits the contexts
/// save on plane 1 of the samples against one order-0 histogram (pooled: the tables are the
/// stream's; the elements whose planes 0 and 1 are both zero left out: the zero elements,
/// which a sparse chunk leaves out of its planes, are among them), with which the rotation
/// decision weighs each way for FP32 ([`crate::encode::rotation_pays`]).
pub(crate) fn sample_saving(body: &[u8], width: usize, rotate: bool) -> Option<(u8, f64)> {
    if !matches!(width, 2 | 4) || body.len() < MIN_TENSOR_BYTES {
        return None;
    }
    // The samples: E0, and whether contexts save enough there.
    let mut joint = vec![[0u32; 256]; 256];
    let mut plane_bits = 0.0;
    for r in crate::encode::rotation_samples(body.len(), width) {
        let mut planes = vec![[0u32; 256]; width];
        for e in body[r].chunks_exact(width) {
            let (p0, p1) = top_two(e, width, rotate);
            joint[p0 as usize][p1 as usize] += 1;
            let mut v = [0u8; 4];
            v[..width].copy_from_slice(e);
            let t = u32::from_le_bytes(v);
            let t = match (rotate, width) {
                (true, 2) => (t as u16).rotate_left(1) as u32,
                (true, _) => t.rotate_left(1),
                _ => t,
            };
            for (j, p) in planes.iter_mut().enumerate() {
                p[(t >> (8 * (width - 1 - j))) as usize & 255] += 1;
            }
        }
        plane_bits += planes.iter().map(entropy).sum::<f64>();
    }
    let e0 = (0..256)
        .max_by_key(|&e| {
            let n: u64 = joint[e].iter().map(|&c| c as u64).sum::<u64>()
                - if e == 0 { joint[0][0] as u64 } else { 0 };
            (n, std::cmp::Reverse(e))
        })
        .unwrap_or(0) as u8;
    let mut ctx = [[0u32; 256]; CONTEXTS];
    for (e, row) in joint.iter().enumerate() {
        let c = &mut ctx[context(e as u8, e0)];
        for (n, &j) in c.iter_mut().zip(row) {
            *n += j;
        }
    }
    if saving(&ctx) < SAMPLE_MIN_SAVING * plane_bits {
        return None;
    }
    ctx[context(0, e0)][0] -= joint[0][0];
    Some((e0, saving(&ctx)))
}

/// [`plan_tables`]'s last step: the tables of the whole body's counts `ctx` (each context's
/// plane-1 histogram under `E0`), with the chunks' counts, if they save at least
/// [`TABLES_PAY_TIMES`] their size.
pub(crate) fn kept(
    e0: u8,
    ctx: &[[u32; 256]; CONTEXTS],
    chunk_counts: Vec<[u32; 256]>,
    form: TableForm,
) -> Option<(ContextTables, Vec<[u32; 256]>)> {
    let tables = ContextTables::from_counts(e0, ctx)?;
    (saving(ctx) / 8.0 >= TABLES_PAY_TIMES * tables.written_len(form) as f64)
        .then_some((tables, chunk_counts))
}

/// Bits the contexts save on `ctx`'s plane 1 against one order-0 histogram.
fn saving(ctx: &[[u32; 256]; CONTEXTS]) -> f64 {
    entropy(&merged(ctx)) - ctx.iter().map(entropy).sum::<f64>()
}

/// Each chunk's `N` histograms, as `count(chunk, h)` puts them in `h`, chunk after chunk of
/// `body` (on rayon's threads, in tasks of whole chunks, if `parallel`), and their sums over
/// the body: the counting pass of the context and row tables.
pub(crate) fn count_chunks<const N: usize>(
    body: &[u8],
    chunk_bytes: usize,
    parallel: bool,
    count: impl Fn(&[u8], &mut Vec<[u32; 256]>) + Sync,
) -> (Vec<[u32; 256]>, [[u32; 256]; N]) {
    count_chunks_two::<N, 0>(body, chunk_bytes, parallel, count).0
}

/// [`count_chunks`] for two models' histograms counted in one pass: `count(chunk, h)` puts
/// `A + B` histograms in `h`, the first `A` go to the first model's chunk counts, the other
/// `B` to the second's (each as [`count_chunks`] gives them, with their sums), so that
/// neither list is copied out of a joint one.
#[allow(clippy::type_complexity)]
pub(crate) fn count_chunks_two<const A: usize, const B: usize>(
    body: &[u8],
    chunk_bytes: usize,
    parallel: bool,
    count: impl Fn(&[u8], &mut Vec<[u32; 256]>) + Sync,
) -> (
    (Vec<[u32; 256]>, [[u32; 256]; A]),
    (Vec<[u32; 256]>, [[u32; 256]; B]),
) {
    // Each task's chunks are counted straight into their places in `a` and `b` and summed
    // there (the parts' lists were concatenated and then summed on one thread: two passes
    // over 13 MB of histograms for a 32 MiB BF16 tensor with row and sign tables).
    let chunks = body.len().div_ceil(chunk_bytes);
    let (mut a, mut b) = (vec![[0u32; 256]; chunks * A], vec![[0u32; 256]; chunks * B]);
    type Part<'s> = (&'s [u8], &'s mut [[u32; 256]], &'s mut [[u32; 256]]);
    let count_part = |(part, a, b): Part| {
        let mut h = Vec::new();
        let (mut sum_a, mut sum_b) = ([[0u32; 256]; A], [[0u32; 256]; B]);
        for (i, chunk) in part.chunks(chunk_bytes).enumerate() {
            count(chunk, &mut h);
            debug_assert_eq!(h.len(), A + B);
            a[i * A..(i + 1) * A].copy_from_slice(&h[..A]);
            b[i * B..(i + 1) * B].copy_from_slice(&h[A..]);
            add_histograms(&mut sum_a, &h[..A]);
            add_histograms(&mut sum_b, &h[A..]);
        }
        (sum_a, sum_b)
    };
    let task = match parallel {
        true => planepack_core::codec::parallel_task_bytes(body.len(), chunk_bytes),
        false => body.len().max(1),
    };
    let mut parts: Vec<Part> = Vec::with_capacity(body.len().div_ceil(task));
    let (mut rest_a, mut rest_b) = (&mut a[..], &mut b[..]);
    for part in body.chunks(task) {
        let n = part.len().div_ceil(chunk_bytes);
        let (pa, ra) = std::mem::take(&mut rest_a).split_at_mut(n * A);
        let (pb, rb) = std::mem::take(&mut rest_b).split_at_mut(n * B);
        parts.push((part, pa, pb));
        (rest_a, rest_b) = (ra, rb);
    }
    let sums: Vec<_> = if parallel {
        use rayon::prelude::*;
        parts.into_par_iter().map(count_part).collect()
    } else {
        parts.into_iter().map(count_part).collect()
    };
    let (mut sum_a, mut sum_b) = ([[0u32; 256]; A], [[0u32; 256]; B]);
    for (pa, pb) in &sums {
        add_histograms(&mut sum_a, pa);
        add_histograms(&mut sum_b, pb);
    }
    ((a, sum_a), (b, sum_b))
}

/// Each chunk's histograms by table, `N` a chunk, as a stream-wide model's counting pass kept
/// them (the row and sign tables'): what a chunk's plan prices its plane by, and the plane's
/// histogram (every element counted in one table) without a pass of its own.
pub(crate) struct ChunkCounts<const N: usize>(pub Vec<[u32; 256]>);

impl<const N: usize> ChunkCounts<N> {
    /// Chunk `index`'s `N` histograms, if they were kept.
    pub fn chunk(&self, index: usize) -> Option<&[[u32; 256]]> {
        self.0.get(index * N..(index + 1) * N)
    }

    /// Chunk `index`'s plane histogram (its histograms summed), if they were kept and count
    /// `n` elements.
    pub fn plane_counts(&self, index: usize, n: usize) -> Option<[u32; 256]> {
        let sum = merged(self.chunk(index)?);
        (sum.iter().map(|&c| c as usize).sum::<usize>() == n).then_some(sum)
    }

    /// Bits chunk `index`'s plane costs under `cost` (a [`crate::model::cost_table`] of the
    /// `N` tables; infinite where a symbol has no frequency in its table), if its histograms
    /// were kept and sum to `counts`, the plane's histogram; else `None`.
    pub fn bits(&self, index: usize, counts: &[u32; 256], cost: &[f32]) -> Option<f64> {
        let kept = self.chunk(index)?;
        (&merged(kept) == counts).then(|| crate::model::cost_table_bits(cost, kept))
    }

    /// Every chunk's histograms, in order.
    pub fn chunks(&self) -> std::slice::ChunksExact<'_, [u32; 256]> {
        self.0.chunks_exact(N)
    }

    /// What the chunks would save with a stream-wide model: `saving` of each chunk's
    /// histograms where positive, summed in chunk order (so the same sum on any number of
    /// threads), the chunks priced on rayon's threads if `parallel`. (Priced on one thread,
    /// a table and a cost a chunk, the sign tables' decision took 6 ms of a 32 MiB CNN
    /// tensor's two-thread encode.)
    pub fn savings(&self, parallel: bool, saving: impl Fn(&[[u32; 256]]) -> f64 + Sync) -> f64 {
        let positive = |chunk: &[[u32; 256]]| saving(chunk).max(0.0);
        let add = |sum: f64, s: f64| sum + s;
        if parallel {
            use rayon::prelude::*;
            let each: Vec<f64> = self.0.par_chunks_exact(N).map(positive).collect();
            each.into_iter().fold(0.0, add)
        } else {
            self.chunks().map(positive).fold(0.0, add)
        }
    }
}

/// One histogram of the elements of every context: the sum of `h`.
pub(crate) fn merged(h: &[[u32; 256]]) -> [u32; 256] {
    let mut sum = [0u32; 256];
    for c in h {
        for (a, &b) in sum.iter_mut().zip(c) {
            *a += b;
        }
    }
    sum
}

/// `sum[c] += h[c]` for every context `c`.
pub(crate) fn add_histograms(sum: &mut [[u32; 256]], h: &[[u32; 256]]) {
    for (x, y) in sum.iter_mut().zip(h) {
        for (p, q) in x.iter_mut().zip(y) {
            *p += q;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The four interleaved sets fold into the counts one set would hold, for every length's
    /// remainder, with runs of one pair (the case the sets are for).
    #[test]
    fn interleaved_context_counts_equal_one_pass() {
        let context_of = context_table(127);
        let mut x = 7u32;
        let pairs: Vec<(u8, u8)> = (0..1003)
            .map(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if i % 100 < 30 {
                    (127, 0)
                } else {
                    ((x >> 24) as u8, (x >> 16) as u8)
                }
            })
            .collect();
        for n in [0, 1, 2, 3, 4, 5, 7, 1000, 1003] {
            let mut h = Vec::new();
            count_by_context(&pairs[..n], |&p| p, &context_of, &mut h);
            let mut expected = vec![[0u32; 256]; CONTEXTS];
            for &(e, s) in &pairs[..n] {
                expected[context_of[e as usize] as usize][s as usize] += 1;
            }
            assert_eq!(h, expected, "{n} pairs");
        }
    }

    /// The byte arithmetic is the spec's clamp, for every pair of bytes.
    #[test]
    fn context_byte_is_the_clamped_difference() {
        for e0 in 0..=255u8 {
            for e in 0..=255u8 {
                assert_eq!(context_byte(e, e0) as usize, context(e, e0), "{e} {e0}");
            }
        }
    }
}
