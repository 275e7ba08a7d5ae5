//! The encoder: the rotation decision, every chunk planned from its histograms (dense,
//! sparse or modelled, each plane raw, constant or rANS) and coded, chunks in parallel.

use super::*;
use crate::contexts::{merged, ContextEncoder, PLANE_CONTEXT, VERSION_CONTEXT};
use crate::row_contexts::{RowEncoder, PLANE_ROW_CONTEXT, VERSION_ROW_CONTEXT, VERSION_ROW_LANES};
use crate::sign_contexts::{SignEncoder, PLANE_SIGN, VERSION_SIGN};

/// The stream-wide tables a chunk's planes may be coded with: plane 1's by the exponent
/// (version 4), plane 0's by the exponent one row up (version 6), a dense chunk's plane 1 by
/// the exponent and the sign one row up (version 8).
#[derive(Clone, Copy, Default)]
pub(crate) struct Models<'a> {
    pub contexts: Option<&'a ContextEncoder>,
    pub rows: Option<&'a RowEncoder>,
    pub signs: Option<&'a SignEncoder>,
}

/// Samples [`rotation_pays`] takes, evenly spaced over the tensor, and their size: 32 KiB in
/// all, enough for order-0 statistics and a small cost next to coding the tensor.
pub(crate) const ROTATION_SAMPLES: usize = 4;
pub(crate) const ROTATION_SAMPLE_BYTES: usize = 8 << 10;

/// The samples `rotation_pays` reads from a body of `body_len` bytes of `width`-byte
/// elements: up to `ROTATION_SAMPLES` byte ranges of `ROTATION_SAMPLE_BYTES` (whole
/// elements), evenly spaced. (The GPU encoder counts the same ranges on the device.)
pub fn rotation_samples(body_len: usize, width: usize) -> Vec<std::ops::Range<usize>> {
    let sample = ROTATION_SAMPLE_BYTES / width * width;
    let slots = body_len.div_ceil(sample);
    let picks = slots.min(ROTATION_SAMPLES);
    (0..picks)
        .map(|k| {
            let at = k * slots / picks * sample;
            at..body_len.min(at + sample)
        })
        .collect()
}

/// The rotation decision from each sample's plane histograms, unrotated and rotated (in
/// [`rotation_samples`]' order): rotate where the order-0 entropy of the rotated planes,
/// summed over the samples, is not larger; no samples (an empty body) rotate. The GPU
/// encoder (which writes no context planes) decides by this function, and so does the CPU
/// encoder without context planes.
pub fn rotation_pays_by_counts(samples: &[[Vec<[u32; 256]>; 2]]) -> bool {
    let bits = order0_bits(samples);
    bits[1] <= bits[0]
}

/// The samples' order-0 plane bits, unrotated and rotated.
fn order0_bits(samples: &[[Vec<[u32; 256]>; 2]]) -> [f64; 2] {
    let mut bits = [0.0f64; 2];
    for both in samples {
        for (cost, planes) in bits.iter_mut().zip(both) {
            *cost += planes.iter().map(entropy_bits).sum::<f64>();
        }
    }
    bits
}

/// Do the byte planes of `body` (whole elements of `width` > 1 bytes) cost fewer bits with
/// the sign rotated to the bottom? Rotation puts a float's whole exponent in the top plane,
/// which usually pays (BF16, FP16 and most FP32 tensors), but not always: in FP32 tensors
/// whose values sit near a few exponents, the sign joined to the top mantissa bits can code
/// better. Decided per stream (the format's flag `R`) from the order-0 entropy of the planes
/// of up to [`ROTATION_SAMPLES`] samples of [`ROTATION_SAMPLE_BYTES`], each way; ties rotate.
///
/// With `context_savings` (FP32 elements, and the encoder may write context planes: each
/// way's [`crate::contexts::sample_saving`], unrotated first), each way's bits are less what
/// plane 1's context tables would save on the samples, where they would be planned:
/// unrotated, plane 0 holds the sign and the
/// exponent's top seven bits and the contexts recover most of the exponent's last bit from
/// plane 1, which order-0 statistics cannot see. On an FP32 linear layer's output feeding a
/// GELU (values skewed to one sign at some magnitudes) the sign then codes with the exponent
/// and the stream is 2-3 % shorter unrotated, which the order-0 rule missed. Not for 2-byte
/// elements: rotated, their plane 1 holds the sign, which the context and sign planes
/// already code with the exponent; weighed this way, 4 of the 9 BF16 workload batches came
/// out longer (an embedding table by 0.9 %), one shorter by 0.25 %.
pub(crate) fn rotation_pays(
    body: &[u8],
    width: usize,
    context_savings: Option<&[Option<(u8, f64)>; 2]>,
    planes: &mut Vec<Vec<u8>>,
) -> bool {
    planes.resize_with(width, Vec::new);
    let samples: Vec<[Vec<[u32; 256]>; 2]> = rotation_samples(body.len(), width)
        .into_iter()
        .map(|r| {
            [false, true].map(|rotate| {
                split(&body[r.clone()], width, rotate, planes);
                planes.iter().map(|p| histogram(p)).collect()
            })
        })
        .collect();
    let mut bits = order0_bits(&samples);
    for (cost, saving) in bits.iter_mut().zip(context_savings.into_iter().flatten()) {
        *cost -= saving.map_or(0.0, |s| s.1);
    }
    bits[1] <= bits[0]
}

/// Sample chunks [`Rans::modelled_may_pay`] tries at most, evenly spaced over the tensor (one
/// in 16 chunks, at least 2).
pub(crate) const MODELLED_SAMPLES: usize = 8;

/// Order-0 entropy of a histogram, in bits: `sum c log2(n / c)`, computed as
/// `n log2 n - sum c log2 c` (the logarithms of counts up to 8192 looked up: the rotation
/// decision prices two ways of four planes of four samples, which took a tenth of encoding
/// a tensor of a few KiB with a division and a `log2` a symbol).
pub fn entropy_bits(counts: &[u32; 256]) -> f64 {
    let mut n = 0u64;
    let mut sum = 0.0f64;
    for &c in counts.iter().filter(|&&c| c > 0) {
        n += c as u64;
        sum += c as f64 * crate::model::log2_int(c);
    }
    let log2_n = match u32::try_from(n) {
        Ok(n) => crate::model::log2_int(n),
        Err(_) => (n as f64).log2(),
    };
    (n as f64 * log2_n - sum).max(0.0)
}

/// Per-thread encoder scratch.
#[derive(Default)]
pub(crate) struct EncScratch {
    modelled: modelled::Scratch,
    scaled: scaled::Scratch,
    /// A chunk coded as planes while its modelled form is kept aside.
    planes: Vec<Vec<u8>>,
    sparse_planes: Vec<Vec<u8>>,
    lanes: lanes::Encoder,
    dense: Vec<u8>,
    sparse: Vec<u8>,
    mask: Vec<u8>,
    nonzero: Vec<u8>,
    /// A context plane's contexts, and the chunk's plane-1 histograms per context.
    sel: Vec<u8>,
    context_counts: Vec<[u32; 256]>,
    difference: crate::difference::Scratch,
    tails: crate::tails::Scratch,
}

thread_local! {
    /// This thread's encoder scratch between calls ([`planepack_core::scratch`]).
    static ENC_SCRATCH: planepack_core::scratch::Slot<EncScratch> = const { std::cell::Cell::new(None) };
}

/// This thread's encoder scratch, kept for its next call where [`scratch_kept`].
pub(crate) fn enc_scratch(chunk_bytes: usize) -> planepack_core::scratch::Taken<EncScratch> {
    planepack_core::scratch::take(&ENC_SCRATCH, scratch_kept(chunk_bytes))
}

/// What the encoder decided once for the whole tensor, with which it codes every chunk.
#[derive(Clone, Copy)]
pub(crate) struct TensorPlan<'a> {
    /// Element width in bytes.
    pub width: usize,
    /// Sign rotated to the bottom (the stream's flag `R`).
    pub rotate: bool,
    /// Row length in elements for "equal to up" (0: no shape).
    pub row: usize,
    /// Whether chunks try the modelled form ([`Rans::modelled_may_pay`]).
    pub try_modelled: bool,
    /// Whether chunks try the block-scaled form (FP32 only).
    pub try_scaled: bool,
    /// The stream's context and row tables, where planes 1 and 0 may use them.
    pub models: Models<'a>,
    /// Whether chunks try the difference form ([`Rans::differences_may_pay`]).
    pub try_differences: bool,
    /// Whether chunks try a tail dictionary (FP32 only).
    pub try_tails: bool,
}

/// What coded chunks need of the stream's header: a version, and flag `T` ([`FLAG_TAILS`])
/// where one is a tail-dictionary chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Needs {
    pub version: u8,
    pub tails: bool,
}

impl Needs {
    /// Version `version`, no flag.
    pub(crate) fn version(version: u8) -> Needs {
        Needs {
            version,
            tails: false,
        }
    }

    /// What this and `other` need together.
    pub(crate) fn and(self, other: Needs) -> Needs {
        Needs {
            version: self.version.max(other.version),
            tails: self.tails || other.tails,
        }
    }
}

/// One parallel task's chunks: their bytes, each chunk's length, what they need of the header.
type CodedTask = (Vec<u8>, Vec<u32>, Needs);

/// How a plane will be written, chosen from its histogram alone.
// One per byte plane of a chunk, on the stack: boxing the table would allocate per plane.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub enum PlanePlan {
    Const(u8),
    Raw,
    Rans(Table),
    /// Plane 1 coded with the stream's context tables (version 4; the CPU encoder only).
    Context,
    /// Plane 0 of a dense chunk coded with the stream's row tables (version 6; the CPU
    /// encoder only).
    Row,
    /// Plane 1 of a dense chunk coded with the stream's sign tables (version 8; the CPU
    /// encoder only).
    Sign,
}

/// A plane's kind and its estimated size in bytes (exact for raw and constant planes; for a
/// coded plane the table's cost in bits plus the table and lane headers, which the coder
/// meets to within a few bytes a lane).
pub(crate) fn plan_plane(symbols: &[u8], form: TableForm) -> (PlanePlan, f64) {
    plan_plane_counts(&histogram(symbols), form)
}

/// `plan_plane` from the plane's histogram alone (its length is the counts' sum; a
/// constant plane's byte the one symbol present, 0 for an empty plane): what the GPU encoder
/// plans by, from counts taken on the device.
pub fn plan_plane_counts(counts: &[u32; 256], form: TableForm) -> (PlanePlan, f64) {
    let len: usize = counts.iter().map(|&c| c as usize).sum();
    let present = counts.iter().filter(|&&c| c > 0).count();
    if present <= 1 {
        let v = counts.iter().position(|&c| c > 0).unwrap_or(0) as u8;
        return (PlanePlan::Const(v), 2.0);
    }
    let table = Table::from_counts(counts);
    let estimate = table.cost_bits(counts) / 8.0
        + (table.written_len(form) + lanes::lane_header(lanes::lanes_for(len))) as f64;
    if estimate < len as f64 {
        (PlanePlan::Rans(table), 1.0 + estimate)
    } else {
        (PlanePlan::Raw, 1.0 + len as f64)
    }
}

/// Is a plane of `symbols` bytes written coded when coding it takes `coded` bytes (its kind
/// byte, table and lanes)? Only if that is shorter than the raw plane and its kind byte.
pub fn coded_plane_kept(coded: usize, symbols: usize) -> bool {
    coded < 1 + symbols
}

/// Is a chunk whose planes came to `written` bytes (mode byte included) kept, or written raw
/// (its mode byte and `elems` bytes) because that is not longer?
pub fn chunk_kept(written: usize, elems: usize) -> bool {
    written <= elems
}

/// Does a chunk of `n` elements, `zeros` of them zero, try the sparse layout?
pub fn sparse_considered(zero_mask: bool, zeros: usize, n: usize) -> bool {
    zero_mask && zeros > 0 && zeros >= n / 8
}

/// Which layouts a chunk is coded in, decided from the estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layouts {
    Dense,
    Sparse,
    /// Too close to call: both are coded and the shorter kept (dense on a tie).
    Both,
}

/// A chunk's plan as byte planes: each plane's kind for the dense layout and, where the
/// sparse layout is considered, for its mask plane and nonzero elements' planes; which
/// layouts to code.
pub struct ChunkPlan {
    pub dense: Vec<PlanePlan>,
    /// The mask plane first, then the nonzero elements' planes.
    pub sparse: Option<Vec<PlanePlan>>,
    pub layouts: Layouts,
    /// The smaller of the two layouts' estimated sizes in bytes, context, row and sign
    /// planes included: what the other forms are weighed against (every form's estimate is
    /// within about 0.1 % of what it codes to).
    pub estimate: f64,
}

impl ChunkPlan {
    /// Plan a chunk from its histograms: `dense[j]` of plane `j` of all its elements and,
    /// where [`sparse_considered`], `mask` of its zero mask's bytes and `zeros` (a zero
    /// element is a zero byte in every plane, so the nonzero elements' planes are the dense
    /// ones less `zeros` zero bytes). The CPU and GPU encoders both plan by this function.
    pub fn from_counts(
        dense: &[[u32; 256]],
        sparse: Option<(&[u32; 256], usize)>,
        form: TableForm,
    ) -> ChunkPlan {
        ChunkPlan::from_counts_with(dense, sparse, None, None, None, form)
    }

    /// [`ChunkPlan::from_counts`], with plane 1 a context plane in a layout where its
    /// estimated size (`plane1_context`: dense, sparse) is below its own table's, and the
    /// dense layout's plane 0 a row plane where its estimate (`plane0_row`) is, and its
    /// plane 1 a sign plane where its estimate (`plane1_sign`) is below both.
    pub(crate) fn from_counts_with(
        dense: &[[u32; 256]],
        sparse: Option<(&[u32; 256], usize)>,
        plane1_context: Option<[f64; 2]>,
        plane0_row: Option<f64>,
        plane1_sign: Option<f64>,
        form: TableForm,
    ) -> ChunkPlan {
        // A layout's planes with plane `at` a context plane where that is smaller, and its
        // estimate (`head`: the mode byte and, sparse, the nonzero count).
        let with_context =
            |mut plans: Vec<(PlanePlan, f64)>, at: usize, size: Option<f64>, head| {
                if let (Some(p), Some(size)) = (plans.get_mut(at), size) {
                    if size < p.1 {
                        *p = (PlanePlan::Context, size);
                    }
                }
                let estimate: f64 = head + plans.iter().map(|p| p.1).sum::<f64>();
                (plans, estimate)
            };
        let kinds = |plans: Vec<(PlanePlan, f64)>| plans.into_iter().map(|p| p.0).collect();
        let mut dense_plans: Vec<(PlanePlan, f64)> =
            dense.iter().map(|c| plan_plane_counts(c, form)).collect();
        if let (Some(p), Some(size)) = (dense_plans.first_mut(), plane0_row) {
            if size < p.1 {
                *p = (PlanePlan::Row, size);
            }
        }
        let (mut dense_plans, mut dense_estimate) =
            with_context(dense_plans, 1, plane1_context.map(|c| c[0]), 1.0);
        // The sign plane, where smaller than plane 1's own table or context plane.
        if let (Some(p), Some(size)) = (dense_plans.get_mut(1), plane1_sign) {
            if size < p.1 {
                dense_estimate -= p.1 - size;
                *p = (PlanePlan::Sign, size);
            }
        }
        let dense_plans = kinds(dense_plans);
        let Some((mask, zeros)) = sparse else {
            return ChunkPlan {
                dense: dense_plans,
                sparse: None,
                layouts: Layouts::Dense,
                estimate: dense_estimate,
            };
        };
        let mut plans = vec![plan_plane_counts(mask, form)];
        for d in dense {
            let mut c = *d;
            c[0] -= zeros as u32;
            plans.push(plan_plane_counts(&c, form));
        }
        let (plans, sparse_estimate) = with_context(plans, 2, plane1_context.map(|c| c[1]), 5.0);
        let plans = kinds(plans);
        // Code only the layout the estimates favour, unless they are too close to call: the
        // estimates are within a few bytes a lane.
        let margin = 64.0 + dense_estimate.min(sparse_estimate) / 100.0;
        let layouts = if sparse_estimate <= dense_estimate - margin {
            Layouts::Sparse
        } else if dense_estimate <= sparse_estimate - margin {
            Layouts::Dense
        } else {
            Layouts::Both
        };
        ChunkPlan {
            dense: dense_plans,
            sparse: Some(plans),
            layouts,
            estimate: dense_estimate.min(sparse_estimate),
        }
    }
}

/// Append plane `symbols` as planned (raw after all if coding it came out no smaller); a
/// context plane's contexts come from `ctx` (the tables, the plane-0 symbols of the same
/// elements, scratch). Returns whether it was written as a context plane.
pub(crate) fn put_plane(
    symbols: &[u8],
    plan: &PlanePlan,
    form: TableForm,
    ctx: Option<(&ContextEncoder, &[u8], &mut Vec<u8>)>,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<bool> {
    match plan {
        PlanePlan::Row => unreachable!("a row plane is put by put_row_plane"),
        PlanePlan::Sign => unreachable!("a sign plane is put by put_sign_plane"),
        PlanePlan::Context => {
            let (c, top, sel) = ctx.expect("a context plane is planned only with its tables");
            crate::contexts::contexts_into(top, c.tables.e0, sel);
            let start = out.len();
            out.push(PLANE_CONTEXT);
            enc.encode_selected(&c.prepared, sel, symbols, out)?;
            if coded_plane_kept(out.len() - start, symbols.len()) {
                return Ok(true);
            }
            out.truncate(start);
        }
        PlanePlan::Const(v) => {
            out.push(PLANE_CONST);
            out.push(*v);
            return Ok(false);
        }
        PlanePlan::Rans(table) => {
            let start = out.len();
            out.push(PLANE_RANS);
            table.write(out, form);
            enc.encode(table, symbols, out)?;
            if coded_plane_kept(out.len() - start, symbols.len()) {
                return Ok(false);
            }
            out.truncate(start);
        }
        PlanePlan::Raw => {}
    }
    out.push(PLANE_RAW);
    out.extend_from_slice(symbols);
    Ok(false)
}

/// Append plane 0 of a dense chunk, `top`, as a row plane with the stream's row tables
/// (raw if that comes out no smaller); `sel` is scratch. Returns the version the plane needs:
/// [`VERSION_ROW_CONTEXT`], [`VERSION_ROW_LANES`] if its lanes do not divide the row
/// distance, or 1 if it was written raw.
pub(crate) fn put_row_plane(
    top: &[u8],
    rows: &RowEncoder,
    sel: &mut Vec<u8>,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<u8> {
    let u = rows.tables.distance as usize;
    crate::row_contexts::row_selectors(top, u, &rows.context_of, sel);
    Ok(
        match put_in_row_lanes(PLANE_ROW_CONTEXT, top, &rows.prepared, sel, u, enc, out)? {
            Some(k) if crate::row_contexts::lanes_divide(k, u) => VERSION_ROW_CONTEXT,
            Some(_) => VERSION_ROW_LANES,
            None => 1,
        },
    )
}

/// Append `symbols` as a plane of kind `kind` whose lanes take the row planes' rule for row
/// distance `u` (symbol `i` with table `sel[i]` of `tables`), or raw if that comes out no
/// smaller; returns the lane count, `None` if written raw. (Row and sign planes.)
fn put_in_row_lanes(
    kind: u8,
    symbols: &[u8],
    tables: &lanes::Prepared,
    sel: &[u8],
    u: usize,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<Option<usize>> {
    let start = out.len();
    out.push(kind);
    let k = crate::row_contexts::row_lanes(symbols.len(), u);
    enc.encode_selected_lanes(tables, sel, symbols, k, out)?;
    if coded_plane_kept(out.len() - start, symbols.len()) {
        return Ok(Some(k));
    }
    out.truncate(start);
    out.push(PLANE_RAW);
    out.extend_from_slice(symbols);
    Ok(None)
}

/// Append plane 1 of a dense chunk, `plane`, as a sign plane with the stream's sign tables
/// (`top` its plane 0; raw if that comes out no smaller); `sel` is scratch. Returns the
/// version the plane needs: [`VERSION_SIGN`], or 1 if it was written raw.
pub(crate) fn put_sign_plane(
    plane: &[u8],
    top: &[u8],
    signs: &SignEncoder,
    sel: &mut Vec<u8>,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<u8> {
    let u = signs.distance;
    crate::sign_contexts::sign_selectors(top, plane, u, signs.e0, sel);
    let kept = put_in_row_lanes(PLANE_SIGN, plane, &signs.prepared, sel, u, enc, out)?;
    Ok(if kept.is_some() { VERSION_SIGN } else { 1 })
}

/// Append `planes` to `out`, each as planned (a context plane's contexts from the plane
/// before it, its elements' plane 0; a row plane's from itself). Returns the version the
/// planes need: 1, [`VERSION_CONTEXT`] with a context plane, [`VERSION_ROW_CONTEXT`] with a
/// row plane.
pub(crate) fn put_planes(
    planes: &[&[u8]],
    plans: &[PlanePlan],
    form: TableForm,
    models: Option<(Models, &mut Vec<u8>)>,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<u8> {
    let mut version = 1;
    let mut models = models;
    for (j, (p, plan)) in planes.iter().zip(plans).enumerate() {
        if let (PlanePlan::Row, Some((m, sel))) = (plan, &mut models) {
            let rows = m.rows.expect("a row plane is planned only with its tables");
            version = version.max(put_row_plane(p, rows, sel, enc, out)?);
            continue;
        }
        if let (PlanePlan::Sign, Some((m, sel))) = (plan, &mut models) {
            let signs = m
                .signs
                .expect("a sign plane is planned only with its tables");
            version = version.max(put_sign_plane(p, planes[0], signs, sel, enc, out)?);
            continue;
        }
        let c = match &mut models {
            Some((m, sel)) if j > 0 => m.contexts.map(|t| (t, planes[j - 1], &mut **sel)),
            _ => None,
        };
        if put_plane(p, plan, form, c, enc, out)? {
            version = version.max(VERSION_CONTEXT);
        }
    }
    Ok(version)
}

/// The chunks a tensor-wide trial gate samples: `clamp(chunks / 16, 2, MODELLED_SAMPLES)`
/// evenly spaced chunks of `body`, or `None` for a tensor of at most [`MODELLED_SAMPLES`]
/// chunks, which tries every chunk.
fn sample_chunks(body: &[u8], chunk_bytes: usize) -> Option<Vec<&[u8]>> {
    let chunks = body.len().div_ceil(chunk_bytes);
    if chunks <= MODELLED_SAMPLES {
        return None;
    }
    let samples = (chunks / 16).clamp(2, MODELLED_SAMPLES);
    Some(
        (0..samples)
            .map(|k| {
                let at = (2 * k + 1) * chunks / (2 * samples) * chunk_bytes;
                &body[at..body.len().min(at + chunk_bytes)]
            })
            .collect(),
    )
}

/// Whether `test` holds for any of a trial gate's `samples`: on rayon's threads, each with a
/// scratch of its own, if `parallel`; else in order with `s`.
fn any_sample(
    samples: Vec<&[u8]>,
    parallel: bool,
    s: &mut EncScratch,
    test: impl Fn(&[u8], &mut EncScratch) -> bool + Sync,
) -> bool {
    if parallel {
        samples
            .into_par_iter()
            .any(|chunk| test(chunk, &mut enc_scratch(chunk.len())))
    } else {
        samples.into_iter().any(|chunk| test(chunk, s))
    }
}

impl Rans {
    pub(crate) fn check(&self) -> Result<()> {
        if CHUNK_LOG2_RANGE.contains(&self.chunk_log2) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "chunk size 2^{} (the format takes 2^12 to 2^20)",
                self.chunk_log2
            )))
        }
    }

    /// Is the modelled chunk worth trying on this tensor (`body`, chunks of `chunk_bytes`)?
    /// Classifying a chunk's elements costs more than coding its planes, and on a tensor the
    /// modelled form either wins nearly every chunk (ReLU activations, quantized tables) or
    /// none (transformer activations, KV caches): up to [`MODELLED_SAMPLES`] evenly spaced
    /// chunks decide, and any whose modelled estimate is at least [`MODELLED_MIN_GAIN`] below
    /// its planes' keeps the trial on for every chunk. The samples' planes are priced without
    /// the tensor's context, row and sign tables, so the gate is a little more lenient than
    /// the chunk rule, which prices them with (pricing the samples with them would switch the
    /// trial off on tensors where it now finds modelled chunks: not measured yet). Tensors of
    /// that many chunks or fewer try every chunk. (A slack of 1 % above the rule kept the
    /// trial on for every chunk of transformer and KV tensors once the compact tables brought
    /// their modelled estimates to within 0.1 % of the planes': classification was then half
    /// the encoder's time, for no modelled chunk. Where the form wins it wins by 3-40 %.)
    pub(crate) fn modelled_may_pay(
        &self,
        body: &[u8],
        plan: TensorPlan,
        chunk_bytes: usize,
        parallel: bool,
        s: &mut EncScratch,
    ) -> bool {
        let TensorPlan {
            width, rotate, row, ..
        } = plan;
        let Some(samples) = sample_chunks(body, chunk_bytes) else {
            return true;
        };
        let near = |chunk: &[u8], s: &mut EncScratch| {
            let planes = self.plane_estimate(chunk, width, rotate, s);
            let (modelled, _, _) = modelled::plan(
                chunk,
                width,
                rotate,
                row,
                self.table_form(),
                &mut s.modelled,
            );
            modelled <= planes * (1.0 - MODELLED_MIN_GAIN)
        };
        any_sample(samples, parallel, s, near)
    }

    /// Are difference chunks worth trying on this tensor? As [`Rans::modelled_may_pay`]: up
    /// to [`MODELLED_SAMPLES`] evenly spaced chunks decide (tensors of that many chunks or
    /// fewer try every chunk), on rayon's threads if `parallel`; any whose steps' planes come
    /// out smaller than its own planes keeps the trial on.
    pub(crate) fn differences_may_pay(
        &self,
        body: &[u8],
        width: usize,
        rotate: bool,
        chunk_bytes: usize,
        parallel: bool,
        s: &mut EncScratch,
    ) -> bool {
        let Some(samples) = sample_chunks(body, chunk_bytes) else {
            return true;
        };
        let pays = |chunk: &[u8], s: &mut EncScratch| {
            let planes = self.plane_estimate(chunk, width, rotate, s);
            let (steps, _) =
                crate::difference::plan(chunk, width, self.table_form(), &mut s.difference);
            steps + crate::difference::MIN_SAVING_BYTES <= planes
        };
        any_sample(samples, parallel, s, pays)
    }

    /// Encode one chunk of whole elements (chunk `index` of the tensor) as `plan` says,
    /// appending mode and planes to `out`; returns what the chunk needs of the header: version
    /// 1; 2 if modelled, 3 if scaled, 4 with a context plane, 5 as steps; flag `T` (and
    /// version 1) as a tail dictionary.
    pub(crate) fn encode_chunk(
        &self,
        elems: &[u8],
        index: usize,
        plan: TensorPlan,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<Needs> {
        let TensorPlan {
            width,
            rotate,
            row,
            try_modelled,
            try_scaled,
            models,
            try_differences,
            try_tails,
        } = plan;
        // A chunk whose every block factors (which the first block decides on nearly every
        // other tensor, at once) is scaled where that is smaller than its planes: it decodes
        // faster than planes, so any saving counts.
        let scaled = if try_scaled {
            scaled::plan(elems, rotate, self.table_form(), &mut s.scaled)
        } else {
            None
        };
        // A tail dictionary: most FP32 chunks have too many tails, which a few hundred
        // elements show.
        let tails = if try_tails && scaled.is_none() {
            crate::tails::plan(elems, rotate, self.table_form(), &mut s.tails)
        } else {
            None
        };
        if scaled.is_none() && !try_modelled && !try_differences && tails.is_none() {
            return self
                .encode_chunk_planes(elems, width, rotate, models, index, s, out)
                .map(Needs::version);
        }
        // The planes' plan, once, for whichever form is tried and for writing the planes if
        // none wins (the other trials keep to their own scratch).
        let planes = self.plan_chunk_planes(elems, width, rotate, models, index, s);
        if let Some(scaled) = scaled.filter(|p| p.estimate < planes.estimate) {
            let start = out.len();
            scaled::encode(&scaled, &s.scaled, &mut s.lanes, out)?;
            // (A chunk of a few elements can come out longer than raw: then it is coded as
            // any other, which never is.)
            if out.len() - start <= elems.len() {
                return Ok(Needs::version(scaled::VERSION_SCALED));
            }
            out.truncate(start);
        }
        // Modelled only where it saves at least MODELLED_MIN_GAIN: it decodes at about half
        // the planes' speed, so a fraction of a percent is not worth it. (The estimates are
        // within a few bytes a lane of the coded sizes, so no chunk is coded twice.)
        let modelled = if try_modelled {
            let m = modelled::plan(
                elems,
                width,
                rotate,
                row,
                self.table_form(),
                &mut s.modelled,
            );
            (m.0 <= planes.estimate * (1.0 - MODELLED_MIN_GAIN)).then_some(m)
        } else {
            None
        };
        // What a tail dictionary or steps must beat: whichever of the two the chunk would be.
        let beat = modelled.as_ref().map_or(planes.estimate, |m| m.0);
        // A tail dictionary where it beats that.
        if let Some((estimate, plans)) = tails {
            if estimate + crate::tails::MIN_SAVING_BYTES <= beat {
                let start = out.len();
                crate::tails::encode(&s.tails, &plans, self.table_form(), &mut s.lanes, out)?;
                if chunk_kept(out.len() - start, elems.len()) {
                    return Ok(Needs {
                        version: 1,
                        tails: true,
                    });
                }
                out.truncate(start);
            }
        }
        // Steps where they beat it.
        if try_differences {
            let (steps, plans) =
                crate::difference::plan(elems, width, self.table_form(), &mut s.difference);
            if steps + crate::difference::MIN_SAVING_BYTES <= beat {
                let start = out.len();
                crate::difference::encode(
                    &s.difference,
                    &plans,
                    self.table_form(),
                    &mut s.lanes,
                    out,
                )?;
                if chunk_kept(out.len() - start, elems.len()) {
                    return Ok(Needs::version(crate::difference::VERSION_DIFFERENCE));
                }
                out.truncate(start);
            }
        }
        if let Some((_, tables, plans)) = modelled {
            modelled::encode(
                width,
                &tables,
                &plans,
                self.table_form(),
                &mut s.modelled,
                &mut s.lanes,
                out,
            )?;
            return Ok(Needs::version(VERSION_MODELLED));
        }
        self.write_chunk_planes(elems, width, rotate, planes, models, s, out)
            .map(Needs::version)
    }

    /// Plan the chunk as byte planes (its dense planes split into `s.planes`; where the
    /// sparse layout is considered, its mask and nonzero elements into `s.mask` and
    /// `s.nonzero`); `index` is the chunk's in the tensor (for the counts `contexts` kept).
    pub(crate) fn plan_chunk_planes(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        models: Models,
        index: usize,
        s: &mut EncScratch,
    ) -> ChunkPlan {
        let contexts = models.contexts;
        s.planes.resize_with(width, Vec::new);
        split(elems, width, rotate, &mut s.planes);
        let zeros = count_zeros(elems, width);
        let n = elems.len() / width;
        // With context tables, plane 1's histogram is the sum of its per-context ones (every
        // element is counted in its context), which the plan needs anyway and which the
        // tables' count kept for chunk `index`: one or two passes fewer.
        // So is plane 0's, with row tables: the sum of the chunk's row-context counts.
        let top_counts = match models.rows.and_then(|r| r.chunk_top_counts(index, n)) {
            Some(counts) => {
                debug_assert_eq!(counts, histogram(&s.planes[0]), "chunk {index}");
                counts
            }
            None => histogram(&s.planes[0]),
        };
        if let Some(c) = contexts {
            c.chunk_histograms(
                index,
                &top_counts,
                &s.planes[0],
                &s.planes[1],
                &mut s.context_counts,
            );
        }
        let mut dense: Vec<[u32; 256]> = Vec::with_capacity(width);
        dense.push(top_counts);
        // Without context tables, plane 1's histogram is the sum of the chunk's sign counts
        // where the sign tables kept them.
        let sign_counts = models.signs.and_then(|t| t.chunk_plane_counts(index, n));
        for j in 1..width {
            dense.push(match (contexts, sign_counts) {
                (Some(_), _) if j == 1 => merged(&s.context_counts),
                (None, Some(counts)) if j == 1 => {
                    debug_assert_eq!(counts, histogram(&s.planes[1]), "chunk {index}");
                    counts
                }
                _ => histogram(&s.planes[j]),
            });
        }
        // Plane 1 as a context plane: its cost under the stream's tables, per layout (a zero
        // element is context(0) and symbol 0 in the dense planes and absent from the sparse
        // layout's).
        let context_sizes = |s: &mut EncScratch| {
            let c = contexts?;
            let dense_bits = c.cost_bits(&s.context_counts);
            let zero_bits = zeros as f64 * c.cost[256 * c.context_of[0] as usize] as f64;
            let size = |bits: f64, m: usize| {
                1.0 + bits / 8.0 + lanes::lane_header(lanes::lanes_for(m)) as f64
            };
            Some([
                size(dense_bits, n),
                if zeros > 0 {
                    size(dense_bits - zero_bits, n - zeros)
                } else {
                    size(dense_bits, n)
                },
            ])
        };
        let context_sizes = context_sizes(s);
        // Plane 0 as a row plane (dense layout only): its cost under the stream's row tables.
        // A plane in the row planes' lanes of `bits` under its tables: its estimated bytes
        // (none where a symbol has no frequency).
        let in_row_lanes = |bits: f64, u: usize| {
            let k = crate::row_contexts::row_lanes(n, u);
            Some(1.0 + bits / 8.0 + lanes::lane_header(k) as f64).filter(|b| b.is_finite())
        };
        let row_size = models.rows.and_then(|r| {
            in_row_lanes(r.chunk_bits(index, &dense[0])?, r.tables.distance as usize)
        });
        // Plane 1 as a sign plane (dense layout only): its cost under the stream's sign tables.
        let sign_size = models
            .signs
            .and_then(|t| in_row_lanes(t.chunk_bits(index, dense.get(1)?)?, t.distance));
        let mask = sparse_considered(self.zero_mask, zeros, n).then(|| {
            take_zeros_out(elems, width, &mut s.mask, &mut s.nonzero);
            histogram(&s.mask)
        });
        let sparse = mask.as_ref().map(|m| (m, zeros));
        let form = self.table_form();
        ChunkPlan::from_counts_with(&dense, sparse, context_sizes, row_size, sign_size, form)
    }

    /// The estimated size of the chunk as byte planes: the smaller of the dense and sparse
    /// layouts' estimates (what [`Rans::write_chunk_planes`] decides by).
    pub(crate) fn plane_estimate(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        s: &mut EncScratch,
    ) -> f64 {
        self.plan_chunk_planes(elems, width, rotate, Models::default(), 0, s)
            .estimate
    }

    /// Encode one chunk as byte planes (dense or sparse, or raw), appending to `out`; returns
    /// the stream version it needs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn encode_chunk_planes(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        models: Models,
        index: usize,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<u8> {
        let plan = self.plan_chunk_planes(elems, width, rotate, models, index, s);
        self.write_chunk_planes(elems, width, rotate, plan, models, s, out)
    }

    /// Write one chunk as byte planes by `plan`, which [`Rans::plan_chunk_planes`] made for
    /// these elements with this scratch (its dense planes, mask and nonzero elements still in
    /// `s`); returns the stream version it needs (1, or 4 with a context plane).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_chunk_planes(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        plan: ChunkPlan,
        models: Models,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<u8> {
        let dense_planes: Vec<&[u8]> = s.planes.iter().map(|p| &p[..]).collect();
        let mut head = [CHUNK_SPARSE, 0, 0, 0, 0];
        if plan.layouts != Layouts::Dense {
            head[1..].copy_from_slice(&((s.nonzero.len() / width) as u32).to_le_bytes());
            s.sparse_planes.resize_with(width + 1, Vec::new);
            s.sparse_planes[0].clone_from(&s.mask);
            split(&s.nonzero, width, rotate, &mut s.sparse_planes[1..]);
        }
        let sparse_planes: Vec<&[u8]> = s.sparse_planes.iter().map(|p| &p[..]).collect();
        let start = out.len();
        let s_lanes = &mut s.lanes;
        let sel = &mut s.sel;
        let form = self.table_form();
        // A layout's mode bytes and planes; the sparse layout's mask plane has no context
        // plane after it, so its nonzero planes are put on their own (plane 1's contexts are
        // the nonzero elements' plane 0), and they have no row plane (row planes are dense).
        // Returns the version the planes need.
        let mut put = |sparse: bool, dst: &mut Vec<u8>| -> Result<u8> {
            if sparse {
                let sparse_plans = plan.sparse.as_ref().expect("a sparse plan");
                dst.extend_from_slice(&head);
                put_plane(sparse_planes[0], &sparse_plans[0], form, None, s_lanes, dst)?;
                let nonzero = Models {
                    rows: None,
                    signs: None,
                    ..models
                };
                put_planes(
                    &sparse_planes[1..],
                    &sparse_plans[1..],
                    form,
                    Some((nonzero, &mut *sel)),
                    s_lanes,
                    dst,
                )
            } else {
                dst.push(CHUNK_DENSE);
                put_planes(
                    &dense_planes,
                    &plan.dense,
                    form,
                    Some((models, &mut *sel)),
                    s_lanes,
                    dst,
                )
            }
        };
        let used = match plan.layouts {
            Layouts::Sparse => put(true, out)?,
            Layouts::Both => {
                s.dense.clear();
                let dense_used = put(false, &mut s.dense)?;
                s.sparse.clear();
                let sparse_used = put(true, &mut s.sparse)?;
                if s.sparse.len() < s.dense.len() {
                    out.extend_from_slice(&s.sparse);
                    sparse_used
                } else {
                    out.extend_from_slice(&s.dense);
                    dense_used
                }
            }
            Layouts::Dense => put(false, out)?,
        };
        if !chunk_kept(out.len() - start, elems.len()) {
            out.truncate(start);
            out.push(CHUNK_RAW);
            out.extend_from_slice(elems);
            return Ok(1);
        }
        Ok(used)
    }
}

impl Rans {
    /// How this encoder writes frequency tables ([`Rans::compact_tables`]).
    pub fn table_form(&self) -> TableForm {
        if self.compact_tables {
            TableForm::Compact
        } else {
            TableForm::Wide
        }
    }

    /// The tensor's context tables, row tables and sign tables, each where it pays (the rules
    /// of [`crate::contexts::plan_tables`], [`crate::row_contexts::plan_tables`] and
    /// [`crate::sign_contexts::plan_tables`]). Where the samples call for several, the body is
    /// counted for them in one pass: row and context counts together, or row and sign counts
    /// together (the context counts then the sign counts summed over the classes); the result
    /// is what the planners give one after the other, the row tables' `E0` the context
    /// tables' where those are kept (their own where not: counted again if that differs), the
    /// sign tables' the stream's (the context section's: the context tables', else the row
    /// tables', else the samples'). `ctx_e0`: the context tables' `E0` where the rotation
    /// samples say they pay ([`crate::contexts::sample_saving`], counted once with the
    /// rotation decision).
    #[allow(clippy::too_many_arguments)]
    fn plan_models(
        &self,
        body: &[u8],
        width: usize,
        rotate: bool,
        ctx_e0: Option<u8>,
        row: usize,
        chunk_bytes: usize,
        parallel: bool,
    ) -> (
        Option<ContextEncoder>,
        Option<RowEncoder>,
        Option<SignEncoder>,
    ) {
        use crate::contexts::{self, CONTEXTS};
        use crate::row_contexts::{self as rows, RowSetup, ROW_CONTEXTS};
        use crate::sign_contexts::{self as signs, SIGN_TABLES};
        let form = self.table_form();
        let sign_considered =
            self.sign_contexts && signs::considered(body, width, rotate, row, chunk_bytes);
        let row_setup = |e0: Option<u8>| {
            self.row_contexts
                .then(|| RowSetup::new(body, width, rotate, row, e0, chunk_bytes))
                .flatten()
        };
        // Row and sign counts in one pass, with `setup`'s E0 for both.
        let rows_and_signs = |setup: &RowSetup| {
            let ctx_of = contexts::context_table(setup.e0);
            contexts::count_chunks_two::<ROW_CONTEXTS, SIGN_TABLES>(
                body,
                chunk_bytes,
                parallel,
                |chunk, h| signs::count_with_rows(chunk, setup.row, &setup.context_of, &ctx_of, h),
            )
        };
        let Some((e0, setup)) = ctx_e0.and_then(|e0| row_setup(Some(e0)).map(|s| (e0, s))) else {
            // Context tables on their own; row tables (and sign tables) by the context
            // tables' E0 where they are kept, else the samples'.
            let contexts = ctx_e0.and_then(|e0| {
                contexts::plan_tables(e0, body, width, rotate, chunk_bytes, form, parallel)
            });
            let contexts = contexts.map(|(t, c)| ContextEncoder::with_chunk_counts(t, c));
            let kept_e0 = contexts.as_ref().map(|c| c.tables.e0);
            let (rows, signs) = match (row_setup(kept_e0), sign_considered) {
                (Some(setup), true) => {
                    let ((row_counts, row_all), (sign_counts, sign_all)) = rows_and_signs(&setup);
                    let e0 = setup.e0;
                    let c = contexts.as_ref();
                    let signs = signs::kept(e0, row, sign_counts, &sign_all, c, form, parallel);
                    (setup.kept(row_counts, &row_all, form, parallel), signs)
                }
                (setup, considered) => {
                    let rows = setup.and_then(|s| {
                        s.count_and_keep(body, width, rotate, chunk_bytes, form, parallel)
                    });
                    let c = contexts.as_ref();
                    let signs = considered
                        .then(|| {
                            let e0 = kept_e0
                                .or(rows.as_ref().map(|r| r.tables.e0))
                                .unwrap_or_else(|| rows::samples_e0(body, width, rotate));
                            signs::plan_tables(body, row, e0, c, chunk_bytes, form, parallel)
                        })
                        .flatten();
                    (rows, signs)
                }
            };
            return (contexts, rows, signs);
        };
        if sign_considered {
            // Row and sign counts; the context counts are the sign counts by context.
            let ((row_counts, row_all), (sign_counts, sign_all)) = rows_and_signs(&setup);
            let ctx_counts: Vec<[u32; 256]> = sign_counts
                .chunks_exact(SIGN_TABLES)
                .flat_map(signs::by_context)
                .collect();
            let ctx_all = signs::by_context(&sign_all);
            let contexts = contexts::kept(e0, &ctx_all, ctx_counts, form)
                .map(|(t, c)| ContextEncoder::with_chunk_counts(t, c));
            let own_e0 = match contexts {
                Some(_) => e0,
                None => rows::samples_e0(body, width, rotate),
            };
            if own_e0 == setup.e0 {
                let c = contexts.as_ref();
                let signs = signs::kept(e0, row, sign_counts, &sign_all, c, form, parallel);
                let rows = setup.kept(row_counts, &row_all, form, parallel);
                return (contexts, rows, signs);
            }
            // Without the context tables, the samples' E0 for both: counted again.
            let (rows, signs) = match row_setup(Some(own_e0)) {
                Some(setup) => {
                    let ((row_counts, row_all), (sign_counts, sign_all)) = rows_and_signs(&setup);
                    let signs =
                        signs::kept(own_e0, row, sign_counts, &sign_all, None, form, parallel);
                    (setup.kept(row_counts, &row_all, form, parallel), signs)
                }
                None => (None, None),
            };
            return (contexts, rows, signs);
        }
        let ctx_of = contexts::context_table(e0);
        let ((ctx_counts, ctx_all), (row_counts, row_all)) =
            contexts::count_chunks_two::<CONTEXTS, ROW_CONTEXTS>(
                body,
                chunk_bytes,
                parallel,
                |chunk, h| rows::count_with_contexts(chunk, width, rotate, &setup, &ctx_of, h),
            );
        let contexts = contexts::kept(e0, &ctx_all, ctx_counts, form)
            .map(|(t, c)| ContextEncoder::with_chunk_counts(t, c));
        // Without context tables the row tables take the samples' own E0 (the shift follows
        // from it): the counts made with the context tables' serve where it is the same.
        let own_e0 = match contexts {
            Some(_) => e0,
            None => rows::samples_e0(body, width, rotate),
        };
        let rows = if own_e0 == setup.e0 {
            setup.kept(row_counts, &row_all, form, parallel)
        } else {
            let e0 = Some(own_e0);
            rows::plan_tables(body, width, rotate, row, e0, chunk_bytes, form, parallel)
        };
        (contexts, rows, None)
    }

    /// [`Rans::encode_rows`] at `chunk_log2`, or with [`Rans::chunk_search`] by a descent over
    /// the sizes of [`search_chunk_log2`]: the default 64 KiB first, then larger sizes while
    /// each is shorter than the best so far, else smaller ones while each is. Sizes past the
    /// first that holds the whole input in one chunk write the same stream and are not tried.
    /// On the workloads the descent lands within 0.02 % of the shortest of every size, per
    /// record, with half the encodes (a tensor's sizes rarely have two minima); ties keep the
    /// larger chunk, which decodes faster on a CPU.
    pub(crate) fn encode_searched(
        &self,
        input: &[u8],
        elem: ElemType,
        row: usize,
        rows: Option<RowMap>,
        parallel: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if !self.chunk_search {
            return self.encode_rows(input, elem, row, rows, parallel, out);
        }
        let sizes = search_chunk_log2(elem.size());
        let holds = sizes
            .iter()
            .position(|&c| input.len() <= 1 << c)
            .unwrap_or(sizes.len() - 1);
        let sizes = &sizes[..=holds];
        let start = sizes
            .iter()
            .position(|&c| c == DEFAULT_CHUNK_LOG2)
            .unwrap_or(sizes.len() - 1);
        let encode = |chunk_log2: u8| -> Result<Vec<u8>> {
            let at = Rans {
                chunk_log2,
                chunk_search: false,
                ..*self
            };
            let mut stream = Vec::new();
            at.encode_rows(input, elem, row, rows.clone(), parallel, &mut stream)?;
            Ok(stream)
        };
        let mut best = encode(sizes[start])?;
        // Takes the sizes in `way` while each comes out shorter; whether any did.
        let mut walk = |way: &mut dyn Iterator<Item = &u8>| -> Result<bool> {
            let mut moved = false;
            for &c in way {
                let trial = encode(c)?;
                if trial.len() >= best.len() {
                    break;
                }
                (best, moved) = (trial, true);
            }
            Ok(moved)
        };
        if !walk(&mut sizes[start + 1..].iter())? {
            walk(&mut sizes[..start].iter().rev())?;
        }
        out.extend_from_slice(&best);
        Ok(())
    }

    /// Encode with rows of `row` elements (0: no shape), `rows` the repeated ones; the chunks
    /// on all of rayon's threads if `parallel` (the same bytes either way).
    pub(crate) fn encode_rows(
        &self,
        input: &[u8],
        elem: ElemType,
        row: usize,
        rows: Option<RowMap>,
        parallel: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.check()?;
        let width = elem.size();
        let start = out.len();
        // The header, the row map, the tables' sections and the chunk table go before the
        // chunks once the chunks are coded (the version, the sections and the chunk lengths
        // are known then); until then the row map waits in `row_map`.
        let mut flags = if rows.is_some() { FLAG_ROWS } else { 0 }
            | if self.compact_tables {
                FLAG_COMPACT_TABLES
            } else {
                0
            };
        let mut row_map = Vec::new();
        let originals: Vec<u8>;
        let input_body = match &rows {
            Some(m) => {
                let n = input.len() / m.row_bytes;
                row_map.extend_from_slice(&(m.row_bytes as u64).to_le_bytes());
                let mut bits = vec![0u8; n.div_ceil(8)];
                for &(r, _) in &m.copies {
                    bits[r as usize / 8] |= 1 << (r % 8);
                }
                row_map.extend_from_slice(&bits);
                for &(_, src) in &m.copies {
                    row_map.extend_from_slice(&src.to_le_bytes());
                }
                originals = kept_rows(input, m.row_bytes, &bits, parallel);
                &originals[..]
            }
            None => input,
        };
        let body = input_body.len() / width * width;
        let chunk_bytes = (1usize << self.chunk_log2) / width * width;
        let n_chunks = body.div_ceil(chunk_bytes);
        let mut s = enc_scratch(chunk_bytes);
        // The context tables' first step on the rotation samples (`E0`, where they pay): for
        // FP32 both ways, which the rotation weighs, else the chosen way's.
        let context_samples = |rotate| match self.contexts {
            true => crate::contexts::sample_saving(&input_body[..body], width, rotate),
            false => None,
        };
        let both = (self.rotate && self.contexts && width == 4)
            .then(|| [false, true].map(context_samples));
        // The format never rotates single bytes; wider elements are rotated where a sample
        // says the planes come out smaller that way.
        let rotate = self.rotate
            && width > 1
            && rotation_pays(&input_body[..body], width, both.as_ref(), &mut s.planes);
        // (For single bytes the flag means nothing; it is set as this encoder always did.)
        flags |= u8::from(if width == 1 { self.rotate } else { rotate });
        let ctx_e0 = match both {
            Some(both) => both[usize::from(rotate)],
            None => context_samples(rotate),
        };
        let (contexts, rows_enc, signs) = self.plan_models(
            &input_body[..body],
            width,
            rotate,
            ctx_e0.map(|(e0, _)| e0),
            row,
            chunk_bytes,
            parallel,
        );
        let mut plan = TensorPlan {
            width,
            rotate,
            row,
            try_modelled: false,
            try_scaled: self.scaled && width == 4,
            models: Models {
                contexts: contexts.as_ref(),
                rows: rows_enc.as_ref(),
                signs: signs.as_ref(),
            },
            try_differences: false,
            try_tails: self.tails && width == 4,
        };
        plan.try_differences = self.differences
            && width > 1
            && self.differences_may_pay(
                &input_body[..body],
                width,
                rotate,
                chunk_bytes,
                parallel,
                &mut s,
            );
        plan.try_modelled = self.modelled
            && self.modelled_may_pay(&input_body[..body], plan, chunk_bytes, parallel, &mut s);
        // Chunks in order, coded into `out`; each chunk's length into the table.
        let code = |part: &[u8],
                    first: usize,
                    s: &mut EncScratch,
                    out: &mut Vec<u8>,
                    lens: &mut Vec<u32>| {
            let mut needs = Needs::version(1);
            for (i, c) in part.chunks(chunk_bytes).enumerate() {
                let at = out.len();
                needs = needs.and(self.encode_chunk(c, first + i, plan, s, out)?);
                lens.push((out.len() - at) as u32);
            }
            Ok::<Needs, Error>(needs)
        };
        let mut lens = Vec::with_capacity(n_chunks);
        // The parallel tasks' coded bytes, in order (they follow the header, once it is known;
        // one core codes straight into `out`).
        let mut tasks: Vec<Vec<u8>> = Vec::new();
        let task_bytes = planepack_core::codec::parallel_task_bytes(body, chunk_bytes);
        let needs = if parallel && body > task_bytes {
            // Tasks of whole chunks (`parallel_task_bytes`), coded on rayon's
            // threads into buffers of their own (sized for a task's worst case: each chunk at
            // most its raw bytes and a mode byte), then appended in order: the same bytes as
            // one core's.
            let coded: Vec<Result<CodedTask>> = input_body[..body]
                .par_chunks(task_bytes)
                .enumerate()
                .map(|(t, part)| {
                    let chunks = part.len().div_ceil(chunk_bytes);
                    let mut bytes = Vec::with_capacity(part.len() + chunks);
                    let mut part_lens = Vec::with_capacity(chunks);
                    let first = t * (task_bytes / chunk_bytes);
                    let mut s = enc_scratch(chunk_bytes);
                    let needs = code(part, first, &mut s, &mut bytes, &mut part_lens)?;
                    Ok((bytes, part_lens, needs))
                })
                .collect();
            let mut all = Needs::version(1);
            for c in coded {
                let (bytes, part_lens, needs) = c?;
                tasks.push(bytes);
                lens.extend_from_slice(&part_lens);
                all = all.and(needs);
            }
            all
        } else {
            code(&input_body[..body], 0, &mut s, out, &mut lens)?
        };
        if needs.tails {
            flags |= FLAG_TAILS;
        }
        let version = needs.version;
        // The context tables go before the chunk table, once a chunk has used them; a
        // version-5 or 6 stream has the section always: the tensor's tables where it has any
        // (whether or not a chunk used them), else an empty set (with the row tables' `E0`
        // in version 6). The row tables follow in version 6 (a chunk used them).
        let form = self.table_form();
        let mut section = Vec::new();
        match contexts.filter(|_| version >= VERSION_CONTEXT) {
            Some(c) => c.tables.write(&mut section, form),
            None if version >= crate::difference::VERSION_DIFFERENCE => {
                let rows = rows_enc.as_ref().filter(|_| version >= VERSION_ROW_CONTEXT);
                let signs = signs.as_ref().filter(|_| version >= VERSION_SIGN);
                let e0 = rows.map(|r| r.tables.e0).or(signs.map(|s| s.e0));
                section.extend_from_slice(&[e0.unwrap_or(0), 0]);
            }
            None => {}
        }
        if version >= VERSION_ROW_CONTEXT {
            match (&rows_enc, &signs) {
                (Some(r), _) => r.tables.write(&mut section, form),
                // Version 8 without row tables: the section gives the sign planes' distance.
                (None, Some(s)) if version >= VERSION_SIGN => crate::row_contexts::RowTables {
                    e0: s.e0,
                    distance: s.distance as u32,
                    shift: 0,
                    tables: Default::default(),
                }
                .write(&mut section, form),
                _ => unreachable!("a row plane is written only with the row tables"),
            }
        }
        if version >= VERSION_SIGN {
            let s = signs
                .as_ref()
                .expect("a sign plane is written only with the sign tables");
            s.tables.write(&mut section, form);
        }
        let mut head =
            Vec::with_capacity(HEADER_BYTES + row_map.len() + section.len() + 4 * n_chunks);
        crate::header::write_header(
            &mut head,
            version,
            width,
            self.chunk_log2,
            flags,
            input.len(),
            &[&row_map, &section],
            &lens,
        );
        if tasks.is_empty() {
            out.splice(start..start, head);
        } else {
            // (Not the splice: it would move every coded byte once more, on one thread.)
            out.reserve(
                head.len() + tasks.iter().map(Vec::len).sum::<usize>() + input.len() - body,
            );
            out.extend_from_slice(&head);
            planepack_core::codec::append_parts(out, &tasks);
        }
        out.extend_from_slice(&input_body[body..]);
        debug_assert!(out.len() - start <= self.max_compressed_len(input.len(), elem));
        Ok(())
    }
}

/// The rows of `input` (of `row_bytes` each) whose bit in `copies` is clear, in order: the
/// body a row map leaves. On rayon's threads if `parallel` (one thread copying the whole
/// tensor, and faulting in its pages, was a tenth of a two-thread encode's time on CNN
/// activations).
fn kept_rows(input: &[u8], row_bytes: usize, copies: &[u8], parallel: bool) -> Vec<u8> {
    let rows = input.len() / row_bytes;
    let kept = |r: std::ops::Range<usize>| r.filter(|&i| copies[i / 8] >> (i % 8) & 1 == 0);
    // Tasks of whole rows (`parallel_task_bytes`; one task on one thread), each given its
    // slice of the body by the kept rows before it.
    let per_task = match parallel {
        true => planepack_core::codec::parallel_task_bytes(input.len(), row_bytes) / row_bytes,
        false => rows,
    }
    .max(1);
    let tasks: Vec<std::ops::Range<usize>> = (0..rows)
        .step_by(per_task)
        .map(|t| t..rows.min(t + per_task))
        .collect();
    let counts: Vec<usize> = tasks.iter().map(|t| kept(t.clone()).count()).collect();
    let mut out = vec![0u8; counts.iter().sum::<usize>() * row_bytes];
    let mut parts = Vec::with_capacity(tasks.len());
    let mut rest = &mut out[..];
    for (t, c) in tasks.into_iter().zip(counts) {
        let (part, after) = std::mem::take(&mut rest).split_at_mut(c * row_bytes);
        parts.push((t, part));
        rest = after;
    }
    let fill = |(t, part): (std::ops::Range<usize>, &mut [u8])| {
        for (dst, i) in part.chunks_exact_mut(row_bytes).zip(kept(t)) {
            dst.copy_from_slice(&input[i * row_bytes..][..row_bytes]);
        }
    };
    if parallel {
        parts.into_par_iter().for_each(fill);
    } else {
        parts.into_iter().for_each(fill);
    }
    out
}

/// A row is coded as a copy only if the planes would spend at least this many bits on it
/// (estimated in [`find_copies`]): a reference costs 32 bits, and taking a row out of the body
/// breaks the neighbourhood a modelled chunk's "up" and "left" classes see. Tried on the
/// workloads' tensors: 33, 48, 64 and 128 bits; 48 stored the fewest bytes, 128 lost up to
/// 18 % on CNN activations whose repeated rows are cheap ones.
const MIN_COPY_BITS: f64 = 48.0;
/// What a copy costs in the map: its u32 source row.
const REFERENCE_BITS: f64 = 32.0;

/// Rows of `row_bytes` that repeat an earlier row: (row, first row with the same bytes),
/// for rows the planes would code in at least [`MIN_COPY_BITS`]; none unless the copies'
/// estimated saving exceeds the map's own cost (a bitmap bit for every row). A row's cost is estimated
/// from the tensor's fraction `p` of zero elements (`width` bytes each): a zero element costs
/// `log2(1 / p)` bits of mask, a nonzero one `log2(1 / (1 - p))` plus 4 bits a byte (nonzero
/// floats rarely code below half their size). So the all-zero padding rows of a mostly-zero
/// CNN activation ([40, 1152, 11, 11] BF16, 90 % zeros: 1.7 bits a row) stay in the body,
/// where they became 300 000 references and a stream 2.5 times as long before this rule,
/// while the zero rows of a denser one (113-element rows at 23 % zeros: 240 bits) are copies.
/// Rows are keyed by their 64-bit XXH3 (SipHash over whole rows took an eighth of the
/// encoder's time) and a match is confirmed byte for byte; a row whose hash collides with a
/// different earlier row is simply kept as an original, so the map is always exact.
pub(crate) fn find_copies(
    input: &[u8],
    row_bytes: usize,
    width: usize,
    parallel: bool,
) -> Vec<(u32, u32)> {
    use std::collections::hash_map::{Entry, HashMap};
    let elements = input.len() / width;
    // Each row's zero elements and hash, in one pass over the row (on rayon's threads if
    // `parallel`, in tasks of whole rows): the tensor's zero fraction, each row's cost, the
    // map's keys.
    let per_row = |row: &[u8]| (count_zeros(row, width), xxhash_rust::xxh3::xxh3_64(row));
    let rows: Vec<(usize, u64)> = if parallel {
        let task = planepack_core::codec::parallel_task_bytes(input.len(), row_bytes);
        input
            .par_chunks(task)
            .flat_map_iter(|part| part.chunks_exact(row_bytes).map(per_row))
            .collect()
    } else {
        input.chunks_exact(row_bytes).map(per_row).collect()
    };
    let zeros: usize = rows.iter().map(|r| r.0).sum();
    let p = (zeros.max(1) as f64 / elements as f64).min(1.0 - 1.0 / elements as f64);
    let (zero_bits, nonzero_bits) = (-p.log2(), -(1.0 - p).log2() + 4.0 * width as f64);
    let row_bits = |z: usize| z as f64 * zero_bits + (row_bytes / width - z) as f64 * nonzero_bits;
    // Each row against the first earlier row of its hash (a row whose hash collides with a
    // different earlier row stays an original and is not a source). The rows are split by
    // hash into shards, one map each (on rayon's threads if `parallel`: one thread's map was
    // a tenth of a two-thread encode's time on CNN activations, rows of 11 elements); every
    // hash lives in one shard, where rows come in order, so the copies are those one map
    // finds.
    let shards = if parallel {
        rayon::current_num_threads().next_power_of_two()
    } else {
        1
    };
    let shard_copies = |shard: usize| {
        // Keyed by the hash itself: it is already uniform, so hashing it again (SipHash)
        // would only cost time.
        let mut first: HashMap<u64, u32, std::hash::BuildHasherDefault<HashedKey>> =
            HashMap::with_capacity_and_hasher(rows.len() / shards, Default::default());
        let mut copies = Vec::new();
        for (i, (row, &(z, hash))) in input.chunks_exact(row_bytes).zip(&rows).enumerate() {
            if (hash >> 32) as usize & (shards - 1) != shard || row_bits(z) < MIN_COPY_BITS {
                continue;
            }
            match first.entry(hash) {
                Entry::Occupied(e) => {
                    let src = *e.get();
                    if input[src as usize * row_bytes..][..row_bytes] == *row {
                        copies.push((i as u32, src));
                    }
                }
                Entry::Vacant(e) => {
                    e.insert(i as u32);
                }
            }
        }
        copies
    };
    let mut copies: Vec<(u32, u32)> = if shards > 1 {
        let mut c: Vec<(u32, u32)> = (0..shards)
            .into_par_iter()
            .flat_map_iter(shard_copies)
            .collect();
        c.sort_unstable();
        c
    } else {
        shard_copies(0)
    };
    // (Summed in row order, as one map would: the same float, the same decision.)
    let saved_bits: f64 = copies
        .iter()
        .map(|&(i, _)| row_bits(rows[i as usize].0) - REFERENCE_BITS)
        .sum();
    // The map's fixed cost: its row length and a bitmap bit for every row.
    let map_bits = 64.0 + (input.len() / row_bytes) as f64;
    if saved_bits <= map_bits {
        copies.clear();
    }
    copies
}

/// A [`std::hash::Hasher`] for keys that are already hashes ([`find_copies`]' XXH3 of a row):
/// the key is the hash.
#[derive(Default)]
struct HashedKey(u64);

impl std::hash::Hasher for HashedKey {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed with it; any other input folds in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}
