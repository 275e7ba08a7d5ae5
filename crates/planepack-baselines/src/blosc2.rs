//! The real C-Blosc2 (through the `blosc2-sys` binding, built from its vendored sources), so
//! that users see planepack beside the library they would actually use: SIMD shuffle or
//! bitshuffle, blocked, with zstd or LZ4 inside, one or all threads.
//!
//! Why our own thin wrapper instead of the `blosc2-rs` safe layer: two of its calls we need
//! are unsound for our use (its `compress_into_ctx` multiplies the slice length by the
//! typesize, reading past a byte slice; its `decompress_into_ctx` writes the header's length
//! whatever the destination's). The few calls below each check what C-Blosc2 will read and
//! write before handing it pointers.
//!
//! The stream is one Blosc2 chunk (`blosc2_compress_ctx`): self-describing (filter, codec,
//! typesize and sizes live in its header), so any Blosc2 reader decodes it. A chunk holds at
//! most `BLOSC2_MAX_BUFFERSIZE` (about 2 GiB) of raw bytes; larger tensors are refused.

use blosc2_sys as ffi;
use planepack_core::codec::check_output_len;
use planepack_core::{Codec, ElemType, Error, Result};
use std::cell::RefCell;
use std::os::raw::c_void;

/// Blosc2's filter before the codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blosc2Filter {
    /// Byte shuffle: byte k of every element together.
    Shuffle,
    /// Bit shuffle: bit k of every element together.
    BitShuffle,
}

/// Blosc2's codec after the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blosc2Inner {
    Zstd,
    Lz4,
}

/// C-Blosc2 with one filter, one codec and one level (Blosc2's default level is 5, 9 is its
/// best ratio). Encode uses one thread; [`Codec::decode`] one thread and
/// [`Codec::decode_parallel`] as many as the machine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blosc2 {
    pub filter: Blosc2Filter,
    pub inner: Blosc2Inner,
    pub level: u8,
}

/// Blosc2's recommended level.
pub const BLOSC2_DEFAULT_LEVEL: u8 = 5;

const HEADER: usize = ffi::BLOSC_EXTENDED_HEADER_LENGTH as usize;
const MAX_BUFFER: usize = ffi::BLOSC2_MAX_BUFFERSIZE as usize;
const MAX_OVERHEAD: usize = ffi::BLOSC2_MAX_OVERHEAD as usize;

/// An owned `blosc2_context`, freed on drop.
struct Ctx(*mut ffi::blosc2_context);

impl Drop for Ctx {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from blosc2_create_[cd]ctx and is freed once, here.
            unsafe { ffi::blosc2_free_ctx(self.0) }
        }
    }
}

thread_local! {
    /// Decompression contexts of this thread, by thread count (a context keeps its thread
    /// pool, so it is made once, as a Blosc2 user would).
    static DCTX: RefCell<Vec<(usize, Ctx)>> = const { RefCell::new(Vec::new()) };
}

fn threads_all() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(i16::MAX as usize)
}

impl Blosc2 {
    pub fn new(filter: Blosc2Filter, inner: Blosc2Inner, level: u8) -> Self {
        Blosc2 {
            filter,
            inner,
            level,
        }
    }

    fn cctx(&self, typesize: usize) -> Result<Ctx> {
        // SAFETY: returns a plain struct of defaults.
        let mut p = unsafe { ffi::blosc2_get_blosc2_cparams_defaults() };
        p.compcode = match self.inner {
            Blosc2Inner::Zstd => ffi::BLOSC_ZSTD,
            Blosc2Inner::Lz4 => ffi::BLOSC_LZ4,
        } as u8;
        p.clevel = self.level.min(9);
        p.typesize = typesize as i32;
        p.nthreads = 1;
        p.filters = [0; 6];
        p.filters[5] = match self.filter {
            Blosc2Filter::Shuffle => ffi::BLOSC_SHUFFLE,
            Blosc2Filter::BitShuffle => ffi::BLOSC_BITSHUFFLE,
        } as u8;
        // SAFETY: the parameters are Blosc2's defaults with plain fields changed; the
        // pointer fields stay null as in the defaults.
        let ctx = Ctx(unsafe { ffi::blosc2_create_cctx(p) });
        if ctx.0.is_null() {
            return Err(Error::Unsupported("blosc2: cannot create a context".into()));
        }
        Ok(ctx)
    }

    /// C-Blosc2 trusts much of its 32-byte header (filter ids index tables of function
    /// pointers, flag bits select lazy chunks that dereference a super-chunk): a mutated header
    /// crashed it in our robustness tests. So a header must be one this codec writes: the
    /// stable chunk format, this filter and codec (or a plain copy, or a special-value run of
    /// zeros, NaNs or one value), nothing else set.
    fn check_header(&self, h: &[u8]) -> Result<()> {
        let (filter, compcode, compformat) = (
            match self.filter {
                Blosc2Filter::Shuffle => ffi::BLOSC_SHUFFLE,
                Blosc2Filter::BitShuffle => ffi::BLOSC_BITSHUFFLE,
            } as u8,
            match self.inner {
                Blosc2Inner::Zstd => ffi::BLOSC_ZSTD,
                Blosc2Inner::Lz4 => ffi::BLOSC_LZ4,
            } as u8,
            match self.inner {
                Blosc2Inner::Zstd => ffi::BLOSC_ZSTD_FORMAT,
                Blosc2Inner::Lz4 => ffi::BLOSC_LZ4_FORMAT,
            } as u8,
        );
        let flags = h[2];
        let extended = (ffi::BLOSC_DOSHUFFLE | ffi::BLOSC_DOBITSHUFFLE) as u8;
        let memcpyed = flags & ffi::BLOSC_MEMCPYED as u8 != 0;
        let ok = h[0] == ffi::BLOSC2_VERSION_FORMAT_STABLE as u8
            && flags & extended == extended
            && flags & ffi::BLOSC_DODELTA as u8 == 0
            && (memcpyed || flags >> 5 == compformat)
            && matches!(h[3], 1 | 2 | 4)
            && h[16..21].iter().all(|&b| b == 0)
            && h[21] == filter
            && h[22] == compcode
            && h[23..31].iter().all(|&b| b == 0)
            // Blosc2 flags: only a special-value run (zeros, NaNs, a repeated value) may be set.
            && h[31] & 0x0f == 0
            && matches!(h[31] >> 4, 0..=3);
        if ok {
            Ok(())
        } else {
            Err(Error::corrupt(format!(
                "blosc2: not a chunk as {} writes it (header {:02x?})",
                self.name(),
                h
            )))
        }
    }

    fn decode_threads(&self, compressed: &[u8], out: &mut [u8], threads: usize) -> Result<()> {
        check_output_len(self.decoded_len(compressed)?, out)?;
        if compressed.len() > i32::MAX as usize {
            return Err(Error::corrupt("blosc2: stream over 2 GiB"));
        }
        DCTX.with(|cell| {
            let mut cache = cell.borrow_mut();
            let ctx = match cache.iter().position(|(n, _)| *n == threads) {
                Some(i) => &cache[i].1,
                None => {
                    // SAFETY: a plain struct of defaults.
                    let mut p = unsafe { ffi::blosc2_get_blosc2_dparams_defaults() };
                    p.nthreads = threads as i16;
                    // SAFETY: defaults with the thread count changed.
                    let ctx = Ctx(unsafe { ffi::blosc2_create_dctx(p) });
                    if ctx.0.is_null() {
                        return Err(Error::Unsupported("blosc2: cannot create a context".into()));
                    }
                    cache.push((threads, ctx));
                    &cache.last().expect("just pushed").1
                }
            };
            // SAFETY: C-Blosc2 reads at most `compressed.len()` bytes from `compressed` and
            // writes at most `out.len()` bytes to `out`, both lengths passed here and both
            // below 2^31 (checked above and by decoded_len).
            let n = unsafe {
                ffi::blosc2_decompress_ctx(
                    ctx.0,
                    compressed.as_ptr() as *const c_void,
                    compressed.len() as i32,
                    out.as_mut_ptr() as *mut c_void,
                    out.len() as i32,
                )
            };
            if n < 0 {
                return Err(Error::corrupt(format!("blosc2: error {n}")));
            }
            check_output_len(n as usize, out)
        })
    }
}

impl Codec for Blosc2 {
    fn name(&self) -> String {
        let filter = match self.filter {
            Blosc2Filter::Shuffle => "shuffle",
            Blosc2Filter::BitShuffle => "bitshuffle",
        };
        let inner = match self.inner {
            Blosc2Inner::Zstd => "zstd",
            Blosc2Inner::Lz4 => "lz4",
        };
        format!("blosc2-{filter}-{inner}-{}", self.level)
    }

    fn implementation(&self) -> String {
        // SAFETY: returns a pointer to a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(ffi::blosc2_get_version_string()) };
        format!("C-Blosc2 {} (blosc2-sys)", v.to_string_lossy())
    }

    fn max_compressed_len(&self, raw_len: usize, _: ElemType) -> usize {
        raw_len + MAX_OVERHEAD
    }

    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()> {
        if input.len() > MAX_BUFFER {
            return Err(Error::Unsupported(format!(
                "blosc2: a chunk holds at most {MAX_BUFFER} bytes, this tensor has {}",
                input.len()
            )));
        }
        // C-Blosc2 2.15.2 writes an all-zero buffer whose length is not a whole number of
        // elements as a special-value chunk that it then cannot decode (error -11, seen in our
        // tail-length tests); such a buffer is coded with typesize 1. Real tensors always hold
        // whole elements and keep their typesize.
        let typesize = if input.len().is_multiple_of(elem.size()) {
            elem.size()
        } else {
            1
        };
        let ctx = self.cctx(typesize)?;
        let start = out.len();
        let cap = input.len() + MAX_OVERHEAD;
        out.resize(start + cap, 0);
        // SAFETY: C-Blosc2 reads `input.len()` bytes of `input` and writes at most `cap` bytes
        // from `out[start..]`, which is exactly `cap` long; both lengths fit in i32.
        let n = unsafe {
            ffi::blosc2_compress_ctx(
                ctx.0,
                input.as_ptr() as *const c_void,
                input.len() as i32,
                out[start..].as_mut_ptr() as *mut c_void,
                cap as i32,
            )
        };
        if n <= 0 {
            out.truncate(start);
            return Err(Error::Unsupported(format!("blosc2: compression error {n}")));
        }
        out.truncate(start + n as usize);
        Ok(())
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        if compressed.len() < HEADER {
            return Err(Error::corrupt("blosc2: stream shorter than its header"));
        }
        self.check_header(&compressed[..HEADER])?;
        let (mut nbytes, mut cbytes, mut blocksize) = (0i32, 0i32, 0i32);
        // SAFETY: reads the header only, which is present (checked above).
        let rc = unsafe {
            ffi::blosc2_cbuffer_sizes(
                compressed.as_ptr() as *const c_void,
                &mut nbytes,
                &mut cbytes,
                &mut blocksize,
            )
        };
        if rc < 0 || nbytes < 0 {
            return Err(Error::corrupt("blosc2: bad header"));
        }
        if cbytes as usize != compressed.len() {
            return Err(Error::corrupt(format!(
                "blosc2: header says {cbytes} compressed bytes, the stream has {}",
                compressed.len()
            )));
        }
        Ok(nbytes as usize)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_threads(compressed, out, 1)
    }

    fn decode_parallel(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_threads(compressed, out, threads_all())
    }
}
