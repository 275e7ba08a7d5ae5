//! Format stability: the encoder's exact bytes, pinned (as for the bit-plane codec). The GPU
//! decoder and the format spec are checked against what this encoder writes, so a rewrite
//! for speed must not change its output by accident. A deliberate change of the encoder's
//! choices updates the constant (last: the per-stream rotation choice); a change of the
//! format also the stream version.

use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;
use planepack_testkit::{generate, Pattern};

/// FNV-1a, 64 bit.
fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

#[test]
fn encoder_output_is_unchanged() {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for codec in [
        Rans::default(),
        Rans {
            chunk_log2: 12,
            zero_mask: false,
            rotate: false,
            rows: false,
        },
    ] {
        for elem in ElemType::ALL {
            for pattern in Pattern::ALL {
                for len in [0, 1, 130, 4096, 3 * 4096 + 77, 100_000] {
                    let data = generate(pattern, elem, len, len as u64 * 7 + 3);
                    fnv1a(&mut h, &codec.encode_to_vec(&data, elem).unwrap());
                    // The same bytes as rows of 10 elements, repeated: the row map.
                    let rows =
                        [&data[..data.len() / (10 * elem.size()) * 10 * elem.size()]; 3].concat();
                    let mut enc = Vec::new();
                    codec
                        .encode_shaped(
                            &rows,
                            elem,
                            &[rows.len() / (10 * elem.size()), 10],
                            &mut enc,
                        )
                        .unwrap();
                    fnv1a(&mut h, &enc);
                }
            }
        }
    }
    assert_eq!(
        h, 0xe5f9_451a_b848_c388,
        "encoder output changed: {h:#018x}"
    );
}
