//! The GPU bit-plane encoder kernel against the copy kernel on the large tensors: for kernel
//! work and tuning, not for figures (`cargo xtask gpu-bench` makes those, every stream
//! checked). Medians of 15 alternating runs; `PROBE_CHECK=1` also compares each stream with
//! the CPU encoder's.
//!
//! `cargo run --release -p planepack-gpu --example bitplane_encode_probe [name ...]`
use planepack_core::Codec;
use planepack_datasets::{datasets_dir, load, Manifest};
use planepack_gpu::{Gpu, GpuOptions};

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
            let e = g
                .prepare_bitplane_encode(&up.buffer, t.data.len(), elem.bits(), &g.config())
                .unwrap();
            if std::env::var_os("PROBE_CHECK").is_some() {
                let cpu = planepack_bitplane::BitPlane::new()
                    .encode_to_vec(&t.data, elem)
                    .unwrap();
                assert!(g.run_bitplane_encode(&e).unwrap().0 == cpu, "{}", t.name);
            }
            let copy = g.prepare_copy(&t.data).unwrap();
            let times = g.time_each(&[&e.launch, &copy], 15);
            enc_s += times[0].median();
            copy_s += times[1].median();
            println!(
                "{:<48} {elem}: encode / copy {:.3}",
                format!("{}/{}", d.name, t.name),
                times[1].median() / times[0].median()
            );
        }
    }
    println!("all: encode / copy {:.3}", copy_s / enc_s);
}
