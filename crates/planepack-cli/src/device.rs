//! `--device gpu`: the codecs that have GPU kernels run there (through `planepack-gpu`), the
//! others on the CPU. Encoders: bit-plane and IBP with one mask (byte-identical to the CPU's;
//! IBP's k-means clustering has no GPU version) and rANS at `GPU_RANS`' settings (byte planes
//! only: byte-identical to the CPU encoder at those settings; the modelled, block-scaled and
//! difference chunks and the row map are CPU-only, so a CNN activation or a dequantized Q8_0
//! table comes out larger than `--device cpu` writes it). Decoders: bit-plane, IBP (one mask
//! or clusters), rANS (every chunk kind). A tensor a kernel cannot take (IBP rows of an odd
//! number of 16-bit chunks) goes to the CPU. The command says how many parts ran where.

use crate::fail::{Code, Fail};
use planepack_container::{CodecId, CodecSpec, Engine, EngineCounts};
use planepack_core::ElemType;
use planepack_gpu::{Gpu, GpuError, GpuOptions};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    Cpu,
    Gpu,
}

pub struct GpuEngine {
    gpu: Gpu,
    counts: EngineCounts,
}

impl std::fmt::Debug for GpuEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuEngine({})", self.gpu.adapter_name())
    }
}

/// The engine for `device` (None for the CPU); an error when no GPU adapter is found.
pub fn engine(device: Device) -> Result<Option<Arc<GpuEngine>>, Fail> {
    match device {
        Device::Cpu => Ok(None),
        Device::Gpu => {
            let gpu = Gpu::new(&GpuOptions::from_env())
                .map_err(|e| Fail::new(Code::Internal, format!("--device gpu: {e}")))?;
            Ok(Some(Arc::new(GpuEngine {
                gpu,
                counts: EngineCounts::default(),
            })))
        }
    }
}

impl GpuEngine {
    /// One line for the summary: the adapter and how many parts ran where.
    pub fn summary(&self) -> String {
        let (enc, enc_cpu, dec, dec_cpu) = self.counts.get();
        let mut parts = Vec::new();
        if enc + enc_cpu > 0 {
            parts.push(format!(
                "{enc} parts encoded on the GPU, {enc_cpu} on the CPU"
            ));
        }
        if dec + dec_cpu > 0 {
            parts.push(format!(
                "{dec} parts decoded on the GPU, {dec_cpu} on the CPU"
            ));
        }
        format!("device: {} ({})", self.gpu.adapter_name(), parts.join("; "))
    }
}

/// A GPU error as a codec error; `None` where the kernel cannot take this stream (the CPU
/// codec runs instead).
fn outcome<T>(r: Result<T, GpuError>) -> Option<planepack_core::Result<T>> {
    match r {
        Ok(v) => Some(Ok(v)),
        Err(GpuError::Unsupported(_)) => None,
        Err(GpuError::Stream(e)) => Some(Err(e)),
        Err(e @ GpuError::Corrupt { .. }) => {
            Some(Err(planepack_core::Error::corrupt(e.to_string())))
        }
        Err(e) => Some(Err(planepack_core::Error::Unsupported(e.to_string()))),
    }
}

impl Engine for GpuEngine {
    fn encode(
        &self,
        codec: CodecSpec,
        data: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Option<planepack_core::Result<()>> {
        let got = match codec.id {
            CodecId::BitPlane => self.gpu.encode_bitplane(data, elem),
            CodecId::Ibp => self.gpu.encode_ibp(data, elem, shape),
            CodecId::Rans => self.gpu.encode_rans(data, elem, &planepack_gpu::GPU_RANS),
            _ => return None,
        };
        outcome(got).map(|r| r.map(|v| out.extend(v)))
    }

    fn decode(
        &self,
        codec: CodecSpec,
        payload: &[u8],
        out: &mut [u8],
    ) -> Option<planepack_core::Result<()>> {
        // The `_into` decoders compare the stream's declared length with the entry's (`out`)
        // before they allocate or dispatch anything.
        let got = match codec.id {
            CodecId::BitPlane => self.gpu.decode_bitplane_into(payload, out),
            CodecId::Ibp | CodecId::IbpClusters => self.gpu.decode_ibp_into(payload, out),
            CodecId::Rans => self.gpu.decode_rans_into(payload, out),
            _ => return None,
        };
        outcome(got)
    }

    fn counts(&self) -> &EngineCounts {
        &self.counts
    }
}
