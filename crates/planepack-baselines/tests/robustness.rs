//! Damaged and random streams given to every baseline decoder: an error or wrong bytes of the
//! right length, never a panic or a hang.

use planepack_core::ElemType;
use planepack_testkit::finishes_within;
use planepack_testkit::{generate, mutate, Mutation, Pattern, Rng};

#[test]
fn mutated_streams_never_panic() {
    finishes_within(300, || {
        let mut rng = Rng(11);
        for codec in planepack_baselines::all() {
            let mut streams = Vec::new();
            for (i, elem) in ElemType::ALL.into_iter().enumerate() {
                for p in [Pattern::Mixed, Pattern::ReluSparse, Pattern::Specials] {
                    let raw = generate(p, elem, 500 + 1500 * i, i as u64);
                    let enc = codec.encode_to_vec(&raw, elem).unwrap();
                    streams.push((raw, enc));
                }
            }
            let mut truncations_missed = 0;
            for round in 0..3000 {
                let (raw, enc) = &streams[round % streams.len()];
                let m = Mutation::ALL[round % Mutation::ALL.len()];
                let bad = mutate(enc, m, &mut rng);
                let mut out = vec![0u8; raw.len()];
                let ok = codec.decode(&bad, &mut out).is_ok();
                if ok && m == Mutation::Truncate && !bad.is_empty() && out != *raw {
                    truncations_missed += 1;
                }
                if let Ok(n) = codec.decoded_len(&bad) {
                    if n <= 1 << 24 {
                        let _ = codec.decode_to_vec(&bad);
                    }
                }
            }
            assert_eq!(
                truncations_missed,
                0,
                "{} accepted a truncated stream",
                codec.name()
            );
        }
    });
}

#[test]
fn random_bytes_never_panic() {
    finishes_within(120, || {
        let mut rng = Rng(5);
        for codec in planepack_baselines::all() {
            for _ in 0..2000 {
                let len = rng.below(300) as usize;
                let s: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                let mut out = vec![0u8; rng.below(5000) as usize];
                let _ = codec.decode(&s, &mut out);
                if let Ok(n) = codec.decoded_len(&s) {
                    if n <= 1 << 24 {
                        let _ = codec.decode_to_vec(&s);
                    }
                }
            }
        }
    });
}
