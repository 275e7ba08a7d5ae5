//! The rANS encoder on the GPU (the offload direction for the codec with the best ratio),
//! byte-identical to `planepack-rans`' encoder at [`GPU_RANS`]'s settings: a tensor already in
//! device memory is compressed there, and only its histograms, its lanes' states and word
//! counts, and the stream come back.
//!
//! The split is the one the format was built for: what is data-parallel runs on the device,
//! what decides runs on the host, by the CPU encoder's own functions
//! (`planepack_rans::internals::plan`), from exact integer counts, so both encoders make the
//! same decisions by construction.
//! 1. `rans_count.wgsl` (twice when the rotation is in question: first on the rotation
//!    samples, both ways, whose records come back unless they are longer than the samples'
//!    own bytes, which are then read back and counted on the host; then on the chunks): per
//!    chunk the histograms of its byte planes
//!    and of its zero mask's bytes and its nonzero count; it also writes the zero mask and the
//!    nonzero elements compacted in order (the sparse layout's planes).
//! 2. Host: the rotation ([`rotation_pays_by_counts`]), each chunk's layouts and plane kinds
//!    ([`ChunkPlan::from_counts`]), the 12-bit tables.
//! 3. `rans_lanes.wgsl`: every lane of every coded plane, one invocation each (rANS lanes are
//!    independent by the format's design), in the layouts the plan codes (both where the
//!    estimates are too close to call, as the CPU does).
//! 4. Host: from the lanes' word counts, each coded plane's length, the written-or-raw rules
//!    ([`coded_plane_kept`], [`chunk_kept`]), the shorter layout, the chunk table; then the
//!    stream as a list of segments.
//! 5. `rans_assemble.wgsl`: the stream, each output word from its segment.
//!
//! Left for later (the format supports them, this encoder does not write them): the modelled
//! chunk (version 2), the block-scaled chunk (version 3), the context planes (version 4), the
//! difference chunk (version 5), the row planes (version 6), the sign planes (version 8) and
//! the row map. Their plans read
//! more than per-chunk histograms (element classes, block factoring, the tensor's plane-1
//! counts per context, the steps' histograms, plane 0 counted by the element one row up, row
//! hashes); streams from this encoder are version 1, and equal the CPU's at `modelled: false,
//! scaled: false, contexts: false, differences: false, row_contexts: false, sign_contexts:
//! false` (compact tables
//! on, as the CPU's default; a container records
//! such a part as `rans`, which every rANS decoder reads; `planepack compress --device gpu`
//! reports how many parts the GPU encoded).

use crate::contract::{
    RansAssembleParams, RansCountParams, RansLanesParams, COUNT_MASKS, COUNT_NONZERO,
    COUNT_RECORDS, LOOP_ITERATIONS_MAX, SRC_DENSE, SRC_LITERAL, SRC_MASK, SRC_NONZERO, SRC_RAW,
    SRC_WORDS,
};
use crate::shaders::Kernel;
use crate::{u32_of, within_loop_budget, Gpu, GpuError, KernelConfig, Result};

use planepack_core::ElemType;
use planepack_rans::internals::plan::{
    chunk_kept, coded_plane_kept, lane_header, lanes_for, rotation_pays_by_counts,
    rotation_samples, sparse_considered, ChunkPlan, Layouts, PlanePlan, Table,
};
use planepack_rans::internals::TableForm;
use planepack_rans::Rans;

/// The settings the GPU encoder writes: the default's, without the modelled and block-scaled
/// chunks, the context planes, the tail dictionaries and the row map (see the module docs).
pub const GPU_RANS: Rans = Rans::PLANES;

/// A stream encoded on the device, with what crossed the link for it.
#[derive(Debug, Clone)]
pub struct EncodedRans {
    pub stream: Vec<u8>,
    /// Bytes read back: histograms, lane states and word counts, the stream.
    pub download_bytes: usize,
    /// Bytes sent: count jobs, tables, lane jobs, segments and literal bytes.
    pub upload_bytes: usize,
    /// Wall clock of the device's steps: each submission of a kernel (and the readback of
    /// its small results: count records, lane states) to its completion, without the host's
    /// planning between them and without reading the stream back.
    pub kernel_seconds: f64,
    /// The same per step: rotation samples' counts, chunks' counts, lanes, assembly.
    pub step_seconds: [f64; 4],
}

/// What an encode moved and how long its kernels ran.
#[derive(Default)]
struct Tally {
    down: usize,
    up: usize,
    kernel_seconds: f64,
    step_seconds: [f64; 4],
}

impl Tally {
    fn time(&mut self, step: usize, clock: std::time::Instant) {
        let t = clock.elapsed().as_secs_f64();
        self.kernel_seconds += t;
        self.step_seconds[step] += t;
    }
}

/// One run of output bytes and where they come from (`shaders/rans_assemble.wgsl`).
#[derive(Debug, Clone)]
enum Piece {
    Literal(Vec<u8>),
    /// `len` bytes from a source (`SRC_*`) starting at unit `src` (a byte, or an element for
    /// planes), of plane `plane` where the source has planes.
    From {
        source: u32,
        plane: u32,
        src: u32,
        len: usize,
    },
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Literal(b) => b.len(),
            Piece::From { len, .. } => *len,
        }
    }
}

fn total(pieces: &[Piece]) -> usize {
    pieces.iter().map(Piece::len).sum()
}

/// A plane's symbols: where they are on the device and how many.
#[derive(Clone, Copy)]
struct PlaneSource {
    source: u32,
    plane: u32,
    start: u32,
    symbols: usize,
}

/// A coded plane's lanes: its table and its first lane job.
struct CodedPlane {
    table: Table,
    first_job: usize,
    lanes: usize,
}

/// Words of a count job's slot in `hist`: its longest record, (W + 1) histograms of a bitmap
/// and 256 counts, and the nonzero count.
fn hist_stride(width: usize) -> usize {
    ((width + 1) * (8 + 256) + 1).next_multiple_of(4)
}

/// The most elements a job may have for its counts to go as u16 (`rans_count.wgsl`, `wide`):
/// then at most one count of a histogram reaches 65535.
const NARROW_MAX: usize = 2 * 65535 - 1;

/// A job's counts, as `rans_count.wgsl` recorded them (see there), read back.
struct Counts {
    /// The W planes' histograms, then the mask bytes'.
    hists: Vec<[u32; 256]>,
    nonzero: usize,
}

impl Counts {
    /// Parse one record of a job of `n` elements; `None` if it is not one (a kernel fault).
    fn parse(rec: &[u8], width: usize, n: usize, wide: bool) -> Option<Counts> {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                rec.get(4 * i..4 * i + 4)?.try_into().ok()?,
            ))
        };
        let mut at = 0;
        let mut hists = Vec::with_capacity(width + 1);
        for p in 0..=width {
            let bits: Vec<u32> = (0..8).map(|i| word(at + i)).collect::<Option<_>>()?;
            at += 8;
            let present: Vec<usize> = (0..256)
                .filter(|&s| bits[s / 32] >> (s % 32) & 1 == 1)
                .collect();
            let mut h = [0u32; 256];
            for (k, &sym) in present.iter().enumerate() {
                h[sym] = if wide {
                    word(at + k)?
                } else {
                    word(at + k / 2)? >> (16 * (k % 2)) & 0xffff
                };
            }
            at += if wide {
                present.len()
            } else {
                present.len().div_ceil(2)
            };
            if !wide {
                // A count written as 65535 is the plane's length less the others.
                let len = if p < width { n } else { n.div_ceil(8) } as u32;
                if let Some(s) = (0..256).find(|&s| h[s] == 0xffff) {
                    let others: u32 = h.iter().sum::<u32>() - 0xffff;
                    h[s] = len.checked_sub(others)?;
                }
            }
            hists.push(h);
        }
        Some(Counts {
            hists,
            nonzero: word(at)? as usize,
        })
    }
}

impl Gpu {
    /// Encode `raw_len` bytes of `elem` elements held at the start of `data` (a `STORAGE`
    /// buffer of this device) with `rans`' settings, which must be [`GPU_RANS`]'s but for the
    /// chunk size, the zero mask and the rotation; equal to the CPU encoder's stream at those
    /// settings. A subgroup kernel that cannot run here is rerun on the workgroup path.
    pub fn encode_rans_on_device(
        &self,
        data: &wgpu::Buffer,
        raw_len: usize,
        elem: ElemType,
        rans: &Rans,
    ) -> Result<EncodedRans> {
        self.with_subgroup_fallback(|c| self.encode_rans_with(data, raw_len, elem, rans, c))
    }

    /// The rANS stream of `input` at `rans`' settings (upload, encode, compressed bytes back),
    /// equal to `rans.encode_to_vec(input, elem)`.
    pub fn encode_rans(&self, input: &[u8], elem: ElemType, rans: &Rans) -> Result<Vec<u8>> {
        check_settings(rans)?;
        let t = self.upload(input)?;
        Ok(self
            .encode_rans_on_device(&t.buffer, input.len(), elem, rans)?
            .stream)
    }

    /// [`Gpu::encode_rans_on_device`] on the scan path `cfg` names.
    pub fn encode_rans_with(
        &self,
        data: &wgpu::Buffer,
        raw_len: usize,
        elem: ElemType,
        rans: &Rans,
        cfg: &KernelConfig,
    ) -> Result<EncodedRans> {
        check_settings(rans)?;
        if !data.usage().contains(wgpu::BufferUsages::STORAGE) || (raw_len as u64) > data.size() {
            return Err(GpuError::Unsupported(
                "input that does not fit its buffer (or a buffer without STORAGE usage)".into(),
            ));
        }
        let width = elem.size();
        let n = raw_len / width;
        let body = n * width;
        let chunk_elems = (1usize << rans.chunk_log2) / width;
        let n_chunks = n.div_ceil(chunk_elems);
        u32_of(raw_len, "tensor")?;
        // Per tile of 256 invocations of 32 elements: the tile loop, the element loop (with
        // its plane loop), the nonzero copy and the mask-byte loop; the histogram's copies.
        let tiles = chunk_elems.div_ceil(256 * 32) as u64;
        within_loop_budget(
            tiles * (1 + 32 * (1 + width as u64) + 32 + 4) + 2 * (width as u64 + 1),
            cfg.loop_budget.min(LOOP_ITERATIONS_MAX),
            "rANS counts",
        )?;
        within_loop_budget(
            chunk_elems.div_ceil(lanes_for(chunk_elems)) as u64,
            cfg.loop_budget.min(LOOP_ITERATIONS_MAX),
            "rANS lanes",
        )?;
        let mut tally = Tally::default();
        let tally = &mut tally;

        // 1-2. The rotation, from the samples' counts both ways.
        let rotate = if width == 1 || !rans.rotate {
            false
        } else {
            // The samples' records, unless they would be longer than the samples themselves
            // (a small tensor): then the samples' bytes are read back and counted here.
            let jobs = rotation_jobs(body, width);
            let raw = rotation_samples(body, width).iter().map(|r| r.len()).sum();
            let readable = data.usage().contains(wgpu::BufferUsages::COPY_SRC);
            match self.rans_counts(
                data,
                &jobs,
                width,
                None,
                readable.then_some(raw),
                cfg,
                tally,
            )? {
                Some(counts) => rotation_from(&counts, width),
                None => rotation_pays_by_counts(&self.sample_counts(data, body, width, tally)),
            }
        };

        // The chunks' counts and zero masks.
        let mask = self.zeroed_buffer(
            (n_chunks * chunk_elems.div_ceil(32)).max(1) * 4,
            "zero masks",
            wgpu::BufferUsages::empty(),
        )?;
        let geometry = Geometry {
            width,
            chunk_elems,
            n,
        };
        let jobs = chunk_jobs(geometry, rotate);
        let counts = self
            .rans_counts(data, &jobs, width, Some(&mask), None, cfg, tally)?
            .ok_or_else(|| GpuError::Device("chunk counts refused without a budget".into()))?;

        // 3. Plans, tables and lane jobs; the nonzero elements of the chunks whose sparse
        // layout is coded; 4. every coded lane.
        let lanes = plan_lanes(&counts, geometry, rans.zero_mask, rans.table_form());
        let sparse_jobs: Vec<[u32; 4]> = jobs
            .iter()
            .zip(&lanes.chunks)
            .filter(|(_, c)| c.1.is_some())
            .map(|(j, _)| *j)
            .collect();
        let nz = self.zeroed_buffer(
            if sparse_jobs.is_empty() { 1 } else { n } * 4,
            "nonzero elements",
            wgpu::BufferUsages::empty(),
        )?;
        self.rans_nonzero(data, &sparse_jobs, width, &nz, cfg, tally)?;
        let words = self.zeroed_buffer(
            u32_of(lanes.region_end.max(2) * 2, "coded lanes")? as usize,
            "lane words",
            wgpu::BufferUsages::empty(),
        )?;
        let lane_out = self.rans_lanes(
            data,
            &nz,
            &mask,
            &lanes.tables,
            &lanes.jobs,
            &words,
            rotate,
            width,
            tally,
        )?;

        // 5. The stream's layout, then its assembly.
        let flag = stream_flags(rans, width, rotate);
        let pieces = lay_out(&lanes, &lane_out, geometry, rans, flag, raw_len);
        let stream = self.rans_assemble(data, &nz, &mask, &words, &pieces, rotate, width, tally)?;
        Ok(EncodedRans {
            stream,
            download_bytes: tally.down,
            upload_bytes: tally.up,
            kernel_seconds: tally.kernel_seconds,
            step_seconds: tally.step_seconds,
        })
    }

    /// The rotation samples' plane histograms, both ways, counted on the host from the
    /// samples' bytes read back (`data` has `COPY_SRC` usage) by the count kernel's twin.
    fn sample_counts(
        &self,
        data: &wgpu::Buffer,
        body: usize,
        width: usize,
        tally: &mut Tally,
    ) -> Vec<[Vec<[u32; 256]>; 2]> {
        let clock = std::time::Instant::now();
        let samples = rotation_samples(body, width);
        let counts = samples
            .iter()
            .map(|r| {
                use crate::twins::rans as twin;
                let raw = self.read_range(data, r.start as u64, r.len());
                tally.down += r.len();
                let elems: Vec<u32> = (0..raw.len() / width)
                    .map(|e| twin::element(&raw, e, width))
                    .collect();
                [false, true].map(|rotate| twin::plane_counts(&elems, width, rotate))
            })
            .collect();
        tally.time(0, clock);
        counts
    }

    /// Run `rans_count.wgsl` on `jobs`, writing the zero masks into `mask` for chunks.
    /// The records' lengths come back first, then the records packed
    /// (`ibp_condense.wgsl`); `None` instead where the records would take more than `budget`
    /// bytes.
    #[allow(clippy::too_many_arguments)]
    fn rans_counts(
        &self,
        data: &wgpu::Buffer,
        jobs: &[[u32; 4]],
        width: usize,
        mask: Option<&wgpu::Buffer>,
        budget: Option<usize>,
        cfg: &KernelConfig,
        tally: &mut Tally,
    ) -> Result<Option<Vec<Counts>>> {
        let stride = hist_stride(width);
        if jobs.is_empty() {
            return Ok(Some(vec![]));
        }
        let hist = self.zeroed_buffer(
            jobs.len() * stride * 4,
            "histograms",
            wgpu::BufferUsages::empty(),
        )?;
        let lens = self.zeroed_buffer(
            jobs.len() * 4,
            "record lengths",
            wgpu::BufferUsages::COPY_SRC,
        )?;
        let spare = self.scratch(4)?;
        let mode = if mask.is_some() {
            COUNT_MASKS
        } else {
            COUNT_RECORDS
        };
        let (pass, status) = self.count_pass(
            data,
            jobs,
            width,
            mode,
            [&hist, &spare, mask.unwrap_or(&spare), &lens],
            cfg,
            tally,
        )?;
        let size = lens.size();
        let staging = self.readback_buffer(size + 8);
        let clock = std::time::Instant::now();
        let mut enc = self.device.create_command_encoder(&Default::default());
        pass(&mut enc);
        enc.copy_buffer_to_buffer(&status, 0, &staging, 0, 8);
        enc.copy_buffer_to_buffer(&lens, 0, &staging, 8, size);
        self.queue.submit([enc.finish()]);
        let back = self.map_read_all(&staging);
        status_ok(&back)?;
        let lens: &[u32] = bytemuck::cast_slice(&back[8..8 + jobs.len() * 4]);
        if lens.iter().any(|&l| l as usize > 4 * stride) {
            return Err(GpuError::Device("rANS count record over its slot".into()));
        }
        let starts = crate::device::prefix_starts(lens)?;
        if budget.is_some_and(|b| starts[jobs.len()] as usize > b) {
            tally.time(usize::from(mask.is_some()), clock);
            tally.down += jobs.len() * 4;
            return Ok(None);
        }
        let packed = self.condense(&hist, &starts, 4 * stride)?;
        tally.time(usize::from(mask.is_some()), clock);
        tally.down += jobs.len() * 4 + packed.len();
        jobs.iter()
            .enumerate()
            .map(|(j, job)| {
                let rec = &packed[starts[j] as usize..starts[j + 1] as usize];
                Counts::parse(rec, width, job[1] as usize, wide_counts(jobs))
                    .ok_or_else(|| GpuError::Device("a malformed rANS count record".into()))
            })
            .collect::<Result<_>>()
            .map(Some)
    }

    /// `rans_count.wgsl` over `jobs` in `mode` (`COUNT_*`), with `outputs` its histogram
    /// records, nonzero elements, zero masks and record lengths: the pass, to be recorded into
    /// a command encoder, and the status buffer it reports into (the subgroup scan's; the
    /// workgroup kernel has no such binding).
    #[allow(clippy::too_many_arguments)]
    fn count_pass<'a>(
        &'a self,
        data: &'a wgpu::Buffer,
        jobs: &[[u32; 4]],
        width: usize,
        mode: u32,
        outputs: [&'a wgpu::Buffer; 4],
        cfg: &KernelConfig,
        tally: &mut Tally,
    ) -> Result<(impl FnOnce(&mut wgpu::CommandEncoder) + 'a, wgpu::Buffer)> {
        let n_jobs = u32_of(jobs.len(), "chunk count")?;
        let jobs_buf = self.storage(bytemuck::cast_slice(jobs), "count jobs")?;
        tally.up += jobs.len() * 16;
        let pipeline = self.pipeline(
            Kernel::RansCount {
                width: width as u32,
            },
            cfg.path,
        )?;
        let (gx, gy) = self.grid(n_jobs);
        let p = self.uniform(&RansCountParams {
            n_jobs,
            jobs_x: gx,
            write_out: mode,
            hist_stride: hist_stride(width) as u32,
            wide: wide_counts(jobs) as u32,
            ..Default::default()
        });
        let status = self.status();
        let with_status = (cfg.path == crate::ScanPath::Subgroup).then(|| status.clone());
        let [hist, nz, mask, lens] = outputs;
        let pass = move |enc: &mut wgpu::CommandEncoder| {
            let mut buffers = vec![data, &jobs_buf, hist, nz, mask, lens, &p];
            if let Some(s) = &with_status {
                buffers.push(s);
            }
            self.record_dispatch(enc, &pipeline, &buffers, (gx, gy, 1));
        };
        Ok((pass, status))
    }

    /// The nonzero elements of the chunks `jobs` (their sparse layouts are coded) into `nz`
    /// at the chunks' first elements: `rans_count.wgsl` in its `COUNT_NONZERO` pass, timed
    /// with the counts.
    fn rans_nonzero(
        &self,
        data: &wgpu::Buffer,
        jobs: &[[u32; 4]],
        width: usize,
        nz: &wgpu::Buffer,
        cfg: &KernelConfig,
        tally: &mut Tally,
    ) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let spare = self.scratch(4)?;
        let (pass, status) = self.count_pass(
            data,
            jobs,
            width,
            COUNT_NONZERO,
            [&spare, nz, &spare, &spare],
            cfg,
            tally,
        )?;
        let staging = self.readback_buffer(8);
        let clock = std::time::Instant::now();
        let mut enc = self.device.create_command_encoder(&Default::default());
        pass(&mut enc);
        enc.copy_buffer_to_buffer(&status, 0, &staging, 0, 8);
        self.queue.submit([enc.finish()]);
        let back = self.map_read_all(&staging);
        tally.time(1, clock);
        status_ok(&back)?;
        Ok(())
    }

    /// Run `rans_lanes.wgsl`: every lane job's (final state, word count).
    #[allow(clippy::too_many_arguments)]
    fn rans_lanes(
        &self,
        data: &wgpu::Buffer,
        nz: &wgpu::Buffer,
        mask: &wgpu::Buffer,
        tables: &[u32],
        jobs: &[[u32; 8]],
        words: &wgpu::Buffer,
        rotate: bool,
        width: usize,
        tally: &mut Tally,
    ) -> Result<Vec<[u32; 2]>> {
        if jobs.is_empty() {
            return Ok(vec![]);
        }
        let n_jobs = u32_of(jobs.len(), "lane count")?;
        let tables_buf = self.storage(bytemuck::cast_slice(tables), "frequency tables")?;
        let jobs_buf = self.storage(bytemuck::cast_slice(jobs), "lane jobs")?;
        tally.up += tables.len() * 4 + jobs.len() * 32;
        let out =
            self.zeroed_buffer(jobs.len() * 8, "lane states", wgpu::BufferUsages::COPY_SRC)?;
        let groups = n_jobs.div_ceil(64);
        let (gx, gy) = self.grid(groups);
        let pipeline = self.pipeline(
            Kernel::RansLanes {
                width: width as u32,
            },
            crate::ScanPath::Workgroup,
        )?;
        let p = self.uniform(&RansLanesParams {
            n_jobs,
            jobs_x: gx,
            rotate: rotate as u32,
            ..Default::default()
        });
        let clock = std::time::Instant::now();
        let back = self.dispatch_and_read(
            &pipeline,
            &[data, nz, mask, &tables_buf, &jobs_buf, words, &out, &p],
            (gx, gy, 1),
            &out,
        );
        tally.time(2, clock);
        tally.down += jobs.len() * 8;
        Ok(back[..jobs.len() * 8]
            .chunks_exact(8)
            .map(|b| {
                [
                    u32::from_le_bytes(b[..4].try_into().expect("4 bytes")),
                    u32::from_le_bytes(b[4..].try_into().expect("4 bytes")),
                ]
            })
            .collect())
    }

    /// Run `rans_assemble.wgsl` over `pieces` and read the stream back.
    #[allow(clippy::too_many_arguments)]
    fn rans_assemble(
        &self,
        data: &wgpu::Buffer,
        nz: &wgpu::Buffer,
        mask: &wgpu::Buffer,
        words: &wgpu::Buffer,
        pieces: &[Piece],
        rotate: bool,
        width: usize,
        tally: &mut Tally,
    ) -> Result<Vec<u8>> {
        let Segments {
            segs,
            lit_words,
            lit_at,
            total,
        } = segments(pieces)?;
        let n_words = u32_of(total.div_ceil(4), "stream")?;
        let segs_buf = self.storage(bytemuck::cast_slice(&segs), "segments")?;
        let lit_buf = self.storage(&lit_words, "literal bytes")?;
        tally.up += segs.len() * 16 + lit_words.len();
        let out = self.zeroed_buffer(total, "stream", wgpu::BufferUsages::COPY_SRC)?;
        let (gx, gy) = self.grid(n_words.div_ceil(256));
        let pipeline = self.pipeline(
            Kernel::RansAssemble {
                width: width as u32,
            },
            crate::ScanPath::Workgroup,
        )?;
        let p = self.uniform(&RansAssembleParams {
            n_segs: u32_of(segs.len(), "segments")?,
            n_words,
            groups_x: gx,
            total: total as u32,
            rotate: rotate as u32,
            lit_at: u32_of(lit_at, "stream")?,
            ..Default::default()
        });
        // The assembly is timed alone: reading the stream back is the offload's download,
        // not the kernel's work.
        let grid = if n_words > 0 { (gx, gy, 1) } else { (0, 0, 0) };
        let clock = std::time::Instant::now();
        let mut enc = self.device.create_command_encoder(&Default::default());
        self.record_dispatch(
            &mut enc,
            &pipeline,
            &[data, nz, mask, words, &segs_buf, &lit_buf, &out, &p],
            grid,
        );
        self.queue.submit([enc.finish()]);
        self.wait();
        tally.time(3, clock);
        let v = self.read(&out, total);
        tally.down += total;
        Ok(v)
    }
}

/// The count jobs of the rotation samples (`rotation_samples`), each unrotated then rotated:
/// (first element, elements, rotate, 0).
fn rotation_jobs(body: usize, width: usize) -> Vec<[u32; 4]> {
    rotation_samples(body, width)
        .iter()
        .flat_map(|r| {
            let (s, l) = ((r.start / width) as u32, ((r.end - r.start) / width) as u32);
            [[s, l, 0, 0], [s, l, 1, 0]]
        })
        .collect()
}

/// The rotation decision from the samples' counts (the CPU encoder's rule).
fn rotation_from(counts: &[Counts], width: usize) -> bool {
    let per: Vec<[Vec<[u32; 256]>; 2]> = counts
        .chunks_exact(2)
        .map(|both| [0, 1].map(|r| both[r].hists[..width].to_vec()))
        .collect();
    rotation_pays_by_counts(&per)
}

/// The count jobs of the chunks.
fn chunk_jobs(g: Geometry, rotate: bool) -> Vec<[u32; 4]> {
    (0..g.chunks())
        .map(|c| {
            let start = (c * g.chunk_elems) as u32;
            [start, g.chunk_len(c) as u32, rotate as u32, 0]
        })
        .collect()
}

/// Which counts a set of jobs records as u32 (`rans_count.wgsl`'s `wide`).
fn wide_counts(jobs: &[[u32; 4]]) -> bool {
    jobs.iter().any(|j| j[1] as usize > NARROW_MAX)
}

/// The GPU encoder's pipeline with each kernel replaced by its CPU twin ([`crate::twins::rans`]) and
/// the host's steps as they are: what a device would write, without one (tests hold it to
/// the CPU encoder's bytes where no adapter exists; it is not a fast encoder).
pub fn encode_rans_twin(input: &[u8], elem: ElemType, rans: &Rans) -> Result<Vec<u8>> {
    use crate::twins::rans as twin;
    check_settings(rans)?;
    let width = elem.size();
    let n = input.len() / width;
    let g = Geometry {
        width,
        chunk_elems: (1usize << rans.chunk_log2) / width,
        n,
    };
    u32_of(input.len(), "tensor")?;
    let elems: Vec<u32> = (0..n).map(|e| twin::element(input, e, width)).collect();
    let mut nz = vec![0u32; n];
    let mut mask = vec![0u32; g.chunks() * g.chunk_elems.div_ceil(32)];
    let mut count = |jobs: &[[u32; 4]], write: bool| -> Result<Vec<Counts>> {
        let wide = wide_counts(jobs);
        jobs.iter()
            .map(|j| {
                let (s, l) = (j[0] as usize, j[1] as usize);
                let (rec, z, m) = twin::count_job(&elems[s..s + l], width, j[2] == 1, wide);
                if write {
                    nz[s..s + z.len()].copy_from_slice(&z);
                    mask[s / 32..s / 32 + m.len()].copy_from_slice(&m);
                }
                Counts::parse(&rec, width, l, wide)
                    .ok_or_else(|| GpuError::Device("a malformed rANS count record".into()))
            })
            .collect()
    };
    let rotate = width > 1
        && rans.rotate
        && rotation_from(&count(&rotation_jobs(n * width, width), false)?, width);
    let counts = count(&chunk_jobs(g, rotate), true)?;
    let lanes = plan_lanes(&counts, g, rans.zero_mask, rans.table_form());
    let sources = twin::Sources {
        data: input,
        nz: &nz,
        mask: &mask,
        width,
        rotate,
    };
    let mut words = vec![0u16; lanes.region_end];
    let lane_out: Vec<[u32; 2]> = lanes
        .jobs
        .iter()
        .map(|j| {
            let (source, plane, start) = (j[0] & 15, j[0] >> 4, j[1] as usize);
            let symbol = |i: u32| twin::source_byte(&sources, source, plane, start + i as usize);
            let table = &lanes.tables[j[4] as usize * 256..][..256];
            twin::lane(
                symbol,
                j[2],
                j[3] & 0xff,
                j[3] >> 8,
                table,
                j[5],
                &mut words,
            )
        })
        .collect();
    let flag = stream_flags(rans, width, rotate);
    let pieces = lay_out(&lanes, &lane_out, g, rans, flag, input.len());
    let seg = segments(&pieces)?;
    Ok(twin::assemble(
        &seg.segs,
        &seg.lit_words[4 * seg.lit_at..],
        &words,
        seg.total,
        &sources,
    ))
}

/// The pieces as `rans_assemble.wgsl` reads them.
struct Segments {
    /// Per segment: first output byte, source | plane << 4, first source unit, 0.
    segs: Vec<[u32; 4]>,
    /// The block index (per KiB of output, the segment of its first byte; then the last
    /// segment), then the literal bytes from word `lit_at`.
    lit_words: Vec<u8>,
    lit_at: usize,
    /// Bytes of the stream.
    total: usize,
}

/// Lay `pieces` out as segments (empty pieces left out) with their literal bytes and the
/// block index.
fn segments(pieces: &[Piece]) -> Result<Segments> {
    let mut segs: Vec<[u32; 4]> = Vec::new();
    let mut lit: Vec<u8> = Vec::new();
    let mut at = 0usize;
    for p in pieces {
        if p.len() == 0 {
            continue;
        }
        let dst = u32_of(at, "stream")?;
        match p {
            Piece::Literal(b) => {
                segs.push([dst, SRC_LITERAL, u32_of(lit.len(), "stream")?, 0]);
                lit.extend_from_slice(b);
            }
            Piece::From {
                source, plane, src, ..
            } => segs.push([dst, source | plane << 4, *src, 0]),
        }
        at += p.len();
    }
    let total = at;
    u32_of(total, "stream")?;
    // Per 1 KiB block of output (a workgroup's 256 words), the segment its first byte is
    // in, then one more entry: the kernel's search stays between two of them.
    let blocks = total.div_ceil(1024);
    let mut index: Vec<u32> = Vec::with_capacity(blocks + 1);
    let mut r = 0usize;
    for b in 0..blocks {
        while r + 1 < segs.len() && segs[r + 1][0] as usize <= 1024 * b {
            r += 1;
        }
        index.push(r as u32);
    }
    index.push(segs.len().saturating_sub(1) as u32);
    let lit_at = index.len();
    let mut lit_words: Vec<u8> = bytemuck::cast_slice(&index).to_vec();
    lit_words.extend_from_slice(&lit);
    Ok(Segments {
        segs,
        lit_words,
        lit_at,
        total,
    })
}

/// A tensor's shape as the encoder cuts it: element width, chunk elements, elements.
#[derive(Clone, Copy)]
struct Geometry {
    width: usize,
    chunk_elems: usize,
    n: usize,
}

impl Geometry {
    fn chunks(&self) -> usize {
        self.n.div_ceil(self.chunk_elems)
    }
    fn chunk_len(&self, c: usize) -> usize {
        self.chunk_elems.min(self.n - c * self.chunk_elems)
    }
}

/// A chunk layout's planes: each plane's symbols, kind and, if coded, its lanes.
type Planned = Vec<(PlaneSource, PlanePlan, Option<CodedPlane>)>;

/// What the lane coder is given and what the layout reads back from it.
struct LanePlan {
    /// Per coded plane, 256 entries `freq | cum << 16`.
    tables: Vec<u32>,
    /// Per lane: (source | plane << 4, start, symbols, lanes | lane << 8, table, region end,
    /// 0, 0), as `rans_lanes.wgsl` reads them.
    jobs: Vec<[u32; 8]>,
    /// 16-bit words of all lane regions.
    region_end: usize,
    /// Per chunk: its dense and sparse layouts where the plan codes them, its nonzero count.
    chunks: Vec<(Option<Planned>, Option<Planned>, usize)>,
}

/// Plan every chunk from its counts (the CPU encoder's [`ChunkPlan::from_counts`]) and list
/// the lanes of every plane planned as coded, in each layout the plan codes.
fn plan_lanes(counts: &[Counts], g: Geometry, zero_mask: bool, form: TableForm) -> LanePlan {
    let mut lp = LanePlan {
        tables: Vec::new(),
        jobs: Vec::new(),
        region_end: 0,
        chunks: Vec::with_capacity(counts.len()),
    };
    for (c, cn) in counts.iter().enumerate() {
        let len = g.chunk_len(c);
        let start = (c * g.chunk_elems) as u32;
        let dense = &cn.hists[..g.width];
        let zeros = len - cn.nonzero;
        let plan = if sparse_considered(zero_mask, zeros, len) {
            ChunkPlan::from_counts(dense, Some((&cn.hists[g.width], zeros)), form)
        } else {
            ChunkPlan::from_counts(dense, None, form)
        };
        let dense_sources = (0..g.width as u32).map(|j| PlaneSource {
            source: SRC_DENSE,
            plane: j,
            start,
            symbols: len,
        });
        let dense_planned = (plan.layouts != Layouts::Sparse)
            .then(|| lp.code(dense_sources.collect(), &plan.dense));
        let sparse_planned = match (&plan.sparse, plan.layouts) {
            (Some(kinds), Layouts::Sparse | Layouts::Both) => {
                let mask = PlaneSource {
                    source: SRC_MASK,
                    plane: 0,
                    start: start / 8,
                    symbols: len.div_ceil(8),
                };
                let planes = (0..g.width as u32).map(|j| PlaneSource {
                    source: SRC_NONZERO,
                    plane: j,
                    start,
                    symbols: cn.nonzero,
                });
                Some(lp.code(std::iter::once(mask).chain(planes).collect(), kinds))
            }
            _ => None,
        };
        lp.chunks.push((dense_planned, sparse_planned, cn.nonzero));
    }
    lp
}

impl LanePlan {
    /// A layout's planes with their kinds; the coded ones get a table and their lanes.
    fn code(&mut self, sources: Vec<PlaneSource>, kinds: &[PlanePlan]) -> Planned {
        sources
            .into_iter()
            .zip(kinds)
            .map(|(src, kind)| {
                let coded = match kind {
                    PlanePlan::Rans(table) => Some(self.lanes(&src, table)),
                    _ => None,
                };
                (src, kind.clone(), coded)
            })
            .collect()
    }

    /// The lane jobs of a plane coded with `table`: a region per lane of its symbol count
    /// (a lane writes at most a word per symbol), rounded to whole 32-bit words.
    fn lanes(&mut self, src: &PlaneSource, table: &Table) -> CodedPlane {
        let t = (self.tables.len() / 256) as u32;
        self.tables
            .extend((0..256).map(|s| table.freq[s] as u32 | (table.cum[s] as u32) << 16));
        let k = lanes_for(src.symbols);
        let first_job = self.jobs.len();
        for lane in 0..k {
            let count = src.symbols.saturating_sub(lane).div_ceil(k);
            self.region_end += count.next_multiple_of(2);
            self.jobs.push([
                src.source | src.plane << 4,
                src.start,
                src.symbols as u32,
                k as u32 | (lane as u32) << 8,
                t,
                self.region_end as u32,
                0,
                0,
            ]);
        }
        CodedPlane {
            table: table.clone(),
            first_job,
            lanes: k,
        }
    }
}

/// The header's flags byte, as the CPU encoder sets it: the rotation (for single bytes the
/// setting, which means nothing there), no row map, the table form.
fn stream_flags(rans: &Rans, width: usize, rotate: bool) -> u8 {
    let rotated = if width == 1 { rans.rotate } else { rotate };
    u8::from(rotated)
        | if rans.compact_tables {
            planepack_rans::FLAG_COMPACT_TABLES
        } else {
            0
        }
}

/// The stream as pieces, as the CPU encoder writes it: the header (version 1, `flag` the
/// stream's flags byte; the short form for one chunk) and chunk table (long form only), each chunk in the shorter of its coded layouts (dense
/// on a tie) or raw where that is not longer, then the tail bytes.
fn lay_out(
    lp: &LanePlan,
    lane_out: &[[u32; 2]],
    g: Geometry,
    rans: &Rans,
    flag: u8,
    raw_len: usize,
) -> Vec<Piece> {
    let form = rans.table_form();
    let n_chunks = g.chunks();
    let mut lens = Vec::with_capacity(n_chunks);
    let mut chunks = Vec::new();
    for (c, (dense, sparse, nonzero)) in lp.chunks.iter().enumerate() {
        let len = g.chunk_len(c);
        let layout = |mode: Vec<u8>, planes: &Planned| -> Vec<Piece> {
            let mut v = vec![Piece::Literal(mode)];
            for (src, kind, coded) in planes {
                v.extend(plane_pieces(
                    src,
                    kind,
                    coded.as_ref(),
                    lane_out,
                    &lp.jobs,
                    form,
                ));
            }
            v
        };
        let dense = dense
            .as_ref()
            .map(|p| layout(vec![planepack_rans::CHUNK_DENSE], p));
        let sparse = sparse.as_ref().map(|p| {
            let mut head = vec![planepack_rans::CHUNK_SPARSE];
            head.extend_from_slice(&(*nonzero as u32).to_le_bytes());
            layout(head, p)
        });
        let mut best = match (dense, sparse) {
            (Some(d), Some(s)) if total(&s) < total(&d) => s,
            (Some(d), _) => d,
            (None, Some(s)) => s,
            (None, None) => unreachable!("a chunk is coded in at least one layout"),
        };
        if !chunk_kept(total(&best), len * g.width) {
            best = vec![
                Piece::Literal(vec![planepack_rans::CHUNK_RAW]),
                Piece::From {
                    source: SRC_RAW,
                    plane: 0,
                    src: (c * g.chunk_elems * g.width) as u32,
                    len: len * g.width,
                },
            ];
        }
        lens.push(total(&best) as u32);
        chunks.extend(best);
    }
    let mut head = Vec::with_capacity(planepack_rans::HEADER_BYTES + 4 * n_chunks);
    planepack_rans::write_header(
        &mut head,
        1,
        g.width,
        rans.chunk_log2,
        flag,
        raw_len,
        &[],
        &lens,
    );
    let body = g.n * g.width;
    let mut pieces = vec![Piece::Literal(head)];
    pieces.extend(chunks);
    pieces.push(Piece::From {
        source: SRC_RAW,
        plane: 0,
        src: body as u32,
        len: raw_len - body,
    });
    pieces
}

/// The count kernel's status words read back (the first 8 bytes of `back`: flags, chunk):
/// an error where the kernel reported one.
fn status_ok(back: &[u8]) -> Result<()> {
    let word = |i: usize| u32::from_le_bytes(back[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    match word(0) {
        0 => Ok(()),
        flags => Err(GpuError::Corrupt {
            flags,
            what: crate::contract::describe_flags(flags),
            unit: "chunk",
            at: word(1),
        }),
    }
}

/// The settings this encoder writes (see [`GPU_RANS`]); every element width is taken.
fn check_settings(rans: &Rans) -> Result<()> {
    if rans.modelled || rans.scaled {
        return Err(GpuError::Unsupported(
            "rANS modelled or block-scaled chunks (the GPU encoder writes byte planes only)".into(),
        ));
    }
    if !planepack_rans::CHUNK_LOG2_RANGE.contains(&rans.chunk_log2) {
        return Err(GpuError::Unsupported(format!(
            "rANS chunks of 2^{} bytes",
            rans.chunk_log2
        )));
    }
    Ok(())
}

/// A plane's pieces as the CPU's `put_plane` writes it: constant, raw, or coded where that is
/// shorter than raw (lane header from the lanes' states and word counts, then each lane's
/// words, lane 0 first).
fn plane_pieces(
    src: &PlaneSource,
    kind: &PlanePlan,
    coded: Option<&CodedPlane>,
    lane_out: &[[u32; 2]],
    lane_jobs: &[[u32; 8]],
    form: TableForm,
) -> Vec<Piece> {
    let raw = || {
        vec![
            Piece::Literal(vec![planepack_rans::PLANE_RAW]),
            Piece::From {
                source: src.source,
                plane: src.plane,
                src: src.start,
                len: src.symbols,
            },
        ]
    };
    match (kind, coded) {
        (PlanePlan::Const(v), _) => vec![Piece::Literal(vec![planepack_rans::PLANE_CONST, *v])],
        (PlanePlan::Rans(_), Some(c)) => {
            let lanes = &lane_out[c.first_job..c.first_job + c.lanes];
            let words: usize = lanes.iter().map(|l| l[1] as usize).sum();
            let coded_len = 1 + c.table.written_len(form) + lane_header(c.lanes) + 2 * words;
            if !coded_plane_kept(coded_len, src.symbols) {
                return raw();
            }
            let mut lit = vec![planepack_rans::PLANE_RANS];
            c.table.write(&mut lit, form);
            lit.push(c.lanes as u8);
            for l in lanes {
                lit.extend_from_slice(&l[0].to_le_bytes());
            }
            for l in lanes {
                lit.extend_from_slice(&(l[1] as u16).to_le_bytes());
            }
            let mut v = vec![Piece::Literal(lit)];
            // A lane's words end where its region ends (the job's word 5), in 16-bit words.
            let jobs = &lane_jobs[c.first_job..c.first_job + c.lanes];
            for (job, l) in jobs.iter().zip(lanes) {
                v.push(Piece::From {
                    source: SRC_WORDS,
                    plane: 0,
                    src: 2 * (job[5] - l[1]),
                    len: 2 * l[1] as usize,
                });
            }
            v
        }
        _ => raw(),
    }
}
