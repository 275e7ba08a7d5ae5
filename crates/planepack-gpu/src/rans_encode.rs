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
//!    samples, both ways, then on the chunks): per chunk the histograms of its byte planes
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
//! chunk (version 2), the block-scaled chunk (version 3) and the row map. Their plans read more
//! than histograms (element classes, block factoring, row hashes); streams from this encoder
//! are version 1, and equal the CPU's at `modelled: false, scaled: false` (the container and
//! the command say which settings wrote a part).

use crate::contract::{
    RansAssembleParams, RansCountParams, RansLanesParams, LOOP_ITERATIONS_MAX, SRC_DENSE,
    SRC_LITERAL, SRC_MASK, SRC_NONZERO, SRC_RAW, SRC_WORDS,
};
use crate::shaders::Kernel;
use crate::{u32_of, within_loop_budget, Gpu, GpuError, KernelConfig, Result};

use planepack_core::ElemType;
use planepack_rans::internals::plan::{
    chunk_kept, coded_plane_kept, lane_header, lanes_for, rotation_pays_by_counts,
    rotation_samples, sparse_considered, ChunkPlan, Layouts, PlanePlan, Table,
};
use planepack_rans::Rans;

/// The settings the GPU encoder writes: the default's, without the modelled and block-scaled
/// chunks and the row map (see the module docs).
pub const GPU_RANS: Rans = Rans {
    chunk_log2: planepack_rans::DEFAULT_CHUNK_LOG2,
    zero_mask: true,
    rotate: true,
    rows: false,
    modelled: false,
    scaled: false,
};

/// A stream encoded on the device, with what crossed the link for it.
#[derive(Debug, Clone)]
pub struct EncodedRans {
    pub stream: Vec<u8>,
    /// Bytes read back: histograms, lane states and word counts, the stream.
    pub download_bytes: usize,
    /// Bytes sent: count jobs, tables, lane jobs, segments and literal bytes.
    pub upload_bytes: usize,
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

/// Words of `hist` per count job: (W + 1) * 256 counts and the nonzero count, rounded to 4.
fn hist_stride(width: usize) -> usize {
    ((width + 1) * 256 + 1).next_multiple_of(4)
}

/// A job's counts, as `rans_count.wgsl` wrote them.
struct Counts<'a> {
    words: &'a [u32],
    width: usize,
}

impl Counts<'_> {
    fn plane(&self, j: usize) -> [u32; 256] {
        self.words[j * 256..(j + 1) * 256]
            .try_into()
            .expect("256 counts")
    }
    fn nonzero(&self) -> usize {
        self.words[(self.width + 1) * 256] as usize
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
        check_settings(rans, elem)?;
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
        check_settings(rans, elem)?;
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
        // Per tile of 256 elements: the tile loop, the plane and mask-byte loops; the
        // histogram's copy loops. The lane coder: a lane's symbols.
        let tiles = chunk_elems.div_ceil(256) as u64;
        within_loop_budget(
            tiles * (1 + width as u64 + 4) + 2 * (width as u64 + 1),
            cfg.loop_budget.min(LOOP_ITERATIONS_MAX),
            "rANS counts",
        )?;
        within_loop_budget(
            chunk_elems.div_ceil(lanes_for(chunk_elems)) as u64,
            cfg.loop_budget.min(LOOP_ITERATIONS_MAX),
            "rANS lanes",
        )?;
        let mut down = 0usize;
        let mut up = 0usize;

        // 1-2. The rotation, from the samples' counts both ways.
        let rotate = if width == 1 || !rans.rotate {
            false
        } else {
            let samples = rotation_samples(body, width);
            let jobs: Vec<[u32; 4]> = samples
                .iter()
                .flat_map(|r| {
                    let (s, l) = ((r.start / width) as u32, ((r.end - r.start) / width) as u32);
                    [[s, l, 0, 0], [s, l, 1, 0]]
                })
                .collect();
            let counts = self.rans_counts(data, &jobs, width, None, cfg, &mut down, &mut up)?;
            let stride = hist_stride(width);
            let per: Vec<[Vec<[u32; 256]>; 2]> = counts
                .chunks_exact(2 * stride)
                .map(|both| {
                    [0, 1].map(|r| {
                        let c = Counts {
                            words: &both[r * stride..(r + 1) * stride],
                            width,
                        };
                        (0..width).map(|j| c.plane(j)).collect()
                    })
                })
                .collect();
            rotation_pays_by_counts(&per)
        };

        // The chunks' counts, the zero mask and the nonzero elements.
        let nz = self.zeroed_buffer(
            n.max(1) * 4,
            "nonzero elements",
            wgpu::BufferUsages::empty(),
        )?;
        let mask = self.zeroed_buffer(
            (n_chunks * chunk_elems.div_ceil(32)).max(1) * 4,
            "zero masks",
            wgpu::BufferUsages::empty(),
        )?;
        let chunk_len = |c: usize| chunk_elems.min(n - c * chunk_elems);
        let jobs: Vec<[u32; 4]> = (0..n_chunks)
            .map(|c| {
                [
                    (c * chunk_elems) as u32,
                    chunk_len(c) as u32,
                    rotate as u32,
                    0,
                ]
            })
            .collect();
        let counts = self.rans_counts(
            data,
            &jobs,
            width,
            Some((&nz, &mask)),
            cfg,
            &mut down,
            &mut up,
        )?;
        let stride = hist_stride(width);

        // 3. Plans, tables and lane jobs.
        let mut tables: Vec<u32> = Vec::new();
        let mut lane_jobs: Vec<[u32; 8]> = Vec::new();
        let mut region_end = 0usize; // in 16-bit words
        let mut nonzeros = Vec::with_capacity(n_chunks);
        // Per chunk: (dense, sparse) planes, each a source and, if coded, its lanes.
        type Planned = Vec<(PlaneSource, PlanePlan, Option<CodedPlane>)>;
        let mut planned: Vec<(Option<Planned>, Option<Planned>)> = Vec::with_capacity(n_chunks);
        for c in 0..n_chunks {
            let words = &counts[c * stride..(c + 1) * stride];
            let cn = Counts { words, width };
            let len = chunk_len(c);
            let start = (c * chunk_elems) as u32;
            let dense: Vec<[u32; 256]> = (0..width).map(|j| cn.plane(j)).collect();
            let nonzero = cn.nonzero();
            let zeros = len - nonzero;
            let mask_counts = cn.plane(width);
            let plan = if sparse_considered(rans.zero_mask, zeros, len) {
                ChunkPlan::from_counts(&dense, Some((&mask_counts, zeros)))
            } else {
                ChunkPlan::from_counts(&dense, None)
            };
            let mut code = |sources: Vec<PlaneSource>, kinds: &[PlanePlan]| -> Planned {
                sources
                    .into_iter()
                    .zip(kinds)
                    .map(|(src, kind)| {
                        let coded =
                            match kind {
                                PlanePlan::Rans(table) => {
                                    let t = (tables.len() / 256) as u32;
                                    tables.extend((0..256).map(|s| {
                                        table.freq[s] as u32 | (table.cum[s] as u32) << 16
                                    }));
                                    let k = lanes_for(src.symbols);
                                    let first_job = lane_jobs.len();
                                    for lane in 0..k {
                                        let count = src.symbols.saturating_sub(lane).div_ceil(k);
                                        region_end += count.next_multiple_of(2);
                                        lane_jobs.push([
                                            src.source | src.plane << 4,
                                            src.start,
                                            src.symbols as u32,
                                            k as u32 | (lane as u32) << 8,
                                            t,
                                            region_end as u32,
                                            0,
                                            0,
                                        ]);
                                    }
                                    Some(CodedPlane {
                                        table: table.clone(),
                                        first_job,
                                        lanes: k,
                                    })
                                }
                                _ => None,
                            };
                        (src, clone_plan(kind), coded)
                    })
                    .collect()
            };
            let dense_sources: Vec<PlaneSource> = (0..width as u32)
                .map(|j| PlaneSource {
                    source: SRC_DENSE,
                    plane: j,
                    start,
                    symbols: len,
                })
                .collect();
            let dense_planned =
                (plan.layouts != Layouts::Sparse).then(|| code(dense_sources, &plan.dense));
            let sparse_planned = match (&plan.sparse, plan.layouts) {
                (Some(kinds), Layouts::Sparse | Layouts::Both) => {
                    let mut sources = vec![PlaneSource {
                        source: SRC_MASK,
                        plane: 0,
                        start: start / 8,
                        symbols: len.div_ceil(8),
                    }];
                    sources.extend((0..width as u32).map(|j| PlaneSource {
                        source: SRC_NONZERO,
                        plane: j,
                        start,
                        symbols: nonzero,
                    }));
                    Some(code(sources, kinds))
                }
                _ => None,
            };
            planned.push((dense_planned, sparse_planned));
            nonzeros.push(nonzero);
        }
        u32_of(region_end * 2, "coded lanes")?;

        // 4. Every coded lane.
        let words = self.zeroed_buffer(
            region_end.max(2) * 2,
            "lane words",
            wgpu::BufferUsages::empty(),
        )?;
        let lane_out = self.rans_lanes(
            data, &nz, &mask, &tables, &lane_jobs, &words, rotate, width, &mut down, &mut up,
        )?;

        // 5. The stream's layout, then its assembly.
        let mut head = Vec::with_capacity(planepack_rans::HEADER_BYTES + 4 * n_chunks);
        head.extend_from_slice(&planepack_rans::MAGIC);
        head.push(1);
        head.push(width as u8);
        head.push(rans.chunk_log2);
        head.push(u8::from(if width == 1 { rans.rotate } else { rotate }));
        head.extend_from_slice(&(raw_len as u64).to_le_bytes());
        let table_at = head.len();
        head.resize(table_at + 4 * n_chunks, 0);
        let mut pieces = vec![];
        let mut chunk_pieces = Vec::new();
        for (c, (dense, sparse)) in planned.iter().enumerate() {
            let len = chunk_len(c);
            let layout = |mode: Vec<u8>, planes: &Planned| -> Vec<Piece> {
                let mut v = vec![Piece::Literal(mode)];
                for (src, kind, coded) in planes {
                    v.extend(plane_pieces(
                        src,
                        kind,
                        coded.as_ref(),
                        &lane_out,
                        &lane_jobs,
                    ));
                }
                v
            };
            let dense = dense
                .as_ref()
                .map(|p| layout(vec![planepack_rans::CHUNK_DENSE], p));
            let sparse = sparse.as_ref().map(|p| {
                let mut head = vec![planepack_rans::CHUNK_SPARSE];
                head.extend_from_slice(&(nonzeros[c] as u32).to_le_bytes());
                layout(head, p)
            });
            let mut best = match (dense, sparse) {
                (Some(d), Some(s)) => {
                    if total(&s) < total(&d) {
                        s
                    } else {
                        d
                    }
                }
                (Some(d), None) => d,
                (None, Some(s)) => s,
                (None, None) => unreachable!("a chunk is coded in at least one layout"),
            };
            if !chunk_kept(total(&best), len * width) {
                best = vec![
                    Piece::Literal(vec![planepack_rans::CHUNK_RAW]),
                    Piece::From {
                        source: SRC_RAW,
                        plane: 0,
                        src: (c * chunk_elems * width) as u32,
                        len: len * width,
                    },
                ];
            }
            let t = total(&best);
            head[table_at + 4 * c..table_at + 4 * c + 4].copy_from_slice(&(t as u32).to_le_bytes());
            chunk_pieces.extend(best);
        }
        pieces.push(Piece::Literal(head));
        pieces.extend(chunk_pieces);
        pieces.push(Piece::From {
            source: SRC_RAW,
            plane: 0,
            src: body as u32,
            len: raw_len - body,
        });
        let stream = self.rans_assemble(
            data, &nz, &mask, &words, &pieces, rotate, width, &mut down, &mut up,
        )?;
        Ok(EncodedRans {
            stream,
            download_bytes: down,
            upload_bytes: up,
        })
    }

    /// Run `rans_count.wgsl` on `jobs`; `outputs` (nonzero elements, zero masks) for chunks.
    /// Returns the counts, [`hist_stride`] words per job.
    #[allow(clippy::too_many_arguments)]
    fn rans_counts(
        &self,
        data: &wgpu::Buffer,
        jobs: &[[u32; 4]],
        width: usize,
        outputs: Option<(&wgpu::Buffer, &wgpu::Buffer)>,
        cfg: &KernelConfig,
        down: &mut usize,
        up: &mut usize,
    ) -> Result<Vec<u32>> {
        let stride = hist_stride(width);
        if jobs.is_empty() {
            return Ok(vec![]);
        }
        let n_jobs = u32_of(jobs.len(), "chunk count")?;
        let jobs_buf = self.storage(bytemuck::cast_slice(jobs), "count jobs")?;
        *up += jobs.len() * 16;
        let hist = self.zeroed_buffer(
            jobs.len() * stride * 4,
            "histograms",
            wgpu::BufferUsages::COPY_SRC,
        )?;
        let spare;
        let (nz, mask) = match outputs {
            Some(o) => o,
            None => {
                spare = self.scratch(4)?;
                (&spare, &spare)
            }
        };
        let kernel = Kernel::RansCount {
            width: width as u32,
        };
        let pipeline = self.pipeline(kernel, cfg.path)?;
        let (gx, gy) = self.grid(n_jobs);
        let p = self.uniform(&RansCountParams {
            n_jobs,
            jobs_x: gx,
            write_out: outputs.is_some() as u32,
            hist_stride: stride as u32,
            _pad: [],
        });
        let status = self.status();
        // (Only the subgroup scan reports into `status`: the workgroup kernel has no such
        // binding.)
        let mut buffers = vec![data, &jobs_buf, &hist, nz, mask, &p];
        if cfg.path == crate::ScanPath::Subgroup {
            buffers.push(&status);
        }
        let bind = self.bind_all(&pipeline, &buffers);
        let size = hist.size();
        let staging = self.readback_buffer(size + 8);
        let mut enc = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        enc.copy_buffer_to_buffer(&status, 0, &staging, 0, 8);
        enc.copy_buffer_to_buffer(&hist, 0, &staging, 8, size);
        self.queue.submit([enc.finish()]);
        let back = self.map_read_all(&staging);
        let flags = u32::from_le_bytes(back[..4].try_into().expect("4 bytes"));
        if flags != 0 {
            return Err(GpuError::Corrupt {
                flags,
                what: crate::contract::describe_flags(flags),
                unit: "chunk",
                at: u32::from_le_bytes(back[4..8].try_into().expect("4 bytes")),
            });
        }
        *down += jobs.len() * stride * 4;
        Ok(bytemuck::cast_slice(&back[8..8 + jobs.len() * stride * 4]).to_vec())
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
        down: &mut usize,
        up: &mut usize,
    ) -> Result<Vec<[u32; 2]>> {
        if jobs.is_empty() {
            return Ok(vec![]);
        }
        let n_jobs = u32_of(jobs.len(), "lane count")?;
        let tables_buf = self.storage(bytemuck::cast_slice(tables), "frequency tables")?;
        let jobs_buf = self.storage(bytemuck::cast_slice(jobs), "lane jobs")?;
        *up += tables.len() * 4 + jobs.len() * 32;
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
        let back = self.dispatch_and_read(
            &pipeline,
            &[data, nz, mask, &tables_buf, &jobs_buf, words, &out, &p],
            (gx, gy, 1),
            &out,
        );
        *down += jobs.len() * 8;
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
        down: &mut usize,
        up: &mut usize,
    ) -> Result<Vec<u8>> {
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
        let n_words = u32_of(total.div_ceil(4), "stream")?;
        let segs_buf = self.storage(bytemuck::cast_slice(&segs), "segments")?;
        let lit_buf = self.storage(&lit, "literal bytes")?;
        *up += segs.len() * 16 + lit.len();
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
            ..Default::default()
        });
        let grid = if n_words > 0 { (gx, gy, 1) } else { (0, 0, 0) };
        let mut v = self.dispatch_and_read(
            &pipeline,
            &[data, nz, mask, words, &segs_buf, &lit_buf, &out, &p],
            grid,
            &out,
        );
        v.truncate(total);
        *down += total;
        Ok(v)
    }
}

/// The settings this encoder writes (see [`GPU_RANS`]) and the element widths it takes.
fn check_settings(rans: &Rans, elem: ElemType) -> Result<()> {
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
    let _ = elem;
    Ok(())
}

fn clone_plan(p: &PlanePlan) -> PlanePlan {
    match p {
        PlanePlan::Const(v) => PlanePlan::Const(*v),
        PlanePlan::Raw => PlanePlan::Raw,
        PlanePlan::Rans(t) => PlanePlan::Rans(t.clone()),
    }
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
            let coded_len = 1 + c.table.written_len() + lane_header(c.lanes) + 2 * words;
            if !coded_plane_kept(coded_len, src.symbols) {
                return raw();
            }
            let mut lit = vec![planepack_rans::PLANE_RANS];
            c.table.write(&mut lit);
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
