//! Every dataset file through every codec choice gives back the same bytes; edge-case files
//! (empty tensors, 64-bit dtypes, .npy) too; bad input files are refused with an error.

use planepack_container::format::MAGIC;
use planepack_container::{compress, CodecId, CompressOptions, Container, Error, Policy};
use planepack_datasets::{datasets_dir, Manifest};
use std::io::Cursor;

fn pack(file: &[u8], policy: Policy) -> Result<Vec<u8>, Error> {
    let mut out = Cursor::new(Vec::new());
    let opts = CompressOptions {
        policy,
        npy_name: "array".into(),
    };
    compress(file, &mut out, &opts, |_| {})?;
    Ok(out.into_inner())
}

fn unpack(container: &[u8]) -> Result<Vec<u8>, Error> {
    let c = Container::parse(container, "array")?;
    let mut out = Vec::new();
    c.decompress_to(&mut out, |_| {})?;
    Ok(out)
}

fn policies() -> Vec<Policy> {
    let mut v: Vec<Policy> = CodecId::ALL
        .into_iter()
        .map(|c| Policy::Fixed(c.into()))
        .collect();
    v.push(Policy::BestRatio);
    v.push(Policy::Link {
        gbps: 24.0,
        engine_gbps: Some(64.0),
    });
    v.push(Policy::Link {
        gbps: 24.0,
        engine_gbps: None,
    });
    v
}

#[test]
fn every_dataset_file_every_codec_round_trips() {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).unwrap();
    for d in &manifest.datasets {
        let bytes = std::fs::read(dir.join(&d.file)).unwrap();
        for p in policies() {
            let packed = pack(&bytes, p).unwrap_or_else(|e| panic!("{} {p:?}: {e}", d.name));
            assert_eq!(unpack(&packed).unwrap(), bytes, "{} {p:?}", d.name);
            // Random access: one tensor alone equals its bytes in the original.
            let c = Container::parse(&packed[..], "array").unwrap();
            let last = c.entries.len() - 1;
            let t = &c.source.tensors[last];
            let i = c.index_of(&t.name).unwrap();
            assert_eq!(
                c.read(i).unwrap(),
                &bytes[t.offset as usize..(t.offset + t.len) as usize]
            );
        }
    }
}

/// A safetensors file from (name, dtype, shape, bytes) with an optional `__metadata__`.
fn safetensors(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)], pad: usize) -> Vec<u8> {
    let mut json = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut off = 0;
    for (name, dtype, shape, data) in tensors {
        json += &format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{off},{}]}}",
            off + data.len()
        );
        off += data.len();
    }
    json += "}";
    json += &" ".repeat(pad);
    let mut f = (json.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(json.as_bytes());
    for t in tensors {
        f.extend_from_slice(&t.3);
    }
    f
}

fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_s}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut f = b"\x93NUMPY\x01\x00".to_vec();
    f.extend_from_slice(&(h.len() as u16).to_le_bytes());
    f.extend_from_slice(h.as_bytes());
    f.extend_from_slice(data);
    f
}

fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = planepack_core::testdata::Rng(seed);
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

#[test]
fn edge_case_files_round_trip() {
    let specials: Vec<u8> = [
        0.0f32,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::MIN_POSITIVE / 2.0,
    ]
    .iter()
    .flat_map(|f| f.to_le_bytes())
    .chain(0x7fc0_1234u32.to_le_bytes()) // a NaN with a payload
    .collect();
    let files = [
        safetensors(&[], 0),
        safetensors(&[("empty", "F32", vec![0, 4], vec![])], 3),
        safetensors(
            &[
                ("specials", "F32", vec![6], specials.clone()),
                ("i64", "I64", vec![3, 5], bytes(120, 1)),
                ("f64", "F64", vec![7], bytes(56, 2)),
                ("bf16", "BF16", vec![33, 3], bytes(198, 3)),
                ("bool", "BOOL", vec![17], vec![1; 17]),
                ("u16", "U16", vec![5], bytes(10, 4)),
                ("scalar", "F16", vec![], bytes(2, 5)),
                ("f8", "F8_E4M3", vec![9, 7], bytes(63, 6)),
            ],
            7,
        ),
        npy("<f4", &[6], &specials),
        npy("<i8", &[2, 3], &bytes(48, 7)),
        npy(">f4", &[5], &bytes(20, 8)),
        npy("|u1", &[0], &[]),
        npy("|b1", &[3, 1], &[0, 1, 1]),
    ];
    for (i, f) in files.iter().enumerate() {
        for p in policies() {
            let packed = pack(f, p).unwrap_or_else(|e| panic!("file {i} {p:?}: {e}"));
            assert_eq!(&unpack(&packed).unwrap(), f, "file {i} {p:?}");
        }
    }
}

#[test]
fn bad_input_files_are_refused() {
    let good = safetensors(&[("a", "F32", vec![4], bytes(16, 9))], 0);
    let json_with = |body: &str| {
        let mut f = (body.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(body.as_bytes());
        f.extend_from_slice(&bytes(16, 10));
        f
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty file", vec![]),
        ("text", b"hello, this is not a tensor file at all".to_vec()),
        ("truncated header", good[..20].to_vec()),
        ("header length beyond the file", {
            let mut f = good.clone();
            f[0..8].copy_from_slice(&1_000_000u64.to_le_bytes());
            f
        }),
        ("data truncated", good[..good.len() - 1].to_vec()),
        ("data extended", [good.clone(), vec![0]].concat()),
        (
            "offsets beyond the data",
            json_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,32]}}"),
        ),
        (
            "offsets with a gap",
            json_with("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}"),
        ),
        (
            "dtype disagrees with size",
            json_with("{\"a\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[0,16]}}"),
        ),
        (
            "unsupported dtype",
            json_with("{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}"),
        ),
        ("not json", json_with("{\"a\": nope")),
        ("npy truncated", npy("<f4", &[6], &[0; 23])),
        ("npy object dtype", npy("|O", &[2], &[0; 16])),
        (
            "npy header truncated",
            b"\x93NUMPY\x01\x00\xff\x00{'descr'".to_vec(),
        ),
    ];
    for (what, f) in cases {
        match pack(&f, Policy::BestRatio) {
            Err(Error::InvalidInput(msg)) => {
                assert!(!msg.is_empty(), "{what}");
                if what == "unsupported dtype" {
                    assert!(msg.contains("dtype"), "{what}: {msg}");
                }
            }
            other => panic!(
                "{what}: expected InvalidInput, got {:?}",
                other.map(|v| v.len())
            ),
        }
    }
}

#[test]
fn every_single_bit_flip_is_detected() {
    let dir = datasets_dir();
    // The smallest dataset file keeps thousands of full decodes quick.
    let m = Manifest::read(&dir).unwrap();
    let smallest = m.datasets.iter().min_by_key(|d| d.bytes).unwrap();
    let file = std::fs::read(dir.join(&smallest.file)).unwrap();
    let packed = pack(&file, Policy::BestRatio).unwrap();
    assert_eq!(&packed[..4], &MAGIC);
    let mut rng = planepack_core::testdata::Rng(42);
    let bits = packed.len() as u64 * 8;
    // Every bit of the metadata, then thousands of random bits over the whole file.
    let meta_end = {
        let c = Container::parse(&packed[..], "array").unwrap();
        c.header.payload_start().unwrap()
    };
    let positions: Vec<u64> = (0..meta_end * 8)
        .chain((0..4000).map(|_| rng.next_u64() % bits))
        .collect();
    for pos in positions {
        let mut bad = packed.clone();
        bad[(pos / 8) as usize] ^= 1 << (pos % 8);
        match unpack(&bad) {
            Err(Error::Corrupt(_)) => {}
            Err(e) => panic!("bit {pos}: unexpected error kind {e}"),
            Ok(_) => panic!("bit {pos}: flip not detected"),
        }
    }
    // Truncation anywhere and appended bytes.
    for cut in (0..packed.len()).step_by(97).chain([packed.len() - 1]) {
        assert!(unpack(&packed[..cut]).is_err(), "cut at {cut}");
    }
    assert!(unpack(&[packed.clone(), vec![0]].concat()).is_err());
}

#[test]
fn payload_checksum_failure_names_the_tensor() {
    let f = safetensors(
        &[
            ("first", "F32", vec![64], bytes(256, 11)),
            ("second", "BF16", vec![64], vec![0; 128]),
        ],
        0,
    );
    let packed = pack(&f, Policy::Fixed(CodecId::Zstd.into())).unwrap();
    let mut bad = packed.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x10;
    let err = unpack(&bad).unwrap_err().to_string();
    assert!(err.contains("\"second\""), "{err}");
}

/// One catalogue: every spelling the command takes names the codec it builds, and every
/// codec the harness measures can be written by `compress --codec <its name>`.
#[test]
fn codec_names_parse_back_and_match_the_codecs() {
    use planepack_container::CodecSpec;
    let mut specs = CodecSpec::bench_set();
    specs.extend(CodecId::ALL.map(CodecSpec::from));
    for spec in specs {
        let name = spec.name();
        assert_eq!(CodecSpec::parse(&name), Some(spec), "{name}");
        assert_eq!(spec.codec().name(), name, "catalogue and codec disagree");
    }
    assert_eq!(CodecSpec::parse("zstd"), Some(CodecId::Zstd.into()));
    for bad in [
        "zstd-0",
        "zstd-23",
        "blosc2-shuffle-zstd-10",
        "bitplane-3",
        "lz",
        "zstd-",
    ] {
        assert_eq!(CodecSpec::parse(bad), None, "{bad}");
    }
}

/// Found by the `container` fuzz target: header fields whose sum passes 2^64 are an error,
/// not an overflow (a panic in debug builds, a wrapped offset in release ones).
#[test]
fn header_fields_that_overflow_are_refused() {
    let mut b = vec![0u8; 48];
    b[..4].copy_from_slice(&MAGIC);
    b[4..6].copy_from_slice(&planepack_container::format::VERSION.to_le_bytes());
    b[6] = 1;
    for (preamble, entries) in [(u64::MAX, 0u64), (u64::MAX - 47, 1), (0, u64::MAX / 8)] {
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        b[16..24].copy_from_slice(&preamble.to_le_bytes());
        b[24..32].copy_from_slice(&entries.to_le_bytes());
        let h = planepack_container::format::Header::parse(&b, 48);
        assert!(h.is_err(), "preamble {preamble} entries {entries}");
        assert!(Container::parse(&b[..], "array").is_err());
    }
}

/// Issue 17: a stored safetensors header whose own length field disagrees with the stored
/// header is refused even when the metadata checksum is recomputed (it would decompress into
/// a file safetensors rejects).
#[test]
fn stored_header_length_must_match_the_header() {
    let dir = datasets_dir();
    let m = Manifest::read(&dir).unwrap();
    let smallest = m.datasets.iter().min_by_key(|d| d.bytes).unwrap();
    let file = std::fs::read(dir.join(&smallest.file)).unwrap();
    let packed = pack(&file, Policy::BestRatio).unwrap();
    let h = planepack_container::format::Header::parse(&packed, packed.len() as u64).unwrap();
    let at = planepack_container::format::HEADER_LEN;
    let sum_at = h.checksum_offset().unwrap() as usize;
    for delta in [-8i64, -1, 1, 8] {
        let mut bad = packed.clone();
        let n = u64::from_le_bytes(bad[at..at + 8].try_into().unwrap());
        bad[at..at + 8].copy_from_slice(&((n as i64 + delta) as u64).to_le_bytes());
        let sum = planepack_container::checksum(&bad[..sum_at]);
        bad[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
        match Container::parse(&bad[..], "array") {
            Err(Error::Corrupt(m)) => assert!(m.contains("states"), "{m}"),
            other => panic!("length {delta:+}: {:?}", other.map(|_| ())),
        }
    }
}
