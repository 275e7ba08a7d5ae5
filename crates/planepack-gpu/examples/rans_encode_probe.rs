//! The GPU rANS encoder's steps on the large tensors (or the files named): for kernel work
//! and tuning, not for figures (`cargo xtask gpu-bench` makes those). Per tensor, the best of
//! 5 runs of each step's submission (rotation counts, chunk counts, lanes, assembly) and of
//! the whole encode, against the copy kernel; every stream is checked against the CPU's.
//!
//! `cargo run --release -p planepack-gpu --example rans_encode_probe [name ...]`
use planepack_core::Codec;
use planepack_datasets::{datasets_dir, load, Manifest};
use planepack_gpu::{Gpu, GpuOptions, GPU_RANS};

fn main() {
    let g = Gpu::new(&GpuOptions::from_env()).expect("a GPU adapter");
    println!("{}", g.describe());
    let which: Vec<String> = std::env::args().skip(1).collect();
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).expect("datasets/manifest.toml");
    let (mut enc_s, mut copy_s) = (0.0, 0.0);
    // PROBE_CONCAT=bf16 (or f32, f16, u8): one tensor of the named files' tensors of that
    // type back to back, up to 32 MiB (the corpus has no large BF16 tensor).
    let concat = std::env::var("PROBE_CONCAT").ok();
    let mut joined: Vec<u8> = Vec::new();
    let mut joined_elem = None;
    for d in &manifest.datasets {
        if !which.is_empty() && !which.iter().any(|w| d.file.contains(w.as_str())) {
            continue;
        }
        for t in load(&dir.join(&d.file)).expect("dataset") {
            let Some(elem) = t.elem() else { continue };
            if let Some(c) = &concat {
                if elem.to_string() == *c && joined.len() < 32 << 20 {
                    joined.extend_from_slice(&t.data[..t.data.len() / elem.size() * elem.size()]);
                    joined_elem = Some(elem);
                }
                continue;
            }
            if t.data.len() < 1 << 20 {
                continue;
            }
            let (c, e) = probe(&g, &format!("{}/{}", d.name, t.name), elem, &t.data);
            copy_s += c;
            enc_s += e;
        }
    }
    if let Some(elem) = joined_elem {
        let (c, e) = probe(&g, "joined", elem, &joined);
        copy_s += c;
        enc_s += e;
    }
    println!("all: kernels / copy {:.3}", copy_s / enc_s);
}

/// One tensor: the best of 5 encodes (each checked), printed; returns (copy, kernels) seconds.
fn probe(g: &Gpu, name: &str, elem: planepack_core::ElemType, data: &[u8]) -> (f64, f64) {
    let up = g.upload(data).unwrap();
    let cpu = GPU_RANS.encode_to_vec(data, elem).unwrap();
    let mut best: Option<planepack_gpu::EncodedRans> = None;
    let mut wall = f64::INFINITY;
    for _ in 0..5 {
        let clock = std::time::Instant::now();
        let e = g
            .encode_rans_on_device(&up.buffer, data.len(), elem, &GPU_RANS)
            .unwrap();
        wall = wall.min(clock.elapsed().as_secs_f64());
        if std::env::var_os("NOCHECK").is_none() {
            assert!(e.stream == cpu, "{name}");
        }
        if best
            .as_ref()
            .is_none_or(|b| e.kernel_seconds < b.kernel_seconds)
        {
            best = Some(e);
        }
    }
    let e = best.unwrap();
    let copy = g.prepare_copy(data).unwrap();
    let c = g.time_each(&[&copy], 5)[0].median();
    let ms = e.step_seconds.map(|s| format!("{:.1}", s * 1e3));
    println!(
        "{name:<48} {elem} {:>6.2} MB: kernels / copy {:.3}; steps ms {ms:?}; wall {:.1} ms; down / raw {:.3} (stream {:.3})",
        data.len() as f64 / 1e6,
        c / e.kernel_seconds,
        wall * 1e3,
        e.download_bytes as f64 / data.len() as f64,
        e.stream.len() as f64 / data.len() as f64
    );
    (c, e.kernel_seconds)
}
