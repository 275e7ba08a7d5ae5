//! Every codec's reader with header fields at their type's full range: the structure-aware
//! target. Mutations of valid streams (the `decode` target) almost never turn a column count
//! into 2^60 or a length into 2^63, and such fields are what once crashed the IBP reader (a
//! size computed from two of them wrapped). Here the input picks a codec and a small tensor
//! (its bytes, element type and row length), the target encodes it, and then the input edits
//! up to four fields of the stream's first 64 bytes: a 1-, 2-, 4- or 8-byte little-endian
//! field at an offset aligned to its width, set to an extreme (0, 1, the maximum, the sign
//! bit, 2^16, 2^31, 2^32, 2^60-2^62, 2^k, the field's own value +-1 or doubled) or to bytes
//! from the input. The edited stream goes to the decoder with the buffer a
//! container entry would give (the tensor's length), an empty one, and the length the stream
//! claims when that is small; and to the host-side checks of the GPU engine (chunk offsets of
//! bit-plane and rANS streams, the IBP row layout), which must refuse or describe it within
//! its bytes. Nothing may panic, hang, touch memory out of bounds (ASan) or allocate past
//! libFuzzer's limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_container::{CodecId, CodecSpec};
use planepack_core::ElemType;

const MAX_OUT: usize = 16 << 20;

struct Take<'a>(&'a [u8]);

impl Take<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u64(&mut self, bytes: usize) -> u64 {
        (0..bytes).fold(0, |v, i| v | (self.u8() as u64) << (8 * i))
    }
}

fuzz_target!(|data: &[u8]| {
    let mut t = Take(data);
    let id = CodecId::ALL[t.u8() as usize % CodecId::ALL.len()];
    let elem = [ElemType::U8, ElemType::BF16, ElemType::F16, ElemType::F32][t.u8() as usize % 4];
    let cols = 1 + t.u8() as usize % 64;
    let edits = t.u8() as usize % 5;
    let mut plan = Vec::new();
    for _ in 0..edits {
        // Mostly 8- and 4-byte fields, at offsets aligned to their width (where headers put
        // them), so that two hostile fields meet often enough to be found.
        let width = [8usize, 8, 4, 2, 1, 8, 4, 8][t.u8() as usize % 8];
        let at = (t.u8() as usize % (64 / width)) * width;
        let kind = t.u8();
        let literal = t.u64(8);
        plan.push((at, width, kind, literal));
    }
    // The rest of the input is the tensor, cut to whole elements; repeated so that codecs
    // with rows and chunks see more than one.
    let rest = t.0;
    let mut tensor = rest.repeat(1 + 2048 / rest.len().max(1));
    tensor.truncate(tensor.len() / elem.size() / cols * cols * elem.size());
    let n = tensor.len() / elem.size();
    let shape = if n >= 2 * cols { vec![n / cols, cols] } else { vec![n] };
    let codec = CodecSpec::from(id).codec();
    let mut stream = Vec::new();
    if codec.encode_shaped(&tensor, elem, &shape, &mut stream).is_err() {
        return;
    }
    for (at, width, kind, literal) in plan {
        if at + width > stream.len() {
            continue;
        }
        let bits = 8 * width as u32;
        let max = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let mut own = [0u8; 8];
        own[..width].copy_from_slice(&stream[at..at + width]);
        let own = u64::from_le_bytes(own);
        let value = match kind % 16 {
            0 => 0,
            1 => 1,
            2 => max,
            3 => max >> 1,
            4 => (max >> 1) + 1,
            5 => 1 << 16,
            6 => 1 << 31,
            7 => 1 << 32,
            8 => 1 << 60,
            9 => 1 << 61,
            10 => 1 << 62,
            11 => 1 << ((literal as u32) % bits),
            12 => own.wrapping_add(1),
            13 => own.wrapping_sub(1),
            14 => own.wrapping_mul(2),
            _ => literal,
        } & max;
        stream[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
    }
    let mut out = vec![0u8; tensor.len()];
    let _ = codec.decode(&stream, &mut out);
    let _ = codec.decode_parallel(&stream, &mut out);
    let _ = codec.decode(&stream, &mut []);
    if let Ok(claimed) = codec.decoded_len(&stream) {
        if claimed <= MAX_OUT && claimed != tensor.len() {
            let mut other = vec![0u8; claimed];
            let _ = codec.decode(&stream, &mut other);
        }
    }
    // The GPU engine's host side: what it locates must lie within the stream.
    match id {
        CodecId::BitPlane => {
            if let Ok(h) = planepack_bitplane::parse_header(&stream) {
                // (start, end) of each chunk.
                if let Ok(spans) = planepack_bitplane::chunk_spans(&stream, &h) {
                    assert!(spans.iter().all(|&(s, e)| s <= e && e <= stream.len()));
                }
            }
        }
        CodecId::Rans => {
            if let Ok(h) = planepack_rans::parse_header(&stream) {
                // (offset, length) of each chunk's payload.
                if let Ok(spans) = planepack_rans::chunk_spans(&stream, &h) {
                    assert!(spans.iter().all(|&(o, l)| o + l <= stream.len()));
                }
            }
        }
        CodecId::Ibp | CodecId::IbpClusters => {
            if let Ok(l) = planepack_ibp::stream_layout(&stream) {
                assert!(l.row_offsets.iter().all(|&o| o <= stream.len()));
                assert!(l.tail_offset <= stream.len());
            }
        }
        _ => {}
    }
});
