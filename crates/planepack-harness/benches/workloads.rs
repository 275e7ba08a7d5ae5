//! Single-core encode and decode speed of the GPU-decodable codecs (rANS, bit-plane, IBP) on
//! production-size tensors, beside memcpy of the same bytes in the same run, and rANS's
//! parallel encoder and decoder on 1 to all of the machine's threads: the first batch
//! (up to 64 MiB, as `cargo xtask bench --workloads` cuts them) of the largest size class of
//! four workload files (>= 16 MiB; 1-16 MiB for the KV cache, whose layers are 3 MiB): a
//! transformer's BF16 activations, a BF16 KV cache of 8192 tokens, a CNN's BF16 activations
//! and the transformer's FP32 activations (the bit-plane encoder's slower width). The files come from `cargo xtask workloads` (`target/workloads/`); without
//! them this bench stops and says so.
//! Run with `cargo xtask criterion --workloads`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use planepack_container::CodecSpec;
use planepack_harness::input::{Batches, BATCH_BYTES};
use planepack_harness::{Group, SizeClass};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// (criterion group, workload file stem)
const FILES: [(&str, &str); 4] = [
    ("wl-transformer-bf16", "transformer-minilm-16x512-bf16"),
    ("wl-kv-bf16", "kv-smollm2-8192-bf16"),
    ("wl-cnn-bf16", "cnn-efficientnet-lite0-b40-bf16"),
    ("wl-transformer-fp32", "transformer-minilm-16x512-fp32"),
];

/// Where `cargo xtask workloads` writes them (xtask's `workloads::dir`).
fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/workloads")
}

/// The file's first batch of its largest size class (>= 16 MiB; the KV cache's layers are
/// 1-16 MiB each).
fn large_batch(stem: &str) -> Group {
    let path = workloads_dir().join(format!("{stem}.safetensors"));
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask workloads` first",
        path.display()
    );
    let mut b = Batches::open(stem, "workload", &path, BATCH_BYTES)
        .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    let i = [SizeClass::Large, SizeClass::Medium]
        .into_iter()
        .find_map(|c| (0..b.len()).find(|&i| b.kind(i).is_some_and(|k| k.1 == c)))
        .unwrap_or_else(|| panic!("{stem}: no tensor of 1 MiB or more"));
    b.load(i).unwrap_or_else(|e| panic!("{stem}: {e:#}"))
}

fn bench(c: &mut Criterion) {
    for (label, stem) in FILES {
        let g = large_batch(stem);
        let bytes: usize = g.tensors.iter().map(|t| t.1.len()).sum();
        let mut group = c.benchmark_group(label);
        group
            .throughput(Throughput::Bytes(bytes as u64))
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
        let mut dst: Vec<Vec<u8>> = g.tensors.iter().map(|t| vec![0u8; t.1.len()]).collect();
        group.bench_function("memcpy", |b| {
            b.iter(|| {
                for ((_, src), d) in g.tensors.iter().zip(&mut dst) {
                    d.copy_from_slice(black_box(src));
                }
            })
        });
        for name in ["rans", "bitplane", "ibp"] {
            let codec = CodecSpec::parse(name).expect("a catalogue name").codec();
            let encode_all = |out: &mut Vec<Vec<u8>>| {
                for ((shape, data), o) in g.tensors.iter().zip(out.iter_mut()) {
                    o.clear();
                    codec.encode_shaped(data, g.elem, shape, o).unwrap();
                }
            };
            let mut enc: Vec<Vec<u8>> = vec![Vec::new(); g.tensors.len()];
            encode_all(&mut enc);
            for ((_, data), (e, d)) in g.tensors.iter().zip(enc.iter().zip(&mut dst)) {
                codec.decode(e, d).unwrap();
                assert!(d == data, "{name} does not round-trip on {stem}");
            }
            let ratio = bytes as f64 / enc.iter().map(Vec::len).sum::<usize>() as f64;
            eprintln!("{label}: {name} ratio {ratio:.3} on {bytes} bytes");
            group.bench_function(BenchmarkId::new("encode", name), |b| {
                b.iter(|| encode_all(&mut enc))
            });
            group.bench_function(BenchmarkId::new("decode", name), |b| {
                b.iter(|| {
                    for (e, d) in enc.iter().zip(&mut dst) {
                        codec.decode(black_box(e), d).unwrap();
                    }
                })
            });
            if name != "rans" {
                continue;
            }
            // Scaling: the parallel encoder and decoder (chunks over rayon) on pools of 1 to
            // all of this machine's threads, each tensor in turn.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            for threads in 1..=cores {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("a thread pool");
                let mut par: Vec<Vec<u8>> = vec![Vec::new(); g.tensors.len()];
                let id = format!("{name}-{threads}-threads");
                group.bench_function(BenchmarkId::new("encode-parallel", &id), |b| {
                    b.iter(|| {
                        pool.install(|| {
                            for ((shape, data), o) in g.tensors.iter().zip(par.iter_mut()) {
                                o.clear();
                                codec
                                    .encode_shaped_parallel(data, g.elem, shape, o)
                                    .unwrap();
                            }
                        })
                    })
                });
                assert!(par == enc, "{name}: the parallel encoder wrote other bytes");
                group.bench_function(BenchmarkId::new("decode-parallel", &id), |b| {
                    b.iter(|| {
                        pool.install(|| {
                            for (e, d) in enc.iter().zip(&mut dst) {
                                codec.decode_parallel(black_box(e), d).unwrap();
                            }
                        })
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
