//! Single-core encode and decode speed of every codec on real tensors, with memcpy of the same
//! bytes measured in the same run as the reference.
//!
//! Input: all tensors of one dtype from one dataset file, concatenated (activations of
//! EfficientNet-Lite0 saved for backward, FP32 and BF16 autocast). Run with
//! `cargo bench -p planepack-bitplane --bench codecs`; criterion reports GB/s of raw bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use planepack_bitplane::BitPlane;
use planepack_core::{Codec, ElemType};
use std::hint::black_box;
use std::time::Duration;

fn real_tensor(file: &str, dtype: &str) -> Vec<u8> {
    let path = planepack_datasets::datasets_dir().join(file);
    let tensors = planepack_datasets::load(&path).unwrap_or_else(|e| panic!("{e}"));
    tensors
        .into_iter()
        .filter(|t| t.dtype == dtype)
        .flat_map(|t| t.data)
        .collect()
}

fn codecs() -> Vec<Box<dyn Codec>> {
    let mut v: Vec<Box<dyn Codec>> = vec![Box::new(BitPlane::new())];
    v.extend(planepack_baselines::all());
    v
}

fn bench(c: &mut Criterion) {
    for (label, file, dtype, elem) in [
        (
            "f32",
            "activations/efficientnet-lite0-fp32.safetensors",
            "F32",
            ElemType::F32,
        ),
        (
            "bf16",
            "activations/efficientnet-lite0-bf16.safetensors",
            "BF16",
            ElemType::BF16,
        ),
    ] {
        let data = real_tensor(file, dtype);
        let mut g = c.benchmark_group(label.to_string());
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let mut dst = vec![0u8; data.len()];
        g.bench_function("memcpy", |b| {
            b.iter(|| dst.copy_from_slice(black_box(&data)))
        });
        for codec in codecs() {
            let name = codec.name();
            if name == "raw" {
                continue; // memcpy above
            }
            let enc = codec.encode_to_vec(&data, elem).unwrap();
            let mut out = vec![0u8; data.len()];
            codec.decode(&enc, &mut out).unwrap();
            assert!(out == data, "{name} does not round-trip");
            let mut buf = Vec::with_capacity(enc.len() * 2);
            if !name.starts_with("zstd-19") {
                g.bench_with_input(BenchmarkId::new("encode", &name), &data, |b, d| {
                    b.iter(|| {
                        buf.clear();
                        codec.encode(black_box(d), elem, &mut buf).unwrap()
                    })
                });
            }
            g.bench_with_input(BenchmarkId::new("decode", &name), &enc, |b, e| {
                b.iter(|| codec.decode(black_box(e), &mut out).unwrap())
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
