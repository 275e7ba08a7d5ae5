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
    /// A chunk coded as planes while its modelled form is kept aside.
    planes: Vec<Vec<u8>>,
    sparse_planes: Vec<Vec<u8>>,
    lanes: lanes::Encoder,
    dense: Vec<u8>,
    sparse: Vec<u8>,
    mask: Vec<u8>,
    nonzero: Vec<u8>,
}

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

    /// Encode one chunk of whole elements (rows of `row` elements; 0: unknown), appending
    /// mode and planes to `out`; returns whether the chunk is modelled (mode 3).
    pub(crate) fn encode_chunk(
        &self,
        elems: &[u8],
        width: usize,
        rotate: bool,
        row: usize,
        s: &mut EncScratch,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        if !self.modelled {
            self.encode_chunk_planes(elems, width, rotate, s, out)?;
            return Ok(false);
        }
        let best_plane_estimate = self.plane_estimate(elems, width, rotate, s);
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
            return Ok(true);
        }
        self.encode_chunk_planes(elems, width, rotate, s, out)?;
        Ok(false)
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
    /// Encode with rows of `row` elements (0: no shape), `rows` the repeated ones.
    pub(crate) fn encode_rows(
        &self,
        input: &[u8],
        elem: ElemType,
        row: usize,
        rows: Option<RowMap>,
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
                originals = input
                    .chunks_exact(m.row_bytes)
                    .enumerate()
                    .filter(|(i, _)| bits[i / 8] >> (i % 8) & 1 == 0)
                    .flat_map(|(_, row)| row.iter().copied())
                    .collect();
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
        for (i, c) in input_body[..body].chunks(chunk_bytes).enumerate() {
            let at = out.len();
            if self.encode_chunk(c, width, rotate, row, &mut s, out)? {
                out[version_at] = VERSION;
            }
            let len = (out.len() - at) as u32;
            out[table_at + 4 * i..table_at + 4 * i + 4].copy_from_slice(&len.to_le_bytes());
        }
        out.extend_from_slice(&input_body[body..]);
        debug_assert!(out.len() - start <= self.max_compressed_len(input.len(), elem));
        Ok(())
    }
}

/// Rows of `row_bytes` that repeat an earlier row: (row, first row with the same bytes).
pub(crate) fn find_copies(input: &[u8], row_bytes: usize) -> Vec<(u32, u32)> {
    let mut first: std::collections::HashMap<&[u8], u32> = std::collections::HashMap::new();
    let mut copies = Vec::new();
    for (i, row) in input.chunks_exact(row_bytes).enumerate() {
        match first.entry(row) {
            std::collections::hash_map::Entry::Occupied(e) => copies.push((i as u32, *e.get())),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(i as u32);
            }
        }
    }
    copies
}
