//! Single-core throughput probe on synthetic data, for profiling (not a result: figures come
//! from the criterion bench and the harness on real tensors).
//!
//! `cargo run --release -p planepack-bitplane --example bitplane_probe -- [f32|bf16] [pattern] [enc|dec] [reps]`
use planepack_bitplane::BitPlane;
use planepack_core::testdata::{generate, Pattern};
use planepack_core::{Codec, ElemType};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let elems: Vec<ElemType> = match args.get(1) {
        Some(e) => vec![e.parse().unwrap()],
        None => vec![ElemType::F32, ElemType::BF16],
    };
    let patterns: Vec<Pattern> = match args.get(2) {
        Some(p) => Pattern::ALL
            .into_iter()
            .filter(|x| format!("{x:?}").eq_ignore_ascii_case(p))
            .collect(),
        None => vec![
            Pattern::ReluSparse,
            Pattern::Smooth,
            Pattern::RandomBits,
            Pattern::Mixed,
        ],
    };
    let what = args.get(3).map(String::as_str).unwrap_or("both");
    let reps: usize = args.get(4).map(|r| r.parse().unwrap()).unwrap_or(3);
    for &elem in &elems {
        let files: Vec<(String, Vec<u8>)> = match std::env::var("PROBE_FILE") {
            Ok(f) => vec![(f.clone(), std::fs::read(&f).unwrap())],
            Err(_) => patterns
                .iter()
                .map(|&p| (format!("{p:?}"), generate(p, elem, 16 << 20, 1)))
                .collect(),
        };
        for (p, data) in files {
            let mut out = Vec::new();
            let codec = BitPlane::new();
            let s = codec.encode_with_stats(&data, elem, &mut out).unwrap();
            let mut dec = vec![0u8; data.len()];
            let (mut enc_best, mut dec_best) = (f64::MAX, f64::MAX);
            for _ in 0..reps {
                if what != "dec" {
                    let mut o = Vec::with_capacity(out.len());
                    let t = Instant::now();
                    codec.encode(&data, elem, &mut o).unwrap();
                    enc_best = enc_best.min(t.elapsed().as_secs_f64());
                }
                if what != "enc" {
                    let t = Instant::now();
                    codec.decode(&out, &mut dec).unwrap();
                    dec_best = dec_best.min(t.elapsed().as_secs_f64());
                }
            }
            let gb = data.len() as f64 / 1e9;
            println!(
                "{elem} {p}: enc {:.2} GB/s dec {:.2} GB/s  {s}",
                gb / enc_best,
                gb / dec_best
            );
        }
    }
}
