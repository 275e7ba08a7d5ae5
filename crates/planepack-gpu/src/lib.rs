//! GPU decoders for planepack's formats, in WGSL through wgpu: one code base for Vulkan,
//! Metal and DX12 (NVIDIA, AMD, Intel and Apple GPUs), and for Mesa's lavapipe on CPUs.
//!
//! The CPU decoders (`planepack-bitplane`, `planepack-ibp`, `planepack-rans`) are the
//! reference: every GPU decode is tested bit-identical to them, on every dataset, on both
//! scan paths.
//!
//! * [`Gpu::new`] picks a backend and adapter (`GpuOptions`, or the environment variables
//!   `PLANEPACK_GPU_BACKEND`, `PLANEPACK_GPU_ADAPTER`, `PLANEPACK_GPU_NO_SUBGROUPS`), requests
//!   `Features::SUBGROUP` when the adapter has it, and says what it chose ([`Gpu::describe`]).
//! * [`Gpu::decode_bitplane`], [`Gpu::decode_ibp`], [`Gpu::decode_rans`] and
//!   [`Gpu::gather_ibp`] mirror the CPU API: a whole compressed tensor in, its bytes out; or a
//!   list of IBP rows.
//! * The host does only what is cheap and sequential: it checks stream headers and locates
//!   chunks (2 bytes per 4 KB; 4 per 64 KiB for rANS, plus its row map) or rows (each row's
//!   participation bitmap); everything else is in the shaders ([`shaders`]).
//! * Bad input never hangs the GPU or writes outside the output: shaders bound every read and
//!   loop, and report broken rules in a status buffer that becomes [`GpuError::Corrupt`].
//! * A subgroup kernel that meets subgroups it cannot number reports it, and the decode is
//!   rerun on the workgroup-memory kernel; [`Gpu::set_path`] forces either path (tests run both).

pub mod shaders;
mod timing;

pub use shaders::{Kernel, ScanPath};
pub use timing::Timing;

use std::collections::HashMap;
use std::sync::Mutex;
use wgpu::util::DeviceExt;

/// Invocations that decode one IBP row together (at most; short rows take fewer), on a CPU
/// device (lavapipe) and on a GPU. Each invocation takes a run of whole 32-chunk groups of the
/// row, and a workgroup of 64 takes 64 / lanes rows, so one prefix sum (and its barriers) and
/// one table of the columns' popcounts serve many rows. On lavapipe 1 and 2 were fastest and 4
/// and 8 slower (`examples/gpu_probe.rs`, large real tensors); a GPU wants more invocations per
/// row to keep its cores busy on a few thousand rows. The GPU figure is unmeasured: set
/// `PLANEPACK_GPU_IBP_LANES` (a power of two up to 64) to tune it on a real device.
pub const IBP_LANES_CPU: u32 = 2;
pub const IBP_LANES_GPU: u32 = 16;

/// Invocations per IBP row must be a power of two dividing the kernel's workgroup of 64.
fn checked_lanes(lanes: u32) -> Result<u32> {
    if lanes.is_power_of_two() && lanes <= 64 {
        Ok(lanes)
    } else {
        Err(GpuError::Unsupported(format!(
            "{lanes} invocations per IBP row (a power of two up to 64)"
        )))
    }
}

/// The error bit a subgroup kernel sets when it cannot number its subgroups (shaders/common.wgsl).
pub const ERR_LAYOUT: u32 = 256;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter found ({0})")]
    NoAdapter(String),
    #[error("GPU device: {0}")]
    Device(String),
    /// The host-side checks of the stream failed.
    #[error("invalid stream: {0}")]
    Stream(#[from] planepack_core::Error),
    /// A shader found a broken rule: `flags` are its error bits, `at` the first failing block
    /// (bit-plane) or output row (IBP).
    #[error("corrupt stream: the GPU decoder reported {what} at {unit} {at}")]
    Corrupt {
        flags: u32,
        what: String,
        unit: &'static str,
        at: u32,
    },
    #[error("unsupported on the GPU: {0}")]
    Unsupported(String),
}

pub type Result<T> = std::result::Result<T, GpuError>;

fn describe_flags(f: u32) -> String {
    let names = [
        (1, "a read past the stream"),
        (2, "a read past a chunk"),
        (4, "a bad block tag or length"),
        (8, "lengths that do not add up"),
        (16, "a bad symbol"),
        (32, "a bad value or nonzero padding"),
        (64, "a row index out of range"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        format!("error bits {f:#x}")
    } else {
        v.join(", ")
    }
}

/// How to choose the adapter.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Backends to consider (default: Vulkan, Metal, DX12).
    pub backends: Option<wgpu::Backends>,
    /// Only adapters whose name contains this (case-insensitive).
    pub adapter: Option<String>,
    /// Do not request subgroups even when the adapter has them.
    pub no_subgroups: bool,
    /// Invocations per IBP row (a power of two, 1 to 64); default [`IBP_LANES_CPU`] or
    /// [`IBP_LANES_GPU`] by device type.
    pub ibp_lanes: Option<u32>,
}

impl GpuOptions {
    /// From `PLANEPACK_GPU_BACKEND` (vulkan, metal, dx12, gl, all), `PLANEPACK_GPU_ADAPTER`,
    /// `PLANEPACK_GPU_NO_SUBGROUPS=1` and `PLANEPACK_GPU_IBP_LANES`.
    pub fn from_env() -> GpuOptions {
        let backends = std::env::var("PLANEPACK_GPU_BACKEND").ok().map(|b| {
            match b.to_ascii_lowercase().as_str() {
                "vulkan" => wgpu::Backends::VULKAN,
                "metal" => wgpu::Backends::METAL,
                "dx12" => wgpu::Backends::DX12,
                "gl" => wgpu::Backends::GL,
                _ => wgpu::Backends::all(),
            }
        });
        GpuOptions {
            backends,
            adapter: std::env::var("PLANEPACK_GPU_ADAPTER").ok(),
            no_subgroups: std::env::var("PLANEPACK_GPU_NO_SUBGROUPS").is_ok_and(|v| v == "1"),
            ibp_lanes: std::env::var("PLANEPACK_GPU_IBP_LANES")
                .ok()
                .and_then(|v| v.parse().ok()),
        }
    }
}

/// A device with planepack's kernels.
pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    subgroups: bool,
    timestamps: bool,
    path: Mutex<ScanPath>,
    pipelines: Mutex<HashMap<(Kernel, ScanPath), wgpu::ComputePipeline>>,
    max_binding: u64,
    max_groups: u32,
    ibp_lanes: std::sync::atomic::AtomicU32,
}

/// A stream as the kernels read it: 32 spare zero bytes after it (the readers' windows load
/// ahead), then whole words.
fn stream_padded(bytes: &[u8]) -> Vec<u8> {
    let mut padded = Vec::with_capacity(bytes.len() + 36);
    padded.extend_from_slice(bytes);
    padded.extend_from_slice(&[0u8; 32]);
    words(&padded)
}

/// Words of `bytes`, zero-padded to a multiple of 4 and at least one word.
fn words(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(bytes.len().div_ceil(4).max(1) * 4, 0);
    v
}

fn u32_of(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n).map_err(|_| GpuError::Unsupported(format!("{what} over 4 GiB")))
}

/// A kernel launch with its buffers, ready to run (again and again, for timing).
pub struct Prepared {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: (u32, u32),
    out: wgpu::Buffer,
    status: wgpu::Buffer,
    out_len: usize,
    /// The buffer the launch reads its stream (or, for the copy kernel, its source) from:
    /// where a transfer timing writes fresh bytes before each launch.
    input: wgpu::Buffer,
    /// Bytes uploaded for this launch (stream and metadata).
    pub upload_bytes: usize,
    kernel: Kernel,
    /// A second launch recorded after the first (the rANS row map's placement pass).
    then: Option<Pass>,
}

/// One more launch of a [`Prepared`] decode.
struct Pass {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    groups: (u32, u32),
}

impl Gpu {
    pub fn new(opts: &GpuOptions) -> Result<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = desc_backends(opts);
        let instance = wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(desc_backends(opts)));
        let wanted = opts.adapter.as_ref().map(|s| s.to_ascii_lowercase());
        let mut candidates: Vec<wgpu::Adapter> = adapters
            .into_iter()
            .filter(|a| {
                wanted
                    .as_ref()
                    .is_none_or(|w| a.get_info().name.to_ascii_lowercase().contains(w))
            })
            .collect();
        // Discrete GPUs first, then integrated, then the rest (lavapipe is a CPU).
        candidates.sort_by_key(|a| match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        });
        let adapter = candidates.into_iter().next().ok_or_else(|| {
            GpuError::NoAdapter(format!(
                "backends {:?}{}",
                desc_backends(opts),
                wanted
                    .map(|w| format!(", name containing {w:?}"))
                    .unwrap_or_default()
            ))
        })?;
        let features = adapter.features();
        let subgroups = !opts.no_subgroups && features.contains(wgpu::Features::SUBGROUP);
        let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let mut required = wgpu::Features::empty();
        if subgroups {
            required |= wgpu::Features::SUBGROUP;
        }
        if timestamps {
            required |= wgpu::Features::TIMESTAMP_QUERY;
        }
        let limits = adapter.limits();
        let ibp_lanes = match opts.ibp_lanes {
            Some(l) => checked_lanes(l)?,
            None if adapter.get_info().device_type == wgpu::DeviceType::Cpu => IBP_LANES_CPU,
            None => IBP_LANES_GPU,
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("planepack"),
            required_features: required,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device(e.to_string()))?;
        Ok(Gpu {
            device,
            queue,
            info: adapter.get_info(),
            subgroups,
            timestamps,
            path: Mutex::new(if subgroups {
                ScanPath::Subgroup
            } else {
                ScanPath::Workgroup
            }),
            pipelines: Mutex::new(HashMap::new()),
            max_binding: limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size),
            max_groups: limits.max_compute_workgroups_per_dimension,
            ibp_lanes: ibp_lanes.into(),
        })
    }

    /// Adapter, backend, subgroup sizes and the scan path in use.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?}, driver {} {}; subgroups {}..{}{}; {} path{})",
            self.info.name,
            self.info.backend,
            self.info.device_type,
            self.info.driver,
            self.info.driver_info,
            self.info.subgroup_min_size,
            self.info.subgroup_max_size,
            if self.subgroups { "" } else { " not used" },
            match self.path() {
                ScanPath::Subgroup => "subgroup",
                ScanPath::Workgroup => "workgroup-memory",
            },
            if self.timestamps {
                ", timestamp queries"
            } else {
                ", wall-clock timing"
            }
        )
    }

    pub fn adapter_name(&self) -> &str {
        &self.info.name
    }

    pub fn has_subgroups(&self) -> bool {
        self.subgroups
    }

    /// Whether the adapter is a CPU emulating a GPU (lavapipe): its "upload" is a copy within
    /// host memory, and figures from it must say so.
    pub fn is_emulated(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    pub fn path(&self) -> ScanPath {
        *self.path.lock().unwrap()
    }

    /// Force a scan path (the subgroup path only where the device has subgroups).
    pub fn set_path(&self, p: ScanPath) -> Result<()> {
        if p == ScanPath::Subgroup && !self.subgroups {
            return Err(GpuError::Unsupported(
                "this device was opened without subgroups".into(),
            ));
        }
        *self.path.lock().unwrap() = p;
        Ok(())
    }

    /// Invocations per IBP row in launches prepared from now on.
    pub fn ibp_lanes(&self) -> u32 {
        self.ibp_lanes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Set the invocations per IBP row (a power of two, 1 to 64): for tuning and tests.
    pub fn set_ibp_lanes(&self, lanes: u32) -> Result<()> {
        self.ibp_lanes
            .store(checked_lanes(lanes)?, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn pipeline(&self, kernel: Kernel, path: ScanPath) -> wgpu::ComputePipeline {
        let mut map = self.pipelines.lock().unwrap();
        map.entry((kernel, path))
            .or_insert_with(|| {
                let src = shaders::source(kernel, path);
                let module = self
                    .device
                    .create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some("planepack kernel"),
                        source: wgpu::ShaderSource::Wgsl(src.into()),
                    });
                self.device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some("planepack kernel"),
                        layout: None,
                        module: &module,
                        entry_point: Some("main"),
                        compilation_options: Default::default(),
                        cache: None,
                    })
            })
            .clone()
    }

    /// The compressed stream, with eight spare zero words: unaligned 32-bit loads of its last
    /// bytes read one word further, and the IBP kernel's field reader loads up to five words
    /// ahead of its position; the kernels' own length checks decide what is valid.
    fn stream(&self, bytes: &[u8]) -> Result<wgpu::Buffer> {
        self.storage(&stream_padded(bytes), "stream")
    }

    fn storage(&self, bytes: &[u8], what: &str) -> Result<wgpu::Buffer> {
        let data = words(bytes);
        if data.len() as u64 > self.max_binding {
            return Err(GpuError::Unsupported(format!(
                "{what} of {} bytes exceeds this device's storage binding limit of {}",
                data.len(),
                self.max_binding
            )));
        }
        Ok(self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(what),
                contents: &data,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            }))
    }

    fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytemuck::cast_slice(words),
                usage: wgpu::BufferUsages::UNIFORM,
            })
    }

    fn output(&self, len: usize) -> Result<wgpu::Buffer> {
        let size = len.div_ceil(4).max(1) as u64 * 4;
        if size > self.max_binding {
            return Err(GpuError::Unsupported(format!(
                "output of {len} bytes exceeds this device's storage binding limit"
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("output"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    /// Workgroup grid for `n` groups: (x, y) with x * y >= n.
    fn grid(&self, n: u32) -> (u32, u32) {
        let x = n.clamp(1, self.max_groups);
        (x, n.div_ceil(x).max(1))
    }

    fn bind(&self, pipeline: &wgpu::ComputePipeline, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    fn status(&self) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("status"),
                contents: bytemuck::cast_slice(&[0u32, u32::MAX]),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// Prepare a bit-plane decode: check the header, locate the chunks, upload.
    pub fn prepare_bitplane(&self, stream: &[u8], path: ScanPath) -> Result<Prepared> {
        let header = planepack_bitplane::parse_header(stream)?;
        let spans = planepack_bitplane::chunk_spans(stream, &header)?;
        let n_chunks = u32_of(spans.len(), "chunk count")?;
        let n_blocks = u32_of(header.raw_len.div_ceil(128), "block count")?;
        let raw_len = u32_of(header.raw_len, "tensor")?;
        let offsets: Vec<u32> = spans
            .iter()
            .map(|&(o, _)| u32_of(o, "stream"))
            .collect::<Result<_>>()?;
        let pipeline = self.pipeline(
            Kernel::BitPlane {
                width: header.width,
            },
            path,
        );
        let (gx, gy) = self.grid(n_chunks);
        let s = self.stream(stream)?;
        let c = self.storage(bytemuck::cast_slice(&offsets), "chunk offsets")?;
        let out_len = n_blocks as usize * 128;
        let out = self.output(out_len)?;
        let p = self.uniform(&[n_chunks, n_blocks, header.width, raw_len, gx, 0, 0, 0]);
        let status = self.status();
        let bind_group = self.bind(&pipeline, &[&s, &c, &out, &p, &status]);
        Ok(Prepared {
            pipeline,
            bind_group,
            groups: if n_chunks == 0 { (0, 0) } else { (gx, gy) },
            out,
            status,
            out_len: header.raw_len,
            input: s,
            upload_bytes: stream.len() + offsets.len() * 4,
            kernel: Kernel::BitPlane {
                width: header.width,
            },
            then: None,
        })
    }

    /// Prepare an IBP decode of `rows` (None: the whole tensor, tail included) of an `Ibp`
    /// stream.
    pub fn prepare_ibp(
        &self,
        stream: &[u8],
        rows: Option<&[usize]>,
        path: ScanPath,
    ) -> Result<Prepared> {
        let l = planepack_ibp::stream_layout(stream)?;
        let spans: Vec<(usize, usize)> = l.row_offsets.windows(2).map(|w| (w[0], w[1])).collect();
        let tail = match rows {
            None => Some((
                l.tail_offset,
                l.raw_len - l.rows * l.columns * (l.width / 8) as usize,
            )),
            Some(_) => None,
        };
        let group = IbpGroup {
            bytes: stream,
            width: l.width,
            columns: l.columns,
            rows: l.rows,
            mask_offset: l.mask_offset,
            bitmask_offset: l.bitmask_offset,
            spans: &spans,
            tail,
        };
        self.prepare_group(&group, rows, path)
    }

    /// Prepare a gather of `rows` (None: all) from a compressed group in either layout, with
    /// the mask it was compressed with.
    pub fn prepare_rows(
        &self,
        group: &planepack_ibp::CompressedRows,
        mask: &planepack_ibp::Mask,
        rows: Option<&[usize]>,
        path: ScanPath,
    ) -> Result<Prepared> {
        group.validate()?;
        let b = (mask.width / 8) as usize;
        if group.row_bytes != mask.mask.len() * b {
            return Err(
                planepack_core::Error::corrupt("row length disagrees with the mask").into(),
            );
        }
        if mask.mask.iter().zip(&mask.bitval).any(|(m, v)| v & !m != 0) {
            return Err(planepack_core::Error::corrupt("bitval has bits outside the mask").into());
        }
        // One upload: mask, bitval, row bitmask, rows.
        let mut bytes = Vec::with_capacity(
            2 * group.row_bytes + 4 * group.row_bitmask.len() + group.data.len(),
        );
        for w in mask.mask.iter().chain(&mask.bitval) {
            bytes.extend_from_slice(&w.to_le_bytes()[..b]);
        }
        let bitmask_offset = bytes.len();
        for w in &group.row_bitmask {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        let base = bytes.len();
        bytes.extend_from_slice(&group.data);
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
            let len =
                planepack_ibp::row::stored_len(&group.data[start..], group.is_packed(i), &cols)
                    .map_err(|e| planepack_core::Error::corrupt(format!("row {i}: {e}")))?;
            spans.push((base + start, base + start + len));
        }
        let g = IbpGroup {
            bytes: &bytes,
            width: mask.width,
            columns: mask.mask.len(),
            rows: group.rows,
            mask_offset: 0,
            bitmask_offset,
            spans: &spans,
            tail: None,
        };
        self.prepare_group(&g, rows, path)
    }

    fn prepare_group(
        &self,
        l: &IbpGroup,
        rows: Option<&[usize]>,
        path: ScanPath,
    ) -> Result<Prepared> {
        let b = (l.width / 8) as usize;
        let row_bytes = l.columns * b;
        if !row_bytes.is_multiple_of(4) {
            return Err(GpuError::Unsupported(format!(
                "rows of {row_bytes} bytes (the GPU decoder writes whole 32-bit words)"
            )));
        }
        let ids: Vec<u32> = match rows {
            None => (0..l.rows)
                .map(|r| u32_of(r, "row index"))
                .collect::<Result<_>>()?,
            Some(rs) => rs
                .iter()
                .map(|&r| {
                    if r < l.rows {
                        u32_of(r, "row index")
                    } else {
                        Err(GpuError::Stream(planepack_core::Error::Unsupported(
                            format!("row {r} of a tensor with {} rows", l.rows),
                        )))
                    }
                })
                .collect::<Result<_>>()?,
        };
        // The kernel reads the column arrays and rows with aligned loads (shaders/ibp.wgsl):
        // every layout places them so; a group that does not is refused, not misread.
        let align = if l.width == 16 { 2 } else { 4 };
        if !l.mask_offset.is_multiple_of(4) || l.spans.iter().any(|&(s, _)| s % align != 0) {
            return Err(GpuError::Unsupported(format!(
                "IBP rows or masks not aligned to {align} bytes"
            )));
        }
        let (tail_off, tail_len) = l.tail.unwrap_or((0, 0));
        let mut spans = Vec::with_capacity(2 * l.spans.len());
        for &(s, e) in l.spans {
            spans.push(u32_of(s, "stream")?);
            spans.push(u32_of(e, "stream")?);
        }
        let n_out = u32_of(ids.len(), "row count")?;
        // Invocations per row: up to IBP_LANES, fewer for short rows (each takes whole
        // 32-chunk groups); the kernel's workgroup (64 invocations) takes 64 / lanes rows.
        let chunk_groups = (l.columns.div_ceil(32)).max(1) as u32;
        let lanes = chunk_groups.next_power_of_two().min(self.ibp_lanes());
        let rows_per_group = 64 / lanes;
        let groups = n_out.div_ceil(rows_per_group) + u32::from(tail_len > 0);
        let pipeline = self.pipeline(Kernel::Ibp { width: l.width }, path);
        let (gx, gy) = self.grid(groups);
        let s = self.stream(l.bytes)?;
        let o = self.storage(bytemuck::cast_slice(&spans), "row spans")?;
        let r = self.storage(bytemuck::cast_slice(&ids), "row ids")?;
        let out_len = ids.len() * row_bytes + tail_len;
        let out = self.output(out_len)?;
        let p = self.uniform(&[
            u32_of(l.columns, "columns")?,
            l.width,
            n_out,
            u32_of(l.rows, "rows")?,
            u32_of(l.mask_offset, "stream")?,
            u32_of(l.bitmask_offset, "stream")?,
            u32_of(tail_off, "stream")?,
            u32_of(tail_len, "tail")?,
            gx,
            lanes,
            0,
            0,
        ]);
        let status = self.status();
        let bind_group = self.bind(&pipeline, &[&s, &o, &r, &out, &p, &status]);
        Ok(Prepared {
            pipeline,
            bind_group,
            groups: if groups == 0 { (0, 0) } else { (gx, gy) },
            out,
            status,
            out_len,
            input: s,
            upload_bytes: l.bytes.len() + spans.len() * 4 + ids.len() * 4,
            kernel: Kernel::Ibp { width: l.width },
            then: None,
        })
    }

    /// Prepare a rANS decode (`planepack-rans`'s format): check the header and row map,
    /// locate the chunks, upload; a second pass places rows when the stream has a row map.
    pub fn prepare_rans(&self, stream: &[u8], path: ScanPath) -> Result<Prepared> {
        let h = planepack_rans::parse_header(stream)?;
        let spans = planepack_rans::chunk_spans(stream, &h)?;
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
        // Scratch per chunk: W planes of K bytes, then the mask plane.
        let mask_at = width * k;
        let scratch_words = (mask_at + k.div_ceil(8).div_ceil(4) * 4) / 4;
        let scratch_len = n_chunks as usize * scratch_words as usize * 4;
        let tail_len = h.tail_len();
        let mut tail = [0u8; 4];
        tail[..tail_len].copy_from_slice(&stream[stream.len() - tail_len..]);
        let body_len = h.elements() * h.width;
        let pipeline = self.pipeline(Kernel::Rans { width }, path);
        let (gx, gy) = self.grid(n_chunks.max(1));
        let s = self.stream(stream)?;
        let c = self.storage(bytemuck::cast_slice(&offsets), "chunk offsets")?;
        let scratch = self.scratch(scratch_len)?;
        let p = self.uniform(&[
            n_chunks,
            gx,
            k,
            elems,
            scratch_words,
            mask_at,
            // Bytes are never rotated (docs/format-rans.md, conventions).
            u32::from(h.rotate && h.width > 1),
            u32::from_le_bytes(tail),
            tail_len as u32,
            0,
            0,
            0,
        ]);
        let status = self.status();
        let mut upload_bytes = stream.len() + offsets.len() * 4;
        let (out, then) = match &h.rows {
            None => {
                let out = self.output(h.raw_len)?;
                let bind = self.bind(&pipeline, &[&s, &c, &out, &p, &status, &scratch]);
                ((out, bind), None)
            }
            Some(m) => {
                let body = self.output(body_len)?;
                let bind = self.bind(&pipeline, &[&s, &c, &body, &p, &status, &scratch]);
                let row_src = row_sources(m, h.raw_len);
                upload_bytes += row_src.len() * 4;
                let rows = self.pipeline(Kernel::RansRows, ScanPath::Workgroup);
                let n_words = u32_of(h.raw_len.div_ceil(4), "tensor")?;
                let (rx, ry) = self.grid(n_words.div_ceil(256));
                let src = self.storage(bytemuck::cast_slice(&row_src), "row sources")?;
                let out = self.output(h.raw_len)?;
                let rp =
                    self.uniform(&[h.raw_len as u32, u32_of(m.row_bytes, "row")?, n_words, rx]);
                let bind_rows = self.bind(&rows, &[&body, &src, &out, &rp]);
                (
                    (out, bind),
                    Some(Pass {
                        pipeline: rows,
                        bind_group: bind_rows,
                        groups: if n_words == 0 { (0, 0) } else { (rx, ry) },
                    }),
                )
            }
        };
        let (out, bind_group) = out;
        Ok(Prepared {
            pipeline,
            bind_group,
            groups: (gx, gy),
            out,
            status,
            out_len: h.raw_len,
            input: s,
            upload_bytes,
            kernel: Kernel::Rans { width },
            then,
        })
    }

    /// Device-only working memory (not uploaded, not read back).
    fn scratch(&self, len: usize) -> Result<wgpu::Buffer> {
        let size = len.div_ceil(4).max(1) as u64 * 4;
        if size > self.max_binding {
            return Err(GpuError::Unsupported(format!(
                "decoder scratch of {len} bytes exceeds this device's storage binding limit"
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("scratch"),
            size,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        }))
    }

    /// Prepare a copy of `len` bytes (the speed reference).
    pub fn prepare_copy(&self, data: &[u8]) -> Result<Prepared> {
        let n_words = u32_of(data.len().div_ceil(4), "copy")?;
        let pipeline = self.pipeline(Kernel::Copy, ScanPath::Workgroup);
        let (gx, gy) = self.grid(n_words.div_ceil(256));
        let src = self.storage(data, "copy source")?;
        let out = self.output(data.len())?;
        let p = self.uniform(&[n_words, gx, 0, 0]);
        let bind_group = self.bind(&pipeline, &[&src, &out, &p]);
        Ok(Prepared {
            pipeline,
            bind_group,
            groups: if n_words == 0 { (0, 0) } else { (gx, gy) },
            out,
            status: self.status(),
            out_len: data.len(),
            input: src,
            upload_bytes: data.len(),
            kernel: Kernel::Copy,
            then: None,
        })
    }

    /// Record one launch of `p` into `enc`.
    fn record(
        &self,
        p: &Prepared,
        enc: &mut wgpu::CommandEncoder,
        timestamps: Option<(&wgpu::QuerySet, u32)>,
    ) {
        let tw = timestamps.map(|(q, i)| wgpu::ComputePassTimestampWrites {
            query_set: q,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        });
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: tw,
        });
        pass.set_pipeline(&p.pipeline);
        pass.set_bind_group(0, &p.bind_group, &[]);
        if p.groups.0 > 0 {
            pass.dispatch_workgroups(p.groups.0, p.groups.1, 1);
        }
        // wgpu orders the dispatches of a pass that share a buffer (each is its own usage
        // scope), so the second reads what the first wrote.
        if let Some(t) = &p.then {
            pass.set_pipeline(&t.pipeline);
            pass.set_bind_group(0, &t.bind_group, &[]);
            if t.groups.0 > 0 {
                pass.dispatch_workgroups(t.groups.0, t.groups.1, 1);
            }
        }
    }

    fn wait(&self) {
        let _ = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        });
    }

    fn read(&self, buf: &wgpu::Buffer, len: usize) -> Vec<u8> {
        let size = buf.size();
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(buf, 0, &staging, 0, size);
        self.queue.submit([enc.finish()]);
        staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        self.wait();
        let v = staging.slice(..).get_mapped_range().unwrap()[..len].to_vec();
        staging.unmap();
        v
    }

    /// Run a prepared launch once and return its output, or the error its shader reported.
    pub fn run(&self, p: &Prepared) -> Result<Vec<u8>> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        self.record(p, &mut enc, None);
        self.queue.submit([enc.finish()]);
        let status = self.read(&p.status, 8);
        let flags = u32::from_le_bytes(status[0..4].try_into().unwrap());
        let at = u32::from_le_bytes(status[4..8].try_into().unwrap());
        if flags != 0 {
            return Err(GpuError::Corrupt {
                flags,
                what: if flags & ERR_LAYOUT != 0 {
                    "subgroups it cannot number".into()
                } else {
                    describe_flags(flags)
                },
                unit: match p.kernel {
                    Kernel::Ibp { .. } => "output row",
                    Kernel::Rans { .. } => "chunk",
                    _ => "block",
                },
                at,
            });
        }
        Ok(self.read(&p.out, p.out_len))
    }

    /// Decode, falling back to the workgroup path if the subgroup kernel cannot run here.
    fn decode_with(&self, prepare: impl Fn(ScanPath) -> Result<Prepared>) -> Result<Vec<u8>> {
        let path = self.path();
        match self.run(&prepare(path)?) {
            Err(GpuError::Corrupt { flags, .. })
                if flags & ERR_LAYOUT != 0 && path == ScanPath::Subgroup =>
            {
                *self.path.lock().unwrap() = ScanPath::Workgroup;
                self.run(&prepare(ScanPath::Workgroup)?)
            }
            r => r,
        }
    }

    /// Decode a whole bit-plane stream (`planepack-bitplane`'s format).
    pub fn decode_bitplane(&self, stream: &[u8]) -> Result<Vec<u8>> {
        self.decode_with(|p| self.prepare_bitplane(stream, p))
    }

    /// Decode a whole `Ibp` stream, tail bytes included.
    pub fn decode_ibp(&self, stream: &[u8]) -> Result<Vec<u8>> {
        self.decode_with(|p| self.prepare_ibp(stream, None, p))
    }

    /// Decode the listed rows of an `Ibp` stream (any order, repeats allowed), back to back.
    pub fn gather_ibp(&self, stream: &[u8], rows: &[usize]) -> Result<Vec<u8>> {
        self.decode_with(|p| self.prepare_ibp(stream, Some(rows), p))
    }

    /// Decode the listed rows (None: all) of a compressed group in either layout.
    pub fn gather_rows(
        &self,
        group: &planepack_ibp::CompressedRows,
        mask: &planepack_ibp::Mask,
        rows: Option<&[usize]>,
    ) -> Result<Vec<u8>> {
        self.decode_with(|p| self.prepare_rows(group, mask, rows, p))
    }

    /// Decode a whole rANS stream (`planepack-rans`'s format).
    pub fn decode_rans(&self, stream: &[u8]) -> Result<Vec<u8>> {
        self.decode_with(|p| self.prepare_rans(stream, p))
    }

    /// Copy bytes through the copy kernel (tests that it is a fair reference).
    pub fn copy(&self, data: &[u8]) -> Result<Vec<u8>> {
        self.run(&self.prepare_copy(data)?)
    }
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

/// What the IBP kernel needs to know of a group of rows, whatever it came from.
struct IbpGroup<'a> {
    bytes: &'a [u8],
    width: u32,
    columns: usize,
    rows: usize,
    /// Byte offset of the mask words; the bitval words follow.
    mask_offset: usize,
    bitmask_offset: usize,
    /// Stored bytes of every row.
    spans: &'a [(usize, usize)],
    /// Tail bytes (offset, length) copied after the rows.
    tail: Option<(usize, usize)>,
}

fn desc_backends(opts: &GpuOptions) -> wgpu::Backends {
    opts.backends
        .unwrap_or(wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12)
}
