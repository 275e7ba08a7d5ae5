//! Damaged and random streams: an error, never a panic, an out-of-bounds access or a hang;
//! truncated and extended streams are always errors.

use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;
use planepack_testkit::finishes_within;
use planepack_testkit::{generate, mutate, Mutation, Pattern, Rng};

#[test]
fn mutated_streams_are_errors_or_right_length() {
    finishes_within(300, || {
        let codec = Rans {
            chunk_log2: 12,
            ..Rans::default()
        };
        let mut rng = Rng(17);
        let mut streams = Vec::new();
        for (i, elem) in ElemType::ALL.into_iter().enumerate() {
            for p in [
                Pattern::Mixed,
                Pattern::ReluSparse,
                Pattern::Specials,
                Pattern::Smooth,
            ] {
                let raw = generate(p, elem, 3000 + 5000 * i, i as u64);
                let enc = codec.encode_to_vec(&raw, elem).unwrap();
                streams.push((raw, enc));
            }
            // Repeated rows, so that streams with a row map are damaged too.
            let row = generate(Pattern::Smooth, elem, 64 * elem.size(), 5);
            let other = generate(Pattern::ReluSparse, elem, 64 * elem.size(), 6);
            let raw: Vec<u8> = [&row[..], &other, &row, &row, &other, &other, &row].concat();
            let mut enc = Vec::new();
            codec.encode_shaped(&raw, elem, &[7, 64], &mut enc).unwrap();
            let header = planepack_rans::parse_header(&enc).unwrap();
            assert!(header.rows.is_some(), "expected a row map");
            streams.push((raw, enc));
        }
        // Block-scaled chunks (version 3), one chunk of them broken off the grid.
        let mut raw = planepack_testkit::block_scaled_f32(20_000, 8, 4);
        raw[9_000] ^= 1;
        let enc = codec.encode_to_vec(&raw, ElemType::F32).unwrap();
        assert_eq!(enc[4], planepack_rans::internals::scaled::VERSION_SCALED);
        streams.push((raw, enc));
        // Difference chunks (version 5), both widths.
        for (elem, width) in [(ElemType::BF16, 2), (ElemType::F32, 4)] {
            let raw = planepack_testkit::smooth_walk(9_001, width, 3, 9);
            let enc = Rans {
                differences: true,
                ..codec
            }
            .encode_to_vec(&raw, elem)
            .unwrap();
            assert_eq!(
                enc[4],
                planepack_rans::internals::difference::VERSION_DIFFERENCE
            );
            streams.push((raw, enc));
        }
        // Tail-dictionary chunks (flag T), rotated and not.
        for rotate in [true, false] {
            let raw = planepack_testkit::scaled_bf16_f32(7_001, 11);
            let enc = Rans { rotate, ..codec }
                .encode_to_vec(&raw, ElemType::F32)
                .unwrap();
            assert_ne!(enc[7] & planepack_rans::FLAG_TAILS, 0);
            streams.push((raw, enc));
        }
        let (mut errors, mut rounds) = (0, 0);
        for round in 0..20_000 {
            let (raw, enc) = &streams[round % streams.len()];
            let m = Mutation::ALL[round % Mutation::ALL.len()];
            let bad = mutate(enc, m, &mut rng);
            if bad == *enc {
                continue;
            }
            rounds += 1;
            let mut out = vec![0u8; raw.len()];
            let r = codec.decode(&bad, &mut out);
            if m == Mutation::Truncate || bad.len() != enc.len() {
                assert!(r.is_err(), "{m:?}: a stream of another length was accepted");
            }
            errors += usize::from(r.is_err());
            let mut out2 = vec![0u8; raw.len()];
            assert_eq!(
                r.is_ok(),
                codec.decode_parallel(&bad, &mut out2).is_ok(),
                "the parallel decoder disagrees"
            );
            if let Ok(n) = codec.decoded_len(&bad) {
                if n <= 1 << 24 {
                    let _ = codec.decode_to_vec(&bad);
                }
            }
        }
        // Most damage is caught by the format's own checks (lane end states, plane and chunk
        // lengths, table sums). Damage inside raw planes (the mantissa bytes of these test
        // patterns are mostly stored raw) cannot be: that is the container checksums' job.
        // About 79 % are refused here; fewer would mean a check was lost.
        assert!(
            errors * 4 >= rounds * 3,
            "only {errors} of {rounds} damaged streams refused"
        );
    });
}

#[test]
fn random_bytes_with_a_valid_header_never_panic() {
    finishes_within(120, || {
        let codec = Rans::default();
        let mut rng = Rng(5);
        for _ in 0..20_000 {
            let len = rng.below(400) as usize;
            let mut s: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if s.len() >= 16 && rng.below(3) == 0 {
                // The short header: flags with bit 7, a varint length, one chunk.
                s[..4].copy_from_slice(&planepack_rans::MAGIC);
                s[4] = planepack_rans::VERSION;
                s[5] = [1, 2, 4][rng.below(3) as usize];
                s[6] = 0x80 | rng.below(2) as u8;
                let mut len = Vec::new();
                planepack_rans::internals::put_length(&mut len, rng.below(1 << 21));
                s[7..7 + len.len()].copy_from_slice(&len);
            } else if s.len() >= 16 && rng.below(2) == 0 {
                s[..4].copy_from_slice(&planepack_rans::MAGIC);
                s[4] = planepack_rans::VERSION;
                s[5] = [1, 2, 4][rng.below(3) as usize];
                s[6] = 12;
                s[7] = rng.below(2) as u8;
                s[8..16].copy_from_slice(&(rng.below(30_000)).to_le_bytes());
            }
            if let Ok(n) = codec.decoded_len(&s) {
                assert!(
                    n <= s.len() << 12,
                    "a {}-byte stream claims {n} bytes",
                    s.len()
                );
                let mut out = vec![0u8; n];
                let _ = codec.decode(&s, &mut out);
            }
        }
    });
}

/// The short header (one chunk): streams of every length up to a chunk and a tail use it
/// and round-trip; its varint length is refused when not in its shortest form, past 10 bytes
/// or past 2^64; a body past the largest chunk, the short flag in the long form's flags byte,
/// and a short stream with bytes missing or added are errors.
#[test]
fn short_headers_round_trip_and_refuse_what_they_cannot_be() {
    use planepack_rans::internals::{get_length, put_length};
    let codec = Rans::default();
    for elem in ElemType::ALL {
        for n in [0, 1, 2, 3, 5, 7, 100, 2047, 4097, 65535, 65536] {
            let raw = generate(Pattern::Mixed, elem, n, n as u64);
            let enc = codec.encode_to_vec(&raw, elem).unwrap();
            let h = planepack_rans::parse_header(&enc).unwrap();
            assert!(h.short, "{elem} {n}: one chunk, short header");
            assert_eq!(enc[6] & 0x80, 0x80);
            let mut out = vec![0u8; raw.len()];
            codec.decode(&enc, &mut out).unwrap();
            assert!(out == raw, "{elem} {n}");
            for bad in [&enc[..enc.len() - 1], &[&enc[..], &[0]].concat()[..]] {
                let mut out = vec![0u8; raw.len()];
                assert!(codec.decode(bad, &mut out).is_err(), "{elem} {n}: length");
            }
        }
        // Two chunks: the long header.
        let raw = generate(Pattern::Mixed, elem, 65537 + elem.size(), 1);
        let enc = codec.encode_to_vec(&raw, elem).unwrap();
        assert!(!planepack_rans::parse_header(&enc).unwrap().short);
        assert!(enc[6] <= 20 && enc[7] & 0x80 == 0);
        // The long form with the short flag in its flags byte.
        let mut bad = enc.clone();
        bad[7] |= 0x80;
        assert!(codec.decode(&bad, &mut vec![0u8; raw.len()]).is_err());
    }
    for v in [0u64, 1, 127, 128, 4096, 1 << 35, u64::MAX] {
        let mut b = Vec::new();
        put_length(&mut b, v);
        assert_eq!(get_length(&b, 0).unwrap(), (v, b.len()));
        assert!(get_length(&b[..b.len() - 1], 0).is_err(), "truncated {v}");
    }
    for bad in [
        &[0x80, 0x00][..],                                             // 0 in two bytes
        &[0xff, 0x80, 0x00],                                           // a zero last byte
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], // 2^64
        &[0x80; 11],                                                   // past 10 bytes
    ] {
        assert!(get_length(bad, 0).is_err(), "{bad:?}");
    }
    // A short header whose body is past the largest chunk (2^20 bytes and one element more).
    let mut s = planepack_rans::MAGIC.to_vec();
    s.extend_from_slice(&[planepack_rans::VERSION, 2, 0x80]);
    put_length(&mut s, (1 << 20) + 2);
    s.extend_from_slice(&[0u8; 64]);
    assert!(planepack_rans::parse_header(&s).is_err());
}

/// A modelled chunk's row length `U` as a damaged header gives it, up to 2^32 - 1: "up" is
/// refused wherever `U` reaches before the lane, and the decoders (the AVX2 one once took a
/// `U` past 2^31 as negative and read before its output) return an error or the data.
#[test]
fn a_modelled_chunks_row_length_is_checked_at_any_size() {
    let modelled = planepack_rans::internals::modelled::CHUNK_MODELLED;
    for (elem, width) in [(ElemType::BF16, 2), (ElemType::F32, 4)] {
        let n = 40_000;
        let data = planepack_testkit::activation_like(n, width, 100, 3);
        let codec = Rans::default();
        let mut enc = Vec::new();
        codec
            .encode_shaped(&data, elem, &[n / 100, 100], &mut enc)
            .unwrap();
        let h = planepack_rans::parse_header(&enc).unwrap();
        let spans = planepack_rans::chunk_spans(&enc, &h).unwrap();
        let at = spans
            .iter()
            .find(|s| enc[s.0] == modelled)
            .expect("a modelled chunk")
            .0
            + 1;
        for u in [
            0u32,
            99,
            101,
            40_000,
            1 << 31,
            (1 << 31) + 100,
            0xff00_0040,
            u32::MAX,
        ] {
            let mut bad = enc.clone();
            bad[at..at + 4].copy_from_slice(&u.to_le_bytes());
            // With 0 or a U past the chunk no "up" is valid: an error, or the data if the
            // chunk had none. (99 and 101 are valid references to other elements.)
            let unusable = u == 0 || u as usize >= n;
            let mut out = vec![0u8; data.len()];
            if codec.decode(&bad, &mut out).is_ok() && unusable {
                assert!(out == data, "{elem} U {u}: decoded otherwise");
            }
            let mut out = vec![0u8; data.len()];
            if codec.decode_parallel(&bad, &mut out).is_ok() && unusable {
                assert!(out == data, "{elem} U {u}: decoded otherwise");
            }
        }
    }
}

/// A tail-dictionary chunk whose index plane names an entry past its dictionary, and one in a
/// stream without flag T, are errors; the untouched stream decodes.
#[test]
fn tail_dictionary_damage_is_refused() {
    let codec = Rans::default();
    let raw = planepack_testkit::scaled_bf16_f32(3_000, 5);
    let enc = codec.encode_to_vec(&raw, ElemType::F32).unwrap();
    let h = planepack_rans::parse_header(&enc).unwrap();
    assert!(h.tails && h.short);
    let at = h.table_at;
    assert_eq!(enc[at], planepack_rans::internals::tails::CHUNK_TAILS);
    assert_eq!(codec.decode_to_vec(&enc).unwrap(), raw);
    // Without the flag (the short header's flags byte is at 6).
    let mut no_flag = enc.clone();
    no_flag[6] &= !planepack_rans::FLAG_TAILS;
    assert!(codec.decode_to_vec(&no_flag).is_err());
    // One entry fewer: the dictionary's last entry's bytes become the planes' first, and
    // every index to the last entry is past the end (or the planes no longer parse).
    let mut fewer = enc.clone();
    fewer[at + 1] -= 1;
    assert!(codec.decode_to_vec(&fewer).is_err());
    // A dictionary of one entry whose chunk holds a raw index plane with an index of 1.
    let d = enc[at + 1] as usize + 1;
    let mut one = enc[..at].to_vec();
    one.extend_from_slice(&[planepack_rans::internals::tails::CHUNK_TAILS, 0]);
    one.extend_from_slice(&enc[at + 2..at + 5]);
    let n = raw.len() / 4;
    one.push(planepack_rans::PLANE_CONST);
    one.push(0x3f);
    one.push(planepack_rans::PLANE_RAW);
    let mut idx = vec![0u8; n];
    idx[n / 2] = 1;
    one.extend_from_slice(&idx);
    assert!(d > 1);
    let err = codec.decode_to_vec(&one).unwrap_err().to_string();
    assert!(err.contains("past the 1 entries"), "{err}");
    idx[n / 2] = 0;
    one.truncate(one.len() - n);
    one.extend_from_slice(&idx);
    let back = codec.decode_to_vec(&one).unwrap();
    assert_eq!(back.len(), raw.len());
}
