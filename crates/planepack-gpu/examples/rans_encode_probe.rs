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
    for d in &manifest.datasets {
        if !which.is_empty() && !which.iter().any(|w| d.file.contains(w.as_str())) {
            continue;
        }
        for t in load(&dir.join(&d.file)).expect("dataset") {
            let Some(elem) = t.elem() else { continue };
            if t.data.len() < 1 << 20 {
                continue;
            }
            let up = g.upload(&t.data).unwrap();
            let cpu = GPU_RANS.encode_to_vec(&t.data, elem).unwrap();
            let mut best: Option<planepack_gpu::EncodedRans> = None;
            let mut wall = f64::INFINITY;
            for _ in 0..5 {
                let clock = std::time::Instant::now();
                let e = g
                    .encode_rans_on_device(&up.buffer, t.data.len(), elem, &GPU_RANS)
                    .unwrap();
                wall = wall.min(clock.elapsed().as_secs_f64());
                if std::env::var_os("NOCHECK").is_none() {
                    assert!(e.stream == cpu, "{}", t.name);
                }
                if best
                    .as_ref()
                    .is_none_or(|b| e.kernel_seconds < b.kernel_seconds)
                {
                    best = Some(e);
                }
            }
            let e = best.unwrap();
            let copy = g.prepare_copy(&t.data).unwrap();
            let c = g.time_each(&[&copy], 5)[0].median();
            enc_s += e.kernel_seconds;
            copy_s += c;
            let ms = e.step_seconds.map(|s| format!("{:.1}", s * 1e3));
            println!(
                "{:<48} {elem} {:>6.2} MB: kernels / copy {:.3}; steps ms {ms:?}; wall {:.1} ms; down / raw {:.3} (stream {:.3})",
                format!("{}/{}", d.name, t.name),
                t.data.len() as f64 / 1e6,
                c / e.kernel_seconds,
                wall * 1e3,
                e.download_bytes as f64 / t.data.len() as f64,
                e.stream.len() as f64 / t.data.len() as f64
            );
        }
    }
    println!("all: kernels / copy {:.3}", copy_s / enc_s);
}
