//! Every dataset file through every codec choice gives back the same bytes; edge-case files
//! (empty tensors, 64-bit dtypes, .npy) too; bad input files are refused with an error.

use planepack_container::format::{MAGIC, MAX_PART_LEN};
use planepack_container::{compress, CodecId, CompressOptions, Container, Error, Policy};
use planepack_datasets::{datasets_dir, Manifest};
use std::io::Cursor;

fn pack(file: &[u8], policy: Policy) -> Result<Vec<u8>, Error> {
    pack_in_parts(file, policy, MAX_PART_LEN)
}

fn pack_in_parts(file: &[u8], policy: Policy, part_len: u64) -> Result<Vec<u8>, Error> {
    let mut out = Cursor::new(Vec::new());
    let mut opts = CompressOptions::new(policy, "array");
    opts.part_len = part_len;
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
            let last = c.source.tensors.len() - 1;
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
    let mut rng = planepack_testkit::Rng(seed);
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
        npy("|u1", &[0], &[]),
        npy("|b1", &[3, 1], &[0, 1, 1]),
    ];
    // Big-endian arrays are refused rather than stored: they came back reinterpreted in Python.
    let big_endian = npy(">f4", &[5], &bytes(20, 8));
    for p in policies() {
        let err = pack(&big_endian, p).expect_err("a big-endian .npy is refused");
        assert!(err.to_string().contains("big-endian"), "{p:?}: {err}");
    }
    for (i, f) in files.iter().enumerate() {
        for p in policies() {
            let packed = pack(f, p).unwrap_or_else(|e| panic!("file {i} {p:?}: {e}"));
            assert_eq!(&unpack(&packed).unwrap(), f, "file {i} {p:?}");
            // In parts of a few bytes: rows split, elements never.
            for part_len in [1, 7, 24] {
                let packed = pack_in_parts(f, p, part_len).unwrap();
                assert_eq!(
                    &unpack(&packed).unwrap(),
                    f,
                    "file {i} {p:?} parts of {part_len}"
                );
            }
        }
    }
}

/// Issue 17 (items 1, 2): a tensor is stored in parts, so neither side holds a whole tensor.
/// Every dataset file in parts of a third of its largest tensor, and of an odd length, gives
/// back the same bytes, with one entry per part, and its largest tensor read alone equal to
/// its bytes.
#[test]
fn tensors_larger_than_a_part_round_trip_in_parts() {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).unwrap();
    for d in &manifest.datasets {
        let bytes = std::fs::read(dir.join(&d.file)).unwrap();
        let largest = Container::parse(
            pack(&bytes, Policy::Fixed(CodecId::Raw.into())).unwrap(),
            "array",
        )
        .unwrap()
        .source
        .tensors
        .iter()
        .map(|t| t.len)
        .max()
        .unwrap();
        let third = (largest / 3).max(1);
        for (p, part_len) in [
            (Policy::BestRatio, third),
            (Policy::Fixed(CodecId::Rans.into()), largest / 2 + 7),
            (Policy::Fixed(CodecId::Ibp.into()), third),
        ] {
            let packed = pack_in_parts(&bytes, p, part_len).unwrap();
            assert_eq!(unpack(&packed).unwrap(), bytes, "{} {p:?}", d.name);
            let c = Container::parse(&packed[..], "array").unwrap();
            let mut parts = 0;
            for (i, t) in c.source.tensors.iter().enumerate() {
                let want = planepack_container::write::parts_of(t, part_len).count();
                assert_eq!(c.parts(i).len(), want, "{} {}", d.name, t.name);
                assert!(c.entries[c.parts(i)].iter().all(|e| e.raw_len <= part_len));
                parts += want;
            }
            assert!(
                parts > c.source.tensors.len(),
                "{}: no tensor was split",
                d.name
            );
            let big = (0..c.source.tensors.len())
                .max_by_key(|&i| c.source.tensors[i].len)
                .unwrap();
            let t = &c.source.tensors[big];
            let mut out = vec![0; t.len as usize];
            c.read_into(big, &mut out).unwrap();
            assert_eq!(out, &bytes[t.offset as usize..(t.offset + t.len) as usize]);
            out.fill(0);
            c.read_into_parallel(big, &mut out).unwrap();
            assert_eq!(out, &bytes[t.offset as usize..(t.offset + t.len) as usize]);
            // The whole file, parts decoded in parallel.
            let mut file = vec![0; bytes.len()];
            c.decompress_into(&mut file).unwrap();
            assert!(file == bytes, "{} {p:?}: decompress_into", d.name);
        }
    }
}

/// Parts coded in parallel (`threads`; a window may hold parts of several tensors) give the
/// same container, byte for byte, and the same events, as one at a time: dataset files in
/// parts, best ratio and a fixed codec.
#[test]
fn parallel_parts_write_the_same_container() {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).unwrap();
    for d in manifest.datasets.iter().take(6) {
        let bytes = std::fs::read(dir.join(&d.file)).unwrap();
        for policy in [Policy::BestRatio, Policy::Fixed(CodecId::Rans.into())] {
            let mut one = CompressOptions::new(policy, "array");
            one.part_len = 40_000;
            let mut four = one.clone();
            four.threads = 4;
            let (mut a, mut b) = (Cursor::new(Vec::new()), Cursor::new(Vec::new()));
            // The events too: every part and every tensor's report, in file order (parallel
            // windows hold parts of several tensors).
            fn said(e: planepack_container::Event) -> String {
                match e {
                    planepack_container::Event::Part { raw_bytes } => format!("{raw_bytes}"),
                    planepack_container::Event::Tensor(t) => format!(
                        "{} {} {} {:?}",
                        t.name, t.parts, t.compressed_bytes, t.codec
                    ),
                }
            }
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            compress(&bytes[..], &mut a, &one, |e| ea.push(said(e))).unwrap();
            compress(&bytes[..], &mut b, &four, |e| eb.push(said(e))).unwrap();
            assert!(a.get_ref() == b.get_ref(), "{} {policy:?}", d.name);
            assert_eq!(ea, eb, "{} {policy:?}", d.name);
            // Windows held to one part's bytes (as `planepack compress` holds them).
            let mut bounded = four.clone();
            bounded.window_bytes = one.part_len;
            let (mut c, mut ec) = (Cursor::new(Vec::new()), Vec::new());
            compress(&bytes[..], &mut c, &bounded, |e| ec.push(said(e))).unwrap();
            assert!(a.get_ref() == c.get_ref(), "{} {policy:?} bounded", d.name);
            assert_eq!(ea, ec, "{} {policy:?} bounded", d.name);
            assert!(ea.iter().filter(|e| e.contains(' ')).count() > 1);
        }
    }
}

/// Recompute the metadata checksum of a container whose metadata a test edited.
fn reseal(b: &mut [u8]) {
    let h = planepack_container::format::Header::parse(b, b.len() as u64).unwrap();
    let at = h.checksum_offset().unwrap() as usize;
    let sum = planepack_container::checksum(&b[..at]);
    b[at..at + 8].copy_from_slice(&sum.to_le_bytes());
}

/// Issue 17 (item 1): metadata that claims a tensor the file cannot hold is refused before any
/// allocation: a 1 TiB tensor in one entry (a few hundred bytes of file), entries that stop
/// before a tensor is covered or go on after the last, and an empty part in a non-empty tensor.
#[test]
fn entry_tables_that_do_not_tile_in_parts_are_refused() {
    use planepack_container::format::{ENTRY_LEN, HEADER_LEN};
    let tib = 1u64 << 40;
    let json =
        format!("{{\"t\":{{\"dtype\":\"U8\",\"shape\":[{tib}],\"data_offsets\":[0,{tib}]}}}}");
    let p = 8 + json.len();
    let payload = zstd::bulk::compress(&[0u8; 64], 3).unwrap();
    let mut b = planepack_container::Header {
        source: planepack_container::SourceKind::Safetensors,
        original_len: p as u64 + tib,
        preamble_len: p as u64,
        entries: 1,
        payload_len: payload.len() as u64,
    }
    .to_bytes()
    .to_vec();
    b.extend_from_slice(&(json.len() as u64).to_le_bytes());
    b.extend_from_slice(json.as_bytes());
    let entry = planepack_container::Entry {
        raw_offset: p as u64,
        raw_len: tib,
        payload_offset: 0,
        payload_len: payload.len() as u64,
        raw_checksum: 0,
        payload_checksum: planepack_container::checksum(&payload),
        codec: CodecId::Zstd,
        elem: 3,
        level: 3,
    };
    b.extend_from_slice(&entry.to_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&payload);
    reseal(&mut b);
    assert!(b.len() < 300);
    match Container::parse(&b[..], "array") {
        Err(Error::Corrupt(m)) => assert!(m.contains("64 MiB"), "{m}"),
        other => panic!("1 TiB tensor: {:?}", other.map(|_| ())),
    }

    // A real two-tensor file in parts, then its entry table edited.
    let f = safetensors(
        &[
            ("a", "F32", vec![64, 4], bytes(1024, 21)),
            ("b", "F32", vec![64, 4], bytes(1024, 22)),
        ],
        0,
    );
    let packed = pack_in_parts(&f, Policy::Fixed(CodecId::Raw.into()), 256).unwrap();
    let h = planepack_container::format::Header::parse(&packed, packed.len() as u64).unwrap();
    assert_eq!(h.entries, 8);
    let table = HEADER_LEN + h.preamble_len as usize;
    let field = |b: &mut Vec<u8>, entry: usize, word: usize, v: u64| {
        let at = table + entry * ENTRY_LEN + word * 8;
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    };
    type Edit<'a> = Box<dyn Fn(&mut Vec<u8>) + 'a>;
    let cases: Vec<(&str, Edit<'_>)> = vec![
        (
            "a part runs past its tensor",
            Box::new(|b| field(b, 3, 1, 512)),
        ),
        ("empty part", Box::new(|b| field(b, 1, 1, 0))),
        (
            "one entry fewer",
            Box::new(|b| {
                // Drop the last entry and its payload; the header says 7 entries.
                let last = table + 7 * ENTRY_LEN;
                let payload_end = b.len() - 256;
                let mut v = b[..last].to_vec();
                v.extend_from_slice(&b[last + ENTRY_LEN..payload_end]);
                v[24..32].copy_from_slice(&7u64.to_le_bytes());
                v[32..40].copy_from_slice(&(7 * 256u64).to_le_bytes());
                *b = v;
            }),
        ),
    ];
    for (what, edit) in cases {
        let mut bad = packed.clone();
        edit(&mut bad);
        reseal(&mut bad);
        match Container::parse(&bad[..], "array") {
            Err(Error::Corrupt(_)) => {}
            other => panic!("{what}: {:?}", other.map(|_| ())),
        }
    }
}

/// Issue 17 (item 8): a container truncated while it is read gives an error, not SIGBUS (it
/// is read with positioned reads, not mapped).
#[test]
fn a_container_truncated_while_read_is_an_error() {
    let f = safetensors(&[("t", "F32", vec![4096], bytes(16384, 5))], 0);
    let packed = pack_in_parts(&f, Policy::Fixed(CodecId::Zstd.into()), 4096).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ppk");
    std::fs::write(&path, &packed).unwrap();
    let c = Container::open(&path, "t").unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(packed.len() as u64 / 2)
        .unwrap();
    match c.verify() {
        Err(Error::Io(e)) => assert!(e.to_string().contains("truncated"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// Issue 17 (item 10): a failed write (a full disk) is the output's error, not the input's.
#[test]
fn write_failures_are_output_errors() {
    struct Full;
    impl std::io::Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28)) // ENOSPC
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl std::io::Seek for Full {
        fn seek(&mut self, _: std::io::SeekFrom) -> std::io::Result<u64> {
            Ok(0)
        }
    }
    let f = safetensors(&[("t", "F32", vec![64], bytes(256, 5))], 0);
    let opts = CompressOptions::new(Policy::BestRatio, "t");
    assert!(matches!(
        compress(&f[..], &mut Full, &opts, |_| {}),
        Err(Error::Output(_))
    ));
    let packed = pack(&f, Policy::BestRatio).unwrap();
    let c = Container::parse(&packed[..], "t").unwrap();
    assert!(matches!(
        c.decompress_to(&mut Full, |_| {}),
        Err(Error::Output(_))
    ));
}

/// Found by the `tensor_files` fuzz target: a `.npy` header of nested brackets made the
/// header parser backtrack exponentially; it is refused as invalid input at once.
#[test]
fn deeply_nested_npy_header_is_refused_quickly() {
    let dict = "{".repeat(60);
    let mut f = b"\x93NUMPY\x01\x00".to_vec();
    f.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    f.extend_from_slice(dict.as_bytes());
    let t = std::time::Instant::now();
    match pack(&f, Policy::BestRatio) {
        Err(Error::InvalidInput(m)) => assert!(m.contains("nests"), "{m}"),
        other => panic!("{:?}", other.map(|v| v.len())),
    }
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
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
    let mut rng = planepack_testkit::Rng(42);
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
    // The parallel whole-file decoder refuses it the same way.
    let c = Container::parse(&bad[..], "array").unwrap();
    let mut file = vec![0; f.len()];
    let err = c.decompress_into(&mut file).unwrap_err().to_string();
    assert!(err.contains("\"second\""), "{err}");
    assert!(
        c.decompress_into(&mut file[1..]).is_err(),
        "wrong output length"
    );
}

/// `auto` adopts IBP with clusters where it is the smallest: rows of two families (each
/// column's sign, exponent and top mantissa bits constant within a family, the low 12 bits
/// noise), interleaved. One mask finds little that both families share; a mask per family
/// finds 20 bits a column, which no byte-oriented coder matches on these rows. The container
/// entry names `ibp-clusters` and gives the bytes back. (A ratio test, not a figure: the
/// figures on real data are `cargo xtask ibp-clusters`.)
#[test]
fn auto_adopts_ibp_clusters_where_they_win() {
    let (rows, cols) = (512usize, 64usize);
    let mut rng = planepack_testkit::Rng(5);
    let heads: Vec<[u32; 2]> = (0..cols)
        .map(|_| {
            [
                rng.next_u64() as u32 & !0xFFF,
                rng.next_u64() as u32 & !0xFFF,
            ]
        })
        .collect();
    let mut data = Vec::with_capacity(rows * cols * 4);
    for r in 0..rows {
        for head in &heads {
            let x = head[r % 2] | (rng.next_u64() as u32 & 0xFFF);
            data.extend_from_slice(&x.to_le_bytes());
        }
    }
    let file = npy("<f4", &[rows, cols], &data);
    let packed = pack(&file, Policy::BestRatio).unwrap();
    let c = Container::parse(&packed[..], "array").unwrap();
    assert_eq!(c.entries.len(), 1);
    assert_eq!(
        c.entries[0].codec,
        CodecId::IbpClusters,
        "auto chose otherwise"
    );
    assert_eq!(unpack(&packed).unwrap(), file);
    // And one mask alone is not what won: its stream is larger.
    let one = pack(&file, Policy::Fixed(CodecId::Ibp.into())).unwrap();
    assert!(one.len() > packed.len());
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
    // A family whose levels start at 0 is spelled without it there; the level still parses.
    assert_eq!(CodecSpec::parse("rans-0"), Some(CodecId::Rans.into()));
    assert_eq!(CodecSpec::from(CodecId::Rans).name(), "rans");
    for bad in [
        "rans-2",
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
