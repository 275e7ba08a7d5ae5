//! The decoder: per chunk, planes decoded and joined (or the modelled lanes), chunks in
//! parallel; then the row map places the repeated rows.

use super::*;
use crate::contexts::{ContextDecoder, ContextTables, PLANE_CONTEXT};
use crate::lanes::Target;
use crate::row_contexts::{RowDecoder, PLANE_ROW_CONTEXT};
use crate::sign_contexts::PLANE_SIGN;

thread_local! {
    /// This thread's decoder scratch between calls ([`planepack_core::scratch`]).
    static DEC_SCRATCH: planepack_core::scratch::Slot<DecScratch> = const { std::cell::Cell::new(None) };
}

/// This thread's decoder scratch, kept for its next call where [`scratch_kept`].
fn dec_scratch(chunk_bytes: usize) -> planepack_core::scratch::Taken<DecScratch> {
    planepack_core::scratch::take(&DEC_SCRATCH, scratch_kept(chunk_bytes))
}

/// Per-thread decoder scratch.
#[derive(Default)]
pub(crate) struct DecScratch {
    /// Two modelled chunks' buffers ([`modelled::decode_two`]; one chunk uses the first).
    pub(crate) modelled: [modelled::DecodeState; 2],
    pub(crate) planes: Vec<Vec<u8>>,
    pub(crate) mask: Vec<u8>,
    /// A sparse chunk's nonzero elements, joined.
    pub(crate) nonzero: Vec<u8>,
    /// Decode table and lane words.
    pub(crate) lanes: (Vec<u32>, Vec<u16>),
    /// With a row map: the chunks' rows before they go to their places.
    placed: Vec<u8>,
}

/// What a plane 1 may be coded with (version 4): the stream's context tables and the plane-0
/// symbols of the same elements.
pub(crate) struct PlaneContext<'a> {
    pub dec: &'a ContextDecoder,
    pub top: &'a [u8],
}

/// Read a plane of `n` symbols at `at` into `dst`; returns the offset after it. A context
/// plane is taken only where `ctx` is given (plane 1 of a version-4 stream's dense or sparse
/// chunk).
pub(crate) fn get_plane(
    chunk: &[u8],
    at: usize,
    n: usize,
    form: TableForm,
    s: &mut (Vec<u32>, Vec<u16>),
    dst: &mut Vec<u8>,
    ctx: Option<PlaneContext>,
) -> Result<usize> {
    // Every path below writes all `n` bytes or fails.
    fit(dst, n);
    let kind = take(chunk, at, 1, "plane kind")?[0];
    match kind {
        PLANE_RAW => {
            dst.copy_from_slice(take(chunk, at + 1, n, "raw plane")?);
            Ok(at + 1 + n)
        }
        PLANE_CONST => {
            let v = take(chunk, at + 1, 1, "constant plane")?[0];
            dst.fill(v);
            Ok(at + 2)
        }
        PLANE_RANS => {
            let (table, pos) = Table::read(chunk, at + 1, form)?;
            table.decode_slots(&mut s.0);
            lanes::decode(chunk, pos, &s.0, Target::Plane, &mut s.1, dst)
        }
        PLANE_CONTEXT if ctx.is_some() => {
            let c = ctx.expect("checked");
            let target = Target::Context {
                top: take(c.top, 0, n, "plane-0 symbols")?,
                dec: c.dec,
            };
            lanes::decode(chunk, at + 1, &c.dec.slots, target, &mut s.1, dst)
        }
        k => Err(Error::corrupt_at(format!("plane kind {k}"), at)),
    }
}

/// Read `width` planes of `n` symbols each from `at` and join them into `out` (`n` elements,
/// rotated back if `rotate`): a dense chunk's body, a sparse chunk's nonzero elements, a
/// scaled chunk's scales. With `ctx` (a version-4 stream's tables), plane 1 may be a context
/// plane; of 2-byte elements, it is decoded straight into the joined elements (no join pass).
/// With `rows` (a version-6 stream's row tables; a dense chunk's planes only), plane 0 may be
/// a row plane. Returns the offset after the planes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn get_joined(
    chunk: &[u8],
    mut at: usize,
    n: usize,
    width: usize,
    rotate: bool,
    form: TableForm,
    planes: &mut Vec<Vec<u8>>,
    lanes: &mut (Vec<u32>, Vec<u16>),
    ctx: Option<&ContextDecoder>,
    rows: Option<&RowDecoder>,
    out: &mut [u8],
) -> Result<usize> {
    debug_assert_eq!(
        out.len(),
        n * width,
        "a joined chunk's output is its n elements"
    );
    planes.resize_with(width, Vec::new);
    // Where a plane after the first is raw, the join reads it in the chunk (no copy into
    // scratch first: the copy was a sixteenth of decoding FP32 tensors, whose low mantissa
    // bytes are raw); plane 0 is always in scratch, the context of plane 1.
    let mut in_chunk: [Option<&[u8]>; 4] = [None; 4];
    for (j, raw) in in_chunk.iter_mut().enumerate().take(width) {
        let (done, rest) = planes.split_at_mut(j);
        let kind = take(chunk, at, 1, "plane kind")?[0];
        match (kind, j, rows, ctx) {
            (PLANE_ROW_CONTEXT, 0, Some(dec), _) => {
                let dst = &mut rest[0];
                fit(dst, n);
                // 2-byte elements whose plane 1 is raw are joined as plane 0 decodes.
                let join = (width == 2).then_some((&mut *out, rotate));
                let joined;
                (at, joined) = lanes::decode_rows(chunk, at + 1, dec, &mut lanes.1, dst, join)?;
                if joined {
                    return Ok(at);
                }
                continue;
            }
            (PLANE_SIGN, 1, Some(dec), _) if width == 2 && dec.signs.is_some() => {
                // Decoded straight into the joined elements (plane 1 is the last).
                let top = &done[0][..n];
                return lanes::decode_signs(chunk, at + 1, dec, top, rotate, &mut lanes.1, out);
            }
            (PLANE_CONTEXT, 1, _, Some(dec)) if width == 2 => {
                let top = &done[0][..n];
                let target = Target::Joined2 { top, dec, rotate };
                return lanes::decode(chunk, at + 1, &dec.slots, target, &mut lanes.1, out);
            }
            (PLANE_RANS, 0, _, _) if width == 2 => {
                // A plain plane 0 followed by a raw plane 1 (embeddings', weights' mantissa
                // bytes) is joined as it decodes.
                let (table, pos) = Table::read(chunk, at + 1, form)?;
                table.decode_slots(&mut lanes.0);
                let joined =
                    lanes::decode_low_joined(chunk, pos, &lanes.0, &mut lanes.1, out, rotate)?;
                if let Some(end) = joined {
                    return Ok(end);
                }
                let dst = &mut rest[0];
                fit(dst, n);
                at = lanes::decode(chunk, pos, &lanes.0, Target::Plane, &mut lanes.1, dst)?;
                continue;
            }
            (PLANE_RAW, 1.., _, _) => {
                *raw = Some(take(chunk, at + 1, n, "raw plane")?);
                at += 1 + n;
                continue;
            }
            _ => {}
        }
        let plane_ctx = match (ctx, j) {
            (Some(dec), 1) => Some(PlaneContext { dec, top: &done[0] }),
            _ => None,
        };
        at = get_plane(chunk, at, n, form, lanes, &mut rest[0], plane_ctx)?;
    }
    let held: [&[u8]; 4] = std::array::from_fn(|j| match in_chunk[j] {
        Some(r) => r,
        None if j < width => &planes[j][..],
        None => &[],
    });
    join_all(&held[..width], width, rotate, out);
    Ok(at)
}

/// Decode one chunk payload into `out` (whole elements); `ctx` is the stream's context
/// tables (version 4), `rows` its row tables (version 6).
pub(crate) fn decode_chunk(
    chunk: &[u8],
    h: &Header,
    ctx: Option<&ContextDecoder>,
    rows: Option<&RowDecoder>,
    s: &mut DecScratch,
    out: &mut [u8],
) -> Result<()> {
    let n = out.len() / h.width;
    let mode = chunk[0];
    s.planes.resize_with(h.width, Vec::new);
    let end = match mode {
        CHUNK_RAW => {
            out.copy_from_slice(take(chunk, 1, out.len(), "raw chunk")?);
            1 + out.len()
        }
        CHUNK_DENSE => get_joined(
            chunk,
            1,
            n,
            h.width,
            h.rotate,
            h.tables,
            &mut s.planes,
            &mut s.lanes,
            ctx,
            rows,
            out,
        )?,
        CHUNK_SPARSE => {
            let nnz = u32::from_le_bytes(take(chunk, 1, 4, "nonzero count")?.try_into().unwrap())
                as usize;
            if nnz > n {
                return Err(Error::corrupt_at(
                    "more nonzero elements than the chunk has",
                    1,
                ));
            }
            let mut at = get_plane(
                chunk,
                5,
                n.div_ceil(8),
                h.tables,
                &mut s.lanes,
                &mut s.mask,
                None,
            )?;
            let ones: usize = s.mask.iter().map(|b| b.count_ones() as usize).sum();
            let pad_ok = n.is_multiple_of(8) || s.mask.last().is_none_or(|&b| b >> (n % 8) == 0);
            if ones != nnz || !pad_ok {
                return Err(Error::corrupt_at(
                    "zero mask disagrees with the nonzero count",
                    5,
                ));
            }
            s.nonzero.resize(nnz * h.width, 0);
            at = get_joined(
                chunk,
                at,
                nnz,
                h.width,
                h.rotate,
                h.tables,
                &mut s.planes,
                &mut s.lanes,
                ctx,
                None,
                &mut s.nonzero,
            )?;
            expand(&s.nonzero, &s.mask, h.width, out);
            at
        }
        modelled::CHUNK_MODELLED if h.version >= VERSION_MODELLED => {
            modelled::decode(chunk, h.width, h.rotate, h.tables, s, out)?
        }
        scaled::CHUNK_SCALED if h.version >= scaled::VERSION_SCALED => {
            scaled::decode(chunk, h, s, out)?
        }
        difference::CHUNK_DIFFERENCE
            if h.version >= difference::VERSION_DIFFERENCE && h.width > 1 =>
        {
            let end = get_joined(
                chunk,
                1,
                n,
                h.width,
                false,
                h.tables,
                &mut s.planes,
                &mut s.lanes,
                None,
                None,
                out,
            )?;
            difference::inverse(out, h.width);
            end
        }
        crate::tails::CHUNK_TAILS if h.tails && h.width == 4 => {
            crate::tails::decode(chunk, h.rotate, h.tables, s, out)?
        }
        m => return Err(Error::corrupt_at(format!("chunk mode {m}"), 0)),
    };
    if end != chunk.len() {
        return Err(Error::corrupt("chunk length disagrees with its planes"));
    }
    Ok(())
}

/// Decode one or two consecutive chunk payloads (`chunks`, their outputs `outs`, as
/// [`decode_chunk`]): two modelled chunks have their lanes run together
/// ([`modelled::decode_two`]), any others are decoded one after the other.
fn decode_chunks(
    chunks: &[&[u8]],
    outs: &mut [&mut [u8]],
    h: &Header,
    ctx: Option<&ContextDecoder>,
    rows: Option<&RowDecoder>,
    s: &mut DecScratch,
) -> Result<()> {
    let modelled = |c: &[u8]| c.first() == Some(&modelled::CHUNK_MODELLED);
    if let ([a, b], [oa, ob]) = (chunks, &mut *outs) {
        if h.version >= VERSION_MODELLED && h.width > 1 && modelled(a) && modelled(b) {
            let ends = modelled::decode_two((a, oa), (b, ob), h.width, h.rotate, h.tables, s)?;
            if ends != (a.len(), b.len()) {
                return Err(Error::corrupt("chunk length disagrees with its planes"));
            }
            return Ok(());
        }
    }
    for (chunk, o) in chunks.iter().zip(outs.iter_mut()) {
        decode_chunk(chunk, h, ctx, rows, s, o)?;
    }
    Ok(())
}

impl Rans {
    pub(crate) fn decode_impl(
        &self,
        compressed: &[u8],
        out: &mut [u8],
        parallel: bool,
    ) -> Result<()> {
        let h = parse_header(compressed)?;
        check_output_len(h.raw_len, out)?;
        let spans = chunk_spans(compressed, &h)?;
        let body = h.elements() * h.width;
        let tail_at = h.raw_len - h.tail_len();
        out[tail_at..].copy_from_slice(&compressed[compressed.len() - h.tail_len()..]);
        // The originals' rows are decoded to the front, then moved to their places.
        let elems = &mut out[..body];
        let chunk_bytes = h.chunk_elements() * h.width;
        let ctx = h.contexts.as_deref().map(ContextTables::decoder);
        let rows = h.row_contexts.as_ref().map(|r| {
            let mut d = r.decoder(h.version);
            d.signs = h.sign_contexts.as_ref().map(|s| s.decoder());
            d
        });
        // Chunks go in pairs (two modelled chunks decode faster together), except where the
        // parallel decoder would then have fewer than four tasks a thread.
        let per = match parallel && spans.len() < 8 * rayon::current_num_threads() {
            true => 1,
            false => 2,
        };
        let work = |(spans, o): (&[(usize, usize)], &mut [u8]), s: &mut DecScratch| {
            let mut chunks: [&[u8]; 2] = [&[], &[]];
            let mut outs: [&mut [u8]; 2] = [&mut [], &mut []];
            for (c, span) in chunks.iter_mut().zip(spans) {
                *c = &compressed[span.0..span.0 + span.1];
            }
            for (dst, o) in outs.iter_mut().zip(o.chunks_mut(chunk_bytes)) {
                *dst = o;
            }
            let n = spans.len();
            decode_chunks(
                &chunks[..n],
                &mut outs[..n],
                &h,
                ctx.as_ref(),
                rows.as_ref(),
                s,
            )
        };
        let Some(m) = &h.rows else {
            if parallel {
                spans
                    .par_chunks(per)
                    .zip(elems.par_chunks_mut(per * chunk_bytes))
                    .try_for_each(|x| work(x, &mut dec_scratch(chunk_bytes)))?;
            } else {
                let mut s = dec_scratch(chunk_bytes);
                spans
                    .chunks(per)
                    .zip(elems.chunks_mut(per * chunk_bytes))
                    .try_for_each(|x| work(x, &mut s))?;
            }
            return Ok(());
        };
        // With a row map each task's chunks are decoded into scratch and their rows written
        // straight to their places (the originals' rows are contiguous in the chunks, not in
        // `out`): `out` is cut into one piece a task (`per` chunks), from where its first byte
        // goes to where the next task's goes (the copied rows between them included, filled
        // last). Placing the rows after decoding moved most of the tensor once more, on one
        // thread. A task with no copied row among its rows decodes straight into its piece
        // (an embedding table with a few repeated rows: most of them; the copy out of
        // scratch was a sixth of its decode).
        let rows_end = h.raw_len - h.tail_len();
        let tasks = spans.len().div_ceil(per);
        let mut pieces = Vec::with_capacity(tasks);
        let mut rest = &mut out[..rows_end];
        let mut at = 0;
        for t in 0..tasks {
            let next = match (t + 1) * per < spans.len() {
                true => placed_at(m, (t + 1) * per * chunk_bytes).0,
                false => rows_end,
            };
            let (piece, after) = std::mem::take(&mut rest)
                .split_at_mut_checked(next.saturating_sub(at))
                .ok_or_else(|| Error::corrupt("row map disagrees with the chunks"))?;
            pieces.push((t * per * chunk_bytes, at, piece));
            rest = after;
            at = next;
        }
        let place = |s: &mut DecScratch, (spans, piece): (&[(usize, usize)], &mut Piece)| {
            let (first, start, piece) = piece;
            let len = (spans.len() * chunk_bytes).min(body - *first);
            // In place where `scatter` would copy the decoded bytes as they are: the piece is
            // as long as they are and no copied row comes before their last row but those
            // before their first.
            let exact = len > 0 && piece.len() == len;
            if exact && placed_at(m, *first).1 == placed_at(m, *first + len - 1).1 {
                return work((spans, &mut piece[..]), s);
            }
            let mut buf = std::mem::take(&mut s.placed);
            buf.resize(len, 0);
            let placed = work((spans, &mut buf[..]), s)
                .and_then(|()| scatter(m, *first, &buf, *start, piece));
            s.placed = buf;
            placed
        };
        if parallel {
            spans
                .par_chunks(per)
                .zip(pieces.par_iter_mut())
                .try_for_each(|x| place(&mut dec_scratch(chunk_bytes), x))?;
        } else {
            let mut s = dec_scratch(chunk_bytes);
            spans
                .chunks(per)
                .zip(pieces.iter_mut())
                .try_for_each(|x| place(&mut s, x))?;
        }
        let r = m.row_bytes;
        for &(row, src) in &m.copies {
            let (row, src) = (row as usize, src as usize);
            out.copy_within(src * r..(src + 1) * r, row * r);
        }
        Ok(())
    }
}

/// Where a task's rows go: its first byte in the chunks' order, where that lands in the
/// tensor, and the output from there to where the next task's first byte lands.
type Piece<'a> = (usize, usize, &'a mut [u8]);

/// Where the originals' byte `x` (counted in the chunks' order) goes in the tensor, and how
/// many copied rows come before it. Copy `i` comes before original row `j` exactly when fewer
/// than `j + 1` originals come before it, that is `copies[i].0 - i <= j` (which never falls as
/// `i` grows), so a binary search counts them.
fn placed_at(m: &RowMap, x: usize) -> (usize, usize) {
    let b = m.row_bytes;
    let j = x / b;
    let (mut lo, mut hi) = (0, m.copies.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if (m.copies[mid].0 as usize).saturating_sub(mid) <= j {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let k = lo;
    ((j + k) * b + x % b, k)
}

/// Write `decoded`, the originals' bytes from `first` on, to their rows in `piece` (the part
/// of the tensor that starts at byte `start`), skipping the copied rows between them. The
/// originals between two copied rows lie together on both sides, so each such run is one
/// copy (a copy a row was a twelfth of decoding CNN activations, rows of 22 bytes).
fn scatter(m: &RowMap, first: usize, decoded: &[u8], start: usize, piece: &mut [u8]) -> Result<()> {
    let b = m.row_bytes;
    let (mut at, mut k) = placed_at(m, first);
    let (mut x, mut src) = (first, decoded);
    while !src.is_empty() {
        // Up to the next copied row (copy `k` is past `at`'s row, as `placed_at` and the
        // skipping below leave it; a map that says otherwise is corrupt).
        let run_end = m.copies.get(k).map_or(usize::MAX, |c| c.0 as usize * b);
        let n = run_end.saturating_sub(at).min(src.len());
        let dst = at
            .checked_sub(start)
            .filter(|_| n > 0)
            .and_then(|o| piece.get_mut(o..o + n))
            .ok_or_else(|| Error::corrupt("row map disagrees with the chunks"))?;
        dst.copy_from_slice(&src[..n]);
        (x, src) = (x + n, &src[n..]);
        at += n;
        if x.is_multiple_of(b) {
            // The next original's row: past the copied rows where it would otherwise go.
            let j = x / b;
            while m.copies.get(k).is_some_and(|c| c.0 as usize == j + k) {
                k += 1;
            }
            at = (j + k) * b;
        }
    }
    Ok(())
}
