//! The IBP encoder on the GPU, byte-identical to `planepack-ibp`'s: rows that are already in
//! device memory are packed there, and only the compressed bytes come back.
//!
//! Four kernels, each the twin of a CPU step (tests compare them on every dataset):
//! * `ibp_count.wgsl`: per column and bit, how many rows have it set
//!   (`planepack_ibp::internals::BitCounts::of`) — the mask of a threshold follows from the counts
//!   on the host ([`planepack_ibp::internals::BitCounts::mask`]);
//! * `ibp_score.wgsl`: the reference's score of each candidate mask (`mask::score`), so the
//!   threshold sweep runs on the device and the host only compares six numbers
//!   ([`planepack_ibp::Preprocessed::choose`]);
//! * `ibp_pack.wgsl`: every row packed with the chosen mask, in place, with its size and
//!   row-bitmask bit (`row::encode_row`, the in-place layout);
//! * `ibp_condense.wgsl`: the packed rows back to back (the condensed layout).
//!
//! Between the last two, the host reads the sizes (4 bytes per row), adds them up and sends
//! the row starts back: one round trip of `8 N` bytes, which [`EncodedRows::download_bytes`]
//! counts. The stream is then written by `planepack_ibp::write_stream`, the CPU encoder's own
//! writer.
//!
//! One invocation scores or packs a whole row, so rows too long for one invocation's loop
//! budget (`LOOP_ITERATIONS_MAX`: about 9 000 chunks for the six-mask score) are refused as unsupported
//! and encoded on the CPU.

use crate::contract::{IbpCountParams, IbpPackParams, IbpScoreParams, LOOP_ITERATIONS_MAX};
use crate::device::prefix_starts;
use crate::launch::{Pass, Prepared};
use crate::shaders::{Kernel, ScanPath};
use crate::{u32_of, within_loop_budget, Gpu, GpuError, Result};

use planepack_core::ElemType;
use planepack_ibp::internals::BitCounts;
use planepack_ibp::{CompressedRows, Ibp, Layout, Mask, Preprocessed, StreamParts};

/// Raw rows in device memory: `rows` rows of `columns` chunks of `width` bits, row-major from
/// the start of `buffer` (`STORAGE` usage; also `COPY_SRC` where a tensor IBP cannot shrink
/// must be read back to be stored whole, as [`Gpu::upload_rows`] makes it).
#[derive(Debug, Clone)]
pub struct DeviceRows {
    pub buffer: wgpu::Buffer,
    pub rows: usize,
    pub columns: usize,
    pub width: u32,
}

impl DeviceRows {
    pub fn row_bytes(&self) -> usize {
        self.columns * (self.width / 8) as usize
    }
}

/// A packing launch: the rows packed in place in the launch's output, their sizes and the row
/// bitmask in `sizes` and `bitmask`.
pub struct IbpPack {
    pub launch: Prepared,
    sizes: wgpu::Buffer,
    bitmask: wgpu::Buffer,
    rows: DeviceRows,
}

/// A group compressed on the GPU, condensed, as it came back.
#[derive(Debug)]
pub struct EncodedRows {
    pub group: CompressedRows,
    /// Bytes read back from the device: row sizes, row bitmask, condensed rows.
    pub download_bytes: usize,
    /// Bytes sent to the device: mask and bitval, row starts.
    pub upload_bytes: usize,
}

/// The most times `pext32` in `ibp_pack.wgsl` loops for one chunk of `mask`: once per run of
/// free bits in each 32-bit half.
fn pext_loops(mask: &Mask) -> u64 {
    crate::ibp::free_bit_runs(mask)
        .map(|(lo, hi)| lo + hi)
        .max()
        .unwrap_or(0)
}

/// One vec4 per column: mask low/high, bitval low/high (shaders/ibp_rows.wgsl).
fn mask_words(m: &Mask) -> Vec<u32> {
    m.mask
        .iter()
        .zip(&m.bitval)
        .flat_map(|(&k, &v)| [k as u32, (k >> 32) as u32, v as u32, (v >> 32) as u32])
        .collect()
}

impl Gpu {
    /// Upload whole rows of `row_bytes` bytes (`data` holds a whole number of them) for the
    /// IBP encoder, chunks of `width` bits.
    pub fn upload_rows(&self, data: &[u8], row_bytes: usize, width: u32) -> Result<DeviceRows> {
        let b = (width / 8) as usize;
        if !matches!(width, 16 | 32 | 64) || row_bytes == 0 || !row_bytes.is_multiple_of(b) {
            return Err(GpuError::Unsupported(format!(
                "rows of {row_bytes} bytes in {width}-bit chunks"
            )));
        }
        if !data.len().is_multiple_of(row_bytes) {
            return Err(GpuError::Unsupported(
                "a group that is not whole rows".into(),
            ));
        }
        Ok(DeviceRows {
            buffer: self.upload(data)?.buffer,
            rows: data.len() / row_bytes,
            columns: row_bytes / b,
            width,
        })
    }

    /// The kernels read whole 32-bit words per row, inside the buffer.
    fn check_rows(&self, r: &DeviceRows) -> Result<()> {
        let rb = r.row_bytes();
        if !matches!(r.width, 16 | 32 | 64) || r.columns == 0 || !rb.is_multiple_of(4) {
            return Err(GpuError::Unsupported(format!(
                "rows of {rb} bytes in {}-bit chunks (the GPU encoder reads whole 32-bit words)",
                r.width
            )));
        }
        if !r.buffer.usage().contains(wgpu::BufferUsages::STORAGE)
            || r.rows
                .checked_mul(rb)
                .is_none_or(|n| n as u64 > r.buffer.size())
            || r.buffer.size() > self.max_binding
        {
            return Err(GpuError::Unsupported(
                "rows that do not fit their buffer (or a buffer without STORAGE usage)".into(),
            ));
        }
        u32_of(r.rows.max(1) * r.columns * 2, "group")?;
        Ok(())
    }

    fn masks_buffer(&self, masks: &[&Mask], r: &DeviceRows) -> Result<wgpu::Buffer> {
        for m in masks {
            if m.width != r.width || m.mask.len() != r.columns || m.bitval.len() != r.columns {
                return Err(GpuError::Unsupported(
                    "a mask of another width or column count than the rows".into(),
                ));
            }
        }
        let words: Vec<u32> = masks.iter().flat_map(|m| mask_words(m)).collect();
        self.storage(bytemuck::cast_slice(&words), "masks")
    }

    /// Per column and bit, the rows that have it set, counted on the device.
    pub fn ibp_bit_counts(&self, r: &DeviceRows) -> Result<BitCounts> {
        self.check_rows(r)?;
        let w = r.width as usize;
        let counts = self.zeroed_buffer(
            r.columns * w * 4,
            "bit counts",
            wgpu::BufferUsages::COPY_SRC,
        )?;
        let cols_x = u32_of(r.columns.div_ceil(64), "columns")?;
        // Strips of rows: enough of them to fill the device, at most the grid's height.
        let strip = r.rows.div_ceil(self.max_groups as usize).max(64);
        // Per row of the strip, the row loop and two bit loops of up to 32; then W sums.
        within_loop_budget(
            strip as u64 * 65 + u64::from(r.width),
            LOOP_ITERATIONS_MAX,
            "IBP bit counts",
        )?;
        let strips = u32_of(r.rows.div_ceil(strip), "rows")?;
        if cols_x > self.max_groups {
            return Err(GpuError::Unsupported(format!("{} columns", r.columns)));
        }
        let pipeline = self.pipeline(Kernel::IbpCount { width: r.width }, ScanPath::Workgroup)?;
        let p = self.uniform(&IbpCountParams {
            columns: u32_of(r.columns, "columns")?,
            n_rows: u32_of(r.rows, "rows")?,
            strip: u32_of(strip, "rows")?,
            cols_x,
            _pad: [],
        });
        let grid = if r.rows > 0 {
            (cols_x, strips, 1)
        } else {
            (0, 0, 0)
        };
        let bytes = self.dispatch_and_read(&pipeline, &[&r.buffer, &counts, &p], grid, &counts);
        Ok(BitCounts {
            width: r.width,
            rows: r.rows,
            counts: bytemuck::cast_slice(&bytes[..r.columns * w * 4]).to_vec(),
        })
    }

    /// The reference's score of each mask on every row (`planepack_ibp::internals::score`),
    /// computed on the device in one launch.
    pub fn ibp_scores(&self, r: &DeviceRows, masks: &[Mask]) -> Result<Vec<i64>> {
        self.check_rows(r)?;
        if masks.is_empty() {
            return Ok(vec![]);
        }
        if masks.len() > crate::contract::IBP_MAX_CANDIDATES as usize {
            return Err(GpuError::Unsupported(format!(
                "{} candidate masks in one launch (at most {})",
                masks.len(),
                crate::contract::IBP_MAX_CANDIDATES
            )));
        }
        let refs: Vec<&Mask> = masks.iter().collect();
        // Per column, the column loop and the candidate loop; then a 6-step sum per candidate.
        let nc = masks.len() as u64;
        within_loop_budget(
            r.columns as u64 * (1 + nc) + nc * 8,
            LOOP_ITERATIONS_MAX,
            "IBP scores",
        )?;
        let m = self.masks_buffer(&refs, r)?;
        let groups = u32_of(r.rows.div_ceil(64), "rows")?;
        let (gx, gy) = self.grid(groups);
        let cands = u32_of(masks.len(), "masks")?;
        let partial = self.zeroed_buffer(
            masks.len() * groups.max(1) as usize * 8,
            "score sums",
            wgpu::BufferUsages::COPY_SRC,
        )?;
        let pipeline = self.pipeline(Kernel::IbpScore { width: r.width }, ScanPath::Workgroup)?;
        let p = self.uniform(&IbpScoreParams {
            columns: u32_of(r.columns, "columns")?,
            n_rows: u32_of(r.rows, "rows")?,
            rows_x: gx,
            groups,
            candidates: cands,
            ..Default::default()
        });
        let grid = if groups > 0 { (gx, gy, 1) } else { (0, 0, 0) };
        let bytes =
            self.dispatch_and_read(&pipeline, &[&r.buffer, &m, &partial, &p], grid, &partial);
        let sums: &[u32] = bytemuck::cast_slice(&bytes[..partial.size() as usize]);
        Ok((0..masks.len())
            .map(|c| {
                let g = groups as usize;
                sums[2 * c * g..2 * (c + 1) * g]
                    .chunks_exact(2)
                    .map(|p| p[0] as u64 | (p[1] as u64) << 32)
                    .sum::<u64>() as i64
            })
            .collect())
    }

    /// Prepare packing every row of `r` with `mask`, in place on the device.
    pub fn prepare_ibp_pack(&self, r: &DeviceRows, mask: &Mask) -> Result<IbpPack> {
        self.check_rows(r)?;
        if mask.mask.iter().zip(&mask.bitval).any(|(m, v)| v & !m != 0) {
            return Err(planepack_core::Error::corrupt("bitval has bits outside the mask").into());
        }
        // Three walks over the row's columns (sizing; then the raw copy or the packing, whose
        // chunks each take `pext_loops`), counted as if an invocation did all three.
        within_loop_budget(
            r.columns as u64 * (3 + pext_loops(mask)),
            LOOP_ITERATIONS_MAX,
            "IBP packing",
        )?;
        let m = self.masks_buffer(&[mask], r)?;
        let rb = r.row_bytes();
        let b = (r.width / 8) as usize;
        let header_units = r.columns.div_ceil(8).div_ceil(b);
        let out = self.zeroed_buffer(r.rows * rb, "packed rows", wgpu::BufferUsages::COPY_SRC)?;
        let sizes = self.zeroed_buffer(r.rows * 4, "row sizes", wgpu::BufferUsages::COPY_SRC)?;
        let bitmask = self.zeroed_buffer(
            r.rows.div_ceil(32) * 4,
            "row bitmask",
            wgpu::BufferUsages::COPY_SRC,
        )?;
        let groups = u32_of(r.rows.div_ceil(64), "rows")?;
        let (gx, gy) = self.grid(groups);
        let kernel = Kernel::IbpPack { width: r.width };
        let pipeline = self.pipeline(kernel, ScanPath::Workgroup)?;
        let p = self.uniform(&IbpPackParams {
            columns: u32_of(r.columns, "columns")?,
            n_rows: u32_of(r.rows, "rows")?,
            rows_x: gx,
            header_units: u32_of(header_units, "columns")?,
            _pad: [],
        });
        let pass = Pass::new(
            pipeline,
            vec![
                r.buffer.clone(),
                m,
                out.clone(),
                sizes.clone(),
                bitmask.clone(),
                p,
            ],
            Some(2),
            if groups == 0 { (0, 0) } else { (gx, gy) },
        );
        let launch = Prepared::new(
            self,
            vec![pass],
            out,
            r.rows * rb,
            self.status(),
            r.buffer.clone(),
            2 * rb,
            kernel,
        );
        Ok(IbpPack {
            launch,
            sizes,
            bitmask,
            rows: r.clone(),
        })
    }

    /// Pack the rows of a prepared launch and bring back only the compressed bytes: the
    /// sizes and the row bitmask first, then (after the row starts went up) the rows
    /// condensed. The result is what `planepack_ibp::compress(.., Layout::Condensed)` gives.
    pub fn run_ibp_pack(&self, pack: &IbpPack) -> Result<EncodedRows> {
        let r = &pack.rows;
        let n = r.rows;
        let bm_len = n.div_ceil(32) * 4;
        let staging = self.readback_buffer((n * 4 + bm_len) as u64);
        let mut enc = self.device.create_command_encoder(&Default::default());
        self.record(&pack.launch, &mut enc, None);
        if n > 0 {
            enc.copy_buffer_to_buffer(&pack.sizes, 0, &staging, 0, (n * 4) as u64);
            enc.copy_buffer_to_buffer(&pack.bitmask, 0, &staging, (n * 4) as u64, bm_len as u64);
        }
        self.queue.submit([enc.finish()]);
        let back = self.map_read_all(&staging);
        let sizes: &[u32] = bytemuck::cast_slice(&back[..n * 4]);
        let row_bitmask: Vec<u32> = bytemuck::cast_slice(&back[n * 4..n * 4 + bm_len]).to_vec();
        let starts = prefix_starts(sizes)?;
        // The condensed layout's offsets are each row's inclusive end.
        let offsets: Vec<u64> = starts[1..].iter().map(|&e| e as u64).collect();
        let total = starts[n] as usize;
        let data = self.condense(&pack.launch.output().buffer, &starts, r.row_bytes())?;
        let group = CompressedRows {
            layout: Layout::Condensed,
            rows: n,
            row_bytes: r.row_bytes(),
            payload_bytes: total,
            data,
            offsets,
            row_bitmask,
        };
        Ok(EncodedRows {
            download_bytes: n * 4 + bm_len + total,
            upload_bytes: pack.launch.upload_bytes + starts.len() * 4,
            group,
        })
    }

    /// Pack every row of `r` with `mask` on the device; only compressed bytes come back.
    pub fn encode_ibp_rows(&self, r: &DeviceRows, mask: &Mask) -> Result<EncodedRows> {
        self.run_ibp_pack(&self.prepare_ibp_pack(r, mask)?)
    }

    /// The mask `planepack_ibp::preprocess` would choose for these rows (every row counted
    /// and scored, the threshold sweep of `threshold`), with counting and scoring on the
    /// device.
    pub fn ibp_preprocess(
        &self,
        r: &DeviceRows,
        threshold: planepack_ibp::Threshold,
    ) -> Result<Preprocessed> {
        let counts = self.ibp_bit_counts(r)?;
        let thresholds = threshold.candidates();
        let masks: Vec<Mask> = thresholds.iter().map(|&t| counts.mask(t)).collect();
        let scores = self.ibp_scores(r, &masks)?;
        Ok(Preprocessed::choose(
            r.width,
            r.columns,
            thresholds
                .into_iter()
                .zip(masks)
                .zip(scores)
                .map(|((t, m), s)| (t, m, s)),
        ))
    }

    /// An `Ibp` stream of a tensor, byte-identical to `Ibp::default().encode_shaped`, with the
    /// rows' mask search and packing on the device (the tail and a tensor IBP cannot shrink
    /// are handled on the host, as stored bytes).
    pub fn encode_ibp(&self, input: &[u8], elem: ElemType, shape: &[usize]) -> Result<Vec<u8>> {
        let row_bytes = planepack_ibp::shaped_row_bytes(input.len(), elem, shape);
        let Some((width, whole @ 1..)) = Ibp::default().split_rows(input.len(), row_bytes) else {
            let mut out = Vec::new();
            planepack_ibp::write_stored(input, &mut out);
            return Ok(out);
        };
        let rows = self.upload_rows(&input[..whole], row_bytes, width)?;
        self.encode_ibp_on_device(&rows, &input[whole..])
    }

    /// The `Ibp` stream of rows already in device memory followed by `tail` (the tensor's
    /// bytes after its last whole row, on the host): the offload direction, where only the
    /// compressed bytes cross the link. Equal to the CPU encoder's stream for the same tensor.
    pub fn encode_ibp_on_device(&self, rows: &DeviceRows, tail: &[u8]) -> Result<Vec<u8>> {
        let ibp = Ibp::default();
        let raw_len = rows.rows * rows.row_bytes() + tail.len();
        let mut out = Vec::new();
        // Too few rows for a mask (the CPU encoder's rule, `Ibp::split_rows`): stored whole.
        let pre = if rows.rows >= planepack_ibp::MIN_ROWS {
            Some(self.ibp_preprocess(rows, ibp.threshold)?)
        } else {
            None
        };
        let masks: Vec<Mask> = pre.into_iter().map(|p| p.mask).collect();
        if let Some(mask) = masks.first().filter(|m| m.invariant_bits() > 0) {
            let enc = self.encode_ibp_rows(rows, mask)?;
            planepack_ibp::write_stream(
                &StreamParts {
                    columns: rows.columns,
                    rows: rows.rows,
                    masks: std::slice::from_ref(mask),
                    row_cluster: &[],
                    row_bitmask: &enc.group.row_bitmask,
                    condensed: &enc.group.data,
                    tail,
                },
                &mut out,
            );
        }
        if !planepack_ibp::keeps_rows(out.len(), raw_len, &masks) {
            // Not worth it: the tensor stored whole, which needs its raw bytes here.
            out.clear();
            let mut input = self.read_back(&crate::DeviceTensor {
                buffer: rows.buffer.clone(),
                offset: 0,
                len: rows.rows * rows.row_bytes(),
            })?;
            input.extend_from_slice(tail);
            planepack_ibp::write_stored(&input, &mut out);
        }
        Ok(out)
    }
}
