//! Throughput probe for profiling IBP decode on a dataset tensor (figures: `cargo xtask criterion`).
//! `cargo run --release -p planepack-ibp --example ibp_probe -- embedding/minilm-word-embeddings-fp32.safetensors word_embeddings.rows [reps]`
use planepack_ibp::{compress, preprocess, Columns, Layout, Rows, Sample, Threshold};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = planepack_datasets::datasets_dir().join(&args[1]);
    let t = planepack_datasets::load(&path)
        .unwrap()
        .into_iter()
        .find(|t| t.name == args[2])
        .unwrap();
    let reps: usize = args.get(3).map(|r| r.parse().unwrap()).unwrap_or(20);
    let row_bytes = t.shape.last().unwrap() * t.dtype_bytes();
    let width = if row_bytes % 8 == 0 { 64 } else { 32 };
    let rows = Rows::new(&t.data, row_bytes, width).unwrap();
    let pre = preprocess(&rows, Threshold::Sweep, Sample::All);
    let cols = Columns::new(&pre.mask);
    let c = compress(&rows, &cols, Layout::Condensed);
    let mut out = vec![0u8; t.data.len()];
    let mut best = f64::MAX;
    for _ in 0..reps {
        let s = Instant::now();
        c.decode_all(&cols, &mut out).unwrap();
        best = best.min(s.elapsed().as_secs_f64());
    }
    assert!(out == t.data);
    println!(
        "decode {:.2} GB/s, ratio {:.3}",
        t.data.len() as f64 / best / 1e9,
        t.data.len() as f64 / c.data.len() as f64
    );
}
