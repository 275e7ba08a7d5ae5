//! Every pattern, element type, tail length and encoder setting round-trips bit-exactly
//! (NaN payloads, -0.0, subnormals and infinities included: the codec never does float
//! arithmetic), with the sequential and the parallel decoder.

use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;
use planepack_testkit::{generate, Pattern};
use proptest::prelude::*;

fn settings() -> Vec<Rans> {
    let mut v = Vec::new();
    for chunk_log2 in [12, 16, 20] {
        for zero_mask in [true, false] {
            for rotate in [true, false] {
                for modelled in [true, false] {
                    v.push(Rans {
                        chunk_log2,
                        zero_mask,
                        rotate,
                        rows: true,
                        modelled,
                    });
                }
            }
        }
    }
    v
}

fn check(codec: &Rans, data: &[u8], elem: ElemType) {
    let enc = codec.encode_to_vec(data, elem).unwrap();
    assert!(enc.len() <= codec.max_compressed_len(data.len(), elem));
    assert_eq!(codec.decoded_len(&enc).unwrap(), data.len());
    let mut out = vec![0xa5u8; data.len()];
    codec.decode(&enc, &mut out).unwrap();
    assert!(out == data, "{} {elem} len {}", codec.name(), data.len());
    out.fill(0x5a);
    codec.decode_parallel(&enc, &mut out).unwrap();
    assert!(
        out == data,
        "{} parallel {elem} len {}",
        codec.name(),
        data.len()
    );
}

#[test]
fn patterns_types_and_settings() {
    for codec in settings() {
        for elem in ElemType::ALL {
            for pattern in Pattern::ALL {
                for len in [0, 1, 3, 127, 4096, 8193, 70_001, 300_000] {
                    check(&codec, &generate(pattern, elem, len, len as u64), elem);
                }
            }
        }
    }
}

#[test]
fn every_tail_length_0_to_4097() {
    let codec = Rans {
        chunk_log2: 12,
        ..Rans::default()
    };
    for len in 0..=4097 {
        for elem in ElemType::ALL {
            check(&codec, &generate(Pattern::Mixed, elem, len, 9), elem);
        }
    }
}

#[test]
fn unaligned_input_and_output() {
    let data = generate(Pattern::Specials, ElemType::F32, 50_001, 4);
    let mut shifted = vec![0u8; data.len() + 1];
    shifted[1..].copy_from_slice(&data);
    let codec = Rans::default();
    let enc = codec.encode_to_vec(&shifted[1..], ElemType::F32).unwrap();
    let mut out = vec![0u8; data.len() + 3];
    codec.decode(&enc, &mut out[3..]).unwrap();
    assert_eq!(&out[3..], &data[..]);
}

#[test]
fn real_tensors_round_trip() {
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir).unwrap();
    for d in &manifest.datasets {
        for t in planepack_datasets::load(&dir.join(&d.file)).unwrap() {
            let Some(elem) = planepack_datasets::elem_of(&t.dtype) else {
                continue;
            };
            check(&Rans::default(), &t.data, elem);
        }
    }
}

/// A tensor whose rows repeat earlier rows (in any order, some many times): the rows are
/// coded once and the stream is smaller than without the row map; every layout round-trips.
#[test]
fn repeated_rows_round_trip_and_pay() {
    let mut rng = planepack_testkit::Rng(21);
    for elem in ElemType::ALL {
        for (rows, cols) in [(2usize, 8usize), (50, 7), (300, 64), (1024, 384)] {
            let row_bytes = cols * elem.size();
            let distinct: Vec<Vec<u8>> = (0..rows / 3 + 1)
                .map(|i| {
                    generate(
                        Pattern::ALL[i % Pattern::ALL.len()],
                        elem,
                        row_bytes,
                        i as u64,
                    )
                })
                .collect();
            let data: Vec<u8> = (0..rows)
                .flat_map(|_| distinct[rng.below(distinct.len() as u64) as usize].clone())
                .collect();
            for codec in settings() {
                let mut enc = Vec::new();
                codec
                    .encode_shaped(&data, elem, &[rows, cols], &mut enc)
                    .unwrap();
                assert!(enc.len() <= codec.max_compressed_len(data.len(), elem));
                let mut out = vec![0x33u8; data.len()];
                codec.decode(&enc, &mut out).unwrap();
                assert!(out == data, "{} {elem} {rows}x{cols}", codec.name());
                out.fill(0);
                codec.decode_parallel(&enc, &mut out).unwrap();
                assert!(
                    out == data,
                    "{} parallel {elem} {rows}x{cols}",
                    codec.name()
                );
            }
            if rows >= 300 {
                let flat = Rans::default().encode_to_vec(&data, elem).unwrap();
                let mut shaped = Vec::new();
                Rans::default()
                    .encode_shaped(&data, elem, &[rows, cols], &mut shaped)
                    .unwrap();
                assert!(
                    shaped.len() * 2 < flat.len(),
                    "{} vs {}",
                    shaped.len(),
                    flat.len()
                );
            }
        }
    }
}

/// Zero elements are taken out by the mask: a tensor of 1 % nonzero ones must compress far
/// below what the planes alone give (it is the mask's entropy, about 0.08 bit an element).
#[test]
fn sparse_tensors_cost_about_their_mask() {
    let n = 1 << 20;
    let mut data = vec![0u8; 4 * n];
    let mut x = 12345u64;
    for e in data.chunks_exact_mut(4) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if x >> 57 == 0 {
            e.copy_from_slice(&1.0f32.to_le_bytes());
        }
    }
    let with = Rans::default().encode_to_vec(&data, ElemType::F32).unwrap();
    let without = Rans {
        zero_mask: false,
        ..Rans::default()
    }
    .encode_to_vec(&data, ElemType::F32)
    .unwrap();
    let bits_per_elem = with.len() as f64 * 8.0 / n as f64;
    assert!(bits_per_elem < 0.12, "{bits_per_elem} bits per element");
    assert!(with.len() < without.len());
    check(&Rans::default(), &data, ElemType::F32);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn random_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..20_000), e in 0usize..4) {
        check(&Rans { chunk_log2: 12, ..Rans::default() }, &data, ElemType::ALL[e]);
    }

    #[test]
    fn few_symbol_bytes_round_trip(data in proptest::collection::vec(0u8..3, 0..20_000), e in 0usize..4) {
        check(&Rans { chunk_log2: 12, ..Rans::default() }, &data, ElemType::ALL[e]);
    }
}
