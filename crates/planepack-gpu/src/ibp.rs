//! The IBP decoder's launch (`shaders/ibp.wgsl`): the host places every row (each row's
//! participation bitmap gives its stored size) and uploads one buffer: mask and bitval (one
//! pair per cluster in a stream with clusters), the rows' participation bits, the rows' stored
//! bytes, the tail. A stream with clusters is decoded in one pass per cluster, each pass
//! given its cluster's rows as (stored row, output row) pairs.
//!
//! A gather of some rows uploads only those rows (each once, however often it is asked for),
//! with their participation bits renumbered: rows that stay compressed in host memory cross
//! the link as compressed bytes, and only the ones a step needs ([`Gpu::prepare_rows`]).

use crate::contract::IbpParams;
use crate::launch::{Pass, Prepared};
use crate::shaders::Kernel;
use crate::{checked_lanes, u32_of, within_loop_budget, Gpu, GpuError, KernelConfig, Result};

use planepack_ibp::Mask;
use std::collections::HashMap;

/// What the IBP kernel needs to know of a group of rows, whatever it came from.
struct IbpGroup<'a> {
    /// One per cluster; all of one width and length.
    masks: &'a [Mask],
    /// Every row's cluster; empty: all in cluster 0.
    row_cluster: &'a [u8],
    rows: usize,
    /// Bit `i` set: row `i` is stored packed (else raw).
    bitmask: &'a [u32],
    data: &'a [u8],
    /// Stored bytes of every row, in `data`.
    spans: Vec<(usize, usize)>,
    /// Bytes after the last whole row (whole-stream decodes only).
    tail: &'a [u8],
    /// For an `Ibp` stream: its mask, bitmask and tail offsets, so that a whole-tensor decode
    /// uploads the stream as it is (`data` is the stream, `spans` are offsets in it).
    stream: Option<StreamOffsets>,
}

/// Where the kernel finds things in an upload.
struct Offsets {
    mask: usize,
    bitmask: usize,
    tail: usize,
    tail_len: usize,
    /// Rows whose spans and participation bits the upload holds.
    stored_rows: usize,
}

struct StreamOffsets {
    mask: usize,
    bitmask: usize,
    tail: usize,
}

impl IbpGroup<'_> {
    fn is_packed(&self, row: usize) -> bool {
        (self.bitmask[row / 32] >> (row % 32)) & 1 == 1
    }

    fn cluster(&self, row: usize) -> usize {
        planepack_ibp::internals::cluster_of(self.row_cluster, row)
    }
}

impl Gpu {
    /// Prepare an IBP decode of `rows` (None: the whole tensor, tail included) of an `Ibp`
    /// stream.
    pub fn prepare_ibp(
        &self,
        stream: &[u8],
        rows: Option<&[usize]>,
        cfg: &KernelConfig,
    ) -> Result<Prepared> {
        let l = planepack_ibp::stream_layout(stream)?;
        let body = l.rows * l.columns * (l.width / 8) as usize;
        let tail = match rows {
            None => &stream[l.tail_offset..l.tail_offset + (l.raw_len - body)],
            Some(_) => &[],
        };
        let group = IbpGroup {
            masks: &l.masks,
            row_cluster: &l.row_cluster,
            rows: l.rows,
            bitmask: &l.bitmask,
            data: stream,
            spans: l.row_offsets.windows(2).map(|w| (w[0], w[1])).collect(),
            tail,
            stream: Some(StreamOffsets {
                mask: l.mask_offset,
                bitmask: l.bitmask_offset,
                tail: l.tail_offset,
            }),
        };
        self.prepare_group(&group, rows, cfg)
    }

    /// Prepare a gather of `rows` (None: all) from a compressed group in either layout, with
    /// the mask it was compressed with. Only the rows asked for are uploaded.
    pub fn prepare_rows(
        &self,
        group: &planepack_ibp::CompressedRows,
        mask: &Mask,
        rows: Option<&[usize]>,
        cfg: &KernelConfig,
    ) -> Result<Prepared> {
        group.validate()?;
        if group.row_bytes != mask.mask.len() * (mask.width / 8) as usize {
            return Err(
                planepack_core::Error::corrupt("row length disagrees with the mask").into(),
            );
        }
        if mask.mask.iter().zip(&mask.bitval).any(|(m, v)| v & !m != 0) {
            return Err(planepack_core::Error::corrupt("bitval has bits outside the mask").into());
        }
        let cols = planepack_ibp::Columns::new(mask);
        let mut spans = Vec::with_capacity(group.rows);
        for i in 0..group.rows {
            let start = match group.layout {
                planepack_ibp::Layout::InPlace => i * group.row_bytes,
                planepack_ibp::Layout::Condensed => {
                    if i == 0 {
                        0
                    } else {
                        group.offsets[i - 1] as usize
                    }
                }
            };
            let len = planepack_ibp::internals::stored_len(
                &group.data[start..],
                group.is_packed(i),
                &cols,
            )
            .map_err(|e| planepack_core::Error::corrupt(format!("row {i}: {e}")))?;
            spans.push((start, start + len));
        }
        let g = IbpGroup {
            masks: std::slice::from_ref(mask),
            row_cluster: &[],
            rows: group.rows,
            bitmask: &group.row_bitmask,
            data: &group.data,
            spans,
            tail: &[],
            stream: None,
        };
        self.prepare_group(&g, rows, cfg)
    }

    fn prepare_group(
        &self,
        g: &IbpGroup,
        rows: Option<&[usize]>,
        cfg: &KernelConfig,
    ) -> Result<Prepared> {
        let width = g.masks[0].width;
        let columns = g.masks[0].mask.len();
        let b = (width / 8) as usize;
        let row_bytes = columns * b;
        if !row_bytes.is_multiple_of(4) {
            return Err(GpuError::Unsupported(format!(
                "rows of {row_bytes} bytes (the GPU decoder writes whole 32-bit words)"
            )));
        }
        // One upload: mask and bitval words, participation bits, stored rows, tail. The kernel
        // reads them with aligned loads (shaders/ibp.wgsl): rows start on 2-byte (W = 16) or
        // 4-byte boundaries, as every layout places them; a group that does not is refused.
        let align = if width == 16 { 2 } else { 4 };
        match (rows, &g.stream) {
            // A whole stream: uploaded as it is.
            (None, Some(o)) => {
                if !o.mask.is_multiple_of(4) || !o.bitmask.is_multiple_of(4) {
                    return Err(misaligned(align));
                }
                let at = Offsets {
                    mask: o.mask,
                    bitmask: o.bitmask,
                    tail: o.tail,
                    tail_len: g.tail.len(),
                    stored_rows: g.rows,
                };
                let spans = span_words(&g.spans, 0, align)?;
                let every = every_row(g.rows)?;
                self.launch_group(g, g.data, &spans, &every, |u| g.cluster(u), at, cfg)
            }
            // A whole group: mask and bitval, its row bitmask, its data, its tail.
            (None, None) => {
                let mut bytes = column_bytes(g.masks);
                let bitmask = bytes.len();
                bytes.extend(g.bitmask.iter().flat_map(|w| w.to_le_bytes()));
                let spans = span_words(&g.spans, bytes.len(), align)?;
                bytes.extend_from_slice(g.data);
                let at = Offsets {
                    mask: 0,
                    bitmask,
                    tail: bytes.len(),
                    tail_len: g.tail.len(),
                    stored_rows: g.rows,
                };
                bytes.extend_from_slice(g.tail);
                let every = every_row(g.rows)?;
                self.launch_group(g, &bytes, &spans, &every, |u| g.cluster(u), at, cfg)
            }
            (Some(rs), _) => {
                let u = gather_upload(g, rs)?;
                let of = |k: usize| g.cluster(u.rows[k]);
                self.launch_group(g, &u.bytes, &u.spans, &u.ids, of, u.at, cfg)
            }
        }
    }

    /// The launch for an assembled upload: `bytes` holds the mask and bitval words (every
    /// cluster's), the participation bits, the rows (`spans`) and the tail at `at`; output row
    /// k is row `ids[k]` of the upload, whose cluster is `cluster_of(ids[k])`.
    #[allow(clippy::too_many_arguments)]
    fn launch_group(
        &self,
        g: &IbpGroup,
        bytes: &[u8],
        spans: &[u32],
        ids: &[u32],
        cluster_of: impl Fn(usize) -> usize,
        at: Offsets,
        cfg: &KernelConfig,
    ) -> Result<Prepared> {
        let width = g.masks[0].width;
        let columns = g.masks[0].mask.len();
        let row_bytes = columns * (width / 8) as usize;
        let lanes_max = checked_lanes(cfg.ibp_lanes)?;
        let n_out = u32_of(ids.len(), "row count")?;
        let tail_len = at.tail_len;
        // Invocations per row: up to the configured lanes, fewer for short rows (each takes
        // whole 32-chunk groups), more for rows too long for one invocation's loop budget;
        // the kernel's workgroup (64 invocations) takes 64 / lanes rows.
        let lanes = row_lanes(
            columns,
            width,
            deposit_loops(g.masks),
            lanes_max,
            cfg.loop_budget,
        )?;
        let rows_per_group = 64 / lanes;
        let kernel = Kernel::Ibp { width, lanes };
        let pipeline = self.pipeline(kernel, cfg.path)?;
        // One pass per cluster that has output rows, given (stored row, output row) pairs;
        // without clusters, one pass over `ids` as they are.
        let Passes {
            entries,
            stride,
            runs,
        } = cluster_entries(ids, g.masks.len(), cluster_of)?;
        let s = self.stream(bytes)?;
        let o = self.storage(bytemuck::cast_slice(spans), "row spans")?;
        let r = self.storage(bytemuck::cast_slice(&entries), "row ids")?;
        let out_len = ids.len() * row_bytes + tail_len;
        let out = self.output(out_len)?;
        let status = self.status();
        let mask_bytes = 2 * row_bytes;
        let mut passes = Vec::with_capacity(runs.len());
        for (i, &(cluster, first, count)) in runs.iter().enumerate() {
            // The last pass also copies the tail.
            let tail = if i + 1 == runs.len() { tail_len } else { 0 };
            let tail_groups = u32_of(tail, "tail")?
                .div_ceil(4)
                .div_ceil(crate::contract::IBP_TAIL_WORDS_PER_GROUP);
            let groups = count.div_ceil(rows_per_group) + tail_groups;
            let (gx, gy) = self.grid(groups);
            let p = self.uniform(&IbpParams {
                columns: u32_of(columns, "columns")?,
                width,
                n_out,
                n_rows: u32_of(at.stored_rows, "rows")?,
                mask_off: u32_of(at.mask + cluster * mask_bytes, "group")?,
                bitmask_off: u32_of(at.bitmask, "group")?,
                tail_off: u32_of(at.tail, "group")?,
                tail_len: u32_of(tail, "tail")?,
                rows_x: gx,
                lanes,
                first,
                count,
                id_stride: stride,
                ..Default::default()
            });
            passes.push(Pass::new(
                pipeline.clone(),
                vec![
                    s.clone(),
                    o.clone(),
                    r.clone(),
                    out.clone(),
                    p,
                    status.clone(),
                ],
                Some(3),
                if groups == 0 { (0, 0) } else { (gx, gy) },
            ));
        }
        Ok(Prepared::new(
            self,
            passes,
            out,
            out_len,
            status,
            s,
            bytes.len() + spans.len() * 4 + entries.len() * 4,
            kernel,
        ))
    }

    /// Decode a whole `Ibp` stream, tail bytes included, and read it back.
    pub fn decode_ibp(&self, stream: &[u8]) -> Result<Vec<u8>> {
        self.decode_with(|c| self.prepare_ibp(stream, None, c))
    }

    /// Decode an `Ibp` stream (one mask or clusters) into `out`, whose length the caller knows
    /// from its own metadata: a stream that declares another length is refused before its
    /// layout is read or anything is allocated on the device.
    pub fn decode_ibp_into(&self, stream: &[u8], out: &mut [u8]) -> Result<()> {
        use planepack_core::Codec;
        let declared = planepack_ibp::Ibp::default().decoded_len(stream)?;
        self.decode_into_with(declared, out, |c| self.prepare_ibp(stream, None, c))
    }

    /// Decode the listed rows of an `Ibp` stream (any order, repeats allowed), back to back.
    pub fn gather_ibp(&self, stream: &[u8], rows: &[usize]) -> Result<Vec<u8>> {
        self.decode_with(|c| self.prepare_ibp(stream, Some(rows), c))
    }

    /// Decode the listed rows (None: all) of a compressed group in either layout.
    pub fn gather_rows(
        &self,
        group: &planepack_ibp::CompressedRows,
        mask: &Mask,
        rows: Option<&[usize]>,
    ) -> Result<Vec<u8>> {
        self.decode_with(|c| self.prepare_rows(group, mask, rows, c))
    }
}

/// The invocations per row of a launch: `configured` (fewer when a row has fewer 32-chunk
/// groups), raised to the first power of two at which one invocation stays within `budget`
/// loop iterations ([`crate::contract::LOOP_ITERATIONS_MAX`]: at one lane, lavapipe's default,
/// a row of a million F32 columns came back wrong). A row too long even for 64 lanes is
/// refused, and the CLI decodes it on the CPU.
fn row_lanes(
    columns: usize,
    width: u32,
    deposit: u64,
    configured: u32,
    budget: u32,
) -> Result<u32> {
    let groups = columns.div_ceil(32).max(1) as u64;
    let mut lanes = groups.next_power_of_two().min(configured as u64) as u32;
    loop {
        let iterations = loop_iterations(columns as u64, width, lanes, deposit);
        if lanes >= 64 || iterations <= u64::from(budget) {
            let rows = format!("IBP rows of {columns} columns of {width} bits");
            within_loop_budget(iterations, budget, &rows)?;
            return Ok(lanes);
        }
        lanes *= 2;
    }
}

/// An upper bound on the loop iterations, all loops together, of one invocation of
/// `shaders/ibp.wgsl` decoding rows of `columns` chunks of `width` bits at `lanes` invocations
/// per row, each chunk's deposit looping at most `deposit` times ([`deposit_loops`]). It
/// follows the kernel's loops one by one and counts loops of a constant trip count as if the
/// compiler had not unrolled them. Keep it in step with the kernel.
fn loop_iterations(columns: u64, width: u32, lanes: u32, deposit: u64) -> u64 {
    const WG: u64 = 64;
    const TILE: u64 = 4096;
    let groups = columns.div_ceil(32);
    let per_lane = groups.div_ceil(lanes as u64);
    let tiles = columns.div_ceil(TILE);
    // Pass 1: per tile, the popcount table (WG words at a time, 4 columns a word) ...
    let table = tiles * (1 + (TILE / 4).div_ceil(WG) * (1 + 4));
    // ... and this invocation's groups, 8 table words each.
    let widths = per_lane * (1 + 8) + tiles;
    // The prefix sum (the subgroup path loops over subgroups, the workgroup path over
    // log2(WG) steps).
    let scan = WG;
    // Pass 2: the groups' 32 chunks, each with its deposit loop.
    let decode = per_lane * (1 + 32 * (1 + deposit));
    // A raw row's copy, a word per lane at a time (an invocation does this or pass 2; both
    // are counted).
    let copy = (columns * u64::from(width) / 32).div_ceil(lanes as u64);
    // The padding check (at most two bitmap words) and the canary (at most 65 laps).
    let checks = 2 + 65;
    table + widths + scan + decode + copy + checks
}

/// The most times the kernel's deposit loops for one chunk, over every column of `masks`:
/// `deposit` iterates once per run of free bits (`~mask`) in a 32-bit word (at most 16), for
/// both words of a 64-bit chunk; a narrower chunk's free bits in at most two runs take the
/// closed form.
fn deposit_loops(masks: &[Mask]) -> u64 {
    masks
        .iter()
        .flat_map(|m| {
            free_bit_runs(m).map(move |(lo, hi)| match m.width {
                64 => lo.min(16) + hi.min(16),
                _ if lo > 2 => lo.min(16),
                _ => 0,
            })
        })
        .max()
        .unwrap_or(0)
}

/// Per column of `m`, the runs of free bits (clear in the mask, within the chunk width) in the
/// low and the high 32 bits of its chunk: what the kernels' deposit (decode) and `pext`
/// (packing) loops iterate over.
pub(crate) fn free_bit_runs(m: &Mask) -> impl Iterator<Item = (u64, u64)> + '_ {
    let runs = |x: u32| u64::from((x & !(x << 1)).count_ones());
    let width_mask = if m.width >= 64 {
        u64::MAX
    } else {
        (1u64 << m.width) - 1
    };
    m.mask.iter().map(move |&k| {
        let free = !k & width_mask;
        (runs(free as u32), runs((free >> 32) as u32))
    })
}

fn misaligned(align: usize) -> GpuError {
    GpuError::Unsupported(format!("IBP rows or masks not aligned to {align} bytes"))
}

/// The mask and bitval words as the kernel reads them: `B` bytes per column each, cluster
/// after cluster (as an `Ibp` stream stores them).
fn column_bytes(masks: &[Mask]) -> Vec<u8> {
    let mut v = Vec::new();
    planepack_ibp::internals::write_masks(masks, &mut v);
    v
}

/// The kernel's `row_ids` and its passes.
struct Passes {
    entries: Vec<u32>,
    /// Words per entry: 1 (stored row) or 2 (stored row, output row).
    stride: u32,
    /// Per pass: (cluster, first entry, entries).
    runs: Vec<(usize, u32, u32)>,
}

/// The passes for output rows `ids` (rows of the upload) among `clusters` clusters. One
/// cluster: `ids` as they are, one pass. Several: (stored row, output row) pairs grouped by
/// cluster, a pass per cluster that has rows (at least one pass, for the tail).
fn cluster_entries(
    ids: &[u32],
    clusters: usize,
    cluster_of: impl Fn(usize) -> usize,
) -> Result<Passes> {
    let n = u32_of(ids.len(), "row count")?;
    if clusters <= 1 {
        return Ok(Passes {
            entries: ids.to_vec(),
            stride: 1,
            runs: vec![(0, 0, n)],
        });
    }
    let mut by_cluster: Vec<Vec<u32>> = vec![Vec::new(); clusters];
    for (out_row, &u) in ids.iter().enumerate() {
        let k = cluster_of(u as usize);
        by_cluster[k].push(u);
        by_cluster[k].push(out_row as u32);
    }
    let mut entries = Vec::with_capacity(2 * ids.len());
    let mut runs = Vec::new();
    for (k, pairs) in by_cluster.iter().enumerate() {
        if !pairs.is_empty() {
            let first = u32_of(entries.len() / 2, "row count")?;
            runs.push((k, first, u32_of(pairs.len() / 2, "row count")?));
            entries.extend_from_slice(pairs);
        }
    }
    if runs.is_empty() {
        runs.push((0, 0, 0));
    }
    Ok(Passes {
        entries,
        stride: 2,
        runs,
    })
}

/// Row spans as the kernel reads them (start, end pairs), moved by `base`; every start must
/// be aligned to `align` bytes.
fn span_words(spans: &[(usize, usize)], base: usize, align: usize) -> Result<Vec<u32>> {
    let mut v = Vec::with_capacity(2 * spans.len());
    for &(s, e) in spans {
        if s % align != 0 {
            return Err(misaligned(align));
        }
        v.push(u32_of(base + s, "group")?);
        v.push(u32_of(base + e, "group")?);
    }
    Ok(v)
}

/// Output row k is stored row k.
fn every_row(n: usize) -> Result<Vec<u32>> {
    (0..n).map(|r| u32_of(r, "row index")).collect()
}

/// The upload of a gather: mask and bitval, then each distinct requested row once (in order
/// of first request, 4-byte aligned) with its participation bit renumbered; output row k is
/// uploaded row `ids[k]`.
fn gather_upload(g: &IbpGroup, rs: &[usize]) -> Result<Gather> {
    let mut index: HashMap<usize, u32> = HashMap::with_capacity(rs.len());
    let mut up: Vec<usize> = Vec::new();
    let mut ids = Vec::with_capacity(rs.len());
    for &r in rs {
        if r >= g.rows {
            return Err(GpuError::Stream(planepack_core::Error::Unsupported(
                format!("row {r} of a tensor with {} rows", g.rows),
            )));
        }
        let next = u32_of(up.len(), "row count")?;
        ids.push(*index.entry(r).or_insert_with(|| {
            up.push(r);
            next
        }));
    }
    let mut bits = vec![0u32; up.len().div_ceil(32)];
    for (k, &r) in up.iter().enumerate() {
        if g.is_packed(r) {
            bits[k / 32] |= 1 << (k % 32);
        }
    }
    let mut bytes = column_bytes(g.masks);
    let bitmask = bytes.len();
    bytes.extend(bits.iter().flat_map(|w| w.to_le_bytes()));
    let stored: usize = up.iter().map(|&r| g.spans[r].1 - g.spans[r].0 + 3).sum();
    bytes.reserve(stored);
    let mut spans = Vec::with_capacity(2 * up.len());
    for &r in &up {
        let (s, e) = g.spans[r];
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        spans.push(u32_of(bytes.len(), "gather")?);
        bytes.extend_from_slice(&g.data[s..e]);
        spans.push(u32_of(bytes.len(), "gather")?);
    }
    let at = Offsets {
        mask: 0,
        bitmask,
        tail: bytes.len(),
        tail_len: 0,
        stored_rows: up.len(),
    };
    Ok(Gather {
        bytes,
        spans,
        ids,
        rows: up,
        at,
    })
}

/// What a gather uploads: the bytes, the rows' spans in them, the output rows' sources.
struct Gather {
    bytes: Vec<u8>,
    spans: Vec<u32>,
    ids: Vec<u32>,
    /// The stored row behind each uploaded row.
    rows: Vec<usize>,
    at: Offsets,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::LOOP_ITERATIONS_MAX as BUDGET;

    #[test]
    fn short_rows_keep_the_configured_lanes_or_fewer() {
        assert_eq!(row_lanes(4500, 32, 0, 1, BUDGET).unwrap(), 1);
        assert_eq!(row_lanes(4500, 32, 0, 16, BUDGET).unwrap(), 16);
        // 2 groups of 32 chunks: 2 lanes at most.
        assert_eq!(row_lanes(40, 32, 0, 16, BUDGET).unwrap(), 2);
        assert_eq!(row_lanes(0, 16, 0, 64, BUDGET).unwrap(), 1);
    }

    #[test]
    fn long_rows_take_lanes_until_an_invocation_fits_the_budget() {
        let lanes = row_lanes(300_000, 32, 0, 1, BUDGET).unwrap();
        assert!(lanes > 1);
        assert!(loop_iterations(300_000, 32, lanes, 0) <= BUDGET as u64);
        assert!(loop_iterations(300_000, 32, lanes / 2, 0) > BUDGET as u64);
        // Deposit loops make a row's chunks dearer.
        assert!(
            row_lanes(150_000, 64, 6, 1, BUDGET).unwrap()
                > row_lanes(150_000, 64, 0, 1, BUDGET).unwrap()
        );
    }

    #[test]
    fn rows_too_long_for_a_whole_workgroup_are_refused() {
        for (columns, width) in [(8 << 20, 32), (1 << 32, 16)] {
            match row_lanes(columns, width, 0, 1, BUDGET) {
                Err(GpuError::Unsupported(m)) => assert!(m.contains("columns"), "{m}"),
                other => panic!("{columns} columns: {other:?}"),
            }
        }
        assert_eq!(row_lanes(8 << 20, 32, 0, 1, u32::MAX).unwrap(), 1);
    }

    #[test]
    fn deposit_loops_count_runs_of_free_bits() {
        let mask = |width, m: Vec<u64>| Mask {
            width,
            bitval: vec![0; m.len()],
            mask: m,
        };
        // 32-bit chunks: free bits in one or two runs take the closed form.
        assert_eq!(
            deposit_loops(&[mask(32, vec![0xffff_0000, 0x7f80_0000])]),
            0
        );
        // Three runs: 0..8, 16..24 and 31 are free.
        assert_eq!(deposit_loops(&[mask(32, vec![0x7f00_ff00])]), 3);
        // 64-bit chunks always loop: one run in each half of an empty mask.
        assert_eq!(deposit_loops(&[mask(64, vec![0])]), 2);
        // 16-bit chunks: 0x70f0 leaves 0..4, 8..12 and 15 free.
        assert_eq!(
            deposit_loops(&[mask(16, vec![0x00f0]), mask(16, vec![0x70f0])]),
            3
        );
    }
}
