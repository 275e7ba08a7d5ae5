//! The encoder: the rotation decision, every chunk planned from its histograms (dense,
//! sparse or modelled, each plane raw, constant or rANS) and coded, chunks in parallel.

use super::*;

/// Samples [`rotation_pays`] takes, evenly spaced over the tensor, and their size: 32 KiB in
/// all, enough for order-0 statistics and a small cost next to coding the tensor.
pub(crate) const ROTATION_SAMPLES: usize = 4;
pub(crate) const ROTATION_SAMPLE_BYTES: usize = 8 << 10;

/// Do the byte planes of `body` (whole elements of `width` > 1 bytes) cost fewer bits with
/// the sign rotated to the bottom? Rotation puts a float's whole exponent in the top plane,
/// which usually pays (BF16, FP16 and most FP32 tensors), but not always: in FP32 tensors
/// whose values sit near a few exponents, the sign joined to the top mantissa bits can code
/// better. Decided per stream (the format's flag `R`) from the order-0 entropy of the planes
/// of up to [`ROTATION_SAMPLES`] samples of [`ROTATION_SAMPLE_BYTES`], each way; ties rotate.
pub(crate) fn rotation_pays(body: &[u8], width: usize, planes: &mut Vec<Vec<u8>>) -> bool {
    let sample = ROTATION_SAMPLE_BYTES / width * width;
    let slots = body.len().div_ceil(sample);
    if slots == 0 {
        return true;
    }
    let picks = slots.min(ROTATION_SAMPLES);
    planes.resize_with(width, Vec::new);
    let mut bits = [0.0f64; 2];
    for k in 0..picks {
        let at = k * slots / picks * sample;
        let chunk = &body[at..body.len().min(at + sample)];
        for (cost, rotate) in bits.iter_mut().zip([false, true]) {
            split(chunk, width, rotate, planes);
            *cost += planes
                .iter()
                .map(|p| entropy_bits(&histogram(p)))
                .sum::<f64>();
        }
    }
    bits[1] <= bits[0]
}

/// Sample chunks [`Rans::modelled_may_pay`] tries at most, evenly spaced over the tensor (one
/// in 16 chunks, at least 2).
pub(crate) const MODELLED_SAMPLES: usize = 8;
/// How close to [`MODELLED_MIN_GAIN`] a sample's modelled estimate must come for the encoder
/// to try the modelled form on every chunk: 1 % of the planes' estimate, so a sample that
/// saves anything at all counts. (On transformer activations and KV caches the modelled form
/// comes out 0.3-0.7 % larger in every chunk; where it wins, it wins by 5-40 %.)
pub(crate) const MODELLED_SAMPLE_SLACK: f64 = 0.01;

/// Order-0 entropy of a histogram, in bits: `sum c log2(n / c)`.
pub(crate) fn entropy_bits(counts: &[u32; 256]) -> f64 {
    let n: f64 = counts.iter().map(|&c| c as f64).sum();
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| c as f64 * (n / c as f64).log2())
        .sum()
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
}

/// What the encoder decided once for the whole tensor, with which it codes every chunk.
#[derive(Clone, Copy)]
pub(crate) struct TensorPlan {
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
}

/// One parallel task's chunks: their bytes, each chunk's length, the stream version they need.
type CodedTask = (Vec<u8>, Vec<u32>, u8);

/// How a plane will be written, chosen from its histogram alone.
// One per byte plane of a chunk, on the stack: boxing the table would allocate per plane.
#[allow(clippy::large_enum_variant)]
pub(crate) enum PlanePlan {
    Const(u8),
    Raw,
    Rans(Table),
}

/// A plane's kind and its estimated size in bytes (exact for raw and constant planes; for a
/// coded plane the table's cost in bits plus the table and lane headers, which the coder
/// meets to within a few bytes a lane).
pub(crate) fn plan_plane(symbols: &[u8]) -> (PlanePlan, f64) {
    let counts = histogram(symbols);
    let present = counts.iter().filter(|&&c| c > 0).count();
    if present <= 1 {
        return (PlanePlan::Const(symbols.first().copied().unwrap_or(0)), 2.0);
    }
    let table = Table::from_counts(&counts);
    let estimate = table.cost_bits(&counts) / 8.0
        + (table.written_len() + lanes::lane_header(lanes::lanes_for(symbols.len()))) as f64;
    if estimate < symbols.len() as f64 {
        (PlanePlan::Rans(table), 1.0 + estimate)
    } else {
        (PlanePlan::Raw, 1.0 + symbols.len() as f64)
    }
}

/// Append plane `symbols` as planned (raw after all if coding it came out no smaller).
pub(crate) fn put_plane(
    symbols: &[u8],
    plan: &PlanePlan,
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    match plan {
        PlanePlan::Const(v) => {
            out.push(PLANE_CONST);
            out.push(*v);
            return Ok(());
        }
        PlanePlan::Rans(table) => {
            let start = out.len();
            out.push(PLANE_RANS);
            table.write(out);
            enc.encode(table, symbols, out)?;
            if out.len() - start < 1 + symbols.len() {
                return Ok(());
            }
            out.truncate(start);
        }
        PlanePlan::Raw => {}
    }
    out.push(PLANE_RAW);
    out.extend_from_slice(symbols);
    Ok(())
}

/// Append `planes` to `out`, each as planned.
pub(crate) fn put_planes(
    planes: &[&[u8]],
    plans: &[PlanePlan],
    enc: &mut lanes::Encoder,
    out: &mut Vec<u8>,
) -> Result<()> {
    for (p, plan) in planes.iter().zip(plans) {
        put_plane(p, plan, enc, out)?;
    }
    Ok(())
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
    /// chunks decide, and any that comes within [`MODELLED_SAMPLE_SLACK`] of its planes keeps
    /// the trial on for every chunk. Tensors of that many chunks or fewer try every chunk.
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
        let chunks = body.len().div_ceil(chunk_bytes);
        if chunks <= MODELLED_SAMPLES {
            return true;
        }
        let samples = (chunks / 16).clamp(2, MODELLED_SAMPLES);
        let near = |k: usize, s: &mut EncScratch| {
            let at = (2 * k + 1) * chunks / (2 * samples) * chunk_bytes;
            let chunk = &body[at..body.len().min(at + chunk_bytes)];
            let planes = self.plane_estimate(chunk, width, rotate, s);
            let (modelled, _, _) = modelled::plan(chunk, width, rotate, row, &mut s.modelled);
            modelled <= planes * (1.0 - MODELLED_MIN_GAIN + MODELLED_SAMPLE_SLACK)
        };
        if parallel {
            (0..samples)
                .into_par_iter()
                .any(|k| near(k, &mut EncScratch::default()))
        } else {
            (0..samples).any(|k| near(k, s))
        }
    }

    /// Encode one chunk of whole elements as `plan` says, appending mode and planes to `out`;
    /// returns the stream version the chunk needs (1; 2 if modelled, 3 if scaled).
    pub(crate) fn encode_chunk(
        &self,
        elems: &[u8],
        plan: TensorPlan,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<u8> {
        let TensorPlan {
            width,
            rotate,
            row,
            try_modelled,
            try_scaled,
        } = plan;
        // A chunk whose every block factors (which the first block decides on nearly every
        // other tensor, at once) is scaled where that is smaller than its planes: it decodes
        // faster than planes, so any saving counts.
        let scaled = if try_scaled {
            scaled::plan(elems, rotate, &mut s.scaled)
        } else {
            None
        };
        if scaled.is_none() && !try_modelled {
            self.encode_chunk_planes(elems, width, rotate, s, out)?;
            return Ok(1);
        }
        // The planes' estimate, once, for whichever of the two forms is tried.
        let best_plane_estimate = self.plane_estimate(elems, width, rotate, s);
        if let Some(scaled) = scaled.filter(|p| p.estimate < best_plane_estimate) {
            let start = out.len();
            scaled::encode(&scaled, &s.scaled, &mut s.lanes, out)?;
            // (A chunk of a few elements can come out longer than raw: then it is coded as
            // any other, which never is.)
            if out.len() - start <= elems.len() {
                return Ok(scaled::VERSION_SCALED);
            }
            out.truncate(start);
        }
        if !try_modelled {
            self.encode_chunk_planes(elems, width, rotate, s, out)?;
            return Ok(1);
        }
        let (estimate, tables, plans) = modelled::plan(elems, width, rotate, row, &mut s.modelled);
        // Modelled only where it saves at least MODELLED_MIN_GAIN: it decodes at about half
        // the planes' speed, so a fraction of a percent is not worth it. (The estimates are
        // within a few bytes a lane of the coded sizes, so no chunk is coded twice.)
        if estimate <= best_plane_estimate * (1.0 - MODELLED_MIN_GAIN) {
            modelled::encode(
                elems,
                width,
                &tables,
                &plans,
                &mut s.modelled,
                &mut s.lanes,
                out,
            )?;
            return Ok(VERSION_MODELLED);
        }
        self.encode_chunk_planes(elems, width, rotate, s, out)?;
        Ok(1)
    }

    /// The estimated size of the chunk as byte planes: the smaller of the dense and sparse
    /// layouts' estimates (what [`Rans::encode_chunk_planes`] decides by).
    pub(crate) fn plane_estimate(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        s: &mut EncScratch,
    ) -> f64 {
        s.planes.resize_with(width, Vec::new);
        split(elems, width, rotate, &mut s.planes);
        let dense = 1.0 + s.planes.iter().map(|p| plan_plane(p).1).sum::<f64>();
        let n = elems.len() / width;
        let zeros = count_zeros(elems, width);
        if self.zero_mask && zeros > 0 && zeros >= n / 8 {
            take_zeros_out(elems, width, &mut s.mask, &mut s.nonzero);
            s.sparse_planes.resize_with(width + 1, Vec::new);
            s.sparse_planes[0].clone_from(&s.mask);
            split(&s.nonzero, width, rotate, &mut s.sparse_planes[1..]);
            let sparse = 5.0 + s.sparse_planes.iter().map(|p| plan_plane(p).1).sum::<f64>();
            return dense.min(sparse);
        }
        dense
    }

    /// Encode one chunk as byte planes (dense or sparse, or raw), appending to `out`.
    pub(crate) fn encode_chunk_planes(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        s.planes.resize_with(width, Vec::new);
        split(elems, width, rotate, &mut s.planes);
        let (dense_plans, dense_sizes): (Vec<_>, Vec<_>) =
            s.planes.iter().map(|p| plan_plane(p)).unzip();
        let dense_estimate = 1.0 + dense_sizes.iter().sum::<f64>();
        let dense_planes: Vec<&[u8]> = s.planes.iter().map(|p| &p[..]).collect();
        let n = elems.len() / width;
        let zeros = count_zeros(elems, width);
        let mut sparse_plan = None;
        if self.zero_mask && zeros > 0 && zeros >= n / 8 {
            take_zeros_out(elems, width, &mut s.mask, &mut s.nonzero);
            s.sparse_planes.resize_with(width + 1, Vec::new);
            s.sparse_planes[0].clone_from(&s.mask);
            split(&s.nonzero, width, rotate, &mut s.sparse_planes[1..]);
            let (plans, sizes): (Vec<_>, Vec<_>) =
                s.sparse_planes.iter().map(|p| plan_plane(p)).unzip();
            sparse_plan = Some((plans, 5.0 + sizes.iter().sum::<f64>()));
        }
        let mut head = [CHUNK_SPARSE, 0, 0, 0, 0];
        head[1..].copy_from_slice(&((n - zeros) as u32).to_le_bytes());
        let sparse_planes: Vec<&[u8]> = s.sparse_planes.iter().map(|p| &p[..]).collect();
        // Code only the layout the estimates favour, unless they are too close to call (then
        // both, and the smaller is kept): the estimates are within a few bytes a lane.
        // One layout to code: straight into `out` (no copy of the chunk).
        let only = match &sparse_plan {
            None => Some(true),
            Some((_, sparse_estimate)) => {
                let margin = 64.0 + dense_estimate.min(*sparse_estimate) / 100.0;
                if *sparse_estimate <= dense_estimate - margin {
                    Some(false)
                } else if dense_estimate <= *sparse_estimate - margin {
                    Some(true)
                } else {
                    None
                }
            }
        };
        let start = out.len();
        match (only, &sparse_plan) {
            (Some(true), _) | (None, None) => {
                out.push(CHUNK_DENSE);
                put_planes(&dense_planes, &dense_plans, &mut s.lanes, out)?;
            }
            (Some(false), Some((sparse_plans, _))) => {
                out.extend_from_slice(&head);
                put_planes(&sparse_planes, sparse_plans, &mut s.lanes, out)?;
            }
            (_, Some((sparse_plans, _))) => {
                // Too close to call: both, and the shorter is kept (dense on a tie).
                s.dense.clear();
                s.dense.push(CHUNK_DENSE);
                put_planes(&dense_planes, &dense_plans, &mut s.lanes, &mut s.dense)?;
                s.sparse.clear();
                s.sparse.extend_from_slice(&head);
                put_planes(&sparse_planes, sparse_plans, &mut s.lanes, &mut s.sparse)?;
                let best = if s.sparse.len() < s.dense.len() {
                    &s.sparse
                } else {
                    &s.dense
                };
                out.extend_from_slice(best);
            }
            (Some(false), None) => unreachable!("no sparse layout to prefer"),
        }
        if out.len() - start > elems.len() {
            out.truncate(start);
            out.push(CHUNK_RAW);
            out.extend_from_slice(elems);
        }
        Ok(())
    }
}

impl Rans {
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
        out.extend_from_slice(&MAGIC);
        let version_at = out.len();
        out.push(1);
        out.push(width as u8);
        out.push(self.chunk_log2);
        let flags_at = out.len();
        out.push(if rows.is_some() { 2 } else { 0 });
        out.extend_from_slice(&(input.len() as u64).to_le_bytes());
        let originals: Vec<u8>;
        let input_body = match &rows {
            Some(m) => {
                let n = input.len() / m.row_bytes;
                out.extend_from_slice(&(m.row_bytes as u64).to_le_bytes());
                let mut bits = vec![0u8; n.div_ceil(8)];
                for &(r, _) in &m.copies {
                    bits[r as usize / 8] |= 1 << (r % 8);
                }
                out.extend_from_slice(&bits);
                for &(_, src) in &m.copies {
                    out.extend_from_slice(&src.to_le_bytes());
                }
                let mut kept = Vec::with_capacity(input.len() - m.copies.len() * m.row_bytes);
                for (i, row) in input.chunks_exact(m.row_bytes).enumerate() {
                    if bits[i / 8] >> (i % 8) & 1 == 0 {
                        kept.extend_from_slice(row);
                    }
                }
                originals = kept;
                &originals[..]
            }
            None => input,
        };
        let body = input_body.len() / width * width;
        let chunk_bytes = (1usize << self.chunk_log2) / width * width;
        let n_chunks = body.div_ceil(chunk_bytes);
        let table_at = out.len();
        out.resize(table_at + 4 * n_chunks, 0);
        let mut s = EncScratch::default();
        // The format never rotates single bytes; wider elements are rotated where a sample
        // says the planes come out smaller that way.
        let rotate =
            self.rotate && width > 1 && rotation_pays(&input_body[..body], width, &mut s.planes);
        // (For single bytes the flag means nothing; it is set as this encoder always did.)
        out[flags_at] |= u8::from(if width == 1 { self.rotate } else { rotate });
        let mut plan = TensorPlan {
            width,
            rotate,
            row,
            try_modelled: false,
            try_scaled: self.scaled && width == 4,
        };
        plan.try_modelled = self.modelled
            && self.modelled_may_pay(&input_body[..body], plan, chunk_bytes, parallel, &mut s);
        // Chunks in order, coded into `out`; each chunk's length into the table.
        let code = |part: &[u8], s: &mut EncScratch, out: &mut Vec<u8>, lens: &mut Vec<u32>| {
            let mut version = 1;
            for c in part.chunks(chunk_bytes) {
                let at = out.len();
                version = version.max(self.encode_chunk(c, plan, s, out)?);
                lens.push((out.len() - at) as u32);
            }
            Ok::<u8, Error>(version)
        };
        let mut lens = Vec::with_capacity(n_chunks);
        let task_bytes =
            chunk_bytes * planepack_core::codec::PARALLEL_TASK_BYTES.div_ceil(chunk_bytes);
        let version = if parallel && body > task_bytes {
            // Tasks of whole chunks, at least PARALLEL_TASK_BYTES each, coded on rayon's
            // threads into buffers of their own (sized for a task's worst case: each chunk at
            // most its raw bytes and a mode byte), then appended in order: the same bytes as
            // one core's.
            let coded: Vec<Result<CodedTask>> = input_body[..body]
                .par_chunks(task_bytes)
                .map_init(EncScratch::default, |s, part| {
                    let chunks = part.len().div_ceil(chunk_bytes);
                    let mut bytes = Vec::with_capacity(part.len() + chunks);
                    let mut part_lens = Vec::with_capacity(chunks);
                    let version = code(part, s, &mut bytes, &mut part_lens)?;
                    Ok((bytes, part_lens, version))
                })
                .collect();
            let mut newest = 1;
            for c in coded {
                let (bytes, part_lens, version) = c?;
                out.extend_from_slice(&bytes);
                lens.extend_from_slice(&part_lens);
                newest = newest.max(version);
            }
            newest
        } else {
            code(&input_body[..body], &mut s, out, &mut lens)?
        };
        out[version_at] = version;
        for (entry, len) in out[table_at..table_at + 4 * n_chunks]
            .chunks_exact_mut(4)
            .zip(&lens)
        {
            entry.copy_from_slice(&len.to_le_bytes());
        }
        out.extend_from_slice(&input_body[body..]);
        debug_assert!(out.len() - start <= self.max_compressed_len(input.len(), elem));
        Ok(())
    }
}

/// Rows of `row_bytes` that repeat an earlier row: (row, first row with the same bytes).
/// Rows are keyed by their 64-bit XXH3 (SipHash over whole rows took an eighth of the
/// encoder's time) and a match is confirmed byte for byte; a row whose hash collides with a
/// different earlier row is simply kept as an original, so the map is always exact.
pub(crate) fn find_copies(input: &[u8], row_bytes: usize) -> Vec<(u32, u32)> {
    use std::collections::hash_map::{Entry, HashMap};
    let mut first: HashMap<u64, u32> = HashMap::new();
    let mut copies = Vec::new();
    for (i, row) in input.chunks_exact(row_bytes).enumerate() {
        match first.entry(xxhash_rust::xxh3::xxh3_64(row)) {
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
}
