//! Every codec's encoder and decoder on a 64 MiB tensor (the container's largest part) of each
//! shape class stays within its documented working memory (`docs/memory.md`): a 1-D tensor
//! (one row to IBP), a few very wide rows, and millions of two-element rows. The counting
//! allocator measures the peak of live heap bytes above the input (encode) or above the input
//! and the output buffer (decode), and the largest single allocation.
//!
//! The inputs are synthetic (ReLU-like sparse floats, so every codec does real work: masks,
//! zero masks, coded planes); this measures memory, not ratios. One test function: the
//! counters are process-wide.

use planepack_container::{CodecId, CodecSpec};
use planepack_core::ElemType;
use planepack_testkit::alloc::{peak_during, Counting};
use planepack_testkit::{generate, Pattern};

#[global_allocator]
static ALLOC: Counting = Counting;

const PART: usize = 64 << 20;

/// The documented bound (`docs/memory.md`): working memory of an encode or a decode as a
/// multiple of the part, above the part itself and the decoder's output buffer. Encoders
/// hold their output (at most about the input) and their own tables; decoders their tables.
fn bound(id: CodecId, encode: bool) -> f64 {
    match (id, encode) {
        // The stored raw bytes; Blosc2 and zstd and LZ4 keep a frame and a work buffer.
        (CodecId::Raw, _) => 1.1,
        // Masks (16 bytes a column), column tables (28), packed rows and their offsets (8
        // bytes a row), the stream.
        (CodecId::Ibp | CodecId::IbpClusters, true) => 3.5,
        (CodecId::Ibp | CodecId::IbpClusters, false) => 1.5,
        (_, true) => 2.5,
        (_, false) => 0.5,
    }
}

#[test]
fn every_codec_stays_within_its_memory_bound_on_a_64_mib_part_of_each_shape() {
    let f32s = generate(Pattern::ReluSparse, ElemType::F32, PART, 11);
    let shapes: [(&str, Vec<usize>); 3] = [
        ("1-D", vec![PART / 4]),
        ("wide rows", vec![16, PART / 64]),
        ("tall columns", vec![PART / 8, 2]),
    ];
    let mut report = String::new();
    let mut failures = Vec::new();
    for id in CodecId::ALL {
        let spec = CodecSpec::from(id);
        let codec = spec.codec();
        for (what, shape) in &shapes {
            let mut payload = Vec::new();
            let (r, enc) =
                peak_during(|| codec.encode_shaped(&f32s, ElemType::F32, shape, &mut payload));
            r.unwrap_or_else(|e| panic!("{} {what}: encode: {e}", codec.name()));
            let mut out = vec![0u8; PART];
            let payload_len = payload.len();
            let (r, dec) = peak_during(|| codec.decode(&payload, &mut out));
            r.unwrap_or_else(|e| panic!("{} {what}: decode: {e}", codec.name()));
            assert!(out == f32s, "{} {what}: round trip", codec.name());
            drop(payload);
            let (e, d) = (enc.peak as f64 / PART as f64, dec.peak as f64 / PART as f64);
            report += &format!(
                "{:<26} {:<13} payload {:>6.3} of raw  encode {e:>5.2} x part  decode {d:>5.2} x part\n",
                codec.name(),
                what,
                payload_len as f64 / PART as f64
            );
            if e > bound(id, true) || d > bound(id, false) {
                failures.push(format!(
                    "{} {what}: encode {e:.2} (bound {}), decode {d:.2} (bound {})",
                    codec.name(),
                    bound(id, true),
                    bound(id, false)
                ));
            }
        }
    }
    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "over the bound:\n{}",
        failures.join("\n")
    );
}
