//! The rANS byte-plane decoder's launch (`shaders/rans.wgsl`, then `shaders/rans_rows.wgsl`
//! when the stream has a row map): the host checks the header and row map and locates the
//! chunks (4 bytes per 64 KiB).

use crate::contract::{RansParams, RansRowsParams};
use crate::launch::{Pass, Prepared};
use crate::shaders::{Kernel, RansPhase, ScanPath};
use crate::{u32_of, Gpu, KernelConfig, Result};
use planepack_rans::internals::TableForm;

/// Scratch words a modelled chunk's parsed context tables take (`shaders/rans.wgsl`,
/// `MODEL_RANK_WORDS`): per context its symbol count and 260 rank entries.
pub const MODEL_RANK_WORDS: u32 = planepack_rans::internals::modelled::CONTEXTS as u32
    * (1 + planepack_rans::internals::modelled::SYMBOLS as u32);
/// Scratch words a modelled chunk's decode slots take after its rank tables, where they fit
/// the device's storage binding (`shaders/rans.wgsl`, `model_slots`): per context 2048 slots,
/// the CPU decoder's entries, so a lane reads one word a symbol instead of searching the ranks.
pub const MODEL_SLOT_WORDS: u32 = planepack_rans::internals::modelled::CONTEXTS as u32
    * planepack_rans::internals::modelled::MODEL_SCALE;

/// A version-4 stream's context tables as the kernel reads them, after the chunk offsets:
/// first `CTX_INDEX_WORDS` words of table indices (byte `e`: the table of a plane-0 byte `e`,
/// `ABSENT` where its context has none), then per table `CTX_TABLE_WORDS` words: the 4096
/// slots, each the CPU decoder's entry (`Table::decode_slots`: the symbol, `cum` at
/// `SLOT_CUM_SHIFT`, `freq - 1` at `SLOT_FREQ_SHIFT`, constants the kernel is given). One
/// storage read a symbol: a slot's symbol and its symbol's frequency in separate arrays were
/// two, and made a row plane's step a third slower than a plain plane's on lavapipe (whose
/// plain planes' tables are in workgroup memory).
pub const CTX_INDEX_WORDS: u32 = 64;
pub const CTX_TABLE_WORDS: u32 = 4096;

/// [`CTX_INDEX_WORDS`] and the tables' words for `t`.
fn context_words(t: &planepack_rans::internals::contexts::ContextTables) -> Vec<u32> {
    table_words(&t.decoder().table_of(), t.tables.iter().flatten())
}

/// The row tables (version 6) in the context tables' layout: the index by the plane-0 byte
/// one row up, then the tables.
fn row_words(
    dec: &planepack_rans::internals::row_contexts::RowDecoder,
    t: &planepack_rans::internals::row_contexts::RowTables,
) -> Vec<u32> {
    table_words(&dec.table_of(), t.tables.iter().flatten())
}

/// The sign tables (version 8) in the context tables' layout, with an index per class of the
/// symbol one row up (none, low bit 0, low bit 1: [`CTX_INDEX_WORDS`] each, by the element's
/// plane-0 byte for the stream's `e0`), then the tables.
fn sign_words(t: &planepack_rans::internals::sign_contexts::SignTables, e0: u8) -> Vec<u32> {
    let by_class = t.decoder().table_of(e0);
    let mut w = Vec::new();
    for (class, table_of) in by_class.iter().enumerate() {
        let last = class + 1 == by_class.len();
        let tables = t.tables.iter().flatten().filter(|_| last);
        w.extend(table_words(table_of, tables));
    }
    w
}

/// [`CTX_INDEX_WORDS`] of `table_of` (a table index per plane-0 byte), then each table's
/// decode slots.
fn table_words<'a>(
    table_of: &[u8; 256],
    tables: impl Iterator<Item = &'a planepack_rans::internals::plan::Table>,
) -> Vec<u32> {
    let mut w: Vec<u32> = table_of
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    let mut slots = Vec::new();
    for table in tables {
        table.decode_slots(&mut slots);
        w.extend_from_slice(&slots);
    }
    w
}

/// The longest modelled lane the kernel takes: an invocation decodes a lane element by element
/// in one loop, and llvmpipe ends every loop of an invocation after 65535 iterations in all (its
/// loop limiter), so longer lanes (only in chunks over 64 KiB, `G` > 16) are decoded on the
/// CPU. (The encoder's lanes of 64 KiB chunks are at most 8192 elements.)
pub const MAX_MODELLED_LANE: usize = 16384;

impl Gpu {
    /// Prepare a rANS decode (`planepack-rans`'s format): check the header and row map,
    /// locate the chunks, upload; a second pass places rows when the stream has a row map.
    pub fn prepare_rans(&self, stream: &[u8], cfg: &KernelConfig) -> Result<Prepared> {
        let h = planepack_rans::parse_header(stream)?;
        let spans = planepack_rans::chunk_spans(stream, &h)?;
        let modelled = spans
            .iter()
            .any(|&(o, _)| stream[o] == planepack_rans::internals::modelled::CHUNK_MODELLED);
        // Each chunk mode only where the stream allows it: from the version that brought it,
        // tail dictionaries with flag T (the CPU decoder's rule; the kernel sees neither).
        use planepack_rans::internals::{difference as d, modelled as m, scaled as s, tails as t};
        let since = |v: u8| (h.version >= v, format!("in a stream before version {v}"));
        for (mode, (allowed, why), what) in [
            (
                m::CHUNK_MODELLED,
                since(planepack_rans::VERSION_MODELLED),
                "a modelled chunk",
            ),
            (
                s::CHUNK_SCALED,
                since(s::VERSION_SCALED),
                "a block-scaled chunk",
            ),
            (
                d::CHUNK_DIFFERENCE,
                since(d::VERSION_DIFFERENCE),
                "a difference chunk",
            ),
            (
                t::CHUNK_TAILS,
                (h.tails, "in a stream without flag T".to_string()),
                "a tail-dictionary chunk",
            ),
        ] {
            if !allowed && spans.iter().any(|&(o, _)| stream[o] == mode) {
                return Err(planepack_core::Error::corrupt(format!("{what} {why}")).into());
            }
        }
        let long_lanes = spans.iter().enumerate().any(|(i, &(o, _))| {
            let n = h
                .chunk_elements()
                .min(h.elements() - i * h.chunk_elements());
            let k = stream.get(o + 6 + h.width).copied().unwrap_or(1).max(1) as usize;
            stream[o] == planepack_rans::internals::modelled::CHUNK_MODELLED
                && 4 * n.div_ceil(4 * k) > MAX_MODELLED_LANE
        });
        if long_lanes {
            return Err(crate::GpuError::Unsupported(format!(
                "modelled rANS lanes over {MAX_MODELLED_LANE} elements"
            )));
        }
        let width = h.width as u32;
        let n_chunks = u32_of(spans.len(), "chunk count")?;
        let k = u32_of(h.chunk_elements(), "chunk")?;
        let elems = u32_of(h.elements(), "tensor")?;
        u32_of(h.raw_len, "tensor")?;
        let mut offsets: Vec<u32> = spans
            .iter()
            .map(|&(o, _)| u32_of(o, "stream"))
            .collect::<Result<_>>()?;
        let end = spans.last().map_or(0, |&(o, l)| o + l);
        offsets.push(u32_of(end, "stream")?);
        // Version 4: the context tables after the offsets (`ctx_at` > 0 says they are there).
        let ctx_at = match &h.contexts {
            Some(t) => {
                let at = u32_of(offsets.len(), "chunk count")?;
                offsets.extend(context_words(t));
                at
            }
            None => 0,
        };
        // Version 6: the row tables after them (`row_at` > 0).
        // Version 7: a row plane's lanes may be any count up to U (`row_across`).
        let (row_at, row_distance, row_first) = match &h.row_contexts {
            Some(t) => {
                let at = u32_of(offsets.len(), "chunk count")?;
                let dec = t.decoder(h.version);
                offsets.extend(row_words(&dec, t));
                let first = dec.by_context[planepack_rans::internals::row_contexts::ROW_FIRST];
                (at, t.distance, first as u32)
            }
            None => (0, 0, 0),
        };
        let row_across =
            u32::from(h.version >= planepack_rans::internals::row_contexts::VERSION_ROW_LANES);
        // Whether the encoder gave the row and sign planes of the stream's dense chunks (of K
        // elements, and the last chunk's) lanes across rows: then the pipelines that decode
        // them hold the subgroup loop for such lanes. (A stream whose lanes do not follow the
        // encoder's rule decodes either way.)
        let lanes_across = row_across != 0 && row_distance > 0 && {
            use planepack_rans::internals::row_contexts::{lanes_divide, row_lanes};
            let u = row_distance as usize;
            let last = h.elements() - (spans.len().max(1) - 1) * h.chunk_elements();
            [h.chunk_elements(), last]
                .iter()
                .any(|&m| !lanes_divide(row_lanes(m, u), u))
        };
        // Version 8: the sign tables after them (`sign_at` > 0), their classes' indices by
        // the context section's E0 (which a version-8 stream always has).
        let sign_at = match (&h.sign_contexts, h.row_contexts.as_ref()) {
            (Some(t), Some(r)) => {
                let at = u32_of(offsets.len(), "chunk count")?;
                offsets.extend(sign_words(t, r.e0));
                at
            }
            _ => 0,
        };
        // The chunks of the other modes, for their own dispatch.
        let other: Vec<u32> = spans
            .iter()
            .enumerate()
            .filter(|&(_, &(o, _))| other_mode(stream[o]))
            .map(|(i, _)| i as u32)
            .collect();
        let n_other = u32_of(other.len(), "chunk count")?;
        let other_at = u32_of(offsets.len(), "chunk count")?;
        offsets.extend(&other);
        // Scratch per chunk: W planes of K bytes, then the mask plane, then (in a stream with
        // modelled chunks) the context tables, and their decode slots where all chunks' scratch
        // still fits one storage binding (64 KiB more a chunk: a 96 MiB tensor of 64 KiB
        // chunks would not on lavapipe, whose binding limit is 128 MiB; its lanes then search
        // the ranks).
        let mask_at = width * k;
        let model_at = (mask_at + k.div_ceil(8).div_ceil(4) * 4) / 4;
        let with_ranks = model_at as usize
            + if modelled {
                MODEL_RANK_WORDS as usize
            } else {
                0
            };
        let with_slots = with_ranks + MODEL_SLOT_WORDS as usize;
        let model_slots = modelled
            && cfg.model_slots
            && (n_chunks as usize * with_slots * 4) as u64 <= self.max_binding;
        let scratch_words = u32_of(if model_slots { with_slots } else { with_ranks }, "scratch")?;
        let scratch_len = n_chunks as usize * scratch_words as usize * 4;
        let tail_len = h.tail_len();
        let mut tail = [0u8; 4];
        tail[..tail_len].copy_from_slice(&stream[stream.len() - tail_len..]);
        let body_len = h.elements() * h.width;
        let s = self.stream(stream)?;
        let c = self.storage(bytemuck::cast_slice(&offsets), "chunk offsets")?;
        let scratch = self.scratch(scratch_len)?;
        let params = |chunks_x: u32| RansParams {
            n_chunks,
            chunks_x,
            chunk_elems: k,
            elems,
            scratch_words,
            mask_at,
            model_at,
            // Bytes are never rotated (docs/format-rans.md, conventions).
            rotate: u32::from(h.rotate && h.width > 1),
            tail: u32::from_le_bytes(tail),
            tail_len: tail_len as u32,
            ctx_at,
            compact_tables: u32::from(h.tables == TableForm::Compact),
            row_at,
            row_distance,
            row_first,
            row_across,
            model_slots: u32::from(model_slots),
            sign_at,
            other_at,
            n_other,
            ..Default::default()
        };
        // The phases to dispatch, each with its grid: a workgroup per chunk, or (plane-parallel)
        // one per chunk and plane slot, then the context planes (where the stream has context
        // tables), then the join; then one per chunk of the other modes, over their list.
        let mut phases: Vec<(RansPhase, u32)> = if cfg.rans_planes {
            let slots = n_chunks
                .checked_mul(width + 1)
                .ok_or_else(|| crate::GpuError::Unsupported("too many rANS chunks".into()))?;
            let mut v = vec![(RansPhase::Planes, slots)];
            if (ctx_at != 0 || sign_at != 0) && width > 1 {
                v.push((RansPhase::Context, n_chunks));
            }
            v.push((RansPhase::Join, n_chunks));
            v
        } else {
            vec![(RansPhase::Whole, n_chunks)]
        };
        if n_other > 0 {
            phases.push((RansPhase::Other, n_other));
        }
        let kernel_of = |phase| Kernel::Rans {
            width,
            phase,
            lanes_across: lanes_across
                && matches!(
                    phase,
                    RansPhase::Whole | RansPhase::Planes | RansPhase::Context
                ),
        };
        // (The launch is named by its first phase's kernel in its errors.)
        let kernel = kernel_of(phases[0].0);
        let status = self.status();
        let mut upload_bytes = stream.len() + offsets.len() * 4;
        let decode = |out: &wgpu::Buffer, out_slot: Option<usize>| -> Result<Vec<Pass>> {
            phases
                .iter()
                .map(|&(phase, groups)| {
                    let (gx, gy) = self.grid(groups.max(1));
                    Ok(Pass::new(
                        self.pipeline(kernel_of(phase), cfg.path)?,
                        vec![
                            s.clone(),
                            c.clone(),
                            out.clone(),
                            self.uniform(&params(gx)),
                            status.clone(),
                            scratch.clone(),
                        ],
                        out_slot,
                        (gx, gy),
                    ))
                })
                .collect()
        };
        let (out, passes) = match &h.rows {
            None => {
                let out = self.output(h.raw_len)?;
                let passes = decode(&out, Some(2))?;
                (out, passes)
            }
            Some(m) => {
                let body = self.output(body_len)?;
                let mut passes = decode(&body, None)?;
                let row_src = row_sources(m, h.raw_len);
                upload_bytes += row_src.len() * 4;
                let rows = self.pipeline(Kernel::RansRows, ScanPath::Workgroup)?;
                let n_words = u32_of(h.raw_len.div_ceil(4), "tensor")?;
                let (rx, ry) = self.grid(n_words.div_ceil(256));
                let src = self.storage(bytemuck::cast_slice(&row_src), "row sources")?;
                let out = self.output(h.raw_len)?;
                let rp = self.uniform(&RansRowsParams {
                    len: h.raw_len as u32,
                    row_bytes: u32_of(m.row_bytes, "row")?,
                    n_words,
                    groups_x: rx,
                    _pad: [],
                });
                let place = Pass::new(
                    rows,
                    vec![body, src, out.clone(), rp],
                    Some(2),
                    if n_words == 0 { (0, 0) } else { (rx, ry) },
                );
                passes.push(place);
                (out, passes)
            }
        };
        Ok(Prepared::new(
            self,
            passes,
            out,
            h.raw_len,
            status,
            s,
            upload_bytes,
            kernel,
        ))
    }

    /// Decode a whole rANS stream (`planepack-rans`'s format) and read it back.
    pub fn decode_rans(&self, stream: &[u8]) -> Result<Vec<u8>> {
        self.decode_with(|c| self.prepare_rans(stream, c))
    }

    /// Decode a rANS stream into `out`, whose length the caller knows from its own metadata: a
    /// stream that declares another length is refused before anything is allocated on the
    /// device.
    pub fn decode_rans_into(&self, stream: &[u8], out: &mut [u8]) -> Result<()> {
        let declared = planepack_rans::parse_header(stream)?.raw_len;
        self.decode_into_with(declared, out, |c| self.prepare_rans(stream, c))
    }
}

/// The chunk modes [`RansPhase::Other`]'s dispatch decodes (modelled, block-scaled,
/// difference, tail dictionary); the other phases leave such chunks to it.
/// `shaders/rans.wgsl`'s `other_mode` reads them as the bit mask `OTHER_MODES`
/// ([`OTHER_MODES_MASK`], generated by `contract.rs`), so the host's list and the kernels agree.
const OTHER_MODES: [u8; 4] = {
    use planepack_rans::internals::{difference as d, modelled as m, scaled as s, tails as t};
    [
        m::CHUNK_MODELLED,
        s::CHUNK_SCALED,
        d::CHUNK_DIFFERENCE,
        t::CHUNK_TAILS,
    ]
};

/// [`OTHER_MODES`] as a mask: bit `mode` set for each (a mode of 32 or more fails to compile).
pub(crate) const OTHER_MODES_MASK: u32 = {
    let mut mask = 0u32;
    let mut i = 0;
    while i < OTHER_MODES.len() {
        mask |= 1 << OTHER_MODES[i];
        i += 1;
    }
    mask
};

fn other_mode(mode: u8) -> bool {
    OTHER_MODES.contains(&mode)
}

/// For each row of a checked row map, its index among the original (not copied) rows, where
/// the rANS kernel leaves it.
fn row_sources(m: &planepack_rans::RowMap, raw_len: usize) -> Vec<u32> {
    let rows = raw_len / m.row_bytes;
    let mut index = vec![0u32; rows];
    let mut copies = m.copies.iter().peekable();
    let mut next = 0u32;
    for r in 0..rows {
        match copies.peek() {
            // The source is an earlier original (checked by parse_header): its index is known.
            Some(&&(row, from)) if row as usize == r => {
                copies.next();
                index[r] = index[from as usize];
            }
            _ => {
                index[r] = next;
                next += 1;
            }
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::MAX_MODELLED_LANE;
    use planepack_rans::internals::modelled::{lane_range, lanes_for};

    /// Every chunk size `rans-1`'s search tries keeps a modelled chunk's lanes within what the
    /// kernel decodes (so its streams never fall back to the CPU), and the search's bound is
    /// the largest that does.
    #[test]
    fn the_chunk_search_keeps_modelled_lanes_within_the_kernel() {
        let longest = |n: usize| lane_range(0, n, lanes_for(n)).len();
        for width in [1usize, 2, 4] {
            for log2 in planepack_rans::search_chunk_log2(width) {
                assert!(
                    longest((1 << log2) / width) <= MAX_MODELLED_LANE,
                    "{width} {log2}"
                );
            }
        }
        let n = planepack_rans::SEARCH_MAX_CHUNK_ELEMENTS;
        assert_eq!(longest(n), MAX_MODELLED_LANE);
        assert!(longest(2 * n) > MAX_MODELLED_LANE);
    }
}
