//! The bit-plane decoder's launch (`shaders/bitplane.wgsl`): the host checks the stream header
//! and locates the chunks (2 bytes per 4 KB), the kernel does the rest.

use crate::contract::BitplaneParams;
use crate::launch::{Pass, Prepared};
use crate::shaders::Kernel;
use crate::{u32_of, Gpu, KernelConfig, Result};

impl Gpu {
    /// Prepare a bit-plane decode: check the header, locate the chunks, upload.
    pub fn prepare_bitplane(&self, stream: &[u8], cfg: &KernelConfig) -> Result<Prepared> {
        let header = planepack_bitplane::parse_header(stream)?;
        let spans = planepack_bitplane::chunk_spans(stream, &header)?;
        let n_chunks = u32_of(spans.len(), "chunk count")?;
        let n_blocks = u32_of(header.raw_len.div_ceil(128), "block count")?;
        let raw_len = u32_of(header.raw_len, "tensor")?;
        let offsets: Vec<u32> = spans
            .iter()
            .map(|&(o, _)| u32_of(o, "stream"))
            .collect::<Result<_>>()?;
        let kernel = Kernel::BitPlane {
            width: header.width,
        };
        let pipeline = self.pipeline(kernel, cfg.path)?;
        let (gx, gy) = self.grid(n_chunks);
        let s = self.stream(stream)?;
        let c = self.storage(bytemuck::cast_slice(&offsets), "chunk offsets")?;
        // The kernel writes whole 128-byte blocks (the last one's padding as zeros).
        let out = self.output(n_blocks as usize * 128)?;
        let p = self.uniform(&BitplaneParams {
            n_chunks,
            n_blocks,
            width: header.width,
            raw_len,
            chunks_x: gx,
            ..Default::default()
        });
        let status = self.status();
        let groups = if n_chunks == 0 { (0, 0) } else { (gx, gy) };
        let pass = Pass::new(
            pipeline,
            vec![s.clone(), c, out.clone(), p, status.clone()],
            Some(2),
            groups,
        );
        Ok(Prepared::new(
            self,
            vec![pass],
            out,
            header.raw_len,
            status,
            s,
            stream.len() + offsets.len() * 4,
            kernel,
        ))
    }

    /// Decode a whole bit-plane stream (`planepack-bitplane`'s format) and read it back.
    pub fn decode_bitplane(&self, stream: &[u8]) -> Result<Vec<u8>> {
        self.decode_with(|c| self.prepare_bitplane(stream, c))
    }

    /// Decode a bit-plane stream into `out`, whose length the caller knows from its own
    /// metadata (a container entry): a stream that declares another length is refused before
    /// anything is allocated on the device.
    pub fn decode_bitplane_into(&self, stream: &[u8], out: &mut [u8]) -> Result<()> {
        let declared = planepack_bitplane::parse_header(stream)?.raw_len;
        self.decode_into_with(declared, out, |c| self.prepare_bitplane(stream, c))
    }
}
