//! IBP single-core speed on real rows: decode of a whole group, gather of 4096 random rows,
//! encode, and memcpy of the same bytes in the same run.
//!
//! `cargo bench -p planepack-ibp --bench ibp`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use planepack_ibp::{compress, preprocess, Columns, Layout, Rows, Sample, Threshold};
use planepack_testkit::Rng;
use std::hint::black_box;
use std::time::Duration;

/// (label, file, tensor, row bytes)
const INPUTS: &[(&str, &str, &str)] = &[
    (
        "embedding",
        "embedding/minilm-word-embeddings-fp32.safetensors",
        "word_embeddings.rows",
    ),
    (
        "gnn-dense",
        "gnn/manpages-minilm-fp32.safetensors",
        "features",
    ),
    ("gnn-bow", "gnn/manpages-bow-fp32.safetensors", "features"),
];

fn bench(c: &mut Criterion) {
    for &(label, file, name) in INPUTS {
        let tensors =
            planepack_datasets::load(&planepack_datasets::datasets_dir().join(file)).unwrap();
        let t = tensors.into_iter().find(|t| t.name == name).unwrap();
        let row_bytes = t.shape.last().unwrap() * 4;
        let width = if row_bytes % 8 == 0 { 64 } else { 32 };
        let rows = Rows::new(&t.data, row_bytes, width).unwrap();
        let pre = preprocess(&rows, Threshold::Sweep, Sample::All);
        let cols = Columns::new(&pre.mask);
        let mut g = c.benchmark_group(label);
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        g.throughput(Throughput::Bytes(t.data.len() as u64));
        let mut out = vec![0u8; t.data.len()];
        g.bench_function("memcpy", |b| {
            b.iter(|| out.copy_from_slice(black_box(&t.data)))
        });
        for layout in [Layout::Condensed, Layout::InPlace] {
            let packed = compress(&rows, &cols, layout);
            g.bench_function(BenchmarkId::new("decode", format!("{layout:?}")), |b| {
                b.iter(|| packed.decode_all(&cols, &mut out).unwrap())
            });
        }
        g.bench_function("encode", |b| {
            b.iter(|| compress(black_box(&rows), &cols, Layout::Condensed))
        });
        // Gather of 4096 random rows (with repeats): throughput in output bytes.
        let mut rng = Rng(1);
        let idx: Vec<usize> = (0..4096)
            .map(|_| rng.below(rows.count as u64) as usize)
            .collect();
        let mut gathered = vec![0u8; idx.len() * row_bytes];
        g.throughput(Throughput::Bytes(gathered.len() as u64));
        let packed = compress(&rows, &cols, Layout::Condensed);
        g.bench_function("gather-4096", |b| {
            b.iter(|| {
                packed
                    .gather(&cols, black_box(&idx), &mut gathered)
                    .unwrap()
            })
        });
        g.bench_function("gather-4096-memcpy", |b| {
            b.iter(|| {
                for (k, &i) in idx.iter().enumerate() {
                    gathered[k * row_bytes..(k + 1) * row_bytes].copy_from_slice(rows.row(i));
                }
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
