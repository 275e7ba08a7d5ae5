//! Encode and decode one workload batch in a loop, for a profiler (`rans` unless a codec of the
//! catalogue is named; `ENCODE_ONLY=1` or `=parallel` times the encoder alone, `DECODE_ONLY=1`
//! the decoder alone (`=parallel`: the parallel decoder), best of ITERS.
//! Variants of the encoder, for what its trials cost: `NO_ROW_CONTEXTS=1` the default rans
//! without row planes; `CHUNK_LOG2=n` the default rans at chunks of 2^n bytes; `FAST=1` plain
//! byte planes only (no modelled, difference, scaled or tail chunks, no context or row planes;
//! `FAST_ROWS=1`, `FAST_CTX=1` put those back).
//! Inputs: `SMALL=1` the file's batch of tensors under 1 MiB, where per-tensor costs show;
//! `JOIN=1` the file's tensors of the batch's type joined into one flat tensor, as the Python
//! speed bench gives them.
//! `cargo run --profile profiling -p planepack-harness --example rans_profile -- STEM [ITERS]
//! [CODEC]`, STEM a workload's (target/workloads/STEM.safetensors) or a file's path.
use planepack_container::CodecSpec;
use planepack_harness::input::{Batches, BATCH_BYTES};
use planepack_harness::SizeClass;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let stem = args.next().expect("a workload stem");
    let iters: usize = args.next().map_or(3, |s| s.parse().unwrap());
    let codec_name = args.next().unwrap_or_else(|| "rans".into());
    let path = match stem.ends_with(".safetensors") {
        true => std::path::PathBuf::from(&stem),
        false => std::path::Path::new("target/workloads").join(format!("{stem}.safetensors")),
    };
    let mut b = Batches::open(&stem, "workload", &path, BATCH_BYTES).unwrap();
    let classes = match std::env::var_os("SMALL").is_some() {
        true => vec![SizeClass::Small],
        false => vec![SizeClass::Large, SizeClass::Medium],
    };
    let i = classes
        .into_iter()
        .find_map(|c| (0..b.len()).find(|&i| b.kind(i).is_some_and(|k| k.1 == c)))
        .unwrap();
    let mut g = b.load(i).unwrap();
    // JOIN=1: every tensor of the file of the batch's element type joined into one flat tensor,
    // as the Python speed bench gives a dtype group.
    if std::env::var_os("JOIN").is_some() {
        let mut joined = Vec::new();
        for j in 0..b.len() {
            let group = b.load(j).unwrap();
            if group.elem == g.elem {
                for t in group.tensors {
                    joined.extend_from_slice(&t.1);
                }
            }
        }
        let n = joined.len() / g.elem.size();
        g.tensors = vec![(vec![n], joined)];
    }
    let bytes: usize = g.tensors.iter().map(|t| t.1.len()).sum();
    // NO_ROW_CONTEXTS=1: the default rans encoder without row planes, for what they cost.
    let codec: Box<dyn planepack_core::Codec> = if std::env::var_os("NO_ROW_CONTEXTS").is_some() {
        Box::new(planepack_rans::Rans {
            row_contexts: false,
            ..Default::default()
        })
    } else if let Ok(log2) = std::env::var("CHUNK_LOG2") {
        // CHUNK_LOG2=n: the default rans at chunks of 2^n bytes (what `rans-1` chooses among).
        Box::new(planepack_rans::Rans {
            chunk_log2: log2.parse().expect("CHUNK_LOG2: a number"),
            ..Default::default()
        })
    } else if std::env::var_os("FAST").is_some() {
        Box::new(planepack_rans::Rans {
            modelled: false,
            differences: false,
            tails: false,
            scaled: false,
            row_contexts: std::env::var_os("FAST_ROWS").is_some(),
            contexts: std::env::var_os("FAST_CTX").is_some(),
            ..Default::default()
        })
    } else {
        CodecSpec::parse(&codec_name).unwrap().codec()
    };
    let mut enc: Vec<Vec<u8>> = vec![Vec::new(); g.tensors.len()];
    if std::env::var_os("ENCODE_ONLY").is_some() {
        // ENCODE_ONLY=parallel: the parallel encoder on rayon's pool.
        let parallel = std::env::var("ENCODE_ONLY").is_ok_and(|v| v == "parallel");
        let mut best = f64::MAX;
        for _ in 0..iters {
            let t = Instant::now();
            for ((shape, data), o) in g.tensors.iter().zip(enc.iter_mut()) {
                o.clear();
                if parallel {
                    codec
                        .encode_shaped_parallel(data, g.elem, shape, o)
                        .unwrap();
                } else {
                    codec.encode_shaped(data, g.elem, shape, o).unwrap();
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let how = if parallel { "parallel" } else { "one core" };
        // FNV-1a of the streams: two builds of the encoder compared byte for byte.
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in enc.iter().flatten() {
            h = (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        println!(
            "{stem}: encode ({how}) best of {iters}: {:.3} GB/s, streams' hash {h:#018x}",
            bytes as f64 / best / 1e9
        );
        return;
    }
    if std::env::var_os("DECODE_ONLY").is_some() {
        // DECODE_ONLY=parallel: the parallel decoder on rayon's pool.
        let parallel = std::env::var("DECODE_ONLY").is_ok_and(|v| v == "parallel");
        for ((shape, data), o) in g.tensors.iter().zip(enc.iter_mut()) {
            codec.encode_shaped(data, g.elem, shape, o).unwrap();
        }
        let mut dst: Vec<Vec<u8>> = g.tensors.iter().map(|t| vec![0u8; t.1.len()]).collect();
        let mut best = f64::MAX;
        for _ in 0..iters {
            let t = Instant::now();
            for (e, d) in enc.iter().zip(&mut dst) {
                if parallel {
                    codec.decode_parallel(e, d).unwrap();
                } else {
                    codec.decode(e, d).unwrap();
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        assert!(dst.iter().zip(&g.tensors).all(|(d, t)| *d == t.1));
        println!(
            "{stem}: decode ({}) best of {iters}: {:.3} GB/s",
            if parallel { "parallel" } else { "one core" },
            bytes as f64 / best / 1e9
        );
        return;
    }
    for _ in 0..iters {
        let t = Instant::now();
        for ((shape, data), o) in g.tensors.iter().zip(enc.iter_mut()) {
            o.clear();
            codec.encode_shaped(data, g.elem, shape, o).unwrap();
        }
        let e = t.elapsed().as_secs_f64();
        let mut dst: Vec<Vec<u8>> = g.tensors.iter().map(|t| vec![0u8; t.1.len()]).collect();
        let t = Instant::now();
        for (e, d) in enc.iter().zip(&mut dst) {
            codec.decode(e, d).unwrap();
        }
        let d = t.elapsed().as_secs_f64();
        let c: usize = enc.iter().map(Vec::len).sum();
        let mut modes = [0usize; 6];
        for e in &enc {
            if let Ok(h) = planepack_rans::parse_header(e) {
                for (at, _) in planepack_rans::chunk_spans(e, &h).unwrap_or_default() {
                    modes[(e[at] as usize).min(5)] += 1;
                }
            }
        }
        println!("chunk modes raw/dense/sparse/modelled/scaled/difference: {modes:?}");
        let mut par: Vec<Vec<u8>> = vec![Vec::new(); g.tensors.len()];
        let t = Instant::now();
        for ((shape, data), o) in g.tensors.iter().zip(par.iter_mut()) {
            o.clear();
            codec
                .encode_shaped_parallel(data, g.elem, shape, o)
                .unwrap();
        }
        let pe = t.elapsed().as_secs_f64();
        assert!(par == enc, "parallel encode differs");
        let t = Instant::now();
        for (e, d) in enc.iter().zip(&mut dst) {
            codec.decode_parallel(e, d).unwrap();
        }
        let pd = t.elapsed().as_secs_f64();
        println!(
            "all cores: encode {:.3} GB/s decode {:.3} GB/s",
            bytes as f64 / pe / 1e9,
            bytes as f64 / pd / 1e9
        );
        println!(
            "{stem}: {} tensors {:.1} MiB ratio {:.4} encode {:.3} GB/s decode {:.3} GB/s",
            g.tensors.len(),
            bytes as f64 / 1048576.0,
            bytes as f64 / c as f64,
            bytes as f64 / e / 1e9,
            bytes as f64 / d / 1e9
        );
    }
}
