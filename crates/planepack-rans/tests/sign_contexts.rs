//! Sign planes (stream version 8): a dense chunk's plane 1 of 2-byte elements coded with its
//! element's exponent context and the low bit (the sign, rotated) of the symbol one row up.
//! They round-trip for BF16 and FP16 and every row length the row planes' lane rules take
//! (lanes that divide the row, lanes across rows of a prime length, rows longer than a lane's
//! share, lane counts that are not multiples of 8), they are what the encoder writes where a
//! column keeps its sign, and never where signs are random; their bytes are pinned; every rule
//! of the format a damaged stream can break is refused without a panic.

use planepack_core::{Codec, ElemType};
use planepack_rans::internals::contexts::context;
use planepack_rans::internals::sign_contexts::{
    sign_table, SignTables, SIGN_PLANES_ONLY, SIGN_SET_BYTES, VERSION_SIGN,
};
use planepack_rans::{chunk_spans, parse_header, Rans};
mod common;
use common::{damage_decodes_alike, fnv1a, round_trips, shaped};
use planepack_testkit::{channel_scaled, channel_signed};

/// The cases: BF16 and FP16 matrices whose columns keep their sign, with rows of 64 (32 lanes
/// a plane), 112 (16 lanes), 28 (28 lanes: the scalar decoder alone), 37 (a prime: eight
/// lanes across rows, version 7's rule) and 3000 (longer than a 4 KiB chunk's lane share), in
/// 4 KiB chunks (the default encoder otherwise) and 64 KiB chunks without the modelled form
/// (which takes these synthetic chunks first, as it may real ones: the sign planes are a
/// form of the planes only); odd row counts, so the last chunk is short.
fn cases() -> Vec<(Vec<u8>, ElemType, usize, Rans)> {
    let mut v = Vec::new();
    for elem in [ElemType::BF16, ElemType::F16] {
        for cols in [64usize, 112, 28, 37, 3000] {
            let rows = (640 << 10) / (cols * elem.size()) + 3;
            let data = channel_signed(rows, cols, elem, cols as u64 * 13 + elem.size() as u64);
            for chunk_log2 in [12u8, 16] {
                let codec = Rans {
                    chunk_log2,
                    modelled: chunk_log2 == 12,
                    ..Rans::default()
                };
                v.push((data.clone(), elem, cols, codec));
            }
        }
    }
    v
}

#[test]
fn sign_planes_round_trip_and_are_chosen() {
    let mut chosen = 0;
    for (data, elem, cols, codec) in cases() {
        let enc = shaped(&codec, &data, elem, cols);
        round_trips(&codec, &enc, &data);
        let off = Rans {
            sign_contexts: false,
            ..codec
        };
        let plain = shaped(&off, &data, elem, cols);
        let chunk_elems = (1usize << codec.chunk_log2) / elem.size();
        let what = format!("{elem} rows of {cols}, chunk 2^{}", codec.chunk_log2);
        // Rows well inside a 64 KiB chunk, whose signs follow the column: where the elements
        // are rotated (the sign then in plane 1), the sign planes pay (an element's sign
        // differs from the one above with probability 2 (1/32)(31/32): 0.33 bit of entropy,
        // not 1) and the stream is version 8. (In 4 KiB chunks the 18 tables cost about what
        // they save here.)
        let rotated = parse_header(&plain).unwrap().rotate;
        if cols <= chunk_elems / 64 && codec.chunk_log2 == 16 && rotated {
            chosen += 1;
            assert_eq!(enc[4], VERSION_SIGN, "{what}");
            assert!(parse_header(&enc).unwrap().sign_contexts.is_some());
            assert!(
                (enc.len() as f64) < 0.995 * plain.len() as f64,
                "{what}: {} vs {}",
                enc.len(),
                plain.len()
            );
        }
        // Never longer than without them by more than the sign section (the tables are
        // kept on an estimate made before the chunks choose their forms).
        let h = parse_header(&enc).unwrap();
        let section = h.sign_contexts.map_or(0, |s| s.written_len(h.tables));
        assert!(enc.len() <= plain.len() + section, "{what}");
        // Without a shape there is no row, and no sign plane.
        assert!(codec.encode_to_vec(&data, elem).unwrap()[4] < VERSION_SIGN);
    }
    // (The BF16 cases are rotated; FP16 ones may not be, by the rotation's sample rule.)
    assert!(chosen >= 4, "{chosen} cases with sign planes");
}

/// Random signs tell nothing: no sign tables, the stream as without them.
#[test]
fn random_signs_get_no_sign_planes() {
    for elem in [ElemType::BF16, ElemType::F16] {
        let data = channel_scaled(3000, 64, elem, 11);
        let codec = Rans::default();
        let enc = shaped(&codec, &data, elem, 64);
        assert!(enc[4] < VERSION_SIGN, "{elem}");
        let off = Rans {
            sign_contexts: false,
            ..codec
        };
        assert_eq!(enc, shaped(&off, &data, elem, 64), "{elem}");
    }
}

/// A sign plane needs no rotation (the format makes no float interpretation: a symbol's class
/// is the low bit of the plane-1 symbol one row up, whatever it means): the encoder writes
/// sign planes only for rotated elements, so a rotated stream with its flag `R` cleared is
/// the test: it decodes to the rotated elements, `rotl(v, 1)`, on the SIMD and scalar paths
/// alike (the class then read from the element's low bit, not its top bit).
#[test]
fn sign_planes_decode_without_rotation() {
    for (cols, seed) in [(64usize, 5u64), (37, 7), (28, 9)] {
        let data = channel_signed(640 * 1024 / (2 * cols), cols, ElemType::BF16, seed);
        let codec = Rans {
            modelled: false,
            ..Rans::default()
        };
        let enc = shaped(&codec, &data, ElemType::BF16, cols);
        assert_eq!(enc[4], VERSION_SIGN, "rows of {cols}");
        let h = parse_header(&enc).unwrap();
        assert!(h.rotate && !h.short);
        let mut plain = enc.clone();
        plain[7] &= !1;
        let rotated: Vec<u8> = data
            .chunks_exact(2)
            .flat_map(|e| {
                u16::from_le_bytes([e[0], e[1]])
                    .rotate_left(1)
                    .to_le_bytes()
            })
            .collect();
        round_trips(&codec, &plain, &rotated);
    }
}

/// The sign planes' streams, pinned (as the other versions' in stability.rs).
#[test]
fn sign_plane_output_is_unchanged() {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (data, elem, cols, codec) in cases() {
        fnv1a(&mut h, &shaped(&codec, &data, elem, cols));
    }
    assert_eq!(
        h, 0x4501_1ff2_7811_c353,
        "encoder output changed: {h:#018x}"
    );
}

/// Where the sign section starts: the last section, right before the chunk table.
fn sign_section(enc: &[u8]) -> usize {
    let h = parse_header(enc).unwrap();
    assert!(!h.short && chunk_spans(enc, &h).unwrap().len() > 1);
    h.table_at - h.sign_contexts.as_ref().unwrap().written_len(h.tables)
}

/// Every rule a damaged sign-plane stream can break is an error: an empty table set, a set
/// bit past the 18th table, a sign plane in a stream before version 8, a row distance its
/// lanes may not have, a table the plane needs taken out of the set; random damage never
/// panics.
#[test]
fn damaged_sign_planes_are_refused() {
    for (elem, cols, seed) in [(ElemType::BF16, 64usize, 5u64), (ElemType::BF16, 37, 7)] {
        let data = channel_signed(640 * 1024 / (2 * cols), cols, elem, seed);
        let codec = Rans {
            modelled: false,
            ..Rans::default()
        };
        let enc = shaped(&codec, &data, elem, cols);
        assert_eq!(enc[4], VERSION_SIGN, "{elem} rows of {cols}");
        let refused = |bad: &[u8], what: &str| {
            let mut out = vec![0u8; data.len()];
            assert!(codec.decode(bad, &mut out).is_err(), "{elem}: {what}");
            assert!(
                codec.decode_parallel(bad, &mut out).is_err(),
                "{elem}: {what}"
            );
        };
        let at = sign_section(&enc);
        let set = u32::from_le_bytes([enc[at], enc[at + 1], enc[at + 2], 0]);
        assert!(set != 0 && set >> 18 == 0);
        let mut empty = enc.clone();
        empty[at..at + SIGN_SET_BYTES].fill(0);
        refused(&empty, "an empty sign table set");
        let mut past = enc.clone();
        past[at + 2] |= 0x04;
        refused(&past, "a table past the 18th");
        let mut old = enc.clone();
        old[4] = VERSION_SIGN - 1;
        refused(&old, "a sign plane in a version-7 stream");
        // The row distance (the row section's first field, before the sign section): 31 for
        // 37 leaves eight lanes more than a quarter of it; 65 for 64 does not divide.
        let h = parse_header(&enc).unwrap();
        let rows_len = h.row_contexts.as_ref().unwrap().written_len(h.tables);
        let u_at = at - rows_len;
        assert_eq!(
            u32::from_le_bytes(enc[u_at..u_at + 4].try_into().unwrap()) as usize,
            cols
        );
        let mut moved = enc.clone();
        moved[u_at] = if cols == 37 { 31 } else { 65 };
        refused(&moved, "a row distance the lanes may not have");
        // Each present table taken out of the set in turn (the sections then end elsewhere):
        // refused.
        for t in (0..18).filter(|t| set >> t & 1 == 1) {
            let mut fewer = enc.clone();
            let s = set & !(1 << t);
            fewer[at..at + SIGN_SET_BYTES].copy_from_slice(&s.to_le_bytes()[..SIGN_SET_BYTES]);
            refused(&fewer, &format!("table {t} out of the set"));
        }
        damage_decodes_alike(&codec, &enc, data.len(), seed);
    }
}

/// A sign plane's element whose table is absent is refused even where the lanes end right:
/// four of the tensor's sign tables are equal ([`planepack_testkit::twin_sign_tables_bf16`]),
/// and with that of exponent 124 below a negative element taken out of the section the lanes
/// decode, with the first or the last table in its place, the tensor's own bytes.
#[test]
fn a_sign_table_taken_out_is_refused_where_the_lanes_end_right() {
    let data = planepack_testkit::twin_sign_tables_bf16(1024, 9);
    let stream = shaped(&SIGN_PLANES_ONLY, &data, ElemType::BF16, 64);
    round_trips(&SIGN_PLANES_ONLY, &stream, &data);
    let h = parse_header(&stream).unwrap();
    assert_eq!(h.version, VERSION_SIGN);
    let e0 = h.row_contexts.as_deref().unwrap().e0;
    assert_eq!(e0, 127);
    let t = &h.sign_contexts.as_deref().unwrap().tables;
    // Class 2: the sign one row up is 1.
    let taken = sign_table(context(124, e0), 2);
    let (first, last) = (t.iter().flatten().next(), t.iter().flatten().last());
    assert!(t[taken].is_some() && t[taken].as_ref() == first && first == last);
    let absent = SignTables::without_table(&stream, taken).unwrap();
    let mut out = vec![0u8; data.len()];
    assert!(SIGN_PLANES_ONLY.decode(&absent, &mut out).is_err());
    assert!(SIGN_PLANES_ONLY.decode_parallel(&absent, &mut out).is_err());
}
