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
mod symbols;

pub use block::Mode;
pub use stats::Stats;

use block::{read, write, zvc_bits, Plan, RAW_BITS};
use geometry::{Geometry, BLOCK_BYTES, W16, W32, W8};
use planepack_core::bitio::{BitReader, BitWriter};
use planepack_core::codec::check_output_len;
use planepack_core::error::take;
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
    let h = take(input, 0, HEADER_BYTES, "bit-plane stream header")?;
    let magic: [u8; 4] = h[0..4].try_into().unwrap();
    if magic != MAGIC {
        return Err(Error::BadMagic {
            expected: MAGIC,
            found: magic,
        });
    }
    if h[4] != VERSION {
        return Err(Error::UnsupportedVersion {
            format: "bit-plane",
            version: h[4],
        });
    }
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
            encode_chunk::<G>(chunk, self.forced, out, &mut stats);
        }
        stats.raw_bytes = input.len() as u64;
        stats.compressed_bytes = (out.len() - start) as u64;
        stats.header_bytes += HEADER_BYTES as u64;
        stats.paper_layout_bytes += HEADER_BYTES as u64;
        Ok(stats)
    }

    /// Decode on all cores (rayon): chunks are independent.
    pub fn decode_parallel(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
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
fn encode_chunk<G: Geometry>(
    chunk: &[u8],
    forced: Option<Mode>,
    out: &mut Vec<u8>,
    stats: &mut Stats,
) {
    let mut blocks = [[0u8; BLOCK_BYTES]; CHUNK_BLOCKS];
    let nb = chunk.len().div_ceil(BLOCK_BYTES);
    for (dst, src) in blocks.iter_mut().zip(chunk.chunks(BLOCK_BYTES)) {
        dst[..src.len()].copy_from_slice(src);
    }
    let plans: Vec<Plan<G>> = blocks[..nb]
        .iter()
        .map(|b| block::plan::<G>(b, forced))
        .collect();

    let start = out.len();
    out.extend_from_slice(&[0, 0]);
    let mut w = BitWriter::new(out);
    for p in &plans {
        let len_field = if p.mode == Mode::Raw { 0 } else { p.bits };
        w.write(p.mode as u64, 3);
        w.write(len_field as u64, 10);
    }
    for (p, b) in plans.iter().zip(&blocks) {
        write(p, b, &mut w);
    }
    let bits = w.finish();
    let len = out.len() - start;
    debug_assert!(len <= MAX_CHUNK_BYTES);
    out[start..start + 2].copy_from_slice(&(len as u16).to_le_bytes());

    let payload_bits: u64 = plans.iter().map(|p| p.bits as u64).sum();
    for p in &plans {
        stats.blocks[p.mode as usize] += 1;
        stats.payload_bits[p.mode as usize] += p.bits as u64;
    }
    stats.chunks += 1;
    stats.header_bytes += 2;
    stats.table_bits += (nb * TABLE_ENTRY_BITS) as u64;
    stats.pad_bits += (len - 2) as u64 * 8 - bits as u64;
    stats.paper_layout_bytes += 2 + (3 * nb as u64 + payload_bits).div_ceil(8);
}

/// Locate every chunk: `(start, end)` byte offsets. Checks that chunk lengths are plausible
/// and that the stream ends exactly after the last chunk.
fn chunk_spans(input: &[u8], header: &Header) -> Result<Vec<(usize, usize)>> {
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

fn chunk_decoder(width: u32) -> ChunkDecoder {
    match width {
        32 => decode_chunk::<W32>,
        16 => decode_chunk::<W16>,
        _ => decode_chunk::<W8>,
    }
}

/// Decode one chunk (`chunk` includes its 2-byte header and starts at byte `offset` of the
/// stream) into `out` (the chunk's raw bytes, 1..=4096).
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
    let mut table = BitReader::new(body);
    let mut r = BitReader::at(body, nb * TABLE_ENTRY_BITS);
    for (b, dst) in out.chunks_mut(BLOCK_BYTES).enumerate() {
        let tag = table.read(3);
        let len = table.read(10) as usize;
        let mode =
            Mode::from_tag(tag).ok_or_else(|| fail(b, &format!("reserved mode tag {tag}")))?;
        let expected = match mode {
            Mode::Raw | Mode::Zero if len != 0 => {
                return Err(fail(b, "RAW or ZERO block with a nonzero length field"))
            }
            Mode::Raw => RAW_BITS as usize,
            Mode::Zvc if len != zvc_bits::<G>(&r) as usize => {
                return Err(fail(b, "ZVC length field disagrees with its mask"))
            }
            _ => len,
        };
        let start = r.pos();
        let res = match <&mut [u8; BLOCK_BYTES]>::try_from(&mut *dst) {
            Ok(full) => read::<G>(mode, &mut r, full),
            Err(_) => {
                // The tensor's last block: decode in full, keep the real bytes, insist that
                // the padding the encoder added decodes back to zeros.
                let mut tmp = [0u8; BLOCK_BYTES];
                let res = read::<G>(mode, &mut r, &mut tmp);
                if res.is_ok() && tmp[dst.len()..].iter().any(|&x| x != 0) {
                    return Err(fail(b, "padding after the end of the tensor is not zero"));
                }
                dst.copy_from_slice(&tmp[..dst.len()]);
                res
            }
        };
        res.map_err(|rule| fail(b, rule))?;
        if r.overran() {
            return Err(Error::Truncated {
                what: "block payload",
                offset,
                needed: r.pos().div_ceil(8) + 2,
                available: chunk.len(),
            });
        }
        if r.pos() - start != expected {
            return Err(fail(
                b,
                "payload length field disagrees with the decoded symbols",
            ));
        }
    }
    let used = r.pos().div_ceil(8);
    if used != body.len() {
        return Err(fail(
            nb,
            &format!(
                "chunk length {} but its blocks end at {}",
                chunk.len(),
                used + 2
            ),
        ));
    }
    if r.pos() % 8 != 0 && r.peek(8 - (r.pos() % 8) as u32) != 0 {
        return Err(fail(
            nb,
            "padding bits at the end of the chunk are not zero",
        ));
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
}
