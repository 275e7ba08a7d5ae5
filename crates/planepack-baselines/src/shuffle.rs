//! Blosc-style filters: byte shuffle or bit shuffle, then LZ4 or zstd.
//!
//! *Byte shuffle* (Blosc's `SHUFFLE`) stores byte 0 of every element, then byte 1 of every
//! element, and so on, so that the slowly varying sign/exponent bytes sit together.
//! *Bit shuffle* (the bitshuffle library's transform) goes one step further: in blocks of
//! `8192 / size` elements it stores bit 0 of every element, then bit 1, ... (bit `8j + k` is
//! bit `k` of byte `j`, little-endian), each plane packed LSB first. Elements left over after
//! the last multiple of 8, and bytes after the last whole element, are stored unshuffled.
//!
//! Stream: 16-byte header (`PPSH`, version 1, kind 0 = byte / 1 = bit, element size, inner
//! codec 0 = LZ4 / 1 = zstd, zero byte, raw length u64 LE), then the inner codec's stream of the
//! shuffled bytes.

use crate::{Lz4, Zstd};
use planepack_core::codec::check_output_len;
use planepack_core::error::stream_header;
use planepack_core::transpose::transpose8;
use planepack_core::{Codec, ElemType, Error, Result};

const MAGIC: [u8; 4] = *b"PPSH";
const HEADER: usize = 16;
/// Bitshuffle block size in bytes (the bitshuffle library's default target).
const BIT_BLOCK_BYTES: usize = 8192;

/// Which shuffle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShuffleKind {
    Byte,
    Bit,
}

/// The compressor after the shuffle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inner {
    Lz4,
    Zstd(i32),
}

impl Inner {
    fn codec(self) -> Box<dyn Codec> {
        match self {
            Inner::Lz4 => Box::new(Lz4),
            Inner::Zstd(level) => Box::new(Zstd { level }),
        }
    }
}

/// Shuffle filter followed by a general-purpose compressor.
#[derive(Debug, Clone, Copy)]
pub struct Shuffle {
    pub kind: ShuffleKind,
    pub inner: Inner,
}

impl Shuffle {
    pub fn new(kind: ShuffleKind, inner: Inner) -> Self {
        Shuffle { kind, inner }
    }
}

/// Byte shuffle of `input` (elements of `size` bytes) into `out` (same length).
pub fn byte_shuffle(input: &[u8], size: usize, out: &mut [u8]) {
    let n = input.len() / size;
    for (i, e) in input.chunks_exact(size).enumerate() {
        for (j, &b) in e.iter().enumerate() {
            out[j * n + i] = b;
        }
    }
    out[n * size..].copy_from_slice(&input[n * size..]);
}

/// Inverse of [`byte_shuffle`].
pub fn byte_unshuffle(input: &[u8], size: usize, out: &mut [u8]) {
    let n = input.len() / size;
    for (i, e) in out.chunks_exact_mut(size).enumerate() {
        for (j, b) in e.iter_mut().enumerate() {
            *b = input[j * n + i];
        }
    }
    out[n * size..].copy_from_slice(&input[n * size..]);
}

/// The blocks of a bit shuffle: `(start byte, elements)`, each a multiple of 8 elements.
fn bit_blocks(len: usize, size: usize) -> impl Iterator<Item = (usize, usize)> {
    let n8 = len / size / 8 * 8;
    let per = BIT_BLOCK_BYTES / size;
    (0..n8)
        .step_by(per)
        .map(move |first| (first * size, per.min(n8 - first)))
}

/// Bit shuffle of `input` into `out` (same length).
pub fn bit_shuffle(input: &[u8], size: usize, out: &mut [u8]) {
    let mut done = 0;
    for (start, m) in bit_blocks(input.len(), size) {
        let src = &input[start..start + m * size];
        let dst = &mut out[start..start + m * size];
        let stride = m / 8;
        for g in 0..stride {
            for j in 0..size {
                let mut rows = [0u8; 8];
                for (r, row) in rows.iter_mut().enumerate() {
                    *row = src[(g * 8 + r) * size + j];
                }
                let t = transpose8(u64::from_le_bytes(rows)).to_le_bytes();
                for (k, &plane_byte) in t.iter().enumerate() {
                    dst[(8 * j + k) * stride + g] = plane_byte;
                }
            }
        }
        done = start + m * size;
    }
    out[done..].copy_from_slice(&input[done..]);
}

/// Inverse of [`bit_shuffle`].
pub fn bit_unshuffle(input: &[u8], size: usize, out: &mut [u8]) {
    let mut done = 0;
    for (start, m) in bit_blocks(input.len(), size) {
        let src = &input[start..start + m * size];
        let dst = &mut out[start..start + m * size];
        let stride = m / 8;
        for g in 0..stride {
            for j in 0..size {
                let mut t = [0u8; 8];
                for (k, b) in t.iter_mut().enumerate() {
                    *b = src[(8 * j + k) * stride + g];
                }
                let rows = transpose8(u64::from_le_bytes(t)).to_le_bytes();
                for (r, &row) in rows.iter().enumerate() {
                    dst[(g * 8 + r) * size + j] = row;
                }
            }
        }
        done = start + m * size;
    }
    out[done..].copy_from_slice(&input[done..]);
}

struct Parsed {
    kind: ShuffleKind,
    size: usize,
    inner: Inner,
    len: usize,
}

fn parse(input: &[u8], expect_inner: Inner) -> Result<Parsed> {
    let h = stream_header(input, HEADER, MAGIC, 1, "shuffle")?;
    let kind = match h[5] {
        0 => ShuffleKind::Byte,
        1 => ShuffleKind::Bit,
        k => return Err(Error::corrupt_at(format!("unknown shuffle kind {k}"), 5)),
    };
    let size = h[6] as usize;
    if !matches!(size, 1 | 2 | 4) {
        return Err(Error::corrupt_at(format!("element size {size}"), 6));
    }
    let inner = match (h[7], expect_inner) {
        (0, Inner::Lz4) => Inner::Lz4,
        (1, Inner::Zstd(l)) => Inner::Zstd(l),
        (c, _) => {
            return Err(Error::corrupt_at(
                format!("inner codec {c} is not this codec's"),
                7,
            ))
        }
    };
    let len = usize::try_from(u64::from_le_bytes(h[8..16].try_into().unwrap()))
        .map_err(|_| Error::corrupt_at("raw length too large", 8))?;
    Ok(Parsed {
        kind,
        size,
        inner,
        len,
    })
}

impl Codec for Shuffle {
    fn name(&self) -> String {
        let k = match self.kind {
            ShuffleKind::Byte => "byteshuffle",
            ShuffleKind::Bit => "bitshuffle",
        };
        match self.inner {
            Inner::Lz4 => format!("{k}-lz4"),
            Inner::Zstd(l) => format!("{k}-zstd-{l}"),
        }
    }

    fn max_compressed_len(&self, raw_len: usize, elem: ElemType) -> usize {
        HEADER + self.inner.codec().max_compressed_len(raw_len, elem)
    }

    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()> {
        let size = elem.size();
        let mut shuffled = vec![0u8; input.len()];
        match self.kind {
            ShuffleKind::Byte => byte_shuffle(input, size, &mut shuffled),
            ShuffleKind::Bit => bit_shuffle(input, size, &mut shuffled),
        }
        out.extend_from_slice(&MAGIC);
        let inner_id = match self.inner {
            Inner::Lz4 => 0,
            Inner::Zstd(_) => 1,
        };
        out.extend_from_slice(&[
            1,
            (self.kind == ShuffleKind::Bit) as u8,
            size as u8,
            inner_id,
        ]);
        out.extend_from_slice(&(input.len() as u64).to_le_bytes());
        self.inner.codec().encode(&shuffled, elem, out)
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        parse(compressed, self.inner).map(|p| p.len)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        let p = parse(compressed, self.inner)?;
        check_output_len(p.len, out)?;
        let inner = p.inner.codec();
        let body = &compressed[HEADER..];
        check_output_len(inner.decoded_len(body)?, out)?;
        let mut shuffled = vec![0u8; p.len];
        inner.decode(body, &mut shuffled)?;
        match p.kind {
            ShuffleKind::Byte => byte_unshuffle(&shuffled, p.size, out),
            ShuffleKind::Bit => bit_unshuffle(&shuffled, p.size, out),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_shuffle_puts_bit_planes_together() {
        // 16 f32 elements: 1.0 (0x3F800000) everywhere. Bit 23..29 set => planes 23..29 full.
        let input: Vec<u8> = (0..16).flat_map(|_| 0x3F80_0000u32.to_le_bytes()).collect();
        let mut out = vec![0u8; input.len()];
        bit_shuffle(&input, 4, &mut out);
        for b in 0..32 {
            let plane = &out[b * 2..b * 2 + 2];
            let expect = if (23..=29).contains(&b) { 0xFF } else { 0 };
            assert_eq!(plane, &[expect, expect], "plane {b}");
        }
    }

    #[test]
    fn byte_shuffle_groups_bytes() {
        let input = [1u8, 2, 3, 4, 5, 6, 7];
        let mut out = [0u8; 7];
        byte_shuffle(&input, 2, &mut out);
        assert_eq!(out, [1, 3, 5, 2, 4, 6, 7]);
    }
}
