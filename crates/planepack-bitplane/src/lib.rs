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
//! Module map: [`geometry`] (elements and planes per width), `symbols` (BPC's plane code and
//! base code), [`block`] (mode choice and block payloads), this file (stream and chunks),
//! [`stats`] (per-mode counts and the cost of each format deviation).

pub mod block;
mod delta;
pub mod geometry;
mod mode_finish;
mod nonzero;
mod raw_tail;
pub mod stats;
pub(crate) mod symbols;

pub use block::Mode;
pub use stats::Stats;

use block::{write, zvc_bits, RAW_BITS};
use geometry::{Geometry, BLOCK_BYTES, W16, W32, W8};
use planepack_core::bitio::{BitReader, SliceBitWriter};
use planepack_core::codec::check_output_len;
use planepack_core::error::{stream_header, take};
use planepack_core::{cpu, Codec, ElemType, Error, Result};
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
/// Bytes of a full chunk's block table.
const TABLE_BYTES: usize = (CHUNK_BLOCKS * TABLE_ENTRY_BITS).div_ceil(8);
/// Bits of the tag at the bottom of a block-table entry.
pub const TAG_BITS: u32 = 3;
/// Largest possible compressed chunk: header, full table, 32 RAW blocks.
pub const MAX_CHUNK_BYTES: usize =
    2 + (CHUNK_BLOCKS * (TABLE_ENTRY_BITS + RAW_BITS as usize)).div_ceil(8);

/// Write a stream header for `raw_len` bytes of `width`-bit elements (the chunks follow): the
/// one writer of the header, for the CPU encoder and the GPU encoder (`planepack-gpu`).
pub fn write_header(width: u32, raw_len: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, width as u8, 0, 0]);
    out.extend_from_slice(&(raw_len as u64).to_le_bytes());
}

/// The prefix codes of the plane symbols and the DBX base element, by name.
pub use symbols::CODES;

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
        write_header(G::W, input.len(), out);
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

    /// [`BitPlane::encode_as`] with tasks of whole chunks coded on rayon's threads into buffers
    /// of their own, then appended in order (on rayon's threads too).
    fn encode_parallel_as<G: Geometry>(&self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let task = planepack_core::codec::parallel_task_bytes(input.len(), CHUNK_BYTES);
        out.reserve(max_len(input.len()));
        write_header(G::W, input.len(), out);
        let parts: Vec<Vec<u8>> = input
            .par_chunks(task)
            .map(|part| {
                let mut bytes = Vec::with_capacity(max_len(part.len()));
                let mut stats = Stats::default();
                for chunk in part.chunks(CHUNK_BYTES) {
                    simd::encode_chunk::<G>(chunk, self.forced, &mut bytes, &mut stats);
                }
                bytes
            })
            .collect();
        planepack_core::codec::append_parts(out, &parts);
        Ok(())
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

/// The room a chunk's table and payloads are written in: the largest chunk after its length
/// field, and the writer's 16 bytes of slack (`put_wide`). An array, so that the writer's
/// bound checks compare with a constant.
const PAYLOAD_ROOM: usize = MAX_CHUNK_BYTES - 2 + 16;

fn max_len(raw_len: usize) -> usize {
    HEADER_BYTES + raw_len.div_ceil(CHUNK_BYTES) * MAX_CHUNK_BYTES
}

/// Encode one chunk (up to 4096 bytes; a partial last block is zero padded).
#[inline(always)]
fn encode_chunk<G: Geometry, const T: u8>(
    chunk: &[u8],
    forced: Option<Mode>,
    out: &mut Vec<u8>,
    stats: &mut Stats,
) {
    // The table comes first and needs every payload's size, but its own size is known from the
    // block count: each block's payload is written where it belongs as soon as it is planned,
    // its table entry into a buffer of its own, OR-ed in front at the end.
    let nb = chunk.len().div_ceil(BLOCK_BYTES);
    let table_bits = nb * TABLE_ENTRY_BITS;
    // Blocks are read in place; only a short last block is copied, zero padded. (Walking
    // `as_chunks` and the tail instead took FP32 2 % faster and BF16 3-4 % slower.)
    let mut tail = [0u8; BLOCK_BYTES];
    let full = chunk.len() / BLOCK_BYTES;
    tail[..chunk.len() - full * BLOCK_BYTES].copy_from_slice(&chunk[full * BLOCK_BYTES..]);
    let block_at = |b: usize| -> &[u8; BLOCK_BYTES] {
        match chunk.get(b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES) {
            Some(x) => x.try_into().unwrap(),
            None => &tail,
        }
    };

    // The chunk's room (`PAYLOAD_ROOM`), zeroed; cut to size after.
    let start = out.len();
    out.resize(start + 2 + PAYLOAD_ROOM, 0);
    let room: &mut [u8; PAYLOAD_ROOM] = (&mut out[start + 2..]).try_into().unwrap();
    let mut w = SliceBitWriter::at_bit(room, table_bits);
    let mut table = [0u8; TABLE_BYTES + 8];
    let mut t = SliceBitWriter::new(&mut table);
    // The chunk's mode counts and bits, added to `stats` once at the end (per block, their
    // read-modify-writes in memory were a few percent of encoding FP32). Two arrays, not a
    // local `Stats` and `Stats::add`: that cost the BF16 batches 5 % (measured, alternated).
    let mut blocks = [0u64; 6];
    let mut bits_by_mode = [0u64; 6];
    for b in 0..nb {
        let block = block_at(b);
        let p = block::plan::<G, T>(block, forced);
        // The table entry, tag first, as one field.
        let length = if p.mode == Mode::Raw {
            0
        } else {
            p.bits as u64
        };
        t.put(p.mode as u64 | length << TAG_BITS, TABLE_ENTRY_BITS as u32);
        write(&p, block, &mut w);
        blocks[p.mode as usize] += 1;
        bits_by_mode[p.mode as usize] += p.bits as u64;
    }
    let payload_bits: u64 = bits_by_mode.iter().sum();
    for m in 0..6 {
        stats.blocks[m] += blocks[m];
        stats.payload_bits[m] += bits_by_mode[m];
    }
    let bits = w.bit_len();
    debug_assert_eq!(bits as u64, table_bits as u64 + payload_bits);
    let len = 2 + bits.div_ceil(8);
    debug_assert!(len <= MAX_CHUNK_BYTES);
    out.truncate(start + len);
    for (o, &x) in out[start + 2..]
        .iter_mut()
        .zip(&table[..table_bits.div_ceil(8)])
    {
        *o |= x;
    }
    out[start..start + 2].copy_from_slice(&(len as u16).to_le_bytes());

    stats.chunks += 1;
    stats.header_bytes += 2;
    stats.table_bits += (nb * TABLE_ENTRY_BITS) as u64;
    stats.pad_bits += (len - 2) as u64 * 8 - bits as u64;
    stats.paper_layout_bytes += 2 + (3 * nb as u64 + payload_bits).div_ceil(8);
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
    if simd::has_v4() {
        return match width {
            32 => simd::decode_chunk_v4::<W32>,
            16 => simd::decode_chunk_v4::<W16>,
            _ => simd::decode_chunk_v4::<W8>,
        };
    }
    #[cfg(target_arch = "x86_64")]
    if simd::has_v3() {
        return match width {
            32 => simd::decode_chunk_v3::<W32>,
            16 => simd::decode_chunk_v3::<W16>,
            _ => simd::decode_chunk_v3::<W8>,
        };
    }
    match width {
        32 => decode_chunk::<W32, { cpu::PORTABLE }>,
        16 => decode_chunk::<W16, { cpu::PORTABLE }>,
        _ => decode_chunk::<W8, { cpu::PORTABLE }>,
    }
}

/// Run-time choice of instruction set.
///
/// The codec is plain portable Rust. On x86_64 CPUs with AVX2/BMI1/BMI2/POPCNT/LZCNT
/// (x86-64-v3: Haswell and later, Zen and later), the same code is compiled a second time with
/// those features enabled (population counts, shifts without the `cl` register, wider vectors),
/// and a third time where AVX-512 F/BW/VL/VBMI/VBMI2 and GFNI are present too (Ice Lake
/// server, Sapphire Rapids, Zen 4 and later): there the block transposes and ZBX's expansion
/// are single instructions that inline into the chunk loops, and plane sizing vectorises over
/// 512 bits. The chunk encoder and decoder dispatch to the best. All are the same source, so
/// their output is identical; a unit test runs every tier this CPU has on the same valid and
/// corrupt chunks, `PLANEPACK_NO_AVX512=1` stops at x86-64-v3 and `PLANEPACK_NO_SIMD=1`
/// forces the portable one.
mod simd {
    use planepack_core::cpu;

    /// The chunk decoder and encoder compiled for one tier: `$decode` (safe; the tier must
    /// have been checked) wraps `$decode_inner`, `$encode_inner` needs the check at its call.
    macro_rules! tier {
        ($features:literal, $tier:expr, $decode:ident, $decode_inner:ident, $encode_inner:ident) => {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = $features)]
            fn $decode_inner<G: super::Geometry>(
                chunk: &[u8],
                offset: usize,
                index: usize,
                out: &mut [u8],
            ) -> planepack_core::Result<()>
            where
                G::Plane: crate::raw_tail::RawTail,
            {
                super::decode_chunk::<G, { $tier }>(chunk, offset, index, out)
            }

            #[cfg(target_arch = "x86_64")]
            pub fn $decode<G: super::Geometry>(
                chunk: &[u8],
                offset: usize,
                index: usize,
                out: &mut [u8],
            ) -> planepack_core::Result<()>
            where
                G::Plane: crate::raw_tail::RawTail,
            {
                // SAFETY: only handed out by `chunk_decoder` (and the tests) after the tier's
                // check in `planepack_core::cpu`.
                unsafe { $decode_inner::<G>(chunk, offset, index, out) }
            }

            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = $features)]
            pub(super) fn $encode_inner<G: super::Geometry>(
                chunk: &[u8],
                forced: Option<super::Mode>,
                out: &mut Vec<u8>,
                stats: &mut super::Stats,
            ) {
                super::encode_chunk::<G, { $tier }>(chunk, forced, out, stats)
            }
        };
    }

    tier!(
        "avx2,bmi1,bmi2,popcnt,lzcnt",
        cpu::X86_64_V3,
        decode_chunk_v3,
        decode_chunk_v3_inner,
        encode_chunk_v3_inner
    );
    // The transposes inline at both tiers; at the AVX-512 tier `mode_finish` and `raw_tail`
    // do too.
    tier!(
        "avx2,bmi1,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,gfni",
        cpu::AVX512,
        decode_chunk_v4,
        decode_chunk_v4_inner,
        encode_chunk_v4_inner
    );

    /// Does the CPU run the x86-64-v3 tier ([`cpu::x86_64_v3`])?
    pub fn has_v3() -> bool {
        cpu::x86_64_v3()
    }

    /// Does the CPU run the AVX-512 tier ([`cpu::avx512`])?
    pub fn has_v4() -> bool {
        cpu::avx512()
    }

    /// Encode a chunk with the best instruction set available.
    pub fn encode_chunk<G: super::Geometry>(
        chunk: &[u8],
        forced: Option<super::Mode>,
        out: &mut Vec<u8>,
        stats: &mut super::Stats,
    ) {
        #[cfg(target_arch = "x86_64")]
        if has_v4() {
            // SAFETY: `has_v4()` confirmed the features.
            return unsafe { encode_chunk_v4_inner::<G>(chunk, forced, out, stats) };
        }
        #[cfg(target_arch = "x86_64")]
        if has_v3() {
            // SAFETY: `has_v3()` confirmed the features.
            return unsafe { encode_chunk_v3_inner::<G>(chunk, forced, out, stats) };
        }
        super::encode_chunk::<G, { cpu::PORTABLE }>(chunk, forced, out, stats)
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
///
/// The common case, a valid table, is read without a branch per entry (modes mix without a
/// pattern, so a `match` on each mode mispredicts); only ZVC entries, a few percent, check
/// their length against their mask. If any rule fails, [`table_error`] finds the first
/// entry that breaks one and names it.
#[inline(always)]
fn read_table<G: Geometry>(
    body: &[u8],
    nb: usize,
    entries: &mut [Entry; CHUNK_BLOCKS],
) -> std::result::Result<usize, (usize, String)> {
    let mut table = BitReader::new(body);
    let mut pos = nb * TABLE_ENTRY_BITS;
    let mut bad = false;
    for entry in entries[..nb].iter_mut() {
        let e = table.read(TABLE_ENTRY_BITS as u32);
        let tag = e & ((1 << TAG_BITS) - 1);
        let len = (e >> TAG_BITS) as usize;
        let raw = tag == Mode::Raw as u64;
        // Tags 6 and 7 are reserved; RAW and ZERO carry no length.
        bad |= tag > Mode::Zero as u64 || ((raw || tag == Mode::Zero as u64) && len != 0);
        let mode = Mode::from_tag(tag.min(Mode::Zero as u64)).unwrap_or(Mode::Zero);
        if mode == Mode::Zvc {
            bad |= len != zvc_bits::<G>(&BitReader::at(body, pos)) as usize;
        }
        let bits = if raw { RAW_BITS as usize } else { len };
        *entry = Entry {
            mode,
            start: pos,
            bits,
        };
        pos += bits;
    }
    if bad {
        return Err(table_error::<G>(body, nb));
    }
    Ok(pos)
}

/// The first entry of a table that [`read_table`] rejected, and the rule it breaks.
#[cold]
fn table_error<G: Geometry>(body: &[u8], nb: usize) -> (usize, String) {
    let mut table = BitReader::new(body);
    let mut pos = nb * TABLE_ENTRY_BITS;
    for b in 0..nb {
        let tag = table.read(3);
        let len = table.read(10) as usize;
        let Some(mode) = Mode::from_tag(tag) else {
            return (b, format!("reserved mode tag {tag}"));
        };
        pos += match mode {
            Mode::Raw | Mode::Zero if len != 0 => {
                return (b, "RAW or ZERO block with a nonzero length field".into())
            }
            Mode::Raw => RAW_BITS as usize,
            Mode::Zvc if len != zvc_bits::<G>(&BitReader::at(body, pos)) as usize => {
                return (b, "ZVC length field disagrees with its mask".into())
            }
            _ => len,
        };
    }
    // Not reached: `read_table` and this function check the same rules.
    (nb, "invalid block table".into())
}

/// Decode one chunk (`chunk` includes its 2-byte header and starts at byte `offset` of the
/// stream) into `out` (the chunk's raw bytes, 1..=4096).
///
/// Two passes over the blocks: first every block's prefix (RAW, ZERO and ZVC blocks are
/// finished there; BX, DBX and ZBX read their base element or mask), then the planes of the
/// others, one block after the other. Kept apart, the first pass's branches on the mode and
/// the second's on symbol kinds predict better (measured: 3-8 % faster than one pass).
/// Stepping two blocks' symbols in turn, which overlaps their position chains, is 5-10 %
/// slower than one block at a time now that the rest of a block is cheap: the two decoders'
/// state spills to the stack and their branches share one history.
#[inline(always)]
fn decode_chunk<G: Geometry, const T: u8>(
    chunk: &[u8],
    offset: usize,
    index: usize,
    out: &mut [u8],
) -> Result<()>
where
    G::Plane: raw_tail::RawTail,
{
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

    // Two passes: every block's prefix (RAW, ZERO and ZVC blocks end there), then the planes
    // of the others. The first pass's mode branches and the second's symbol branches then
    // do not interleave.
    let mut pending = [block::Pending::<G>::Done; CHUNK_BLOCKS];
    let mut readers = [0usize; CHUNK_BLOCKS];
    let mut scratch = [0u8; BLOCK_BYTES];
    for (b, dst) in out.chunks_mut(BLOCK_BYTES).enumerate() {
        let e = entries[b];
        let (o, short) = block_buf(dst, &mut scratch);
        let mut r = BitReader::at(body, e.start);
        pending[b] = block::begin::<G>(e.mode, &mut r, o).map_err(|e| fail(b, e))?;
        readers[b] = r.pos();
        if pending[b].p_bits().is_none() {
            check_consumed(&r, e, chunk.len(), offset)
                .map_err(|e| e.unwrap_or_else(|| fail(b, LENGTH_MISMATCH)))?;
            short_block_done(o, short).map_err(|e| fail(b, e))?;
        }
    }
    for (b, dst) in out.chunks_mut(BLOCK_BYTES).enumerate() {
        let Some(p_bits) = pending[b].p_bits() else {
            continue;
        };
        let e = entries[b];
        let (o, short) = block_buf(dst, &mut scratch);
        let mut r = BitReader::at(body, readers[b]);
        let mut planes = G::zero_planes();
        symbols::decode_planes::<_, T>(&mut r, planes.as_mut(), p_bits, e.start + e.bits)
            .map_err(|e| fail(b, e))?;
        block::finish::<G, T>(pending[b], &planes, o).map_err(|e| fail(b, e))?;
        check_consumed(&r, e, chunk.len(), offset)
            .map_err(|e| e.unwrap_or_else(|| fail(b, LENGTH_MISMATCH)))?;
        short_block_done(o, short).map_err(|e| fail(b, e))?;
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

    /// Chunks in tasks of [`planepack_core::codec::parallel_task_bytes`] on rayon's threads:
    /// the same bytes as [`Codec::encode`] (chunks are coded independently and follow each
    /// other in the stream).
    fn encode_shaped_parallel(
        &self,
        input: &[u8],
        elem: ElemType,
        _shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        match elem.bits() {
            32 => self.encode_parallel_as::<W32>(input, out),
            16 => self.encode_parallel_as::<W16>(input, out),
            8 => self.encode_parallel_as::<W8>(input, out),
            w => Err(Error::Unsupported(format!("element width {w}"))),
        }
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

/// The chunk decoders this CPU can run, by tier: portable, and the x86-64-v3 and AVX-512 builds
/// (for the tier tests and the `tiers` fuzz target).
#[cfg(any(test, fuzzing))]
fn chunk_decoders_at_every_tier<G: Geometry>() -> Vec<(&'static str, ChunkDecoder)>
where
    G::Plane: raw_tail::RawTail,
{
    let mut v: Vec<(&'static str, ChunkDecoder)> =
        vec![("portable", decode_chunk::<G, { cpu::PORTABLE }>)];
    #[cfg(target_arch = "x86_64")]
    {
        if simd::has_v3() {
            v.push(("avx2-bmi2", simd::decode_chunk_v3::<G>));
        }
        if simd::has_v4() {
            v.push(("avx512-vbmi2-gfni", simd::decode_chunk_v4::<G>));
        }
    }
    v
}

/// Decode a whole stream with every tier's chunk decoder this CPU runs; one result per tier.
/// Only in fuzzing builds (`--cfg fuzzing`, set by cargo-fuzz): the `tiers` target checks that
/// all tiers return the same bytes or all an error.
#[cfg(fuzzing)]
pub fn decode_at_every_tier(compressed: &[u8]) -> Result<Vec<(&'static str, Result<Vec<u8>>)>> {
    let header = parse_header(compressed)?;
    let spans = chunk_spans(compressed, &header)?;
    let decoders = match header.width {
        32 => chunk_decoders_at_every_tier::<W32>(),
        16 => chunk_decoders_at_every_tier::<W16>(),
        _ => chunk_decoders_at_every_tier::<W8>(),
    };
    Ok(decoders
        .into_iter()
        .map(|(name, f)| {
            let mut out = vec![0u8; header.raw_len];
            let r = out
                .chunks_mut(CHUNK_BYTES)
                .zip(&spans)
                .enumerate()
                .try_for_each(|(i, (dst, &(s, e)))| f(&compressed[s..e], s, i, dst));
            (name, r.map(|_| out))
        })
        .collect())
}

/// Does this CPU run the AVX-512 chunk decoder? (For tests of its parts.)
#[cfg(test)]
pub(crate) fn simd_has_v4() -> bool {
    #[cfg(target_arch = "x86_64")]
    return simd::has_v4();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// [`symbols::decode_planes`] as the AVX-512 chunk decoder runs it (with the vector tail).
///
/// # Safety
/// [`simd_has_v4`] must be true.
#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(
    enable = "avx2,bmi1,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,gfni"
)]
pub(crate) fn decode_planes_v4<P: raw_tail::RawTail>(
    r: &mut BitReader,
    planes: &mut [P],
    p_bits: u32,
    end: usize,
) -> std::result::Result<(), &'static str> {
    symbols::decode_planes::<P, { cpu::AVX512 }>(r, planes, p_bits, end)
}

#[cfg(test)]
mod tier_tests;
