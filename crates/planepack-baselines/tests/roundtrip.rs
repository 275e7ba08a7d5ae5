//! Every baseline round-trips every pattern, element type and tail length bit-exactly.

use planepack_core::ElemType;
use planepack_testkit::{generate, Pattern};
use proptest::prelude::*;

fn check(data: &[u8], elem: ElemType) {
    for codec in planepack_baselines::all() {
        let enc = codec.encode_to_vec(data, elem).unwrap();
        assert!(
            enc.len() <= codec.max_compressed_len(data.len(), elem),
            "{}",
            codec.name()
        );
        let dec = codec.decode_to_vec(&enc).unwrap();
        assert!(dec == data, "{} {elem} len {}", codec.name(), data.len());
    }
}

#[test]
fn patterns_and_types() {
    for elem in ElemType::ALL {
        for pattern in Pattern::ALL {
            for len in [0, 1, 3, 127, 128, 129, 4096, 8193, 70_001] {
                check(&generate(pattern, elem, len, len as u64), elem);
            }
        }
    }
}

#[test]
fn every_tail_length_0_to_4097() {
    for elem in ElemType::ALL {
        let data = generate(Pattern::Specials, elem, 4097, 3);
        for len in (0..=4097).step_by(1) {
            check(&data[..len], elem);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    #[test]
    fn random_bytes(data in proptest::collection::vec(any::<u8>(), 0..20_000), e in 0usize..4) {
        check(&data, ElemType::ALL[e]);
    }
}
