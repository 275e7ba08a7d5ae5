//! The bit-plane codec: PlaneZip's block modes in independent 4 KB chunks.
//!
//! A tensor is cut into 128-byte blocks. Each block is coded in whichever of six modes is
//! smallest (RAW, ZVC, BX, DBX, ZBX from PlaneZip, plus ZERO for all-zero blocks), tagged with
//! 3 bits. Thirty-two blocks form a chunk of 4 KB of raw data; each chunk starts with its
//! 16-bit compressed length and then a table of (tag, payload length) per block, so that
//! chunks can be located with a prefix sum over the headers and, inside a chunk, every block
//! can be located with a prefix sum over the table. That is what lets a GPU decode a chunk per
//! workgroup and a block per invocation. The exact byte format is `docs/format-bitplane.md`.
//!
//! The codec works on raw bit patterns (no float arithmetic) and is lossless for every input:
//! NaN payloads, -0.0, subnormals and tails of any length included.
//!
//! Module map: [`geometry`] (elements and planes per width), [`symbols`] (BPC's plane code and
//! base code), [`block`] (mode choice and block payloads), this file (stream and chunks),
//! [`stats`] (per-mode counts and the cost of each format deviation).

pub mod block;
pub mod geometry;
pub mod stats;
pub(crate) mod symbols;

pub use block::Mode;
pub use stats::Stats;

use block::{write, zvc_bits, RAW_BITS};
use geometry::{Geometry, BLOCK_BYTES, W16, W32, W8};
use planepack_core::bitio::{BitReader, SliceBitWriter};
use planepack_core::codec::check_output_len;
use planepack_core::error::{stream_header, take};
use planepack_core::{Codec, ElemType, Error, Result};
use rayon::prelude::*;

/// Stream magic: "PPBP".
pub const MAGIC: [u8; 4] = *b"PPBP";
/// Format version written by this build.
pub const VERSION: u8 = 1;
/// Stream header bytes.
pub const HEADER_BYTES: usize = 16;
/// Blocks per chunk.
pub const CHUNK_BLOCKS: usize = 32;
/// Raw bytes per chunk.
pub const CHUNK_BYTES: usize = CHUNK_BLOCKS * BLOCK_BYTES;
/// Bits of one block-table entry: 3-bit tag + 10-bit payload length.
pub const TABLE_ENTRY_BITS: usize = 13;
/// Largest possible compressed chunk: header, full table, 32 RAW blocks.
pub const MAX_CHUNK_BYTES: usize =
    2 + (CHUNK_BLOCKS * (TABLE_ENTRY_BITS + RAW_BITS as usize)).div_ceil(8);

/// The bit-plane codec. `Default` is the normal encoder; [`BitPlane::forcing`] makes one that
/// uses a single mode wherever it applies (for tests and for measuring each mode alone).
#[derive(Debug, Clone, Copy, Default)]
pub struct BitPlane {
    forced: Option<Mode>,
}

/// What a stream header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Element width in bits: 8, 16 or 32.
    pub width: u32,
    /// Length of the original data in bytes.
    pub raw_len: usize,
}

impl Header {
    fn blocks(&self) -> usize {
        self.raw_len.div_ceil(BLOCK_BYTES)
    }
    fn chunks(&self) -> usize {
        self.raw_len.div_ceil(CHUNK_BYTES)
    }
}

/// Parse and check the 16-byte stream header.
pub fn parse_header(input: &[u8]) -> Result<Header> {
    let h = stream_header(input, HEADER_BYTES, MAGIC, VERSION, "bit-plane")?;
    let width = h[5] as u32;
    if !matches!(width, 8 | 16 | 32) {
        return Err(Error::corrupt_at(
            format!("element width {width} is not 8, 16 or 32"),
            5,
        ));
    }
    if h[6] != 0 || h[7] != 0 {
        return Err(Error::corrupt_at("reserved header bytes are not zero", 6));
    }
    let raw_len = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let raw_len = usize::try_from(raw_len).map_err(|_| {
        Error::corrupt_at(format!("raw length {raw_len} does not fit in memory"), 8)
    })?;
    // Every chunk takes at least its 2-byte header: a length the input cannot hold is a lie.
    let min_len = raw_len
        .div_ceil(CHUNK_BYTES)
        .saturating_mul(2)
        .saturating_add(HEADER_BYTES);
    if min_len > input.len() {
        return Err(Error::Truncated {
            what: "chunk headers",
            offset: HEADER_BYTES,
            needed: min_len - HEADER_BYTES,
            available: input.len() - HEADER_BYTES,
        });
    }
    Ok(Header { width, raw_len })
}

impl BitPlane {
    /// The normal encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder that codes every block in `mode` where it applies and fits under RAW size,
    /// and RAW otherwise. Its streams decode with any decoder.
    pub fn forcing(mode: Mode) -> Self {
        BitPlane { forced: Some(mode) }
    }

    /// Encode and return per-mode statistics.
    pub fn encode_with_stats(
        &self,
        input: &[u8],
        elem: ElemType,
        out: &mut Vec<u8>,
    ) -> Result<Stats> {
        match elem.bits() {
            32 => self.encode_as::<W32>(input, out),
            16 => self.encode_as::<W16>(input, out),
            8 => self.encode_as::<W8>(input, out),
            w => Err(Error::Unsupported(format!("element width {w}"))),
        }
    }

    fn encode_as<G: Geometry>(&self, input: &[u8], out: &mut Vec<u8>) -> Result<Stats> {
        let start = out.len();
        out.reserve(max_len(input.len()));
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, G::W as u8, 0, 0]);
        out.extend_from_slice(&(input.len() as u64).to_le_bytes());
        let mut stats = Stats::default();
        for chunk in input.chunks(CHUNK_BYTES) {
            simd::encode_chunk::<G>(chunk, self.forced, out, &mut stats);
        }
        stats.raw_bytes = input.len() as u64;
        stats.compressed_bytes = (out.len() - start) as u64;
        stats.header_bytes += HEADER_BYTES as u64;
        stats.paper_layout_bytes += HEADER_BYTES as u64;
        Ok(stats)
    }

    /// Decode on all cores (rayon): chunks are independent.
    pub fn decode_all_cores(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        let header = parse_header(compressed)?;
        check_output_len(header.raw_len, out)?;
        let spans = chunk_spans(compressed, &header)?;
        let f = chunk_decoder(header.width);
        out.par_chunks_mut(CHUNK_BYTES)
            .zip(spans.par_iter())
            .enumerate()
            .try_for_each(|(i, (dst, &(s, e)))| f(&compressed[s..e], s, i, dst))
    }
}

fn max_len(raw_len: usize) -> usize {
    HEADER_BYTES + raw_len.div_ceil(CHUNK_BYTES) * MAX_CHUNK_BYTES
}

/// Encode one chunk (up to 4096 bytes; a partial last block is zero padded).
#[inline(always)]
fn encode_chunk<G: Geometry>(
    chunk: &[u8],
    forced: Option<Mode>,
    out: &mut Vec<u8>,
    stats: &mut Stats,
) {
    // Plan every block first: the table, which comes first, needs all payload sizes; then the
    // payloads are written straight behind it.
    let nb = chunk.len().div_ceil(BLOCK_BYTES);
    let mut blocks = [[0u8; BLOCK_BYTES]; CHUNK_BLOCKS];
    let mut plans = [const { None }; CHUNK_BLOCKS];
    for ((plan, block), src) in plans
        .iter_mut()
        .zip(&mut blocks)
        .zip(chunk.chunks(BLOCK_BYTES))
    {
        block[..src.len()].copy_from_slice(src); // a short last block is zero padded
        *plan = Some(block::plan::<G>(block, forced));
    }
    let plans = plans[..nb].iter().map(|p| p.as_ref().unwrap());

    // Room for the largest chunk and the writer's 8 bytes of slack, zeroed; cut to size after.
    let start = out.len();
    out.resize(start + MAX_CHUNK_BYTES + 8, 0);
    let mut w = SliceBitWriter::new(&mut out[start + 2..]);
    let mut payload_bits = 0;
    for p in plans.clone() {
        w.put(p.mode as u64, 3);
        w.put(
            if p.mode == Mode::Raw {
                0
            } else {
                p.bits as u64
            },
            10,
        );
        payload_bits += p.bits as usize;
    }
    for (p, block) in plans.clone().zip(&blocks) {
        write(p, block, &mut w);
    }
    let bits = w.bit_len();
    let len = 2 + bits.div_ceil(8);
    debug_assert!(len <= MAX_CHUNK_BYTES);
    out.truncate(start + len);
    out[start..start + 2].copy_from_slice(&(len as u16).to_le_bytes());

    for p in plans {
        stats.blocks[p.mode as usize] += 1;
        stats.payload_bits[p.mode as usize] += p.bits as u64;
    }
    stats.chunks += 1;
    stats.header_bytes += 2;
    stats.table_bits += (nb * TABLE_ENTRY_BITS) as u64;
    stats.pad_bits += (len - 2) as u64 * 8 - bits as u64;
    stats.paper_layout_bytes += 2 + (3 * nb + payload_bits).div_ceil(8) as u64;
}

/// Locate every chunk of a stream whose header is `header`: (start, end) byte offsets, the
/// 2-byte length field included. Checks each length against its block table and that nothing
/// follows the last chunk. Parallel decoders (all cores, the GPU) start here.
pub fn chunk_spans(input: &[u8], header: &Header) -> Result<Vec<(usize, usize)>> {
    let mut spans = Vec::with_capacity(header.chunks());
    let mut pos = HEADER_BYTES;
    let mut blocks_left = header.blocks();
    for _ in 0..header.chunks() {
        let nb = blocks_left.min(CHUNK_BLOCKS);
        blocks_left -= nb;
        let len =
            u16::from_le_bytes(take(input, pos, 2, "chunk header")?.try_into().unwrap()) as usize;
        let min = 2 + (nb * TABLE_ENTRY_BITS).div_ceil(8);
        if len < min {
            return Err(Error::corrupt_at(
                format!("chunk length {len} is shorter than its header and block table ({min})"),
                pos,
            ));
        }
        take(input, pos, len, "chunk")?;
        spans.push((pos, pos + len));
        pos += len;
    }
    if pos != input.len() {
        return Err(Error::TrailingBytes {
            extra: input.len() - pos,
        });
    }
    Ok(spans)
}

type ChunkDecoder = fn(&[u8], usize, usize, &mut [u8]) -> Result<()>;

/// The chunk decoder for an element width, compiled for the best instruction set this CPU has.
fn chunk_decoder(width: u32) -> ChunkDecoder {
    #[cfg(target_arch = "x86_64")]
    if simd::has_v3() {
        return match width {
            32 => simd::decode_chunk_v3::<W32>,
            16 => simd::decode_chunk_v3::<W16>,
            _ => simd::decode_chunk_v3::<W8>,
        };
    }
    match width {
        32 => decode_chunk::<W32>,
        16 => decode_chunk::<W16>,
        _ => decode_chunk::<W8>,
    }
}

/// Run-time choice of instruction set.
///
/// The codec is plain portable Rust. On x86_64 CPUs with AVX2/BMI1/BMI2/POPCNT/LZCNT
/// (x86-64-v3: Haswell and later, Zen and later), the same code is compiled a second time with
/// those features enabled (population counts, shifts without the `cl` register, wider vectors),
/// and the chunk encoder and decoder dispatch to it. Both versions are the same source, so
/// their output is identical; the tests run whichever this CPU picks, and
/// `PLANEPACK_NO_SIMD=1` forces the portable one.
mod simd {
    #[cfg(target_arch = "x86_64")]
    pub fn has_v3() -> bool {
        use std::sync::OnceLock;
        static V3: OnceLock<bool> = OnceLock::new();
        *V3.get_or_init(|| {
            std::env::var_os("PLANEPACK_NO_SIMD").is_none()
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("bmi1")
                && is_x86_feature_detected!("bmi2")
                && is_x86_feature_detected!("popcnt")
                && is_x86_feature_detected!("lzcnt")
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,popcnt,lzcnt")]
    fn decode_chunk_v3_inner<G: super::Geometry>(
        chunk: &[u8],
        offset: usize,
        index: usize,
        out: &mut [u8],
    ) -> planepack_core::Result<()> {
        super::decode_chunk::<G>(chunk, offset, index, out)
    }

    #[cfg(target_arch = "x86_64")]
    pub fn decode_chunk_v3<G: super::Geometry>(
        chunk: &[u8],
        offset: usize,
        index: usize,
        out: &mut [u8],
    ) -> planepack_core::Result<()> {
        // SAFETY: only handed out by `chunk_decoder` after `has_v3()` confirmed the features.
        unsafe { decode_chunk_v3_inner::<G>(chunk, offset, index, out) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,popcnt,lzcnt")]
    fn encode_chunk_v3_inner<G: super::Geometry>(
        chunk: &[u8],
        forced: Option<super::Mode>,
        out: &mut Vec<u8>,
        stats: &mut super::Stats,
    ) {
        super::encode_chunk::<G>(chunk, forced, out, stats)
    }

    /// Encode a chunk with the best instruction set available.
    pub fn encode_chunk<G: super::Geometry>(
        chunk: &[u8],
        forced: Option<super::Mode>,
        out: &mut Vec<u8>,
        stats: &mut super::Stats,
    ) {
        #[cfg(target_arch = "x86_64")]
        if has_v3() {
            // SAFETY: `has_v3()` confirmed the features.
            return unsafe { encode_chunk_v3_inner::<G>(chunk, forced, out, stats) };
        }
        super::encode_chunk::<G>(chunk, forced, out, stats)
    }
}

/// One entry of a chunk's block table, resolved: mode, first payload bit, payload bits.
#[derive(Clone, Copy)]
struct Entry {
    mode: Mode,
    start: usize,
    bits: usize,
}

/// Where a block's bytes go: straight into the caller's buffer, or, for the tensor's short
/// last block, into `scratch`, copied out by [`short_block_done`].
#[inline(always)]
fn block_buf<'a>(
    dst: &'a mut [u8],
    scratch: &'a mut [u8; BLOCK_BYTES],
) -> (&'a mut [u8; BLOCK_BYTES], Option<&'a mut [u8]>) {
    if dst.len() == BLOCK_BYTES {
        (dst.try_into().unwrap(), None)
    } else {
        (scratch, Some(dst))
    }
}

/// Copy a short last block out of its scratch space; the padding must have decoded to zeros.
fn short_block_done(
    decoded: &[u8; BLOCK_BYTES],
    dst: Option<&mut [u8]>,
) -> std::result::Result<(), &'static str> {
    if let Some(dst) = dst {
        if decoded[dst.len()..].iter().any(|&x| x != 0) {
            return Err("padding after the end of the tensor is not zero");
        }
        dst.copy_from_slice(&decoded[..dst.len()]);
    }
    Ok(())
}

/// Read and check a chunk's block table; returns the entries and the payload end in bits.
#[inline(always)]
fn read_table<G: Geometry>(
    body: &[u8],
    nb: usize,
    entries: &mut [Entry; CHUNK_BLOCKS],
) -> std::result::Result<usize, (usize, String)> {
    let mut table = BitReader::new(body);
    let mut pos = nb * TABLE_ENTRY_BITS;
    for (b, entry) in entries[..nb].iter_mut().enumerate() {
        let tag = table.read(3);
        let len = table.read(10) as usize;
        let mode = Mode::from_tag(tag).ok_or_else(|| (b, format!("reserved mode tag {tag}")))?;
        let bits = match mode {
            Mode::Raw | Mode::Zero if len != 0 => {
                return Err((b, "RAW or ZERO block with a nonzero length field".into()))
            }
            Mode::Raw => RAW_BITS as usize,
            Mode::Zvc if len != zvc_bits::<G>(&BitReader::at(body, pos)) as usize => {
                return Err((b, "ZVC length field disagrees with its mask".into()))
            }
            _ => len,
        };
        *entry = Entry {
            mode,
            start: pos,
            bits,
        };
        pos += bits;
    }
    Ok(pos)
}

/// Decode one chunk (`chunk` includes its 2-byte header and starts at byte `offset` of the
/// stream) into `out` (the chunk's raw bytes, 1..=4096).
///
/// Blocks are decoded two at a time so that their symbol chains overlap (see
/// [`symbols::PlaneDecoder`]).
#[inline(always)]
fn decode_chunk<G: Geometry>(
    chunk: &[u8],
    offset: usize,
    index: usize,
    out: &mut [u8],
) -> Result<()> {
    let fail = |block: usize, rule: &str| {
        Error::corrupt_at(format!("chunk {index}, block {block}: {rule}"), offset)
    };
    let body = &chunk[2..];
    let nb = out.len().div_ceil(BLOCK_BYTES);
    let mut entries = [Entry {
        mode: Mode::Zero,
        start: 0,
        bits: 0,
    }; CHUNK_BLOCKS];
    let end = read_table::<G>(body, nb, &mut entries).map_err(|(b, rule)| fail(b, &rule))?;
    if end.div_ceil(8) != body.len() {
        return Err(fail(
            nb,
            &format!(
                "chunk length {} but its blocks end at {}",
                chunk.len(),
                end.div_ceil(8) + 2
            ),
        ));
    }
    if end % 8 != 0 && BitReader::at(body, end).peek(8 - (end % 8) as u32) != 0 {
        return Err(fail(
            nb,
            "padding bits at the end of the chunk are not zero",
        ));
    }

    for (pair, dst) in out.chunks_mut(2 * BLOCK_BYTES).enumerate() {
        let ia = 2 * pair;
        let (da, db) = dst.split_at_mut(dst.len().min(BLOCK_BYTES));
        let ea = entries[ia];
        let mut scratch_a = [0u8; BLOCK_BYTES];
        let (oa, short_a) = block_buf(da, &mut scratch_a);
        let mut ra = BitReader::at(body, ea.start);
        let pa = block::begin::<G>(ea.mode, &mut ra, oa).map_err(|e| fail(ia, e))?;
        let mut planes_a = G::zero_planes();

        if db.is_empty() {
            if let Some(p_bits) = pa.p_bits() {
                symbols::decode_planes(&mut ra, planes_a.as_mut(), p_bits)
                    .map_err(|e| fail(ia, e))?;
            }
        } else {
            let ib = ia + 1;
            let eb = entries[ib];
            let mut scratch_b = [0u8; BLOCK_BYTES];
            let (ob, short_b) = block_buf(db, &mut scratch_b);
            let mut rb = BitReader::at(body, eb.start);
            let pb = block::begin::<G>(eb.mode, &mut rb, ob).map_err(|e| fail(ib, e))?;
            let mut planes_b = G::zero_planes();
            match (pa.p_bits(), pb.p_bits()) {
                (Some(a_bits), Some(b_bits)) => {
                    let mut a = symbols::PlaneDecoder::new(ra, G::W as usize, a_bits);
                    let mut b = symbols::PlaneDecoder::new(rb, G::W as usize, b_bits);
                    symbols::decode_planes_pair(
                        &mut a,
                        planes_a.as_mut(),
                        &mut b,
                        planes_b.as_mut(),
                    )
                    .map_err(|(which, e)| fail(ia + which, e))?;
                    ra = a.r;
                    rb = b.r;
                }
                (Some(a_bits), None) => symbols::decode_planes(&mut ra, planes_a.as_mut(), a_bits)
                    .map_err(|e| fail(ia, e))?,
                (None, Some(b_bits)) => symbols::decode_planes(&mut rb, planes_b.as_mut(), b_bits)
                    .map_err(|e| fail(ib, e))?,
                (None, None) => {}
            }
            block::finish::<G>(pb, &planes_b, ob).map_err(|e| fail(ib, e))?;
            check_consumed(&rb, eb, chunk.len(), offset)
                .map_err(|e| e.unwrap_or_else(|| fail(ib, LENGTH_MISMATCH)))?;
            short_block_done(ob, short_b).map_err(|e| fail(ib, e))?;
        }
        block::finish::<G>(pa, &planes_a, oa).map_err(|e| fail(ia, e))?;
        check_consumed(&ra, ea, chunk.len(), offset)
            .map_err(|e| e.unwrap_or_else(|| fail(ia, LENGTH_MISMATCH)))?;
        short_block_done(oa, short_a).map_err(|e| fail(ia, e))?;
    }
    Ok(())
}

const LENGTH_MISMATCH: &str = "payload length field disagrees with the decoded symbols";

/// After a block: the reader must not have run past the chunk, and must have consumed exactly
/// the block's declared bits. `Err(None)` = length mismatch (the caller names the block).
fn check_consumed(
    r: &BitReader,
    e: Entry,
    chunk_len: usize,
    offset: usize,
) -> std::result::Result<(), Option<Error>> {
    if r.overran() {
        return Err(Some(Error::Truncated {
            what: "block payload",
            offset,
            needed: r.pos().div_ceil(8) + 2,
            available: chunk_len,
        }));
    }
    if r.pos() - e.start != e.bits {
        return Err(None);
    }
    Ok(())
}

impl Codec for BitPlane {
    fn name(&self) -> String {
        match self.forced {
            None => "bitplane".into(),
            Some(m) => format!("bitplane-{}", m.name().to_ascii_lowercase()),
        }
    }

    fn max_compressed_len(&self, raw_len: usize, _elem: ElemType) -> usize {
        max_len(raw_len)
    }

    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()> {
        self.encode_with_stats(input, elem, out).map(|_| ())
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        parse_header(compressed).map(|h| h.raw_len)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        let header = parse_header(compressed)?;
        check_output_len(header.raw_len, out)?;
        let f = chunk_decoder(header.width);
        let spans = chunk_spans(compressed, &header)?;
        for (i, (dst, &(s, e))) in out.chunks_mut(CHUNK_BYTES).zip(&spans).enumerate() {
            f(&compressed[s..e], s, i, dst)?;
        }
        Ok(())
    }

    fn decode_parallel(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode_all_cores(compressed, out)
    }
}
