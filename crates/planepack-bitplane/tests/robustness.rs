//! Damaged and random streams: every decoder answers with an error or, where the format
//! cannot tell, with wrong bytes of the right length. Never a panic, never a hang.

use planepack_bitplane::BitPlane;
use planepack_core::{Codec, ElemType, Error};
use planepack_testkit::finishes_within;
use planepack_testkit::{generate, mutate, Mutation, Pattern, Rng};

/// Outcome counts for one codec.
#[derive(Default, Debug)]
struct Tally {
    rejected: usize,
    decoded_same: usize,
    decoded_different: usize,
}

fn attack(
    codec: &dyn Codec,
    streams: &[(Vec<u8>, Vec<u8>)],
    rounds: usize,
    seed: u64,
) -> [Tally; 7] {
    let mut rng = Rng(seed);
    let mut tallies: [Tally; 7] = Default::default();
    for round in 0..rounds {
        let (raw, enc) = &streams[round % streams.len()];
        let (mi, m) = Mutation::ALL
            .iter()
            .enumerate()
            .nth(round % Mutation::ALL.len())
            .unwrap();
        let bad = mutate(enc, *m, &mut rng);
        // Decode into a buffer of the length the caller expects, as a real caller would.
        let mut out = vec![0u8; raw.len()];
        let t = &mut tallies[mi];
        match codec.decode(&bad, &mut out) {
            Err(_) => t.rejected += 1,
            Ok(()) if out == *raw => t.decoded_same += 1,
            Ok(()) => t.decoded_different += 1,
        }
        // The self-describing path too, when the header's length is sane.
        if let Ok(n) = codec.decoded_len(&bad) {
            if n <= 1 << 24 {
                let _ = codec.decode_to_vec(&bad);
            }
        }
    }
    tallies
}

fn corpus(codec: &dyn Codec) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    for (i, elem) in ElemType::ALL.into_iter().enumerate() {
        for (j, p) in Pattern::ALL.into_iter().enumerate() {
            let raw = generate(p, elem, 300 + 997 * (i + j), (i * 10 + j) as u64);
            let enc = codec.encode_to_vec(&raw, elem).unwrap();
            v.push((raw, enc));
        }
    }
    v
}

#[test]
fn mutated_bitplane_streams_never_panic_and_truncation_is_always_caught() {
    let tallies = finishes_within(120, || {
        let codec = BitPlane::new();
        let streams = corpus(&codec);
        attack(&codec, &streams, 20_000, 1)
    });
    for (m, t) in Mutation::ALL.iter().zip(&tallies) {
        println!("{m:?}: {t:?}");
    }
    // The format can always tell a stream that is too short or too long.
    for m in [
        Mutation::Truncate,
        Mutation::Extend,
        Mutation::InsertByte,
        Mutation::DeleteByte,
    ] {
        let t = &tallies[m as usize];
        assert_eq!(
            t.decoded_different + t.decoded_same,
            0,
            "{m:?} went unnoticed: {t:?}"
        );
    }
    // Most single-bit flips are caught by the length fields and structural checks; the rest
    // land in verbatim payload bits, where no format without a checksum can tell.
    let flips = &tallies[Mutation::FlipBit as usize];
    assert!(flips.rejected > 0 && flips.rejected + flips.decoded_different > 0);
}

#[test]
fn random_bytes_never_panic() {
    finishes_within(60, || {
        let codec = BitPlane::new();
        let mut rng = Rng(7);
        for i in 0..20_000 {
            let len = rng.below(600) as usize;
            let mut s: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            // Half of them with a plausible header, so the chunk decoder is reached.
            if i % 2 == 0 && len >= 16 {
                s[0..4].copy_from_slice(b"PPBP");
                s[4] = 1;
                s[5] = [8, 16, 32][i % 3];
                s[6] = 0;
                s[7] = 0;
                s[8..16].copy_from_slice(&(rng.below(9000)).to_le_bytes());
            }
            if let Ok(n) = codec.decoded_len(&s) {
                let mut out = vec![0u8; n];
                let _ = codec.decode(&s, &mut out);
                let _ = codec.decode_parallel(&s, &mut out);
            }
        }
    });
}

#[test]
fn wrong_output_length_is_an_error() {
    let raw = generate(Pattern::Mixed, ElemType::F32, 5000, 1);
    let enc = BitPlane::new().encode_to_vec(&raw, ElemType::F32).unwrap();
    let mut out = vec![0u8; 4999];
    assert!(matches!(
        BitPlane::new().decode(&enc, &mut out),
        Err(Error::OutputLength { .. })
    ));
}
