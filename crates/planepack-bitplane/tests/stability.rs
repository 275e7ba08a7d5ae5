//! Format stability: the encoder's exact bytes, pinned.
//!
//! The encoder picks among equally valid codings (mode ties, symbol priorities), so a faster
//! rewrite could change the bytes and still round-trip. Streams are stored and shipped, and the
//! GPU decoder and the format spec are checked against what this encoder writes, so its output
//! is pinned: a hash over the streams of every pattern, element type and forced mode, taken
//! from the encoder as first released. A deliberate format change updates the constant (and the
//! stream version).

use planepack_bitplane::{BitPlane, Mode};
use planepack_core::{Codec, ElemType};
use planepack_testkit::{encode_on_4_threads, generate, Pattern};

/// FNV-1a, 64 bit: tiny and fixed forever, unlike std's hasher.
fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

#[test]
fn encoder_output_is_unchanged() {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut codecs = vec![BitPlane::new()];
    codecs.extend(Mode::ALL.map(BitPlane::forcing));
    for codec in &codecs {
        for elem in [ElemType::F32, ElemType::BF16, ElemType::U8] {
            for pattern in Pattern::ALL {
                for len in [0, 1, 130, 4096, 3 * 4096 + 77] {
                    let data = generate(pattern, elem, len, len as u64 * 7 + 3);
                    fnv1a(&mut h, &codec.encode_to_vec(&data, elem).unwrap());
                }
            }
        }
    }
    assert_eq!(
        h, 0x3f43_9002_a16d_81b8,
        "encoder output changed: {h:#018x}"
    );
}

/// The parallel encoder writes the serial encoder's bytes, on a pool of 4 threads whatever the
/// machine has (tensors of many tasks, every pattern and width, every forced mode).
#[test]
fn parallel_encoder_writes_the_same_bytes() {
    let mut codecs = vec![BitPlane::new()];
    codecs.extend(Mode::ALL.map(BitPlane::forcing));
    for codec in &codecs {
        for elem in [ElemType::F32, ElemType::BF16, ElemType::U8] {
            for pattern in Pattern::ALL {
                let len = 1_500_000 / elem.size() + 77;
                let data = generate(pattern, elem, len, 11);
                let serial = codec.encode_to_vec(&data, elem).unwrap();
                let parallel = encode_on_4_threads(codec, &data, elem, &[len]);
                assert!(serial == parallel, "{} {elem:?} {pattern:?}", codec.name());
            }
        }
    }
}
