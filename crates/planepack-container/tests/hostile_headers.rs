//! Every codec's decoder against header fields at their type's full range.
//!
//! Mutations of valid streams (the robustness tests, the fuzz targets seeded from the datasets)
//! almost never produce a field such as a 2^60 column count or a 2^63 length, and those are
//! what once crashed the IBP reader: a size computed from them wrapped. Here every field of 1,
//! 2, 4 or 8 bytes starting in the first 64 bytes of a valid stream of every codec is set to
//! each extreme value (`planepack_testkit::header_field_variants`), and the decoder must return
//! an error or the right bytes, never panic or hang, and never ask the allocator for more than
//! the stream and the output can justify. The decoders get the buffer a container entry would
//! give them (the original length), an empty one and, where the stream's claimed length is
//! small, a buffer of that length.
//!
//! One test function: the counting allocator's counters are process-wide.

use planepack_container::{CodecId, CodecSpec};
use planepack_core::{Codec, ElemType};
use planepack_testkit::alloc::{peak_during, Counting};
use planepack_testkit::{generate, header_field_pairs, header_field_variants, Pattern};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most a decoder may ask for in one allocation: a multiple of what it was given (the
/// stream and the caller's buffer) plus fixed tables. A decoder sizing anything from an
/// unchecked field asks for gigabytes.
fn allowed(stream: usize, out: usize) -> usize {
    8 * (stream + out) + (4 << 20)
}

/// Decoded lengths above this are not allocated by the test (a claimed length is not a
/// reason to allocate; the other two buffers still run).
const MAX_CLAIMED: usize = 1 << 20;

/// Streams of every codec on inputs that reach their optional structures: IBP rows with
/// invariant bits, rANS zero masks and row maps, bit-plane's modes, Blosc2's filters.
fn streams() -> Vec<(CodecSpec, Vec<u8>, usize)> {
    // 48 rows of 64 F32 values: a ReLU-like sparse half, then rows repeated (row map), so
    // IBP keeps rows and rANS writes a zero mask or a row map.
    let sparse = generate(Pattern::ReluSparse, ElemType::F32, 48 * 256, 7);
    let mut repeated = sparse[..4 * 256].repeat(12);
    repeated.truncate(48 * 256);
    let bf16 = generate(Pattern::Smooth, ElemType::BF16, 6000, 3);
    // Random bits: IBP stores them whole (no rows), rANS and bit-plane code planes raw.
    let noise = generate(Pattern::RandomBits, ElemType::F32, 4000, 5);
    let mut out = Vec::new();
    for id in CodecId::ALL {
        let spec = CodecSpec::from(id);
        let codec = spec.codec();
        for (data, elem, shape) in [
            (&sparse, ElemType::F32, vec![48, 64]),
            (&repeated, ElemType::F32, vec![48, 64]),
            (&bf16, ElemType::BF16, vec![50, 60]),
            (&noise, ElemType::F32, vec![25, 40]),
        ] {
            let mut s = Vec::new();
            codec
                .encode_shaped(data, elem, &shape, &mut s)
                .unwrap_or_else(|e| panic!("{}: encode: {e}", codec.name()));
            out.push((spec, s, data.len()));
        }
    }
    out
}

fn decode_checked(codec: &dyn Codec, stream: &[u8], out_len: usize, what: &str) {
    let mut out = vec![0u8; out_len];
    let ((), p) = peak_during(|| {
        let _ = codec.decode(stream, &mut out);
        let _ = codec.decode_parallel(stream, &mut out);
    });
    assert!(
        p.largest <= allowed(stream.len(), out_len),
        "{what}: a decode into {out_len} bytes asked for {} bytes at once",
        p.largest
    );
}

#[test]
fn every_header_field_at_its_extremes_is_refused_without_panic_or_large_allocation() {
    let streams = streams();
    let mut tried = 0usize;
    planepack_testkit::finishes_within(600, move || {
        for (spec, stream, raw_len) in &streams {
            let codec = spec.codec();
            let singles = header_field_variants(stream, 64).map(|(at, width, value, s)| {
                let what = format!("{width}-byte field at {at} set to {value:#x}");
                (what, s)
            });
            let pairs = header_field_pairs(stream, 48).map(|((a, b), width, s)| {
                let what = format!("{width}-byte fields at {a} and {b} set to {:02x?}", {
                    let mut v = s[a..a + width].to_vec();
                    v.extend_from_slice(&s[b..b + width]);
                    v
                });
                (what, s)
            });
            for (what, s) in singles.chain(pairs) {
                let what = format!("{}: {what}", codec.name());
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    decode_checked(codec.as_ref(), &s, *raw_len, &what);
                    decode_checked(codec.as_ref(), &s, 0, &what);
                    let (claimed, p) = peak_during(|| codec.decoded_len(&s));
                    assert!(
                        p.largest <= allowed(s.len(), 0),
                        "{what}: decoded_len allocates"
                    );
                    if let Ok(n) = claimed {
                        if n <= MAX_CLAIMED && n != *raw_len {
                            decode_checked(codec.as_ref(), &s, n, &what);
                        }
                    }
                }));
                if let Err(e) = r {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    panic!("{what}: panicked: {msg}");
                }
                tried += 1;
            }
        }
        eprintln!("{tried} hostile headers decoded");
    });
}
