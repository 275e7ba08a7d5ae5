//! The byte-plane rANS codec: planepack's entropy stage, built to be decoded on a GPU.
//!
//! Why it exists: the bit-plane codec and IBP have no entropy stage, so on real tensors they
//! send 7-29 % more bytes than CPU entropy coders (ZipNN, Blosc2 shuffle + zstd) and 3x more
//! on sparse features. What those coders exploit is simple: a float's exponent byte has a
//! few bits of entropy, its mantissa bytes are near noise, and many tensors are mostly zeros.
//! This codec models exactly that, with nothing a GPU cannot decode in parallel:
//!
//! * **Byte planes.** Each element is rotated left by one bit (the sign moves to the lowest
//!   bit, so the top byte of BF16/FP32 is the whole exponent; ZipNN and DietGPU split the
//!   same way; the encoder skips the rotation for a tensor where a sample says it costs) and
//!   split into its bytes, most significant first. Each plane of a chunk is
//!   stored raw, as one constant byte, or rANS-coded with its own order-0 table, whichever
//!   is smallest.
//! * **Zero elements out.** Where a chunk has many all-zero elements, a nonzero mask (one bit
//!   per element) is coded as a plane of its own and only the nonzero elements' planes
//!   follow: sparse features cost little more than the mask's entropy.
//! * **Independent chunks and lanes.** A tensor is cut into chunks (64 KiB by default;
//!   [`Rans::chunk_log2`]); each plane of a chunk is coded by up to 32 independent rANS
//!   lanes (module `lanes`), so a GPU workgroup (or CPU core) takes a chunk and an invocation
//!   (or SIMD lane) takes a lane.
//! * **Runs and repeats** (module `modelled`, stream version 2): where it pays, a chunk codes
//!   each element as a symbol (zero, equal to left, equal to up, a dictionary value, or a
//!   literal's top byte) with the previous symbol as context, in up to 8 contiguous lanes.
//! * **Block-scaled integers** (module `scaled`, stream version 3): FP32 tensors that are a
//!   scale per block times small integers, exactly (block-quantized weights dequantized, as
//!   GGUF's Q8_0 tables are when loaded), stored as the scales and one byte per element.
//! * **The exponent as context** (module `contexts`, stream version 4): plane 1 (the top
//!   mantissa bits) coded with one of six stream-wide tables chosen by the element's plane-0
//!   byte, where that is smaller than the plane's own table.
//! * **A dictionary of mantissas** (module `tails`, header flag `T`): FP32 chunks whose low
//!   three bytes take at most 256 values (BF16 values times one scale, 8-bit pixels through a
//!   convolution) coded as the exponent's plane and a plane of one-byte dictionary indices.
//! * **The exponent one row up as context** (module `row_contexts`, stream version 6): plane
//!   0 of a dense chunk coded with one of eight stream-wide tables chosen by the plane-0 byte
//!   of the element one row (`U`, the shape's last dimension) back, which the same lane
//!   decoded earlier: KV caches and feature maps keep a channel's magnitude from row to row.
//!   Where `U` has no divisor of 8 or more (a prime row length), eight lanes across rows that
//!   decode round by round (stream version 7) instead of one lane a chunk.
//! * **The sign one row up as context** (module `sign_contexts`, stream version 8): plane 1
//!   of a dense chunk of 2-byte elements (rotated: the sign and the top mantissa bits) coded
//!   with one of 18 stream-wide tables chosen by its element's exponent context and the low
//!   bit of the symbol one row up (the sign of the element above), decoded by the row
//!   planes' lane rules: a feature map's or a KV cache's signs follow the channel.
//!
//! The stream format is `docs/format-rans.md`. Every decoder rule there is checked here:
//! a damaged stream is an error, never a panic, an out-of-bounds access or a hang.
//! [`internals`] re-exports the format constants the GPU kernels share (generated into WGSL
//! by `planepack-gpu`); it is not a stable API.
//!
//! ```
//! use planepack_core::{Codec, ElemType};
//! use planepack_rans::Rans;
//!
//! // A BF16 tensor of 4 rows of 1024: a few distinct exponents, half of it zeros.
//! let bytes: Vec<u8> = (0..4 * 1024u32)
//!     .flat_map(|i| {
//!         let v: u16 = if i % 2 == 0 { 0 } else { 0x3f80 | (i % 128) as u16 };
//!         v.to_le_bytes()
//!     })
//!     .collect();
//! let rans = Rans::default();
//! let mut stream = Vec::new();
//! rans.encode_shaped(&bytes, ElemType::BF16, &[4, 1024], &mut stream)?;
//! assert!(stream.len() < bytes.len() / 2);
//! let mut back = vec![0u8; rans.decoded_len(&stream)?];
//! rans.decode_parallel(&stream, &mut back)?; // chunks over every core
//! assert_eq!(back, bytes);
//! # Ok::<(), planepack_core::Error>(())
//! ```

mod compact;
mod contexts;
mod difference;
mod lanes;
mod model;
mod modelled;
mod row_contexts;
mod scaled;
mod sign_contexts;
mod tails;

mod decode;
mod encode;
mod header;
mod planes;

use decode::*;
use encode::*;
pub use header::{chunk_spans, parse_header, write_header, Header, RowMap};
use planes::*;

/// The format constants the GPU kernels share and the pieces the tests reach: not a stable
/// API.
#[doc(hidden)]
pub mod internals {
    pub use crate::lanes::{L, MAX_LANES};
    /// What the encoder decides from counts alone (the rotation, each chunk's layouts and
    /// plane kinds, the written-or-raw rules), shared with the GPU encoder, which counts on
    /// the device and plans on the host by these same functions.
    pub mod plan {
        pub use crate::encode::{
            chunk_kept, coded_plane_kept, entropy_bits, plan_plane_counts, rotation_pays_by_counts,
            rotation_samples, sparse_considered, ChunkPlan, Layouts, PlanePlan,
        };
        pub use crate::lanes::{lane_header, lanes_for};
        pub use crate::model::{histogram, Table};
    }
    pub use crate::compact::RUNS_MAX;
    pub use crate::header::{get_length, put_length};
    pub use crate::model::{TableForm, LIST_MAX, PROB_BITS, SLOT_CUM_SHIFT, SLOT_FREQ_SHIFT};
    /// The modelled chunk's constants.
    pub mod modelled {
        pub use crate::modelled::{
            lane_range, lanes_for, repeat_distance, CHUNK_MODELLED, CONTEXTS, CTX_HIGH,
            CTX_LITERAL, CTX_LOW, LANE_HEADER, LIST_MAX, MODEL_PROB_BITS, MODEL_SCALE, SYMBOLS,
            SYM_DICT, SYM_LEFT, SYM_LITERAL, SYM_UP, SYM_ZERO,
        };
    }
    /// The context planes' constants and tables (stream version 4).
    pub mod contexts {
        pub use crate::contexts::{
            context, ContextDecoder, ContextTables, ABSENT, CONTEXTS, CONTEXT_PLANES_ONLY,
            CTX_ABOVE, CTX_BELOW, PLANE_CONTEXT, VERSION_CONTEXT,
        };
    }
    /// The row planes' constants and tables (stream versions 6 and 7).
    pub mod row_contexts {
        pub use crate::row_contexts::{
            lanes_allowed, lanes_divide, row_context, row_lanes, RowDecoder, RowTables, MAX_SHIFT,
            PLANE_ROW_CONTEXT, ROW_ABSENT, ROW_CONTEXTS, ROW_CTX_ABOVE, ROW_CTX_BELOW, ROW_FIRST,
            ROW_PLANES_ONLY, VERSION_ROW_CONTEXT, VERSION_ROW_LANES,
        };
    }
    /// The sign planes' constants and tables (stream version 8).
    pub mod sign_contexts {
        pub use crate::sign_contexts::{
            sign_class, sign_table, SignDecoder, SignTables, PLANE_SIGN, SIGN_CLASSES, SIGN_FIRST,
            SIGN_PLANES_ONLY, SIGN_SET_BYTES, SIGN_TABLES, VERSION_SIGN,
        };
    }
    /// The difference chunk's constants and its transform (stream version 5).
    pub mod difference {
        pub use crate::difference::{
            order, unorder, unzigzag, zigzag, CHUNK_DIFFERENCE, VERSION_DIFFERENCE,
        };
    }
    /// The tail-dictionary chunk's constants (header flag `T`).
    pub mod tails {
        pub use crate::tails::{CHUNK_TAILS, MAX_TAILS, TAIL_BYTES};
    }
    /// The block-scaled chunk's constants and its element rule.
    pub mod scaled {
        pub use crate::scaled::{
            product, BLOCK_LOG2_RANGE, CHUNK_SCALED, ENCODER_BLOCK_LOG2, VERSION_SCALED,
        };
    }
}

use model::{histogram, Table, TableForm};
use planepack_core::codec::check_output_len;
use planepack_core::error::{stream_header, take};
use planepack_core::{Codec, ElemType, Error, Result};
use rayon::prelude::*;

/// Whether a thread keeps its coding scratch for its next call ([`planepack_core::scratch`])
/// after coding chunks of `chunk_bytes`: where they are of at most the default size. Then
/// the encoder's stays about 1.2 MiB a thread and the decoder's 0.1-0.5 MiB (counted after the
/// workloads' largest tensors); a larger chunk's, which grows with the chunk, is dropped.
pub(crate) fn scratch_kept(chunk_bytes: usize) -> bool {
    chunk_bytes <= 1 << DEFAULT_CHUNK_LOG2
}

/// Stream magic.
pub const MAGIC: [u8; 4] = *b"PPRA";
/// Format version: 8 when a plane 1 is coded with the stream's sign tables, else 7 when a row plane's lane count does not divide the row distance, else 6
/// when a plane 0 is coded with the stream's row tables, else 5 when a
/// chunk is a difference chunk (mode 5), else 4 when a plane is coded with the stream's
/// context tables, else 3 when a chunk is block-scaled (mode 4), else 2 when a chunk is
/// modelled (mode 3), else 1 (the streams of the first version, byte for byte but for the
/// header flags added since: compact tables, the short header). Decoders read all eight.
pub const VERSION: u8 = sign_contexts::VERSION_SIGN;
/// The version that allows modelled chunks (mode 3).
pub const VERSION_MODELLED: u8 = 2;
/// Bytes of the stream header.
pub const HEADER_BYTES: usize = 16;
/// Header flag bit 0: elements were rotated.
pub const FLAG_ROTATED: u8 = 1;
/// Header flag bit 1: a row map follows the header.
pub const FLAG_ROWS: u8 = 2;
/// Header flag bit 2: every frequency table is in the compact form (module `compact`).
pub const FLAG_COMPACT_TABLES: u8 = 4;
/// Header flag bit 3: chunks may be tail-dictionary chunks (mode 6, module `tails`), in a
/// stream of any version. A flag rather than a version: a version implies every section of
/// the versions before it (from 6, the row tables), which a tensor whose only new chunks are
/// these has no use for.
pub const FLAG_TAILS: u8 = 8;
/// Header flag bit 7: the short header of a stream whose body is at most one chunk (module
/// `header`): the flags byte at offset 6, in the chunk-size byte's place (no chunk size has
/// bit 7 set), the raw length as a LEB128 varint, no chunk table. Never set in the long form.
pub const FLAG_SHORT_HEADER: u8 = 0x80;
/// Bytes of the short header before its raw length (magic, version, width, flags).
pub const SHORT_HEADER_FIXED_BYTES: usize = 7;
/// The most body bytes a short header's single chunk may hold (the largest chunk, 2^20).
pub const SHORT_HEADER_MAX_BODY: usize = 1 << *CHUNK_LOG2_RANGE.end();
/// Chunk sizes the format allows: 2^12 (4 KiB) to 2^20 (1 MiB) bytes.
pub const CHUNK_LOG2_RANGE: std::ops::RangeInclusive<u8> = 12..=20;
/// Default chunk: 64 KiB (see `bench-results/rans-study.md` for the measurement).
pub const DEFAULT_CHUNK_LOG2: u8 = 16;
/// The most elements of a chunk [`Rans::chunk_search`] tries: a modelled chunk's 8 lanes
/// (`modelled::lanes_for`) of at most 16384 elements, the longest lane planepack-gpu's kernel
/// decodes in one invocation (its `MAX_MODELLED_LANE`; its tests check the two agree), so
/// that every stream the search writes decodes on a GPU.
pub const SEARCH_MAX_CHUNK_ELEMENTS: usize = 1 << 17;

/// The chunk sizes (log2 of bytes) [`Rans::chunk_search`] chooses among for elements of
/// `width` bytes, smallest first: 4, 16 and 64 KiB, and the largest chunk of at most
/// [`SEARCH_MAX_CHUNK_ELEMENTS`] (128 KiB of bytes, 256 KiB of 16-bit elements, 512 KiB of
/// FP32). No one size is best: on the workloads a CNN's largest feature maps store fewest
/// bytes in 16 KiB chunks (tables that follow the image's regions), a transformer's
/// activations in the largest (fewer tables and lane headers), tensor by tensor
/// (`bench-results/rans-study-workloads.md`).
pub fn search_chunk_log2(width: usize) -> [u8; 4] {
    let largest = SEARCH_MAX_CHUNK_ELEMENTS.ilog2() + width.max(1).ilog2();
    [12, 14, 16, largest as u8]
}

/// Chunk modes (the modelled chunk's is [`modelled::CHUNK_MODELLED`]).
pub const CHUNK_RAW: u8 = 0;
pub const CHUNK_DENSE: u8 = 1;
pub const CHUNK_SPARSE: u8 = 2;
/// Plane kinds.
pub const PLANE_RAW: u8 = 0;
pub const PLANE_CONST: u8 = 1;
pub const PLANE_RANS: u8 = 2;

/// The least fraction of a chunk's estimated planes size a modelled chunk must save for the
/// encoder to write it (informative: decoders take either).
pub const MODELLED_MIN_GAIN: f64 = 0.01;

/// Which parts of the model the encoder may use (all, by default; the study turns them off
/// one at a time to show what each buys). Decoders take any stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rans {
    /// log2 of the chunk size in bytes, in [`CHUNK_LOG2_RANGE`].
    pub chunk_log2: u8,
    /// Try the zero mask on chunks with at least one zero element in eight.
    pub zero_mask: bool,
    /// Rotate the sign bit to the bottom before splitting where a sample of the tensor says
    /// the planes come out smaller (off: never, plain byte planes).
    pub rotate: bool,
    /// Code repeated rows as references to earlier ones ([`RowMap`]; needs a shape).
    pub rows: bool,
    /// Try the modelled chunk (`modelled`: runs, repeated values, neighbours' magnitudes)
    /// and keep it where it is smaller.
    pub modelled: bool,
    /// Try block-scaled chunks (`scaled`: FP32 blocks that are a scale times small
    /// integers) and keep them where they are smaller.
    pub scaled: bool,
    /// Code plane 1 with the exponent as context (`contexts`, stream version 4) where a
    /// sample of the tensor says it pays and a chunk's plane comes out smaller that way.
    pub contexts: bool,
    /// Try difference chunks (`difference`: the steps between neighbouring elements as
    /// planes, stream version 5) where a sample of the tensor says they may pay, and keep
    /// them where they are smaller. Every decoder (CPU, both GPU scan paths) reads them.
    pub differences: bool,
    /// Code plane 0 with the exponent of the element one row up as context
    /// (`row_contexts`, stream version 6; needs a shape) where the tensor's tables pay and
    /// a chunk's plane comes out smaller that way.
    pub row_contexts: bool,
    /// Code plane 1 of 2-byte elements with the exponent and the sign one row up as context
    /// (`sign_contexts`, stream version 8; needs a shape) where a sample says the sign one
    /// row up tells the sign, the tensor's tables pay and a chunk's plane comes out smaller
    /// that way.
    pub sign_contexts: bool,
    /// Write every frequency table in the compact form (header flag bit 2, module
    /// `compact`: varint frequencies, the last implied, symbols as runs), about a third of
    /// the wide form's bytes. Off: the wide tables every decoder before the flag reads.
    pub compact_tables: bool,
    /// Try tail-dictionary chunks (`tails`: FP32 chunks with at most 256 distinct low
    /// three bytes, header flag `T`) and keep them where they are smaller. Every decoder (CPU,
    /// both GPU scan paths) reads them.
    pub tails: bool,
    /// Choose the chunk size per tensor among [`search_chunk_log2`]'s, by a descent from the
    /// default that keeps the shortest stream it meets (`encode_searched`); `chunk_log2` is
    /// then not used. The codec spec `rans-1`: the ratio end of the trade. It encodes the
    /// tensor two to four times (2-2.3 times `rans`'s encode time on the workloads'
    /// transformer batches, 5.4 on the CNN's, whose maps take small chunks); a plane of a
    /// small chunk has fewer lanes (8 at 16 KiB of BF16, 2 at 4 KiB), which a CPU decodes as
    /// fewer independent chains and a GPU as fewer invocations, and a large chunk gives a GPU
    /// fewer, longer lanes. Decoders take the stream as any other (the chunk size is in its
    /// header).
    pub chunk_search: bool,
}

impl Rans {
    /// Byte planes only: no modelled, block-scaled, difference or tail-dictionary chunks, no
    /// context, row or sign planes, no row map (version-1 streams: what the GPU encoder
    /// writes); the tests of one model start from it.
    pub const PLANES: Rans = Rans {
        rows: false,
        modelled: false,
        scaled: false,
        contexts: false,
        differences: false,
        row_contexts: false,
        sign_contexts: false,
        tails: false,
        ..Rans::DEFAULT
    };
    /// The default model with the chunk size searched per tensor ([`Rans::chunk_search`]):
    /// the codec spec `rans-1`.
    pub const SEARCH: Rans = Rans {
        chunk_search: true,
        ..Rans::DEFAULT
    };
    /// Every part of the model on, 64 KiB chunks: [`Rans::default`], the codec spec `rans`.
    pub const DEFAULT: Rans = Rans {
        chunk_log2: DEFAULT_CHUNK_LOG2,
        zero_mask: true,
        rotate: true,
        rows: true,
        modelled: true,
        scaled: true,
        contexts: true,
        differences: true,
        row_contexts: true,
        sign_contexts: true,
        compact_tables: true,
        tails: true,
        chunk_search: false,
    };
}

impl Default for Rans {
    fn default() -> Self {
        Rans::DEFAULT
    }
}

impl Codec for Rans {
    fn name(&self) -> String {
        // The two the container's catalogue names (`rans`, `rans-1`), spelled as it does.
        if *self == Rans::DEFAULT {
            "rans".into()
        } else if *self == Rans::SEARCH {
            "rans-1".into()
        } else {
            format!(
                "rans-{}{}{}{}{}{}{}{}{}{}{}{}",
                if self.chunk_search {
                    "search".to_owned()
                } else {
                    format!("c{}", self.chunk_log2)
                },
                if self.zero_mask { "" } else { "-nozero" },
                if self.rotate { "" } else { "-norotate" },
                if self.rows { "" } else { "-norows" },
                if self.modelled { "" } else { "-nomodel" },
                if self.scaled { "" } else { "-noscale" },
                if self.contexts { "" } else { "-noctx" },
                if self.differences { "" } else { "-nodiff" },
                if self.row_contexts { "" } else { "-norowctx" },
                if self.sign_contexts { "" } else { "-nosignctx" },
                if self.compact_tables {
                    ""
                } else {
                    "-widetables"
                },
                if self.tails { "" } else { "-notails" }
            )
        }
    }

    fn max_compressed_len(&self, raw_len: usize, elem: ElemType) -> usize {
        // The most chunks come with the smallest chunk the encoder may take.
        let chunk_log2 = if self.chunk_search {
            search_chunk_log2(elem.size())[0]
        } else {
            self.chunk_log2
        };
        let chunk = (1usize << chunk_log2.clamp(12, 20)).max(elem.size());
        // A row map (rows of at least 16 bytes) adds 8 bytes and a bit per row; each copied
        // row it lists saves at least 12 bytes more than it costs. Context tables take at
        // most 2 + 6 (1 + 32 + 512) bytes, row tables 6 + 8 (1 + 32 + 512), sign tables 3 + 18 (1 + 32 + 512).
        HEADER_BYTES
            + raw_len
            + 5 * raw_len.div_ceil(chunk)
            + 5
            + 8
            + raw_len.div_ceil(16 * 8)
            + contexts::MAX_SECTION_BYTES
            + row_contexts::MAX_SECTION_BYTES
            + sign_contexts::MAX_SECTION_BYTES
    }

    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()> {
        self.encode_searched(input, elem, 0, None, false, out)
    }

    /// With a shape, rows (the last dimension) that repeat earlier rows are coded as
    /// references (see [`RowMap`]).
    fn encode_shaped(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.encode_shaped_impl(input, elem, shape, false, out)
    }

    /// Chunks in tasks of [`planepack_core::codec::parallel_task_bytes`] over rayon's
    /// threads: the same bytes as [`Codec::encode_shaped`].
    fn encode_shaped_parallel(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.encode_shaped_impl(input, elem, shape, true, out)
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        Ok(parse_header(compressed)?.raw_len)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_impl(compressed, out, false)
    }

    fn decode_parallel(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_impl(compressed, out, true)
    }
}

impl Rans {
    fn encode_shaped_impl(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        parallel: bool,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let row_bytes = shape.last().copied().unwrap_or(0) * elem.size();
        if self.rows
            && shape.len() >= 2
            && row_bytes >= 16
            && input.len().is_multiple_of(row_bytes)
            && input.len() > row_bytes
        {
            let copies = find_copies(input, row_bytes, elem.size(), parallel);
            if !copies.is_empty() {
                let map = RowMap { row_bytes, copies };
                let row = row_bytes / elem.size();
                return self.encode_searched(input, elem, row, Some(map), parallel, out);
            }
        }
        let row = if shape.len() >= 2 {
            shape.last().copied().unwrap_or(0)
        } else {
            0
        };
        self.encode_searched(input, elem, row, None, parallel, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `out` for a mask and its nonzero elements, one element at a time.
    fn reference(nz: &[u8], mask: &[u8], width: usize, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n * width];
        let mut k = 0;
        for i in 0..n {
            if mask[i / 8] >> (i % 8) & 1 == 1 {
                out[i * width..][..width].copy_from_slice(&nz[k * width..][..width]);
                k += 1;
            }
        }
        out
    }

    /// Every zero expansion this CPU has (the SIMD kernels alone and the dispatching
    /// function) against the reference, for densities from empty to full and every length
    /// around the kernels' group sizes.
    #[test]
    fn zero_expansion_kernels_match_the_reference() {
        let mut seed = 3u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for width in [2usize, 4] {
            for n in (0..80usize).chain([511, 512, 513, 4095]) {
                for density in [0u32, 10, 50, 90, 100] {
                    let mut mask = vec![0u8; n.div_ceil(8)];
                    let mut nz = Vec::new();
                    for i in 0..n {
                        if next() % 100 < density {
                            mask[i / 8] |= 1 << (i % 8);
                            nz.extend((0..width).map(|_| next() as u8 | 1));
                        }
                    }
                    let want = reference(&nz, &mask, width, n);
                    let mut out = vec![0xAAu8; n * width];
                    expand(&nz, &mask, width, &mut out);
                    assert_eq!(out, want, "width {width} n {n} density {density}");
                    #[cfg(target_arch = "x86_64")]
                    {
                        type Kernel = unsafe fn(&[u8], &[u8], usize, &mut [u8]) -> (usize, usize);
                        let mut kernels: Vec<(&str, Kernel)> = Vec::new();
                        if planepack_core::cpu::x86_64_v3() {
                            kernels.push(("v3", planes::v3::expand));
                        }
                        if planepack_core::cpu::avx512() {
                            kernels.push(("avx512", planes::avx512::expand));
                        }
                        for (name, kernel) in kernels {
                            let mut out = vec![0xAAu8; n * width];
                            // SAFETY: the CPU has the kernel's features (checked above); the
                            // mask's population equals nz's element count.
                            let (done, k) = unsafe { kernel(&nz, &mask, width, &mut out) };
                            let ones = (0..done).filter(|i| mask[i / 8] >> (i % 8) & 1 == 1);
                            assert_eq!(k, ones.count(), "{name}");
                            assert_eq!(out[..done * width], want[..done * width], "{name}");
                        }
                    }
                }
            }
        }
    }
}
