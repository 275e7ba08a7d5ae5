//! Where the codecs run. The CPU codecs are the reference and the default; an [`Engine`]
//! (the GPU, plugged in by `planepack compress/decompress --device gpu`) takes the parts whose
//! codec it has a kernel for and leaves the others to the CPU. The container format does not
//! change: an engine must write streams the CPU codecs read, byte-identical to a CPU encoder
//! (the GPU crate tests it: bit-plane and IBP at the codec's settings, rANS at the byte-plane
//! settings its GPU encoder writes, `planepack_gpu::GPU_RANS`, which the part's codec `rans`
//! covers since every rANS decoder reads every chunk kind), and every decoded part still meets
//! its checksum.

use crate::codecs::CodecSpec;
use planepack_core::ElemType;
use std::sync::atomic::{AtomicU64, Ordering};

/// Encoders and decoders for some codecs, used instead of the CPU codecs for those.
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// Encode `data` (of `elem`s, `shape` in codec elements) with `codec`, appending to `out`.
    /// `None`: no kernel for this codec or this tensor here (the CPU encodes it).
    fn encode(
        &self,
        codec: CodecSpec,
        data: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Option<planepack_core::Result<()>>;

    /// Decode `payload` (coded with `codec`) into `out`, which has the raw length. `None`: no
    /// kernel for this codec or this stream here (the CPU decodes it).
    fn decode(
        &self,
        codec: CodecSpec,
        payload: &[u8],
        out: &mut [u8],
    ) -> Option<planepack_core::Result<()>>;

    /// Parts this engine encoded and decoded, and those it left to the CPU.
    fn counts(&self) -> &EngineCounts;
}

/// How many parts went where (an engine keeps these so the caller can report them).
#[derive(Debug, Default)]
pub struct EngineCounts {
    pub encoded: AtomicU64,
    pub encoded_on_cpu: AtomicU64,
    pub decoded: AtomicU64,
    pub decoded_on_cpu: AtomicU64,
}

impl EngineCounts {
    /// (encoded here, encoded on the CPU, decoded here, decoded on the CPU).
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.encoded.load(Ordering::Relaxed),
            self.encoded_on_cpu.load(Ordering::Relaxed),
            self.decoded.load(Ordering::Relaxed),
            self.decoded_on_cpu.load(Ordering::Relaxed),
        )
    }
}

/// Encode with the engine where it can, else the CPU codec.
pub(crate) fn encode_on(
    engine: Option<&dyn Engine>,
    codec: CodecSpec,
    data: &[u8],
    elem: ElemType,
    shape: &[usize],
    out: &mut Vec<u8>,
) -> planepack_core::Result<()> {
    contained(|| {
        if let Some(e) = engine {
            let start = out.len();
            if let Some(r) = e.encode(codec, data, elem, shape, out) {
                e.counts().encoded.fetch_add(1, Ordering::Relaxed);
                return r;
            }
            out.truncate(start);
            e.counts().encoded_on_cpu.fetch_add(1, Ordering::Relaxed);
        }
        if codec.splits_on_rayon() {
            codec.codec().encode_shaped_parallel(data, elem, shape, out)
        } else {
            codec.codec().encode_shaped(data, elem, shape, out)
        }
    })
}

/// Decode with the engine where it can, else the CPU codec.
pub(crate) fn decode_on(
    engine: Option<&dyn Engine>,
    codec: CodecSpec,
    payload: &[u8],
    out: &mut [u8],
) -> planepack_core::Result<()> {
    contained(|| {
        if let Some(e) = engine {
            if let Some(r) = e.decode(codec, payload, out) {
                e.counts().decoded.fetch_add(1, Ordering::Relaxed);
                return r;
            }
            e.counts().decoded_on_cpu.fetch_add(1, Ordering::Relaxed);
        }
        if codec.splits_on_rayon() {
            codec.codec().decode_parallel(payload, out)
        } else {
            codec.codec().decode(payload, out)
        }
    })
}

/// Run a codec call with its panics caught: a panic is a bug in a codec, and it must reach
/// the caller as an error naming the tensor (the command's exit code 1, an exception in
/// Python), not unwind through the command's temporary-file handling or a Python interpreter.
/// Codecs hold no state across calls but the scratch a thread keeps for its next call, which
/// a panic drops instead of keeping (`planepack_core::scratch`), so nothing a panic
/// interrupted is used again.
pub(crate) fn contained<T>(
    f: impl FnOnce() -> planepack_core::Result<T>,
) -> planepack_core::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a codec panicked");
        Err(planepack_core::Error::Internal(msg.to_owned()))
    })
}
