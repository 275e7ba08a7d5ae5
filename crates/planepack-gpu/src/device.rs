//! The device: adapter choice, the pipeline cache, and the buffers every launch is built from
//! (stream uploads bounded by the device's binding limit, uniforms, outputs, status words).

use crate::contract::KernelParams;
use crate::shaders::{self, Kernel, ScanPath};
use crate::{checked_lanes, stream_padded, u32_of, words, GpuError, KernelConfig, Result};
use crate::{IBP_LANES_CPU, IBP_LANES_GPU};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use wgpu::util::DeviceExt;

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
    /// Plane-parallel rANS decode ([`crate::KernelConfig::rans_planes`]); default by device
    /// type.
    pub rans_planes: Option<bool>,
}

impl GpuOptions {
    /// From `PLANEPACK_GPU_BACKEND` (vulkan, metal, dx12, gl, all), `PLANEPACK_GPU_ADAPTER`,
    /// `PLANEPACK_GPU_NO_SUBGROUPS=1`, `PLANEPACK_GPU_IBP_LANES` and
    /// `PLANEPACK_GPU_RANS_PLANES` (0 or 1).
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
            rans_planes: std::env::var("PLANEPACK_GPU_RANS_PLANES")
                .ok()
                .map(|v| v == "1"),
        }
    }
}

/// A device with planepack's kernels.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    subgroups: bool,
    pub(crate) timestamps: bool,
    /// Set once a subgroup kernel reported subgroups it cannot number: the default
    /// configuration then uses the workgroup-memory path (a fact about the device, learnt once).
    subgroups_fail: AtomicBool,
    pipelines: Mutex<HashMap<(Kernel, ScanPath), wgpu::ComputePipeline>>,
    pub(crate) max_binding: u64,
    pub(crate) max_groups: u32,
    ibp_lanes: u32,
    rans_planes: bool,
    /// Storage bindings at an offset must start at a multiple of this.
    offset_align: u32,
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
        let rans_planes = opts
            .rans_planes
            .unwrap_or(adapter.get_info().device_type != wgpu::DeviceType::Cpu);
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
            subgroups_fail: AtomicBool::new(false),
            pipelines: Mutex::new(HashMap::new()),
            max_binding: limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size),
            max_groups: limits.max_compute_workgroups_per_dimension,
            ibp_lanes,
            rans_planes,
            offset_align: limits.min_storage_buffer_offset_alignment,
        })
    }

    /// Adapter, backend, subgroup sizes and the scan path in use.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?}, driver {} {}; subgroups {}..{}{}; {} path; rANS {}{})",
            self.info.name,
            self.info.backend,
            self.info.device_type,
            self.info.driver,
            self.info.driver_info,
            self.info.subgroup_min_size,
            self.info.subgroup_max_size,
            if self.subgroups { "" } else { " not used" },
            match self.config().path {
                ScanPath::Subgroup => "subgroup",
                ScanPath::Workgroup => "workgroup-memory",
            },
            if self.rans_planes {
                "plane-parallel"
            } else {
                "a workgroup per chunk"
            },
            if self.timestamps {
                ", timestamp queries"
            } else {
                ", wall-clock timing"
            }
        )
    }

    /// The adapter's backend, driver and subgroup sizes, as wgpu reports them.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
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

    /// The device's default launch configuration: the subgroup path where the device has
    /// subgroups (and they have not failed), and the IBP lanes chosen at [`Gpu::new`].
    pub fn config(&self) -> KernelConfig {
        KernelConfig {
            path: if self.subgroups && !self.subgroups_fail.load(Ordering::Relaxed) {
                ScanPath::Subgroup
            } else {
                ScanPath::Workgroup
            },
            ibp_lanes: self.ibp_lanes,
            rans_planes: self.rans_planes,
            model_slots: true,
            loop_budget: crate::contract::LOOP_ITERATIONS_MAX,
        }
    }

    /// Remember that this device's subgroup kernels cannot run (see [`crate::ERR_LAYOUT`]).
    pub(crate) fn note_subgroups_fail(&self) {
        self.subgroups_fail.store(true, Ordering::Relaxed);
    }

    /// The wgpu device and queue, for callers that own the buffers decodes write into.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Storage bindings at an offset (e.g. [`crate::Prepared::write_into`]) must start at a
    /// multiple of this many bytes.
    pub fn offset_alignment(&self) -> u64 {
        self.offset_align as u64
    }

    /// The pipeline of `kernel` on `path`; the subgroup path only where the device has them.
    pub(crate) fn pipeline(&self, kernel: Kernel, path: ScanPath) -> Result<wgpu::ComputePipeline> {
        if path == ScanPath::Subgroup && !self.subgroups {
            return Err(GpuError::Unsupported(
                "the subgroup path on a device opened without subgroups".into(),
            ));
        }
        // A panic while another thread held the lock leaves the map as it was (entries are
        // inserted whole), so a poisoned lock is still usable.
        let mut map = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        Ok(map
            .entry((kernel, path))
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
            .clone())
    }

    /// The compressed stream, with eight spare zero words: unaligned 32-bit loads of its last
    /// bytes read one word further, and the IBP kernel's field reader loads up to five words
    /// ahead of its position; the kernels' own length checks decide what is valid.
    pub(crate) fn stream(&self, bytes: &[u8]) -> Result<wgpu::Buffer> {
        self.storage(&stream_padded(bytes), "stream")
    }

    pub(crate) fn storage(&self, bytes: &[u8], what: &str) -> Result<wgpu::Buffer> {
        self.buffer_init(bytes, what, wgpu::BufferUsages::empty())
    }

    /// A `STORAGE | COPY_DST | extra` buffer holding `bytes` (zero-padded to whole words),
    /// within the device's binding limit.
    pub(crate) fn buffer_init(
        &self,
        bytes: &[u8],
        what: &str,
        extra: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
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
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | extra,
            }))
    }

    pub(crate) fn uniform<P: KernelParams>(&self, params: &P) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytemuck::bytes_of(params),
                usage: wgpu::BufferUsages::UNIFORM,
            })
    }

    pub(crate) fn output(&self, len: usize) -> Result<wgpu::Buffer> {
        self.zeroed_buffer(len, "output", wgpu::BufferUsages::COPY_SRC)
    }

    /// A zeroed `STORAGE | usage` buffer of `bytes` rounded up to whole words (at least one),
    /// within the device's binding limit (wgpu zero-initializes new buffers).
    pub(crate) fn zeroed_buffer(
        &self,
        bytes: usize,
        what: &str,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        let size = bytes.div_ceil(4).max(1) as u64 * 4;
        if size > self.max_binding {
            return Err(GpuError::Unsupported(format!(
                "{what} of {bytes} bytes exceeds this device's storage binding limit"
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size,
            usage: wgpu::BufferUsages::STORAGE | usage,
            mapped_at_creation: false,
        }))
    }

    /// Workgroup grid for `n` groups: (x, y) with x * y >= n.
    pub(crate) fn grid(&self, n: u32) -> (u32, u32) {
        let x = n.clamp(1, self.max_groups);
        (x, n.div_ceil(x).max(1))
    }

    pub(crate) fn status(&self) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("status"),
                contents: bytemuck::cast_slice(&[0u32, u32::MAX]),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            })
    }

    /// Device-only working memory (not uploaded, not read back).
    pub(crate) fn scratch(&self, len: usize) -> Result<wgpu::Buffer> {
        self.zeroed_buffer(len, "decoder scratch", wgpu::BufferUsages::empty())
    }

    pub(crate) fn wait(&self) {
        let _ = self.device.poll(wgpu::PollType::Wait {
            submission_index: None,
            timeout: None,
        });
    }

    /// `len` bytes at `offset` (a multiple of 4) of `buf`, which has `COPY_SRC` usage and
    /// holds at least `offset + len` rounded up to a word.
    pub(crate) fn read_range(&self, buf: &wgpu::Buffer, offset: u64, len: usize) -> Vec<u8> {
        let size = (len.div_ceil(4).max(1) * 4) as u64;
        let staging = self.readback_buffer(size);
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size);
        self.queue.submit([enc.finish()]);
        let mut v = self.map_read_all(&staging);
        v.truncate(len);
        v
    }

    pub(crate) fn readback_buffer(&self, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: size.max(4),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    pub(crate) fn map_read_all(&self, staging: &wgpu::Buffer) -> Vec<u8> {
        staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        self.wait();
        let v = staging.slice(..).get_mapped_range().unwrap().to_vec();
        staging.unmap();
        v
    }

    /// One dispatch of `pipeline` over `grid` workgroups (none when its x is 0) with whole
    /// buffers bound in order, then the whole of `result` read back.
    pub(crate) fn dispatch_and_read(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
        grid: (u32, u32, u32),
        result: &wgpu::Buffer,
    ) -> Vec<u8> {
        let staging = self.readback_buffer(result.size());
        let mut enc = self.device.create_command_encoder(&Default::default());
        self.record_dispatch(&mut enc, pipeline, buffers, grid);
        enc.copy_buffer_to_buffer(result, 0, &staging, 0, result.size());
        self.queue.submit([enc.finish()]);
        self.map_read_all(&staging)
    }

    /// Record one dispatch of `pipeline` over `grid` workgroups (none when its x is 0) with
    /// whole buffers bound in order.
    pub(crate) fn record_dispatch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
        grid: (u32, u32, u32),
    ) {
        let bind = self.bind_all(pipeline, buffers);
        if grid.0 > 0 {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(grid.0, grid.1, grid.2);
        }
    }

    /// A bind group of whole buffers in binding order.
    pub(crate) fn bind_all(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
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
    pub(crate) fn read(&self, buf: &wgpu::Buffer, len: usize) -> Vec<u8> {
        self.read_range(buf, 0, len)
    }
}

fn desc_backends(opts: &GpuOptions) -> wgpu::Backends {
    opts.backends
        .unwrap_or(wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12)
}

/// Exclusive prefix sums of `lens` and the total after them (`lens.len() + 1` values): where
/// each packed row or chunk starts when they are laid back to back.
pub(crate) fn prefix_starts(lens: &[u32]) -> Result<Vec<u32>> {
    let mut starts = Vec::with_capacity(lens.len() + 1);
    let mut total = 0usize;
    for &l in lens {
        starts.push(u32_of(total, "packed output")?);
        total += l as usize;
    }
    starts.push(u32_of(total, "packed output")?);
    Ok(starts)
}
