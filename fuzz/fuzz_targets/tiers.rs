//! Differential: the bit-plane codec's chunk decoder at every instruction-set tier this CPU
//! runs (portable, x86-64-v3, AVX-512 VBMI2 + GFNI; each compiled with its own transposes,
//! expansion and raw-tail reader) on the same untrusted stream. All must return the same bytes,
//! or all an error: a tier that accepts what another rejects, or decodes it differently, is a
//! bug in one of them. Streams claiming more than the harness affords are skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;

const MAX_OUT: usize = 16 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = planepack_bitplane::parse_header(data) else {
        return;
    };
    if header.raw_len > MAX_OUT {
        return;
    }
    let Ok(results) = planepack_bitplane::decode_at_every_tier(data) else {
        return;
    };
    let (first, rest) = results.split_first().expect("the portable tier always runs");
    for (name, r) in rest {
        match (&first.1, r) {
            (Ok(a), Ok(b)) => assert!(a == b, "{name} decodes differently from {}", first.0),
            (Err(_), Err(_)) => {}
            _ => panic!("{name} and {} disagree on whether the stream is valid", first.0),
        }
    }
});
