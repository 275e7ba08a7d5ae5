//! Compressed bytes of `rans` per dataset group and per workload batch, for comparing two
//! builds of the encoder: `cargo run --release -p planepack-harness --example rans_bytes`
//! (`NO_ROW_CONTEXTS=1`: the default encoder without row planes, for what they buy;
//! `NO_SIGN_CONTEXTS=1`: without sign planes;
//! `CHUNK_LOG2=n`: chunks of 2^n bytes; `WORKLOADS_ONLY=1`: skip the corpus;
//! `VERIFY=1`: each stream decoded and compared; `MODES=1`: also each group's (and workload batch's) chunks by mode, and a dense chunk's plane 0 by kind, which
//! say which path of the GPU decoder a group takes).
use planepack_container::CodecSpec;
use planepack_datasets::{datasets_dir, Manifest};
use planepack_harness::input::{groups_of, Batches, BATCH_BYTES};

/// With `MODES` set, count `stream`'s chunks by mode (a dense chunk by its plane 0's kind).
fn census(stream: &[u8], modes: &mut std::collections::BTreeMap<String, usize>) {
    if std::env::var_os("MODES").is_none() {
        return;
    }
    let h = planepack_rans::parse_header(stream).unwrap();
    for (at, _) in planepack_rans::chunk_spans(stream, &h).unwrap() {
        let mode = stream[at];
        let key = if mode == planepack_rans::CHUNK_DENSE {
            format!("dense/plane0-kind{}", stream[at + 1])
        } else {
            format!("mode{mode}")
        };
        *modes.entry(key).or_default() += 1;
    }
}

/// With `VERIFY` set, decode `stream` and compare it with `data`.
fn verify(codec: &dyn planepack_core::Codec, stream: &[u8], data: &[u8]) {
    if std::env::var_os("VERIFY").is_some() {
        let mut back = vec![0u8; data.len()];
        codec.decode_parallel(stream, &mut back).unwrap();
        assert!(back == data, "round trip");
    }
}

fn main() {
    let off = |v: &str| std::env::var_os(v).is_some();
    let chunk_log2 = std::env::var("CHUNK_LOG2")
        .map(|v| v.parse().expect("CHUNK_LOG2: a number"))
        .unwrap_or(planepack_rans::DEFAULT_CHUNK_LOG2);
    let codec: Box<dyn planepack_core::Codec> =
        if off("NO_ROW_CONTEXTS") || off("NO_SIGN_CONTEXTS") || off("CHUNK_LOG2") {
            Box::new(planepack_rans::Rans {
                row_contexts: !off("NO_ROW_CONTEXTS"),
                sign_contexts: !off("NO_SIGN_CONTEXTS"),
                chunk_log2,
                ..Default::default()
            })
        } else {
            CodecSpec::parse("rans").unwrap().codec()
        };
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).unwrap();
    let mut total = (0u64, 0u64);
    for d in manifest.datasets.iter().filter(|_| !off("WORKLOADS_ONLY")) {
        for g in groups_of(&d.name, &d.category, &dir.join(&d.file)).unwrap() {
            let mut c = 0u64;
            let mut modes = std::collections::BTreeMap::<String, usize>::new();
            for (shape, data) in &g.tensors {
                let mut o = Vec::new();
                codec.encode_shaped(data, g.elem, shape, &mut o).unwrap();
                verify(&*codec, &o, data);
                c += o.len() as u64;
                census(&o, &mut modes);
            }
            total.0 += g.raw_bytes();
            total.1 += c;
            println!(
                "{} {} {:?} {} {}",
                g.dataset,
                g.dtype,
                g.size_class,
                g.raw_bytes(),
                c
            );
            if !modes.is_empty() {
                println!("  chunks: {modes:?}");
            }
        }
    }
    println!("corpus {} {}", total.0, total.1);
    let wl = std::path::Path::new("target/workloads");
    let Ok(entries) = std::fs::read_dir(wl) else {
        return;
    };
    let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "safetensors"))
    {
        let stem = f.file_stem().unwrap().to_string_lossy().to_string();
        let mut b = Batches::open(&stem, "workload", f, BATCH_BYTES).unwrap();
        // Every 8th batch: a sample of each file in a few minutes.
        for i in (0..b.len()).step_by(8) {
            let g = b.load(i).unwrap();
            let mut c = 0u64;
            let mut modes = std::collections::BTreeMap::<String, usize>::new();
            for (shape, data) in &g.tensors {
                let mut o = Vec::new();
                codec
                    .encode_shaped_parallel(data, g.elem, shape, &mut o)
                    .unwrap();
                verify(&*codec, &o, data);
                c += o.len() as u64;
                census(&o, &mut modes);
            }
            println!(
                "{stem} batch {i} {:?} {} {}",
                g.size_class,
                g.raw_bytes(),
                c
            );
            if !modes.is_empty() {
                println!("  chunks: {modes:?}");
            }
        }
    }
}
