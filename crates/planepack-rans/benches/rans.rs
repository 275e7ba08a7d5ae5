//! Single-core encode and decode speed of the rANS codec on real tensors, beside memcpy of the
//! same bytes and the bit-plane codec, in the same run: BF16 and FP32 activations, a BF16 KV
//! cache and sparse FP32 GNN features. Run with `cargo bench -p planepack-rans --bench rans`
//! (or `cargo xtask criterion`); criterion reports GB/s of raw bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;
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

fn bench(c: &mut Criterion) {
    for (label, file, dtype, elem) in [
        (
            "act-f32",
            "activations/efficientnet-lite0-fp32.safetensors",
            "F32",
            ElemType::F32,
        ),
        (
            "act-bf16",
            "activations/efficientnet-lite0-bf16.safetensors",
            "BF16",
            ElemType::BF16,
        ),
        (
            "kv-bf16",
            "kv/smollm2-135m-kv-bf16.safetensors",
            "BF16",
            ElemType::BF16,
        ),
        (
            "gnn-bow-f32",
            "gnn/manpages-bow-fp32.safetensors",
            "F32",
            ElemType::F32,
        ),
    ] {
        let data = real_tensor(file, dtype);
        let mut g = c.benchmark_group(format!("rans-{label}"));
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        let mut dst = vec![0u8; data.len()];
        g.bench_function("memcpy", |b| {
            b.iter(|| dst.copy_from_slice(black_box(&data)))
        });
        let codecs: [Box<dyn Codec>; 2] = [
            Box::new(Rans::default()),
            Box::new(planepack_bitplane::BitPlane::new()),
        ];
        for codec in codecs {
            let name = codec.name();
            let enc = codec.encode_to_vec(&data, elem).unwrap();
            let mut out = vec![0u8; data.len()];
            codec.decode(&enc, &mut out).unwrap();
            assert!(out == data, "{name} does not round-trip");
            let mut buf = Vec::with_capacity(enc.len() * 2);
            g.bench_with_input(BenchmarkId::new("encode", &name), &data, |b, d| {
                b.iter(|| {
                    buf.clear();
                    codec.encode(black_box(d), elem, &mut buf).unwrap()
                })
            });
            g.bench_with_input(BenchmarkId::new("decode", &name), &enc, |b, e| {
                b.iter(|| codec.decode(black_box(e), &mut out).unwrap())
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
