//! Prepared launches and running them: into device memory first, read back only on request.
//!
//! A [`Prepared`] holds everything a decode needs on the device (the uploaded stream and its
//! metadata, the pipeline(s), the output, a status pair). Running it leaves the decoded bytes
//! on the device ([`Gpu::decode_on_device`], or many tensors in one submission with
//! [`Gpu::decode_all_on_device`]); [`Prepared::write_into`] points the output at a buffer the
//! caller owns (a region of a larger tensor arena, say). The status words say whether the
//! kernel found the stream valid; they are 8 bytes per launch, and the only thing read back
//! unless the caller asks for the data ([`Gpu::read_back`]). Here too: the status and
//! subgroup-fallback handling every launch shares, and `condense`, which both encoders use to
//! lay their variable-length rows or chunks back to back.

use crate::contract::{describe_flags, CopyParams, IbpCondenseParams, ERR_LAYOUT, ERR_LOOP};
use crate::shaders::{Kernel, ScanPath};
use crate::{u32_of, Gpu, GpuError, KernelConfig, Result};

/// Decoded bytes in device memory: `len` bytes at `offset` of `buffer`. The kernel may have
/// written zeros past `len`, up to the launch's [`Prepared::output_capacity`].
#[derive(Debug, Clone)]
pub struct DeviceTensor {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    pub len: usize,
}

/// One dispatch: its pipeline, the buffers of its bind group in binding order, and which of
/// them is the launch's output (rebound by [`Prepared::write_into`]).
pub(crate) struct Pass {
    pub pipeline: wgpu::ComputePipeline,
    pub buffers: Vec<wgpu::Buffer>,
    pub out_slot: Option<usize>,
    pub groups: (u32, u32),
    bind_group: Option<wgpu::BindGroup>,
}

impl Pass {
    pub fn new(
        pipeline: wgpu::ComputePipeline,
        buffers: Vec<wgpu::Buffer>,
        out_slot: Option<usize>,
        groups: (u32, u32),
    ) -> Pass {
        Pass {
            pipeline,
            buffers,
            out_slot,
            groups,
            bind_group: None,
        }
    }
}

/// A kernel launch with its buffers, ready to run (again and again, for timing).
pub struct Prepared {
    passes: Vec<Pass>,
    pub(crate) status: wgpu::Buffer,
    out: DeviceTensor,
    /// Bytes the kernel writes (whole words; whole 128-byte blocks for the bit-plane codec).
    capacity: u64,
    /// The buffer the launch reads its stream (or, for the copy kernel, its source) from:
    /// where a transfer timing writes fresh bytes before each launch.
    pub(crate) input: wgpu::Buffer,
    /// Bytes uploaded for this launch (stream and metadata).
    pub upload_bytes: usize,
    kernel: Kernel,
}

impl Prepared {
    /// `out` is the buffer the output passes write (at offset 0), `len` the decoded length.
    // Each codec module builds its launch from these parts, each named at the call.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        gpu: &Gpu,
        passes: Vec<Pass>,
        out: wgpu::Buffer,
        len: usize,
        status: wgpu::Buffer,
        input: wgpu::Buffer,
        upload_bytes: usize,
        kernel: Kernel,
    ) -> Prepared {
        let capacity = out.size();
        let mut p = Prepared {
            passes,
            status,
            out: DeviceTensor {
                buffer: out,
                offset: 0,
                len,
            },
            capacity,
            input,
            upload_bytes,
            kernel,
        };
        p.bind(gpu);
        p
    }

    fn bind(&mut self, gpu: &Gpu) {
        for pass in &mut self.passes {
            let layout = pass.pipeline.get_bind_group_layout(0);
            let entries: Vec<wgpu::BindGroupEntry> = pass
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: if pass.out_slot == Some(i) {
                        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &self.out.buffer,
                            offset: self.out.offset,
                            size: wgpu::BufferSize::new(self.capacity),
                        })
                    } else {
                        b.as_entire_binding()
                    },
                })
                .collect();
            pass.bind_group = Some(gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            }));
        }
    }

    /// Decoded length in bytes.
    pub fn output_len(&self) -> usize {
        self.out.len
    }

    /// Bytes the launch writes in its output region: the decoded length rounded up to whole
    /// words (whole 128-byte blocks for the bit-plane codec); the bytes past
    /// [`Prepared::output_len`] are written as zeros.
    pub fn output_capacity(&self) -> u64 {
        self.capacity
    }

    /// Where the next run writes its output.
    pub fn output(&self) -> &DeviceTensor {
        &self.out
    }

    /// Make the launch write its output into `buffer` at `offset` (a multiple of
    /// [`Gpu::offset_alignment`]), over [`Prepared::output_capacity`] bytes. The buffer must
    /// belong to this device and have `STORAGE` usage; anything else is an error, checked
    /// here, not a device fault later.
    pub fn write_into(&mut self, gpu: &Gpu, buffer: &wgpu::Buffer, offset: u64) -> Result<()> {
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(GpuError::Unsupported(
                "an output buffer without STORAGE usage".into(),
            ));
        }
        if !offset.is_multiple_of(gpu.offset_alignment()) {
            return Err(GpuError::Unsupported(format!(
                "an output offset of {offset} (a multiple of {} is needed)",
                gpu.offset_alignment()
            )));
        }
        if offset
            .checked_add(self.capacity)
            .is_none_or(|end| end > buffer.size())
            || self.capacity > gpu.max_binding
        {
            return Err(GpuError::Unsupported(format!(
                "{} bytes at offset {offset} of a {}-byte buffer",
                self.capacity,
                buffer.size()
            )));
        }
        let len = self.out.len;
        let previous = std::mem::replace(
            &mut self.out,
            DeviceTensor {
                buffer: buffer.clone(),
                offset,
                len,
            },
        );
        // A buffer of another device is a validation error: caught, and the launch kept as it was.
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.bind(gpu);
        if let Some(e) = pollster::block_on(scope.pop()) {
            self.out = previous;
            self.bind(gpu);
            return Err(GpuError::Device(e.to_string()));
        }
        Ok(())
    }
}

impl Gpu {
    /// Record one launch of `p` into `enc`.
    pub(crate) fn record(
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
        // wgpu orders the dispatches of a pass that share a buffer (each is its own usage
        // scope), so a second dispatch reads what the first wrote.
        for d in &p.passes {
            if d.groups.0 == 0 {
                continue;
            }
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, d.bind_group.as_ref(), &[]);
            pass.dispatch_workgroups(d.groups.0, d.groups.1, 1);
        }
    }

    /// Clear a launch's status words before its next run (written before the submission
    /// runs): no error yet, no failing unit yet.
    pub(crate) fn reset_status(&self, p: &Prepared) {
        self.queue
            .write_buffer(&p.status, 0, bytemuck::cast_slice(&[0u32, u32::MAX]));
    }

    /// The error a launch's status words report, if any.
    pub(crate) fn check(&self, p: &Prepared, status: &[u8]) -> Result<()> {
        let flags = u32::from_le_bytes(status[0..4].try_into().unwrap());
        let at = u32::from_le_bytes(status[4..8].try_into().unwrap());
        if flags == 0 {
            return Ok(());
        }
        if flags & ERR_LOOP != 0 {
            // The output is incomplete whatever else the kernel saw: not the stream's fault.
            return Err(GpuError::Unsupported(format!(
                "the driver cut the {:?} kernel's loops short (its iteration limit)",
                p.kernel
            )));
        }
        Err(GpuError::Corrupt {
            flags,
            what: describe_flags(if flags & ERR_LAYOUT != 0 {
                ERR_LAYOUT
            } else {
                flags
            }),
            unit: match p.kernel {
                Kernel::Ibp { .. } => "output row",
                Kernel::Rans { .. } => "chunk",
                _ => "block",
            },
            at,
        })
    }

    /// Run a prepared launch once; its output stays in device memory. Only the 8 status bytes
    /// come back (and this call waits for them).
    pub fn decode_on_device(&self, p: &Prepared) -> Result<DeviceTensor> {
        Ok(self.decode_all_on_device(&[p])?.remove(0))
    }

    /// Run many prepared launches in one submission (one wait at the end); every output stays
    /// in device memory. The first launch whose stream is corrupt gives the error.
    pub fn decode_all_on_device(&self, ps: &[&Prepared]) -> Result<Vec<DeviceTensor>> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        let staging = self.readback_buffer(8 * ps.len() as u64);
        for (i, p) in ps.iter().enumerate() {
            self.reset_status(p);
            self.record(p, &mut enc, None);
            enc.copy_buffer_to_buffer(&p.status, 0, &staging, 8 * i as u64, 8);
        }
        self.queue.submit([enc.finish()]);
        let status = self.map_read_all(&staging);
        for (p, s) in ps.iter().zip(status.chunks_exact(8)) {
            self.check(p, s)?;
        }
        Ok(ps.iter().map(|p| p.out.clone()).collect())
    }

    /// Upload `data` into a new device buffer (`STORAGE`, `COPY_SRC`, `COPY_DST`), e.g. a
    /// tensor for the encoders.
    pub fn upload(&self, data: &[u8]) -> Result<DeviceTensor> {
        Ok(DeviceTensor {
            buffer: self.buffer_init(data, "upload", wgpu::BufferUsages::COPY_SRC)?,
            offset: 0,
            len: data.len(),
        })
    }

    /// Copy decoded bytes back to the host (the buffer needs `COPY_SRC` usage, as the ones
    /// this crate creates have).
    pub fn read_back(&self, t: &DeviceTensor) -> Result<Vec<u8>> {
        let end = t.offset.checked_add(t.len.div_ceil(4) as u64 * 4);
        if !t.buffer.usage().contains(wgpu::BufferUsages::COPY_SRC)
            || !t.offset.is_multiple_of(4)
            || end.is_none_or(|e| e > t.buffer.size())
        {
            return Err(GpuError::Unsupported(
                "reading back a region that is not word-aligned inside a COPY_SRC buffer".into(),
            ));
        }
        Ok(self.read_range(&t.buffer, t.offset, t.len))
    }

    /// Run a prepared launch once and return its output, or the error its shader reported.
    pub fn run(&self, p: &Prepared) -> Result<Vec<u8>> {
        let t = self.decode_on_device(p)?;
        self.read_back(&t)
    }

    /// Decode with the device's default configuration, read back.
    pub(crate) fn decode_with(
        &self,
        prepare: impl Fn(&KernelConfig) -> Result<Prepared>,
    ) -> Result<Vec<u8>> {
        self.with_subgroup_fallback(|c| self.run(&prepare(c)?))
    }

    /// [`Gpu::decode_with`] into `out`, for a stream that declares `declared` raw bytes: a
    /// stream that declares another length than the caller's buffer is refused before anything
    /// is uploaded, allocated or dispatched (a stream's declared length is otherwise bounded
    /// only by its format's expansion, and a hostile one would size the device buffers).
    pub(crate) fn decode_into_with(
        &self,
        declared: usize,
        out: &mut [u8],
        prepare: impl Fn(&KernelConfig) -> Result<Prepared>,
    ) -> Result<()> {
        if declared != out.len() {
            return Err(planepack_core::Error::OutputLength {
                expected: declared,
                provided: out.len(),
            }
            .into());
        }
        let v = self.decode_with(prepare)?;
        if v.len() != out.len() {
            // The kernels write the declared length; anything else is a bug here.
            return Err(GpuError::Device(format!(
                "a decode gave {} bytes where its stream declares {}",
                v.len(),
                out.len()
            )));
        }
        out.copy_from_slice(&v);
        Ok(())
    }

    /// Run `f` with the device's default configuration; where the subgroup kernel cannot run
    /// here, rerun it on the workgroup path and keep to that path on this device.
    pub(crate) fn with_subgroup_fallback<T>(
        &self,
        f: impl Fn(&KernelConfig) -> Result<T>,
    ) -> Result<T> {
        let cfg = self.config();
        match f(&cfg) {
            Err(GpuError::Corrupt { flags, .. })
                if flags & ERR_LAYOUT != 0 && cfg.path == ScanPath::Subgroup =>
            {
                self.note_subgroups_fail();
                f(&cfg.with_path(ScanPath::Workgroup))
            }
            r => r,
        }
    }

    /// Prepare a copy of `data` through the copy kernel (the speed reference).
    pub fn prepare_copy(&self, data: &[u8]) -> Result<Prepared> {
        let n_words = u32_of(data.len().div_ceil(4), "copy")?;
        let pipeline = self.pipeline(Kernel::Copy, ScanPath::Workgroup)?;
        let (gx, gy) = self.grid(n_words.div_ceil(256));
        let src = self.storage(data, "copy source")?;
        let out = self.output(data.len())?;
        let p = self.uniform(&CopyParams {
            n_words,
            groups_x: gx,
            ..Default::default()
        });
        let groups = if n_words == 0 { (0, 0) } else { (gx, gy) };
        let pass = Pass::new(pipeline, vec![src.clone(), out.clone(), p], Some(1), groups);
        Ok(Prepared::new(
            self,
            vec![pass],
            out,
            data.len(),
            self.status(),
            src,
            data.len(),
            Kernel::Copy,
        ))
    }

    /// Copy bytes through the copy kernel (tests that it is a fair reference).
    pub fn copy(&self, data: &[u8]) -> Result<Vec<u8>> {
        self.run(&self.prepare_copy(data)?)
    }

    /// Rows of `row_bytes` (a multiple of 4) starting at `row * row_bytes` in `src`, the first
    /// `starts[r + 1] - starts[r]` bytes of each, copied back to back and read back
    /// (`ibp_condense.wgsl`).
    pub(crate) fn condense(
        &self,
        src: &wgpu::Buffer,
        starts: &[u32],
        row_bytes: usize,
    ) -> Result<Vec<u8>> {
        let n = starts.len() - 1;
        let total = starts[n] as usize;
        let n_words = u32_of(total.div_ceil(4), "output")?;
        let out = self.zeroed_buffer(total, "condensed", wgpu::BufferUsages::COPY_SRC)?;
        let starts_buf = self.storage(bytemuck::cast_slice(starts), "starts")?;
        let pipeline = self.pipeline(Kernel::IbpCondense, ScanPath::Workgroup)?;
        let (gx, gy) = self.grid(n_words.div_ceil(256));
        let p = self.uniform(&IbpCondenseParams {
            n_rows: u32_of(n, "rows")?,
            row_bytes: u32_of(row_bytes, "row")?,
            n_words,
            groups_x: gx,
            _pad: [],
        });
        let grid = if n_words > 0 { (gx, gy, 1) } else { (0, 0, 0) };
        let mut v = self.dispatch_and_read(&pipeline, &[src, &starts_buf, &out, &p], grid, &out);
        v.truncate(total);
        Ok(v)
    }
}
