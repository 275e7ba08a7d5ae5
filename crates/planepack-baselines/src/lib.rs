//! Baseline codecs behind planepack's [`Codec`] trait, for side-by-side comparison.
//!
//! These are what a user would reach for instead of planepack: nothing ([`Raw`]), the
//! zero-value compression of cDMA ([`Zvc`]), general-purpose compressors ([`Zstd`] at any
//! level, [`Lz4`]), and the real C-Blosc2 ([`Blosc2`]: SIMD byte or bit shuffle, then zstd or
//! LZ4, blocked and multithreaded). zstd, LZ4 and Blosc2 are the libraries themselves, through
//! their crates; only ZVC (cDMA's hardware scheme, which has no library) is ours. Our own
//! scalar shuffle filters were dropped once the real Blosc2 was measured: they were slower
//! versions of the same idea.
//!
//! Every decoder here takes untrusted bytes and answers with an error, never a panic.

mod blosc2;
mod zvc;

pub use blosc2::{Blosc2, Blosc2Filter, Blosc2Inner, BLOSC2_DEFAULT_LEVEL};
pub use zvc::Zvc;

use planepack_core::codec::check_output_len;
use planepack_core::error::take;
use planepack_core::{Codec, ElemType, Error, Result};

/// No compression: the stream is the data.
#[derive(Debug, Clone, Copy, Default)]
pub struct Raw;

impl Codec for Raw {
    fn name(&self) -> String {
        "raw".into()
    }
    fn max_compressed_len(&self, raw_len: usize, _: ElemType) -> usize {
        raw_len
    }
    fn encode(&self, input: &[u8], _: ElemType, out: &mut Vec<u8>) -> Result<()> {
        out.extend_from_slice(input);
        Ok(())
    }
    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        Ok(compressed.len())
    }
    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        check_output_len(compressed.len(), out)?;
        out.copy_from_slice(compressed);
        Ok(())
    }
}

/// zstd at a fixed level, one frame with its content size.
#[derive(Debug, Clone, Copy)]
pub struct Zstd {
    pub level: i32,
}

impl Codec for Zstd {
    fn name(&self) -> String {
        format!("zstd-{}", self.level)
    }
    fn implementation(&self) -> String {
        format!("libzstd {} (zstd crate)", zstd::zstd_safe::version_string())
    }
    fn max_compressed_len(&self, raw_len: usize, _: ElemType) -> usize {
        zstd::zstd_safe::compress_bound(raw_len)
    }
    fn encode(&self, input: &[u8], _: ElemType, out: &mut Vec<u8>) -> Result<()> {
        let mut c = zstd::bulk::Compressor::new(self.level)
            .map_err(|e| Error::Unsupported(e.to_string()))?;
        c.include_contentsize(true)
            .map_err(|e| Error::Unsupported(e.to_string()))?;
        let frame = c
            .compress(input)
            .map_err(|e| Error::Unsupported(e.to_string()))?;
        out.extend_from_slice(&frame);
        Ok(())
    }
    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        match zstd::zstd_safe::get_frame_content_size(compressed) {
            Ok(Some(n)) => {
                usize::try_from(n).map_err(|_| Error::corrupt("zstd content size too large"))
            }
            Ok(None) => Err(Error::corrupt("zstd frame without content size")),
            Err(_) => Err(Error::corrupt("not a zstd frame")),
        }
    }
    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        check_output_len(self.decoded_len(compressed)?, out)?;
        thread_local! {
            static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
        }
        let n = DCTX.with(|cell| {
            let mut d = cell.borrow_mut();
            if d.is_none() {
                *d = Some(
                    zstd::bulk::Decompressor::new()
                        .map_err(|e| Error::Unsupported(e.to_string()))?,
                );
            }
            d.as_mut()
                .unwrap()
                .decompress_to_buffer(compressed, out)
                .map_err(|e| Error::corrupt(format!("zstd: {e}")))
        })?;
        check_output_len(n, out)
    }
}

/// LZ4 block format (lz4_flex, safe decoder) with the raw length prepended (4 bytes LE).
#[derive(Debug, Clone, Copy, Default)]
pub struct Lz4;

impl Codec for Lz4 {
    fn name(&self) -> String {
        "lz4".into()
    }
    fn implementation(&self) -> String {
        "lz4_flex 0.11 (LZ4 block format, Rust)".into()
    }
    fn max_compressed_len(&self, raw_len: usize, _: ElemType) -> usize {
        4 + lz4_flex::block::get_maximum_output_size(raw_len)
    }
    fn encode(&self, input: &[u8], _: ElemType, out: &mut Vec<u8>) -> Result<()> {
        let len = u32::try_from(input.len())
            .map_err(|_| Error::Unsupported("LZ4 block over 4 GiB".into()))?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&lz4_flex::block::compress(input));
        Ok(())
    }
    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        let h = take(compressed, 0, 4, "LZ4 length prefix")?;
        Ok(u32::from_le_bytes(h.try_into().unwrap()) as usize)
    }
    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        check_output_len(self.decoded_len(compressed)?, out)?;
        let n = lz4_flex::block::decompress_into(&compressed[4..], out)
            .map_err(|e| Error::corrupt(format!("lz4: {e}")))?;
        check_output_len(n, out)
    }
}

/// Every baseline, in the order tables list them.
pub fn all() -> Vec<Box<dyn Codec>> {
    vec![
        Box::new(Raw),
        Box::new(Zvc),
        Box::new(Zstd { level: 1 }),
        Box::new(Zstd { level: 3 }),
        Box::new(Zstd { level: 19 }),
        Box::new(Lz4),
        Box::new(Blosc2::new(Blosc2Filter::Shuffle, Blosc2Inner::Lz4, 5)),
        Box::new(Blosc2::new(Blosc2Filter::BitShuffle, Blosc2Inner::Lz4, 5)),
        Box::new(Blosc2::new(Blosc2Filter::Shuffle, Blosc2Inner::Zstd, 5)),
        Box::new(Blosc2::new(Blosc2Filter::Shuffle, Blosc2Inner::Zstd, 9)),
        Box::new(Blosc2::new(Blosc2Filter::BitShuffle, Blosc2Inner::Zstd, 5)),
        Box::new(Blosc2::new(Blosc2Filter::BitShuffle, Blosc2Inner::Zstd, 9)),
    ]
}
