//! Bit-exact round trips of the bit-plane codec on adversarial and random inputs.

use planepack_bitplane::{BitPlane, Mode};
use planepack_core::{Codec, ElemType};
use planepack_testkit::{generate, Pattern};
use proptest::prelude::*;

fn roundtrip(codec: &BitPlane, data: &[u8], elem: ElemType) {
    let enc = codec.encode_to_vec(data, elem).unwrap();
    assert!(enc.len() <= codec.max_compressed_len(data.len(), elem));
    let dec = codec.decode_to_vec(&enc).unwrap();
    assert!(
        dec == data,
        "{} {elem} len {} mismatch",
        codec.name(),
        data.len()
    );
    let mut par = vec![0xA5u8; data.len()];
    codec.decode_parallel(&enc, &mut par).unwrap();
    assert!(par == data, "parallel decode mismatch");
}

#[test]
fn every_pattern_every_type() {
    for elem in ElemType::ALL {
        for pattern in Pattern::ALL {
            for len in [0, 1, 127, 128, 129, 4095, 4096, 4097, 3 * 4096 + 77, 65536] {
                let data = generate(pattern, elem, len, len as u64 * 31 + 7);
                roundtrip(&BitPlane::new(), &data, elem);
            }
        }
    }
}

#[test]
fn every_tail_length_0_to_4097() {
    for elem in ElemType::ALL {
        let data = generate(Pattern::Mixed, elem, 4097, 99);
        let specials = generate(Pattern::Specials, elem, 4097, 98);
        for len in 0..=4097 {
            roundtrip(&BitPlane::new(), &data[..len], elem);
            roundtrip(&BitPlane::new(), &specials[..len], elem);
        }
    }
}

#[test]
fn unaligned_buffers() {
    for elem in ElemType::ALL {
        let data = generate(Pattern::Mixed, elem, 20_000, 5);
        let mut backing = vec![0u8; data.len() + 8];
        for off in 1..8 {
            backing[off..off + data.len()].copy_from_slice(&data);
            let input = &backing[off..off + data.len()];
            let enc = BitPlane::new().encode_to_vec(input, elem).unwrap();
            // Decode into an unaligned slice as well.
            let mut out = vec![0u8; data.len() + 8];
            BitPlane::new()
                .decode(&enc, &mut out[off..off + data.len()])
                .unwrap();
            assert_eq!(&out[off..off + data.len()], &data[..]);
        }
    }
}

#[test]
fn every_mode_round_trips_when_forced() {
    for mode in Mode::ALL {
        let codec = BitPlane::forcing(mode);
        for elem in ElemType::ALL {
            for pattern in Pattern::ALL {
                let data = generate(pattern, elem, 9000, mode as u64);
                roundtrip(&codec, &data, elem);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_bytes(data in proptest::collection::vec(any::<u8>(), 0..10_000), e in 0usize..4) {
        roundtrip(&BitPlane::new(), &data, ElemType::ALL[e]);
    }

    /// Few distinct byte values: lots of structure, every mode in play.
    #[test]
    fn structured_bytes(data in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), Just(0x80), Just(0x3F), any::<u8>()], 0..10_000), e in 0usize..4) {
        for mode in [None, Some(Mode::Dbx), Some(Mode::Zbx), Some(Mode::Bx)] {
            let codec = mode.map_or(BitPlane::new(), BitPlane::forcing);
            roundtrip(&codec, &data, ElemType::ALL[e]);
        }
    }
}
