//! The rANS codec's block-scaled chunks (mode 4): the input is turned into FP32 blocks of 32
//! that are an FP16 scale times int8 values (a dequantized Q8_0 table), with some elements
//! knocked off the grid, so that the encoder's factoring and the scaled chunk are reached at
//! all (random bytes almost never factor). decode(encode(x)) == x serially and in parallel, at
//! 4 KiB and 64 KiB chunks; then the stream is damaged where the input's last bytes say and
//! the decoder must return an error or some bytes, never crash or read out of bounds.
//!
//! Input: groups of 34 bytes (a u16 scale as FP16 bits, 32 int8, the first also picking the
//! element set to +-127), then 4 bytes of edits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;

fuzz_target!(|data: &[u8]| {
    let (groups, edits) = data.split_at(data.len() - data.len().min(4));
    let mut tensor = Vec::with_capacity(groups.len() / 34 * 128 + 4);
    for g in groups.chunks(34) {
        if g.len() < 34 {
            // A partial group: its bytes as they are (a tail, or elements that do not factor).
            tensor.extend_from_slice(g);
            break;
        }
        let d = half::f16::from_bits(u16::from_le_bytes([g[0], g[1]])).to_f64();
        // As a Q8_0 block: integers in -127..=127, one of them at the block's largest
        // magnitude (the element the encoder takes its scale from).
        let peak = usize::from(g[2]) % 32;
        for (i, &q) in g[2..].iter().enumerate() {
            let q = match (i == peak, q as i8) {
                (true, q) if q < 0 => -127,
                (true, _) => 127,
                (false, q) => q.max(-127),
            };
            tensor.extend_from_slice(&((d * f64::from(q)) as f32).to_le_bytes());
        }
    }
    for codec in [
        Rans::default(),
        Rans {
            chunk_log2: 12,
            ..Rans::default()
        },
    ] {
        let enc = codec
            .encode_to_vec(&tensor, ElemType::F32)
            .expect("encodes");
        let mut par = Vec::new();
        codec
            .encode_shaped_parallel(&tensor, ElemType::F32, &[tensor.len() / 4], &mut par)
            .expect("the parallel encoder takes what the serial one took");
        assert!(par == enc, "the parallel encoder wrote other bytes");
        let mut out = vec![0u8; tensor.len()];
        codec
            .decode(&enc, &mut out)
            .expect("decodes what it encoded");
        assert!(out == tensor, "does not round-trip");
        out.fill(0);
        codec
            .decode_parallel(&enc, &mut out)
            .expect("decodes in parallel");
        assert!(out == tensor, "does not round-trip in parallel");
        // Damage: set the byte at a position the edits pick (past the 16-byte header).
        if let [a, b, c, v] = *edits {
            if enc.len() > 16 {
                let mut bad = enc.clone();
                let at = 16
                    + usize::from(u16::from_le_bytes([a, b])) * (usize::from(c) + 1)
                        % (enc.len() - 16);
                bad[at] = v;
                let _ = codec.decode(&bad, &mut out);
            }
        }
    }
});
