//! Context planes (stream version 4): plane 1 coded with the element's exponent as context.
//! Tensors of at least 1 MiB whose mantissa's top bits depend on the exponent (synthetic test
//! input, never a figure) get version-4 streams that are
//! smaller than without contexts and round-trip bit-exactly at every tail length, chunk size
//! and layout; damaged version-4 streams are errors or the right length, never a panic.

use planepack_core::{Codec, ElemType};
use planepack_rans::internals::contexts::{
    ContextTables, CONTEXT_PLANES_ONLY, PLANE_CONTEXT, VERSION_CONTEXT,
};
use planepack_rans::{chunk_spans, parse_header, Rans};
use planepack_testkit::{exponent_dependent_floats, finishes_within, mutate, Mutation, Rng};

fn without_contexts(r: &Rans) -> Rans {
    Rans {
        contexts: false,
        ..*r
    }
}

/// A stream's header agrees with itself: version 4 exactly when it holds context tables (the
/// encoder writes version 4 only once a chunk has written a context plane).
fn has_contexts(enc: &[u8]) -> bool {
    let h = parse_header(enc).unwrap();
    chunk_spans(enc, &h).unwrap();
    assert_eq!(h.version >= VERSION_CONTEXT, h.contexts.is_some());
    h.contexts.is_some()
}

fn round_trip(codec: &Rans, data: &[u8], elem: ElemType) -> Vec<u8> {
    let enc = codec.encode_to_vec(data, elem).unwrap();
    assert!(enc.len() <= codec.max_compressed_len(data.len(), elem));
    let mut par = Vec::new();
    codec
        .encode_shaped_parallel(data, elem, &[data.len() / elem.size()], &mut par)
        .unwrap();
    assert!(par == enc, "parallel encoder wrote other bytes");
    let mut out = vec![0xa5u8; data.len()];
    codec.decode(&enc, &mut out).unwrap();
    assert!(out == data, "{} {elem} len {}", codec.name(), data.len());
    out.fill(0x5a);
    codec.decode_parallel(&enc, &mut out).unwrap();
    assert!(out == data, "parallel: {} {elem}", codec.name());
    enc
}

#[test]
fn exponent_dependent_tensors_take_context_planes_and_round_trip() {
    for (elem, width) in [(ElemType::BF16, 2), (ElemType::F32, 4)] {
        for zero_every in [0, 3] {
            let n = (3 << 20) / width / 2 + 37;
            let data = exponent_dependent_floats(n, width, zero_every, 11 + width as u64);
            for chunk_log2 in [12, 16, 20] {
                let codec = Rans {
                    chunk_log2,
                    ..Rans::default()
                };
                let enc = round_trip(&codec, &data, elem);
                let plain = round_trip(&without_contexts(&codec), &data, elem);
                if elem == ElemType::BF16 {
                    assert_eq!(enc[4], VERSION_CONTEXT, "{elem} zeros 1/{zero_every}");
                    assert!(has_contexts(&enc));
                    assert!(
                        (enc.len() as f64) < plain.len() as f64 * 0.995,
                        "{elem} c{chunk_log2}: {} vs {} without contexts",
                        enc.len(),
                        plain.len()
                    );
                }
                // Never larger than without (the section only where its planes pay).
                assert!(
                    enc.len() <= plain.len(),
                    "{elem} c{chunk_log2}: {} vs {}",
                    enc.len(),
                    plain.len()
                );
            }
        }
    }
}

#[test]
fn every_tail_length_round_trips_with_contexts() {
    let data = exponent_dependent_floats((1 << 20) / 2 + 4096, 2, 5, 3);
    let codec = Rans::default();
    for tail in 0..=3usize {
        let mut d = data.clone();
        d.extend(std::iter::repeat_n(0x7f, tail));
        for elem in [ElemType::BF16, ElemType::F16] {
            round_trip(&codec, &d, elem);
        }
        let mut d4 = exponent_dependent_floats((1 << 20) / 4 + 1024, 4, 0, 4);
        d4.extend(std::iter::repeat_n(0x80, tail));
        round_trip(&codec, &d4, ElemType::F32);
    }
}

#[test]
fn the_context_section_reads_back_and_refuses_bad_sets() {
    let data = exponent_dependent_floats(1 << 20, 2, 0, 9);
    let enc = Rans::default()
        .encode_to_vec(&data, ElemType::BF16)
        .unwrap();
    let h = parse_header(&enc).unwrap();
    let t = *h.contexts.clone().expect("context tables");
    let mut again = Vec::new();
    t.write(&mut again, h.tables);
    assert_eq!(&enc[16..16 + again.len()], &again[..]);
    assert_eq!(
        ContextTables::read(&again, 0, false, h.tables).unwrap().0,
        Some(t)
    );
    // No table, or a seventh context: refused.
    for set in [0u8, 0x40, 0x80] {
        let mut bad = enc.clone();
        bad[17] = set;
        assert!(parse_header(&bad).is_err(), "set {set:#04x}");
    }
    // A context plane in a version-3 stream is an unknown plane kind.
    let mut old = enc.clone();
    old[4] = 3;
    let mut out = vec![0u8; data.len()];
    assert!(Rans::default().decode(&old, &mut out).is_err());
    assert_eq!(PLANE_CONTEXT, 3);
}

#[test]
fn damaged_context_streams_are_errors_or_the_right_length() {
    finishes_within(300, || {
        let codec = Rans {
            chunk_log2: 12,
            ..Rans::default()
        };
        let mut streams = Vec::new();
        for (elem, width, zeros) in [
            (ElemType::BF16, 2, 0),
            (ElemType::BF16, 2, 3),
            (ElemType::F32, 4, 0),
        ] {
            let raw = exponent_dependent_floats((1 << 20) / width + 333, width, zeros, 21);
            let enc = codec.encode_to_vec(&raw, elem).unwrap();
            if elem == ElemType::BF16 {
                assert_eq!(enc[4], VERSION_CONTEXT);
            }
            streams.push((raw, enc));
        }
        let mut rng = Rng(5);
        let mut errors = 0;
        for round in 0..600 {
            let (raw, enc) = &streams[round % streams.len()];
            let m = Mutation::ALL[round % Mutation::ALL.len()];
            let mut bad = mutate(enc, m, &mut rng);
            // Half the damage in the section and the first chunks, where it matters most.
            if round % 2 == 0 && bad.len() == enc.len() {
                bad.copy_from_slice(enc);
                let at = 16 + rng.below(8192) as usize;
                bad[at] ^= 1 << rng.below(8);
            }
            let mut out = vec![0u8; raw.len()];
            let r = codec.decode(&bad, &mut out);
            if bad.len() != enc.len() {
                assert!(r.is_err(), "{m:?}: a stream of another length was accepted");
            }
            errors += usize::from(r.is_err());
            let mut out2 = vec![0u8; raw.len()];
            assert_eq!(r.is_ok(), codec.decode_parallel(&bad, &mut out2).is_ok());
        }
        assert!(errors > 300, "only {errors} of 600 damaged streams refused");
    });
}

/// The rotation decision weighs plane 1's context tables for FP32 (`rotation_pays`): FP32
/// values whose sign goes partly with the exponent (negatives at exponent 126 only, positives
/// at 126 or 129, mantissas random; synthetic, never a figure). Rotated, the sign sits with
/// seven random mantissa bits and costs its full entropy; unrotated it codes with the
/// exponent's top seven bits, and plane 1's contexts recover the exponent's last bit, which
/// its order-0 statistics do not: the order-0 rule (the encoder without context planes)
/// rotates, the default encoder does not, and its stream is the shorter by 1.8 % (0.45 bits
/// an element).
#[test]
fn fp32_rotation_weighs_the_context_tables() {
    let mut rng = Rng(0x005e_ed0f_5197);
    let data: Vec<u8> = (0..1usize << 18)
        .flat_map(|_| {
            let u = rng.unit();
            let (sign, exponent) = match u {
                u if u < 0.3 => (1u32, 126u32),
                u if u < 0.51 => (0, 126),
                _ => (0, 129),
            };
            let mantissa = rng.below(1 << 23) as u32;
            ((sign << 31) | (exponent << 23) | mantissa).to_le_bytes()
        })
        .collect();
    let rotated = |enc: &[u8]| enc[7] & 1 != 0;
    let codec = Rans::default();
    let default = round_trip(&codec, &data, ElemType::F32);
    let order0 = round_trip(&without_contexts(&codec), &data, ElemType::F32);
    assert!(rotated(&order0), "the order-0 rule rotates these");
    assert!(!rotated(&default), "weighed with the contexts, unrotated");
    assert!(has_contexts(&default));
    // Rotated, plane 1 is the mantissa's top bits, which the exponent does not predict:
    // contexts would save nothing there, so the stream without them is what rotating gives.
    let bits = |enc: &[u8]| enc.len() as f64 * 8.0 / (1 << 18) as f64;
    assert!(
        bits(&default) < bits(&order0) - 0.25,
        "unrotated with contexts {:.3} bits an element, rotated without {:.3}",
        bits(&default),
        bits(&order0)
    );
}

/// A stream whose context plane holds an element of a context without a table is corrupt,
/// even where the lanes end right: three of the tensor's context tables are equal
/// ([`planepack_testkit::twin_context_tables_bf16`]), and with context 4's taken out of the
/// section the lanes decode, with the first or the last table (contexts 0 and 5) in its
/// place, the tensor's own bytes.
#[test]
fn a_context_without_its_table_is_refused_where_the_lanes_end_right() {
    let data = planepack_testkit::twin_context_tables_bf16(1400);
    let stream = round_trip(&CONTEXT_PLANES_ONLY, &data, ElemType::BF16);
    assert_eq!(stream[4], VERSION_CONTEXT);
    let tables = parse_header(&stream).unwrap().contexts.unwrap().tables;
    assert!(tables[0].is_some() && tables[0] == tables[4] && tables[5] == tables[4]);
    assert!(tables[3] != tables[4]);
    let absent = ContextTables::without_table(&stream, 4).unwrap();
    let h = parse_header(&absent).unwrap();
    chunk_spans(&absent, &h).unwrap();
    let codec = Rans::default();
    let mut out = vec![0u8; codec.decoded_len(&absent).unwrap()];
    assert!(codec.decode(&stream, &mut out).is_ok());
    assert!(codec.decode(&absent, &mut out).is_err());
    assert!(codec.decode_parallel(&absent, &mut out).is_err());
}
