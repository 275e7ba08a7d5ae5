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
                        scaled: modelled,
                        contexts: modelled,
                        differences: !rotate,
                        row_contexts: modelled,
                        sign_contexts: modelled != zero_mask,
                        // Both table forms, each with every other setting.
                        compact_tables: zero_mask != modelled,
                        tails: modelled != rotate,
                        chunk_search: false,
                    });
                }
            }
        }
    }
    v
}

/// The stream `with` a form is less than `factor` of the stream `without` it.
fn shrinks(with: &[u8], without: &[u8], factor: f64, what: &str) {
    assert!(
        (with.len() as f64) < factor * without.len() as f64,
        "{what}: {} vs {}",
        with.len(),
        without.len()
    );
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

/// `chunk_search` writes one of the fixed-size streams exactly, no longer than the default
/// size's, at a size whose neighbours among the sizes it searches are not shorter (a local
/// minimum: what its descent finds), and round-trips like any other.
#[test]
fn chunk_search_writes_a_local_minimum_of_the_fixed_size_streams() {
    let search = Rans {
        chunk_search: true,
        ..Rans::default()
    };
    for elem in ElemType::ALL {
        for pattern in Pattern::ALL {
            for len in [0, 5, 4096, 9000, 70_001, 300_000] {
                let data = generate(pattern, elem, len, len as u64);
                let shape = [len / elem.size() / 64, 64];
                let shaped = shape[0] * 64 * elem.size() == len && shape[0] > 1;
                let encode = |codec: &Rans| {
                    let mut o = Vec::new();
                    if shaped {
                        codec.encode_shaped(&data, elem, &shape, &mut o).unwrap();
                    } else {
                        codec.encode(&data, elem, &mut o).unwrap();
                    }
                    o
                };
                // The sizes up to the first that holds the whole input (larger ones write
                // the same stream).
                let sizes = planepack_rans::search_chunk_log2(elem.size());
                let holds = sizes.iter().position(|&c| len <= 1 << c).unwrap_or(3);
                let fixed: Vec<Vec<u8>> = sizes[..=holds]
                    .iter()
                    .map(|&chunk_log2| {
                        encode(&Rans {
                            chunk_log2,
                            ..Rans::default()
                        })
                    })
                    .collect();
                let found = encode(&search);
                let what = format!("{elem} {pattern:?} len {len}");
                let at = fixed.iter().position(|f| *f == found).expect(&what);
                let default = encode(&Rans::default());
                assert!(found.len() <= default.len(), "{what}");
                for near in [at.wrapping_sub(1), at + 1] {
                    if let Some(n) = fixed.get(near) {
                        assert!(n.len() >= found.len(), "{what}: size {near} shorter");
                    }
                }
                check(&search, &data, elem);
                if shaped {
                    let mut parallel = Vec::new();
                    search
                        .encode_shaped_parallel(&data, elem, &shape, &mut parallel)
                        .unwrap();
                    assert!(parallel == found, "parallel {what}");
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

/// Rows the planes code in a few bits are not worth a 4-byte reference: a padded, mostly-zero
/// activation (4 zero rows of 11 in each 11x11 map, one nonzero in ten inside) whose zero rows
/// repeat is stored without a row map, in fewer bytes than with every repeated row a copy;
/// the same tensor with dense repeated rows still gets its map.
#[test]
fn cheap_repeated_rows_are_not_copies() {
    let mut rng = planepack_testkit::Rng(5);
    let (maps, side) = (2000usize, 11usize);
    let mut data = Vec::with_capacity(maps * side * side * 2);
    for _ in 0..maps * side * side {
        let v: u16 = if rng.below(10) == 0 {
            0x3f00 | rng.below(256) as u16
        } else {
            0
        };
        data.extend_from_slice(&v.to_le_bytes());
    }
    for m in 0..maps {
        for r in [0, 1, side - 2, side - 1] {
            data[((m * side + r) * side * 2)..][..side * 2].fill(0);
        }
    }
    let shape = [maps, side, side];
    let mut enc = Vec::new();
    Rans::default()
        .encode_shaped(&data, ElemType::BF16, &shape, &mut enc)
        .unwrap();
    let header = planepack_rans::parse_header(&enc).unwrap();
    assert!(header.rows.is_none(), "zero rows became copies");
    let mut out = vec![0u8; data.len()];
    Rans::default().decode(&enc, &mut out).unwrap();
    assert!(out == data);
    // Every repeated zero row as a copy would have cost more than the whole stream does.
    let zero_rows = data
        .chunks_exact(side * 2)
        .filter(|r| r.iter().all(|&b| b == 0))
        .count();
    assert!(enc.len() < 4 * (zero_rows - 1), "{} bytes", enc.len());

    // Dense rows repeated: the map stays.
    let dense: Vec<u8> = (0..maps * side * side)
        .flat_map(|i| (0x3f80u16 | ((i % (3 * side)) as u16 * 7 % 128)).to_le_bytes())
        .collect();
    let mut enc = Vec::new();
    Rans::default()
        .encode_shaped(&dense, ElemType::BF16, &shape, &mut enc)
        .unwrap();
    assert!(planepack_rans::parse_header(&enc).unwrap().rows.is_some());
}

/// FP32 tensors that are a scale per block of 32 times int8 (a dequantized Q8_0 table) are
/// stored block-scaled (version 3): about a byte per element, every tail length, zero blocks,
/// rows, both decoders; a block that does not factor leaves only its chunk as planes.
#[test]
fn block_scaled_tensors_round_trip_and_pay() {
    let codec = Rans::default();
    let data = planepack_testkit::block_scaled_f32(1 << 20, 3, 7);
    let enc = codec.encode_to_vec(&data, ElemType::F32).unwrap();
    assert_eq!(enc[4], planepack_rans::internals::scaled::VERSION_SCALED);
    let ratio = data.len() as f64 / enc.len() as f64;
    assert!(ratio > 3.3, "ratio {ratio}");
    check(&codec, &data, ElemType::F32);
    let planes = Rans {
        scaled: false,
        contexts: false,
        ..Rans::default()
    }
    .encode_to_vec(&data, ElemType::F32)
    .unwrap();
    assert!(planes[4] < 3 && planes.len() as f64 > 2.0 * enc.len() as f64);
    // One element off its block's grid: that chunk (only) is coded another way.
    let mut broken = data.clone();
    broken[70_000 * 4] ^= 1;
    let enc2 = codec.encode_to_vec(&broken, ElemType::F32).unwrap();
    assert!(enc2.len() < enc.len() + 65_536 && enc2.len() > enc.len());
    check(&codec, &broken, ElemType::F32);
    for len in (0..=300).chain([4095, 4096, 4097, 65_535, 65_536, 65_537, 200_003]) {
        for chunk_log2 in [12, 16] {
            let c = Rans {
                chunk_log2,
                ..Rans::default()
            };
            check(
                &c,
                &planepack_testkit::block_scaled_f32(len, len as u64, 3),
                ElemType::F32,
            );
        }
    }
    // A chunk is never longer than raw (mode byte and elements), scaled or not: with a few
    // elements, scales and planes cost more than the elements themselves.
    // (Integers of a Q8_0 block, its peak first, so that every prefix factors.)
    let qs = [
        127.0f64, -5.0, 3.0, 100.0, -127.0, 64.0, 1.0, 2.0, -90.0, 17.0,
    ];
    let mut scaled_short = 0;
    for n in 1..=qs.len() {
        let d: Vec<u8> = qs[..n]
            .iter()
            .flat_map(|q| ((q * 0.003_173_828_125) as f32).to_le_bytes())
            .collect();
        let enc = codec.encode_to_vec(&d, ElemType::F32).unwrap();
        let h = planepack_rans::parse_header(&enc).unwrap();
        for (o, len) in planepack_rans::chunk_spans(&enc, &h).unwrap() {
            assert!(len <= 1 + 4 * n, "{n} elements: a chunk of {len} bytes");
            scaled_short += usize::from(enc[o] == planepack_rans::internals::scaled::CHUNK_SCALED);
        }
        check(&codec, &d, ElemType::F32);
    }
    assert!(scaled_short > 0, "no short chunk was scaled");
    // As rows (row map, "equal to up" rows) and with the other element types (never scaled).
    let rows = [&data[..128 * 576 * 4], &data[..128 * 576 * 4]].concat();
    let mut shaped = Vec::new();
    codec
        .encode_shaped(&rows, ElemType::F32, &[256, 576], &mut shaped)
        .unwrap();
    let mut out = vec![0u8; rows.len()];
    codec.decode(&shaped, &mut out).unwrap();
    assert!(out == rows);
    for elem in [ElemType::BF16, ElemType::F16, ElemType::U8] {
        let enc = codec.encode_to_vec(&data, elem).unwrap();
        let h = planepack_rans::parse_header(&enc).unwrap();
        for (o, _) in planepack_rans::chunk_spans(&enc, &h).unwrap() {
            assert_ne!(
                enc[o],
                planepack_rans::internals::scaled::CHUNK_SCALED,
                "{elem}"
            );
        }
        check(&codec, &data, elem);
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

/// FP32 values with few distinct low three bytes (BF16 values times one scale, with NaN
/// payloads, an infinity, -0.0, subnormals and zeros) are coded as tail-dictionary chunks
/// (header flag T), less than 0.7 of their size without them (4 KiB chunks: the dictionary is a tenth of a chunk), and come back bit for bit in
/// every tail length, chunk size, both decoders, rotated or not; chunks with more than 256
/// tails beside them take the other forms.
#[test]
fn scaled_bf16_values_take_tail_dictionaries() {
    let flag = planepack_rans::FLAG_TAILS;
    for chunk_log2 in [12u8, 16] {
        for rotate in [true, false] {
            let codec = Rans {
                chunk_log2,
                rotate,
                ..Rans::default()
            };
            let data = planepack_testkit::scaled_bf16_f32(50_003, 9);
            let enc = codec.encode_to_vec(&data, ElemType::F32).unwrap();
            assert_eq!(enc[7] & flag, flag, "2^{chunk_log2}");
            let without = Rans {
                tails: false,
                ..codec
            }
            .encode_to_vec(&data, ElemType::F32)
            .unwrap();
            assert_eq!(without[7] & flag, 0);
            shrinks(&enc, &without, 0.7, "tail dictionaries");
            for cut in [0, 1, 2, 3, 5, 4097, 40_001] {
                check(&codec, &data[..data.len() - cut], ElemType::F32);
            }
            // Noise in the middle: those chunks take other forms.
            let mut mixed = data.clone();
            let noise = generate(Pattern::RandomBits, ElemType::F32, 30_000, 4);
            mixed[40_000..70_000].copy_from_slice(&noise);
            check(&codec, &mixed, ElemType::F32);
            // One chunk (the short header).
            check(&codec, &data[..4000], ElemType::F32);
        }
    }
}

/// Smooth values (a random walk in the floats' order, through zero, with NaN payloads, an
/// infinity, -0.0 and subnormals) are coded as difference chunks (version 5), smaller than
/// without them, and come back bit for bit in every tail length, chunk size, width, both
/// decoders; with a zero mask in play (zeros every few elements) too.
#[test]
fn smooth_values_take_difference_chunks() {
    use planepack_rans::internals::difference::VERSION_DIFFERENCE;
    for (elem, width) in [(ElemType::BF16, 2), (ElemType::F32, 4)] {
        for chunk_log2 in [12u8, 16] {
            let codec = Rans {
                chunk_log2,
                differences: true,
                ..Rans::default()
            };
            let data = planepack_testkit::smooth_walk(100_003, width, 3, width as u64);
            let enc = codec.encode_to_vec(&data, elem).unwrap();
            assert_eq!(enc[4], VERSION_DIFFERENCE, "{elem} 2^{chunk_log2}");
            let without = Rans {
                differences: false,
                ..codec
            }
            .encode_to_vec(&data, elem)
            .unwrap();
            shrinks(&enc, &without, 0.8, &format!("{elem} difference chunks"));
            for cut in [0, 1, 2, 3, 5, 4097, 50_001] {
                let mut d = data[..data.len() - cut].to_vec();
                check(&codec, &d, elem);
                // Zeros every seventh element: sparse or modelled chunks compete.
                for e in d.chunks_exact_mut(width).step_by(7) {
                    e.fill(0);
                }
                check(&codec, &d, elem);
            }
        }
    }
}
