//! Row planes (stream version 6): plane 0 coded with the exponent of the element one row up.
//! They round-trip for every width and row length (lane counts that are and are not multiples
//! of 8, rows longer than a lane's share of a chunk, lanes across rows of a prime length:
//! version 7), they are what the encoder writes where columns keep their magnitude, their
//! bytes are pinned, and every rule of the format a damaged stream can break is refused
//! without a panic.

use planepack_core::{Codec, ElemType};
use planepack_rans::internals::row_contexts::{
    lanes_divide, row_context, row_lanes, RowTables, PLANE_ROW_CONTEXT, ROW_FIRST, ROW_PLANES_ONLY,
    VERSION_ROW_CONTEXT, VERSION_ROW_LANES,
};
use planepack_rans::{chunk_spans, parse_header, Rans};
mod common;
use common::{damage_decodes_alike, fnv1a, round_trips, shaped};
use planepack_testkit::channel_scaled;

/// The cases: BF16, FP16 and FP32 channel-scaled matrices with rows of 64 (32 lanes), 112 (16
/// lanes), 28 (28 lanes: the scalar decoder alone), 7 and 3000 (longer than a 4 KiB chunk's
/// lane share: every element of a small chunk is in the first row), in 4 KiB and 64 KiB
/// chunks.
fn cases() -> Vec<(Vec<u8>, ElemType, usize, Rans)> {
    let mut v = Vec::new();
    for elem in [ElemType::BF16, ElemType::F16, ElemType::F32] {
        for cols in [64usize, 112, 28, 7, 3000] {
            let rows = (160 << 10) / (cols * elem.size()) + 3;
            let data = channel_scaled(rows, cols, elem, cols as u64 * 31 + elem.size() as u64);
            for chunk_log2 in [12u8, 16] {
                let codec = Rans {
                    chunk_log2,
                    ..Rans::default()
                };
                v.push((data.clone(), elem, cols, codec));
            }
        }
    }
    v
}

#[test]
fn row_planes_round_trip_and_are_chosen() {
    for (data, elem, cols, codec) in cases() {
        let enc = shaped(&codec, &data, elem, cols);
        round_trips(&codec, &enc, &data);
        // Rows shorter than a chunk, of columns that keep their magnitude: row planes pay
        // (rows of 64 and 112; with rows of 7 and 28 the modelled chunk often wins first).
        let chunk_elems = (1usize << codec.chunk_log2) / elem.size();
        let off = Rans {
            row_contexts: false,
            ..codec
        };
        let plain = shaped(&off, &data, elem, cols);
        // Never longer by more than the row section: the tables are kept on an estimate of
        // what the chunks save, made before the chunks choose between planes and the modelled
        // form (rows of 7 in 4 KiB chunks: 90 bytes longer, 0.08 %).
        let section = parse_header(&enc)
            .unwrap()
            .row_contexts
            .map_or(0, |r| r.written_len(parse_header(&enc).unwrap().tables));
        assert!(
            enc.len() <= plain.len() + section,
            "{elem} rows of {cols} chunk {}: {} > {} + {section}",
            codec.chunk_log2,
            enc.len(),
            plain.len()
        );
        if cols < chunk_elems / 4 && cols >= 64 {
            assert_eq!(enc[4], VERSION_ROW_CONTEXT, "{elem} rows of {cols}");
            assert!(
                enc.len() < plain.len(),
                "{elem} rows of {cols}: {} >= {}",
                enc.len(),
                plain.len()
            );
        }
        // Without a shape there is no row, and no row plane.
        assert!(codec.encode_to_vec(&data, elem).unwrap()[4] < VERSION_ROW_CONTEXT);
    }
}

/// The row planes' streams, pinned (as the other versions' in stability.rs).
#[test]
fn row_plane_output_is_unchanged() {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (data, elem, cols, codec) in cases() {
        fnv1a(&mut h, &shaped(&codec, &data, elem, cols));
    }
    assert_eq!(
        h, 0xfc76_b4db_6fdc_b7b1,
        "encoder output changed: {h:#018x}"
    );
}

/// The first chunk's plane 0 of a dense row-plane stream: (the plane's kind byte offset, the
/// lane count's offset).
fn first_row_plane(enc: &[u8]) -> (usize, usize) {
    let h = parse_header(enc).unwrap();
    let spans = chunk_spans(enc, &h).unwrap();
    let (at, _) = spans[0];
    assert_eq!(enc[at], 1, "a dense chunk");
    assert_eq!(enc[at + 1], PLANE_ROW_CONTEXT);
    (at + 1, at + 2)
}

/// The lane count of every dense chunk's row plane.
fn row_plane_lanes(enc: &[u8]) -> Vec<usize> {
    let h = parse_header(enc).unwrap();
    let spans = chunk_spans(enc, &h).unwrap();
    spans
        .iter()
        .filter(|&&(at, _)| enc[at] == 1 && enc[at + 1] == PLANE_ROW_CONTEXT)
        .map(|&(at, _)| enc[at + 2] as usize)
        .collect()
}

/// Every rule a damaged row-plane stream can break is an error: a lane count that does not
/// divide the row distance, a distance of 0, a shift past 7, an empty table set, a row plane
/// where none may be (a stream of an older version), and random damage never panics.
#[test]
fn damaged_row_planes_are_refused() {
    let data = channel_scaled(1000, 64, ElemType::F16, 9);
    let codec = Rans::default();
    let enc = shaped(&codec, &data, ElemType::F16, 64);
    assert_eq!(enc[4], VERSION_ROW_CONTEXT);
    let mut out = vec![0u8; data.len()];
    let (_, lanes_at) = first_row_plane(&enc);
    assert_eq!(enc[lanes_at] as usize, row_lanes(32768, 64));
    let refused = |bad: &[u8], what: &str| {
        let mut out = vec![0u8; data.len()];
        assert!(codec.decode(bad, &mut out).is_err(), "{what}");
        assert!(codec.decode_parallel(bad, &mut out).is_err(), "{what}");
    };
    // The row section follows the context section (E0 and an empty set here).
    let h = parse_header(&enc).unwrap();
    assert!(h.contexts.is_none());
    let section = 16 + 2;
    assert_eq!(
        u32::from_le_bytes(enc[section..section + 4].try_into().unwrap()),
        64
    );
    for (at, v, what) in [
        (section, 0u8, "row distance 0"),
        (section, 65, "a distance the lanes do not divide"),
        (section + 4, 8, "shift 8"),
        (section + 5, 0, "an empty table set"),
        (4, 5, "a row plane in a version-5 stream"),
    ] {
        let mut bad = enc.clone();
        bad[at] = v;
        if what == "row distance 0" {
            bad[at..at + 4].fill(0);
        }
        refused(&bad, what);
    }
    codec.decode(&enc, &mut out).unwrap();
    assert!(out == data);
    damage_decodes_alike(&codec, &enc, data.len(), 5);
}

/// Rows of a prime length (a 1433-word vocabulary, 37, 41), and of 4 x 37 = 148: no divisor
/// of 8 or more, so the encoder's row planes take eight lanes (fewer in a short chunk) across
/// rows (version 7), with rounds across the first row's end and, for 37, only four rounds of
/// a lane per row. They round-trip on every decoder path (AVX2 and scalar: the last chunks'
/// and the 4 KiB chunks' planes have fewer lanes), and their bytes are pinned.
#[test]
fn lanes_across_rows_round_trip_and_are_pinned() {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for (elem, cols, chunk_log2) in [
        (ElemType::F32, 1433usize, 16u8),
        (ElemType::F16, 37, 16),
        (ElemType::F16, 41, 16),
        (ElemType::F32, 148, 16),
        (ElemType::BF16, 37, 12),
    ] {
        let rows = (200 << 10) / (cols * elem.size()) + 5;
        let data = channel_scaled(rows, cols, elem, cols as u64 * 7 + elem.size() as u64);
        let codec = Rans {
            chunk_log2,
            ..Rans::default()
        };
        let enc = shaped(&codec, &data, elem, cols);
        assert_eq!(enc[4], VERSION_ROW_LANES, "{elem} rows of {cols}");
        let m = (1usize << chunk_log2) / elem.size();
        let lanes = row_plane_lanes(&enc);
        // Chunks that are not row planes are modelled; the last chunk's planes are shorter.
        assert!(
            lanes.contains(&row_lanes(m, cols)) || chunk_log2 == 12,
            "{elem} rows of {cols}: {lanes:?}"
        );
        assert!(
            lanes.iter().any(|&k| !lanes_divide(k, cols)),
            "rows of {cols}"
        );
        for k in lanes {
            assert!(
                lanes_divide(k, cols) || 4 * k <= cols,
                "{k} lanes, rows of {cols}"
            );
        }
        round_trips(&codec, &enc, &data);
        fnv1a(&mut h, &enc);
    }
    assert_eq!(
        h, 0x61fb_1832_9cf1_07ae,
        "encoder output changed: {h:#018x}"
    );
}

/// A row plane whose lanes do not divide the row distance is refused in a version-6 stream,
/// and in a version-7 one where they are more than a quarter of it; damage to such a stream
/// never panics, and what decodes, decodes alike sequentially and in parallel.
#[test]
fn lanes_across_rows_keep_their_rules() {
    let data = channel_scaled(2000, 35, ElemType::F16, 3);
    let codec = Rans::default();
    let enc = shaped(&codec, &data, ElemType::F16, 35);
    assert_eq!(enc[4], VERSION_ROW_LANES);
    let (_, lanes_at) = first_row_plane(&enc);
    assert_eq!(enc[lanes_at], 8);
    let mut out = vec![0u8; data.len()];
    codec.decode(&enc, &mut out).unwrap();
    assert!(out == data);
    let refused = |bad: &[u8], what: &str| {
        let mut out = vec![0u8; data.len()];
        let e = codec.decode(bad, &mut out).expect_err(what);
        assert!(
            e.to_string().contains("lanes of a row plane"),
            "{what}: {e}"
        );
        assert!(codec.decode_parallel(bad, &mut out).is_err(), "{what}");
    };
    let mut v6 = enc.clone();
    v6[4] = VERSION_ROW_CONTEXT;
    refused(&v6, "eight lanes across rows in a version-6 stream");
    // U = 31: eight lanes are more than a quarter of it.
    let section = 16 + 2;
    assert_eq!(enc[section], 35);
    let mut short = enc.clone();
    short[section] = 31;
    refused(&short, "eight lanes with U = 31");
    damage_decodes_alike(&codec, &enc, data.len(), 7);
}

/// A row plane's element whose row context has no table is refused even where the lanes end
/// right: three of the tensor's row tables are equal
/// ([`planepack_testkit::twin_row_tables_bf16`]), and with the context of exponent 129's
/// taken out of the section the lanes decode, with the first or the last table in its place,
/// the tensor's own bytes.
#[test]
fn a_row_context_without_its_table_is_refused_where_the_lanes_end_right() {
    let data = planepack_testkit::twin_row_tables_bf16(1024, 5);
    let stream = shaped(&ROW_PLANES_ONLY, &data, ElemType::BF16, 64);
    round_trips(&ROW_PLANES_ONLY, &stream, &data);
    let h = parse_header(&stream).unwrap();
    assert_eq!(h.version, VERSION_ROW_CONTEXT);
    let rows = h.row_contexts.as_deref().unwrap();
    assert_eq!(rows.e0, 127);
    let c = row_context(129, rows.e0, rows.shift);
    let t = &rows.tables;
    let first = t.iter().flatten().next();
    assert!(t[c].is_some() && t[c].as_ref() == first && t[c] == t[ROW_FIRST]);
    let absent = RowTables::without_table(&stream, c).unwrap();
    let mut out = vec![0u8; data.len()];
    assert!(ROW_PLANES_ONLY.decode(&absent, &mut out).is_err());
    assert!(ROW_PLANES_ONLY.decode_parallel(&absent, &mut out).is_err());
}
