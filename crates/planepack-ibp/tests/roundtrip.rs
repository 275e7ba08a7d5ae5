//! Bit-exact round trips of IBP rows, groups, gathers, the KV stream and the codec stream.

use planepack_core::{Codec, ElemType};
use planepack_ibp::BitOps;
use planepack_ibp::{
    compress, preprocess, Columns, Ibp, KvStream, Layout, Mask, Rows, Sample, Threshold,
};
use planepack_testkit::{generate, mutate, Mutation, Pattern, Rng};
use proptest::prelude::*;

/// Rows built so that most chunks share their high bits (the case IBP is for), with some
/// rows that never match.
fn structured_rows(n: usize, v: usize, width: u32, seed: u64) -> Vec<u8> {
    let b = (width / 8) as usize;
    let mut rng = Rng(seed);
    let base: Vec<u64> = (0..v).map(|_| rng.next_u64()).collect();
    let mut out = Vec::with_capacity(n * v * b);
    for r in 0..n {
        for &col in &base {
            let x = if r % 7 == 3 {
                rng.next_u64()
            } else {
                (col & !0xFFF) | (rng.next_u64() & 0xFFF)
            };
            out.extend_from_slice(&x.to_le_bytes()[..b]);
        }
    }
    out
}

fn check_group(data: &[u8], row_bytes: usize, width: u32, mask: &Mask) {
    let rows = Rows::new(data, row_bytes, width).unwrap();
    let mut reference: Option<Vec<u8>> = None;
    for ops in [BitOps::portable(), BitOps::detect()] {
        let cols = Columns::with_ops(mask, ops);
        for layout in [Layout::InPlace, Layout::Condensed] {
            let c = compress(&rows, &cols, layout);
            c.validate().unwrap();
            // Portable and BMI2 paths give identical bytes.
            if layout == Layout::Condensed {
                match &reference {
                    None => reference = Some(c.data.clone()),
                    Some(r) => assert_eq!(r, &c.data),
                }
            }
            let mut out = vec![0u8; data.len()];
            c.decode_all(&cols, &mut out).unwrap();
            assert!(out == data, "{layout:?} {ops:?}");
        }
    }
}

#[test]
fn masks_from_the_sweep_fixed_empty_and_full() {
    for width in [16u32, 32, 64] {
        for v in [1usize, 2, 3, 7, 8, 9, 31, 33, 64, 100, 4096] {
            let n = if v > 1000 { 3 } else { 40 };
            let b = (width / 8) as usize;
            let data = structured_rows(n, v, width, v as u64);
            let rows = Rows::new(&data, v * b, width).unwrap();
            let swept = preprocess(&rows, Threshold::Sweep, Sample::All).mask;
            let fixed = preprocess(&rows, Threshold::Fixed(0.8), Sample::Prefix(0.1)).mask;
            let empty = Mask::empty(width, v);
            let full = Mask {
                width,
                mask: vec![planepack_ibp::internals::ones(width); v],
                bitval: rows.row_chunks(0).collect(),
            };
            for m in [&swept, &fixed, &empty, &full] {
                check_group(&data, v * b, width, m);
            }
        }
    }
}

#[test]
fn rows_that_never_match_are_stored_raw() {
    let data = structured_rows(50, 16, 32, 1);
    let rows = Rows::new(&data, 64, 32).unwrap();
    // A mask no row can match: bitval 1 where every row has... an impossible pattern.
    let m = Mask {
        width: 32,
        mask: vec![0xFFFF_FFFF; 16],
        bitval: vec![0x1234_5678; 16],
    };
    let cols = Columns::new(&m);
    let c = compress(&rows, &cols, Layout::Condensed);
    assert!(c.row_bitmask.iter().all(|&w| w == 0));
    assert_eq!(c.data, data);
}

#[test]
fn gather_equals_decode_all_then_index() {
    let width = 64;
    let data = structured_rows(300, 48, width, 9);
    let rows = Rows::new(&data, 48 * 8, width).unwrap();
    let pre = preprocess(&rows, Threshold::Sweep, Sample::All);
    let cols = Columns::new(&pre.mask);
    let mut rng = Rng(4);
    for layout in [Layout::InPlace, Layout::Condensed] {
        let c = compress(&rows, &cols, layout);
        let mut all = vec![0u8; data.len()];
        c.decode_all(&cols, &mut all).unwrap();
        for n in [0usize, 1, 5, 1000] {
            let idx: Vec<usize> = (0..n).map(|_| rng.below(300) as usize).collect();
            let mut out = vec![0u8; n * 384];
            c.gather(&cols, &idx, &mut out).unwrap();
            for (k, &i) in idx.iter().enumerate() {
                assert_eq!(&out[k * 384..(k + 1) * 384], &all[i * 384..(i + 1) * 384]);
            }
        }
        let mut out = vec![0u8; 384];
        assert!(c.gather(&cols, &[300], &mut out).is_err());
    }
}

#[test]
fn kv_stream_appends_and_gathers() {
    let data = generate(Pattern::Smooth, ElemType::BF16, 200 * 128, 3);
    let prompt = Rows::new(&data[..64 * 128], 128, 64).unwrap();
    let mut kv = KvStream::from_prompt(&prompt, 0.8);
    for r in 64..200 {
        kv.append(&data[r * 128..(r + 1) * 128]).unwrap();
    }
    assert_eq!(kv.rows().rows, 200);
    kv.rows().validate().unwrap();
    let idx: Vec<usize> = (0..200).rev().step_by(3).collect();
    let mut out = vec![0u8; idx.len() * 128];
    kv.gather(&idx, &mut out).unwrap();
    for (k, &i) in idx.iter().enumerate() {
        assert_eq!(&out[k * 128..(k + 1) * 128], &data[i * 128..(i + 1) * 128]);
    }
    assert!(kv.append(&[0u8; 127]).is_err());
}

#[test]
fn codec_stream_round_trips_every_pattern() {
    for elem in ElemType::ALL {
        for p in Pattern::ALL {
            for (len, last) in [
                (0, 1),
                (1, 1),
                (4096, 64),
                (4096 * 3 + 17, 64),
                (50_000, 384),
                (6000, 3),
            ] {
                let data = generate(p, elem, len, len as u64);
                for clusters in [1, 3] {
                    let codec = Ibp {
                        clusters,
                        ..Ibp::default()
                    };
                    let mut enc = Vec::new();
                    codec
                        .encode_shaped(
                            &data,
                            elem,
                            &[len / elem.size() / last.max(1), last],
                            &mut enc,
                        )
                        .unwrap();
                    assert_eq!(
                        codec.decode_to_vec(&enc).unwrap(),
                        data,
                        "{elem} {p:?} {len}"
                    );
                    // The layout a parallel decoder uses places every row where the sequential
                    // decoder finds it: rows tile the body, the tail runs to the end.
                    let l = planepack_ibp::stream_layout(&enc).unwrap();
                    let rb = l.columns * (l.width / 8) as usize;
                    let cols: Vec<_> = l.masks.iter().map(planepack_ibp::Columns::new).collect();
                    for i in 0..l.rows {
                        let cols = &cols[l.cluster(i)];
                        let (s, e) = (l.row_offsets[i], l.row_offsets[i + 1]);
                        let mut row = vec![0u8; rb];
                        let packed = l.bitmask[i / 32] >> (i % 32) & 1 == 1;
                        let used =
                            planepack_ibp::internals::decode_row(&enc[s..], packed, cols, &mut row)
                                .unwrap();
                        assert_eq!(used, e - s);
                        assert_eq!(row, data[i * rb..(i + 1) * rb]);
                    }
                    assert_eq!(l.tail_offset, l.row_offsets[l.rows]);
                    assert_eq!(enc.len() - l.tail_offset, l.raw_len - l.rows * rb);
                    let enc = codec.encode_to_vec(&data, elem).unwrap();
                    assert_eq!(codec.decode_to_vec(&enc).unwrap(), data);
                }
            }
        }
    }
}

#[test]
fn mutated_streams_and_bad_metadata_are_errors_not_panics() {
    // 24 chunks a row decode one row after the other; 40 and 48 take the lockstep path where
    // the CPU has it (rows placed first); the last two are streams with clusters.
    for (v, width, clusters) in [
        (24usize, 32u32, 1),
        (40, 32, 1),
        (48, 64, 1),
        (24, 32, 4),
        (48, 64, 3),
    ] {
        let data = structured_rows(200, v, width, 5);
        let codec = Ibp {
            clusters,
            ..Ibp::default()
        };
        let mut enc = Vec::new();
        codec
            .encode_rows(&data, v * width as usize / 8, &mut enc)
            .unwrap();
        assert_eq!(enc[4], if clusters > 1 { 2 } else { 1 }, "stream version");
        let mut rng = Rng(8);
        let mut caught = 0;
        planepack_testkit::finishes_within(60, move || {
            for round in 0..10_000 {
                let m = Mutation::ALL[round % Mutation::ALL.len()];
                let bad = mutate(&enc, m, &mut rng);
                let mut out = vec![0u8; data.len()];
                if codec.decode(&bad, &mut out).is_err() {
                    caught += 1;
                } else if matches!(
                    m,
                    Mutation::Truncate
                        | Mutation::Extend
                        | Mutation::InsertByte
                        | Mutation::DeleteByte
                ) {
                    panic!("{m:?} went unnoticed");
                }
            }
            assert!(caught > 0);
        });
    }
    let data = structured_rows(200, 24, 32, 5);
    // Group-level bad metadata: a mask of another width, bitmask and offsets that lie.
    let rows = Rows::new(&data, 96, 32).unwrap();
    let pre = preprocess(&rows, Threshold::Sweep, Sample::All);
    let cols = Columns::new(&pre.mask);
    let c = compress(&rows, &cols, Layout::Condensed);
    let other = Columns::new(&Mask::empty(64, 24));
    let mut out = vec![0u8; data.len()];
    assert!(c.decode_all(&other, &mut out).is_err());
    let mut bad = c.clone();
    bad.offsets[10] += 1;
    assert!(bad.validate().is_err());
    let mut bad = c.clone();
    bad.row_bitmask.push(0);
    assert!(bad.validate().is_err());
    let mut bad = c.clone();
    bad.data.truncate(bad.data.len() - 5);
    assert!(bad.validate().is_err());
    assert!(bad.decode_all(&cols, &mut out).is_err());
    let mut inplace = compress(&rows, &cols, Layout::InPlace);
    inplace.data.truncate(100);
    assert!(inplace.validate().is_err());
    assert!(inplace.decode_all(&cols, &mut out).is_err());
}

/// Rows of two families (different sign, exponent and leading mantissa bits per column) and a
/// third of noise: one mask per family saves what one mask for all cannot, the stream with
/// clusters is smaller, decodes bit-exactly, and every row's cluster follows its family.
#[test]
fn clusters_pay_on_rows_of_two_families() {
    let (n, v) = (300usize, 32usize);
    let mut rng = Rng(21);
    let mut data = Vec::with_capacity(n * v * 4);
    for r in 0..n {
        for j in 0..v {
            let x: u32 = match r % 3 {
                0 => 0x3F80_0000 | (j as u32) << 16 | (rng.next_u64() as u32 & 0x3FF),
                1 => 0xC2C0_0000 ^ (j as u32) << 14 | (rng.next_u64() as u32 & 0x3FF),
                _ => rng.next_u64() as u32,
            };
            data.extend_from_slice(&x.to_le_bytes());
        }
    }
    let one = Ibp::default();
    let two = Ibp {
        clusters: 3,
        ..Ibp::default()
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    one.encode_rows(&data, 4 * v, &mut a).unwrap();
    let pre = two.encode_rows(&data, 4 * v, &mut b).unwrap();
    assert_eq!(b[4], 2);
    assert!(pre.len() >= 2, "{} clusters", pre.len());
    assert!(
        b.len() < a.len(),
        "clusters {} bytes, one mask {}",
        b.len(),
        a.len()
    );
    assert_eq!(one.decode_to_vec(&b).unwrap(), data);
    let l = planepack_ibp::stream_layout(&b).unwrap();
    assert_eq!(l.masks.len(), pre.len());
    for family in 0..2 {
        let k = l.cluster(family);
        assert!(
            (family..n).step_by(3).all(|r| l.cluster(r) == k),
            "family {family} split"
        );
    }
}

/// The four-row AVX2 path (`Columns` with the CPU's bit instructions) and the scalar path
/// (portable `Columns`) agree on every corrupted group: both fail, or both succeed with the
/// same bytes. Covers decode-all and gathers, both layouts, 64- and 32-bit chunks.
#[test]
fn fast_and_scalar_group_decoders_agree_on_corrupt_data() {
    let mut rng = Rng(77);
    let mut disagreements = Vec::new();
    let mut errors = 0;
    for (width, v) in [(64u32, 48usize), (32, 40), (64, 37), (32, 70)] {
        let b = width as usize / 8;
        let data = structured_rows(64, v, width, width as u64 + v as u64);
        let rows = Rows::new(&data, v * b, width).unwrap();
        let m = preprocess(&rows, Threshold::Sweep, Sample::All).mask;
        let (fast, scalar) = (
            Columns::with_ops(&m, BitOps::detect()),
            Columns::with_ops(&m, BitOps::portable()),
        );
        for layout in [Layout::Condensed, Layout::InPlace] {
            let good = compress(&rows, &fast, layout);
            for round in 0..400 {
                let mut c = good.clone();
                for _ in 0..1 + round % 3 {
                    let at = rng.below(c.data.len() as u64) as usize;
                    c.data[at] ^= 1 << rng.below(8);
                }
                let idx: Vec<usize> = (0..37).map(|_| rng.below(64) as usize).collect();
                let mut a = vec![0u8; data.len()];
                let mut s = vec![0u8; data.len()];
                let ra = c.decode_all(&fast, &mut a);
                let rs = c.decode_all(&scalar, &mut s);
                errors += ra.is_err() as usize;
                if ra.is_ok() != rs.is_ok() || (ra.is_ok() && a != s) {
                    disagreements.push(format!("decode_all {width} {v} {layout:?} round {round}"));
                }
                let mut ga = vec![0u8; idx.len() * v * b];
                let mut gs = vec![0u8; idx.len() * v * b];
                let ra = c.gather(&fast, &idx, &mut ga);
                let rs = c.gather(&scalar, &idx, &mut gs);
                if ra.is_ok() != rs.is_ok() || (ra.is_ok() && ga != gs) {
                    disagreements.push(format!("gather {width} {v} {layout:?} round {round}"));
                }
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:?}");
    assert!(
        errors > 100,
        "corruption should mostly be caught ({errors})"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_groups(n in 1usize..60, v in 1usize..80, w in prop_oneof![Just(16u32), Just(32), Just(64)], seed in any::<u64>(), t in 0.5f32..1.0) {
        let data = structured_rows(n, v, w, seed);
        let rows = Rows::new(&data, v * (w as usize / 8), w).unwrap();
        let m = preprocess(&rows, Threshold::Fixed(t), Sample::Strided { fraction: 0.5, seed }).mask;
        check_group(&data, v * (w as usize / 8), w, &m);
    }
}

#[test]
fn random_streams_with_plausible_headers_never_panic() {
    planepack_testkit::finishes_within(60, || {
        let mut rng = Rng(21);
        let codec = Ibp::default();
        for i in 0..20_000 {
            let len = 32 + rng.below(400) as usize;
            let mut s: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            s[0..4].copy_from_slice(b"PPIB");
            s[4] = 1;
            s[5] = [16, 32, 64][i % 3];
            s[6] = 0;
            s[7] = 0;
            s[8..16].copy_from_slice(&rng.below(12).to_le_bytes());
            s[16..24].copy_from_slice(&rng.below(12).to_le_bytes());
            s[24..32].copy_from_slice(&rng.below(2000).to_le_bytes());
            if let Ok(n) = codec.decoded_len(&s) {
                let mut out = vec![0u8; n];
                let _ = codec.decode(&s, &mut out);
            }
        }
    });
}

/// Found by the `ibp_rows` fuzz target: a group whose public fields disagree (a bitmask or
/// offset table shorter than the row count, data shorter than its rows) is an error from
/// every decode, whether or not the caller ran `validate` first.
#[test]
fn groups_with_inconsistent_fields_are_errors_not_panics() {
    use planepack_ibp::{CompressedRows, Layout, Mask};
    let cols = Columns::new(&Mask::empty(16, 4));
    let rb = cols.row_bytes();
    let good = |layout| CompressedRows {
        layout,
        rows: 3,
        row_bytes: rb,
        data: vec![0; 3 * rb],
        offsets: if layout == Layout::Condensed {
            vec![rb as u64, 2 * rb as u64, 3 * rb as u64]
        } else {
            Vec::new()
        },
        row_bitmask: vec![0],
        payload_bytes: 3 * rb,
    };
    for layout in [Layout::InPlace, Layout::Condensed] {
        let mut out = vec![0u8; 3 * rb];
        let mut row = vec![0u8; rb];
        good(layout).decode_all(&cols, &mut out).unwrap();
        let breakages = [
            "no bitmask",
            "short offsets or data",
            "more rows than tables",
            "offsets past the data",
        ];
        for what in breakages {
            let mut g = good(layout);
            match what {
                "no bitmask" => g.row_bitmask.clear(),
                "short offsets or data" => {
                    g.offsets.pop();
                    g.data.truncate(rb);
                }
                "more rows than tables" => g.rows = 40,
                _ => match g.offsets.last_mut() {
                    Some(o) => *o = u64::MAX,
                    None => {
                        g.data.pop();
                    }
                },
            }
            let mut out = vec![0u8; g.rows * rb];
            assert!(g.decode_all(&cols, &mut out).is_err(), "{layout:?} {what}");
            assert!(
                g.decode_row(&cols, 2, &mut row).is_err(),
                "{layout:?} {what}"
            );
            assert!(
                g.gather(&cols, &[2, 0], &mut vec![0u8; 2 * rb]).is_err(),
                "{layout:?} {what}"
            );
        }
        assert!(
            good(layout).decode_row(&cols, 3, &mut row).is_err(),
            "row past the end"
        );
    }
}
