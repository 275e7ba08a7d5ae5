//! Zero-value compression over a whole tensor, as in cDMA (Rhu et al., HPCA 2018).
//!
//! Stream: 16-byte header (`PPZV`, version 1, element size in bytes, two zero bytes, raw length
//! as u64 LE), then for each group of 32 elements a 32-bit little-endian mask (bit `i` set =
//! element `i` of the group is nonzero) followed by the nonzero elements, verbatim. The last
//! group may be shorter; its unused mask bits are zero. Bytes after the last whole element are
//! appended verbatim. An element is "zero" only if every bit is zero (-0.0 is not zero).

use planepack_core::codec::check_output_len;
use planepack_core::error::{stream_header, take};
use planepack_core::{Codec, ElemType, Error, Result};

const MAGIC: [u8; 4] = *b"PPZV";
const HEADER: usize = 16;
const GROUP: usize = 32;

/// cDMA-style ZVC: a 32-bit mask per 32 elements, then the nonzero elements.
#[derive(Debug, Clone, Copy, Default)]
pub struct Zvc;

fn parse(input: &[u8]) -> Result<(usize, usize)> {
    let h = stream_header(input, HEADER, MAGIC, 1, "ZVC")?;
    let size = h[5] as usize;
    if !matches!(size, 1 | 2 | 4) || h[6] != 0 || h[7] != 0 {
        return Err(Error::corrupt_at("bad element size or reserved bytes", 5));
    }
    let len = usize::try_from(u64::from_le_bytes(h[8..16].try_into().unwrap()))
        .map_err(|_| Error::corrupt_at("raw length too large", 8))?;
    Ok((size, len))
}

impl Codec for Zvc {
    fn name(&self) -> String {
        "zvc".into()
    }

    fn max_compressed_len(&self, raw_len: usize, elem: ElemType) -> usize {
        HEADER + raw_len + (raw_len / elem.size()).div_ceil(GROUP) * 4
    }

    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()> {
        let size = elem.size();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[1, size as u8, 0, 0]);
        out.extend_from_slice(&(input.len() as u64).to_le_bytes());
        let whole = input.len() / size * size;
        for group in input[..whole].chunks(GROUP * size) {
            let mask_at = out.len();
            out.extend_from_slice(&[0; 4]);
            let mut mask = 0u32;
            for (i, e) in group.chunks_exact(size).enumerate() {
                if e.iter().any(|&b| b != 0) {
                    mask |= 1 << i;
                    out.extend_from_slice(e);
                }
            }
            out[mask_at..mask_at + 4].copy_from_slice(&mask.to_le_bytes());
        }
        out.extend_from_slice(&input[whole..]);
        Ok(())
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        parse(compressed).map(|(_, len)| len)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        let (size, len) = parse(compressed)?;
        check_output_len(len, out)?;
        let whole = len / size * size;
        let mut pos = HEADER;
        for group in out[..whole].chunks_mut(GROUP * size) {
            let mask =
                u32::from_le_bytes(take(compressed, pos, 4, "ZVC mask")?.try_into().unwrap());
            let n = group.len() / size;
            if n < GROUP && mask >> n != 0 {
                return Err(Error::corrupt_at(
                    "mask bits set past the last element",
                    pos,
                ));
            }
            pos += 4;
            for (i, e) in group.chunks_exact_mut(size).enumerate() {
                if mask & (1 << i) != 0 {
                    let v = take(compressed, pos, size, "ZVC element")?;
                    if v.iter().all(|&b| b == 0) {
                        return Err(Error::corrupt_at("element marked nonzero is zero", pos));
                    }
                    e.copy_from_slice(v);
                    pos += size;
                } else {
                    e.fill(0);
                }
            }
        }
        let tail = take(compressed, pos, len - whole, "ZVC tail bytes")?;
        out[whole..].copy_from_slice(tail);
        pos += tail.len();
        if pos != compressed.len() {
            return Err(Error::TrailingBytes {
                extra: compressed.len() - pos,
            });
        }
        Ok(())
    }
}
