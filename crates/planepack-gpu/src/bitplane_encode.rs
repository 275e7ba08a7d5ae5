//! The bit-plane encoder on the GPU (`shaders/bitplane_encode.wgsl`), byte-identical to
//! `planepack-bitplane`'s: every block's modes sized exactly, the smallest kept with the same
//! tie order, the chunk's blocks placed by a prefix sum. Each chunk is written into a slot of
//! the largest chunk's size; the host reads the chunk lengths (4 bytes per 4 KB), sums them and
//! sends the starts back, and `ibp_condense.wgsl` (rows of any size copied back to back)
//! packs the chunks, so only the compressed bytes come back. The header is written by
//! `planepack_bitplane::write_header`, the CPU encoder's own.

use crate::contract::BitplaneEncodeParams;
use crate::device::prefix_starts;
use crate::launch::{Pass, Prepared};
use crate::shaders::Kernel;
use crate::{u32_of, Gpu, GpuError, KernelConfig, Result};

use planepack_core::ElemType;

/// Bytes of one chunk's slot in the encoder's output (room for the largest chunk).
const SLOT_BYTES: usize = planepack_bitplane::MAX_CHUNK_BYTES.div_ceil(4) * 4;

/// A prepared bit-plane encode of a tensor in device memory.
pub struct BitplaneEncode {
    /// The encode kernel; its output is the chunk slots.
    pub launch: Prepared,
    lens: wgpu::Buffer,
    n_chunks: usize,
    raw_len: usize,
    width: u32,
}

impl Gpu {
    /// Prepare encoding `raw_len` bytes of `width`-bit elements held at the start of `data` (a
    /// `STORAGE` buffer of this device; bytes past `raw_len` are ignored).
    pub fn prepare_bitplane_encode(
        &self,
        data: &wgpu::Buffer,
        raw_len: usize,
        width: u32,
        cfg: &KernelConfig,
    ) -> Result<BitplaneEncode> {
        if !matches!(width, 8 | 16 | 32) {
            return Err(GpuError::Unsupported(format!("{width}-bit elements")));
        }
        if !data.usage().contains(wgpu::BufferUsages::STORAGE) || (raw_len as u64) > data.size() {
            return Err(GpuError::Unsupported(
                "input that does not fit its buffer (or a buffer without STORAGE usage)".into(),
            ));
        }
        let raw = u32_of(raw_len, "tensor")?;
        let n_blocks = u32_of(raw_len.div_ceil(128), "tensor")?;
        let n_chunks = raw_len.div_ceil(planepack_bitplane::CHUNK_BYTES);
        let nc = u32_of(n_chunks, "tensor")?;
        let slots = n_chunks
            .checked_mul(SLOT_BYTES)
            .ok_or_else(|| GpuError::Unsupported("tensor too large".into()))?;
        let out = self.zeroed_buffer(slots, "chunk slots", wgpu::BufferUsages::empty())?;
        let lens =
            self.zeroed_buffer(n_chunks * 4, "chunk lengths", wgpu::BufferUsages::COPY_SRC)?;
        let kernel = Kernel::BitPlaneEncode { width };
        let pipeline = self.pipeline(kernel, cfg.path)?;
        let (gx, gy) = self.grid(nc);
        let p = self.uniform(&BitplaneEncodeParams {
            n_chunks: nc,
            n_blocks,
            raw_len: raw,
            chunks_x: gx,
            _pad: [],
        });
        let status = self.status();
        let pass = Pass::new(
            pipeline,
            vec![data.clone(), out.clone(), lens.clone(), p, status.clone()],
            Some(1),
            if nc == 0 { (0, 0) } else { (gx, gy) },
        );
        let launch = Prepared::new(
            self,
            vec![pass],
            out,
            slots,
            status,
            data.clone(),
            0,
            kernel,
        );
        Ok(BitplaneEncode {
            launch,
            lens,
            n_chunks,
            raw_len,
            width,
        })
    }

    /// Run a prepared encode: the stream, with only the compressed bytes (and 4 bytes per
    /// chunk of lengths) read back. Also returns the bytes read back.
    pub fn run_bitplane_encode(&self, e: &BitplaneEncode) -> Result<(Vec<u8>, usize)> {
        let n = e.n_chunks;
        let staging = self.readback_buffer((8 + 4 * n) as u64);
        self.reset_status(&e.launch);
        let mut enc = self.device.create_command_encoder(&Default::default());
        self.record(&e.launch, &mut enc, None);
        enc.copy_buffer_to_buffer(&e.launch.status, 0, &staging, 0, 8);
        if n > 0 {
            enc.copy_buffer_to_buffer(&e.lens, 0, &staging, 8, (4 * n) as u64);
        }
        self.queue.submit([enc.finish()]);
        let back = self.map_read_all(&staging);
        // Set only by a subgroup layout the kernel cannot number or by an encoder fault (a
        // payload whose written length differs from its plan).
        self.check(&e.launch, &back[..8])?;
        let starts = prefix_starts(bytemuck::cast_slice(&back[8..8 + 4 * n]))?;
        let total = starts[n] as usize;
        let chunks = self.condense(&e.launch.output().buffer, &starts, SLOT_BYTES)?;
        let mut stream = Vec::with_capacity(planepack_bitplane::HEADER_BYTES + total);
        planepack_bitplane::write_header(e.width, e.raw_len, &mut stream);
        stream.extend_from_slice(&chunks[..total]);
        Ok((stream, 4 * n + total))
    }

    /// Encode `raw_len` bytes of `width`-bit elements in device memory (the offload
    /// direction); equal to the CPU encoder's stream. A subgroup kernel that cannot run here
    /// is rerun on the workgroup path.
    pub fn encode_bitplane_on_device(
        &self,
        data: &wgpu::Buffer,
        raw_len: usize,
        width: u32,
    ) -> Result<Vec<u8>> {
        self.with_subgroup_fallback(|c| {
            let e = self.prepare_bitplane_encode(data, raw_len, width, c)?;
            Ok(self.run_bitplane_encode(&e)?.0)
        })
    }

    /// The bit-plane stream of `input` (upload, encode, compressed bytes back), equal to
    /// `BitPlane::new().encode_to_vec(input, elem)`.
    pub fn encode_bitplane(&self, input: &[u8], elem: ElemType) -> Result<Vec<u8>> {
        let width = elem.bits();
        if !matches!(width, 8 | 16 | 32) {
            return Err(GpuError::Unsupported(format!("element width {width}")));
        }
        let t = self.upload(input)?;
        self.encode_bitplane_on_device(&t.buffer, input.len(), width)
    }
}
