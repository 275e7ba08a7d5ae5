//! Where does GPU decode time go on large tensors? For kernel work and tuning, not for figures
//! (`cargo xtask gpu-bench` makes those).
//!
//! Every tensor of at least 1 MiB in `datasets/` (or those whose file name contains one of the
//! arguments) is encoded on the CPU with each codec, decoded on the GPU and checked, then the
//! decode and the copy kernel are timed alternately 15 times; the median of the 15
//! decode / copy ratios is printed (this machine's speed drifts, so ratios are taken from
//! neighbouring runs). `PLANEPACK_GPU_IBP_LANES` sets invocations per IBP row,
//! `PLANEPACK_GPU_NO_SUBGROUPS=1` the workgroup-memory path, `CODECS=ibp`, `=bitplane` or `=rans` one
//! codec (`rans-nosign`, `rans-norow`, `rans-nosign-norow`: without sign or row planes;
//! `-noctx`: without context planes; `rans-planes`: byte planes only, `Rans::PLANES`).
//!
//! `cargo run --release -p planepack-gpu --example gpu_probe [name ...] [path.safetensors ...]`
//! (`PROBE_MAX_MB`: skip tensors larger than that; `PROBE_TENSOR`: only tensors whose name
//! contains it).
use planepack_core::Codec;
use planepack_datasets::{datasets_dir, load, Manifest};
use planepack_gpu::{Gpu, GpuOptions};

fn median(v: Vec<f64>) -> f64 {
    planepack_core::stats::median(&v)
}

fn main() {
    let g = Gpu::new(&GpuOptions::from_env()).expect("a GPU adapter");
    println!("{} (IBP lanes {})", g.describe(), g.config().ibp_lanes);
    let which: Vec<String> = std::env::args().skip(1).collect();
    let codecs = std::env::var("CODECS").unwrap_or_else(|_| "ibp,bitplane".into());
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).expect("datasets/manifest.toml");
    // Files named as arguments (a path ending in .safetensors, such as a workload in
    // target/workloads), then the manifest's datasets whose file name contains an argument.
    let files: Vec<(String, std::path::PathBuf)> = which
        .iter()
        .filter(|w| w.ends_with(".safetensors"))
        .map(|w| (w.clone(), std::path::PathBuf::from(w)))
        .chain(
            manifest
                .datasets
                .iter()
                .filter(|d| which.is_empty() || which.iter().any(|w| d.file.contains(w.as_str())))
                .map(|d| (d.name.clone(), dir.join(&d.file))),
        )
        .collect();
    let max_bytes = std::env::var("PROBE_MAX_MB").map_or(usize::MAX, |v| {
        v.parse::<usize>().unwrap().saturating_mul(1 << 20)
    });
    let tensor = std::env::var("PROBE_TENSOR").unwrap_or_default();
    for (name, path) in &files {
        for t in load(path).expect("dataset") {
            let Some(elem) = t.elem() else { continue };
            if t.data.len() < 1 << 20 || t.data.len() > max_bytes || !t.name.contains(&tensor) {
                continue;
            }
            let copy = g.prepare_copy(&t.data).unwrap();
            for codec in codecs.split(',') {
                let mut enc = Vec::new();
                let prepared = if codec == "ibp" {
                    planepack_ibp::Ibp::default()
                        .encode_shaped(&t.data, elem, &t.shape, &mut enc)
                        .unwrap();
                    g.prepare_ibp(&enc, None, &g.config())
                } else if codec.starts_with("rans") {
                    // `rans-nosign`, `rans-norow`: without sign or row planes, for what
                    // those loops cost.
                    let base = match codec.contains("planes") {
                        true => planepack_rans::Rans::PLANES,
                        false => planepack_rans::Rans::default(),
                    };
                    planepack_rans::Rans {
                        sign_contexts: base.sign_contexts && !codec.contains("nosign"),
                        row_contexts: base.row_contexts && !codec.contains("norow"),
                        contexts: base.contexts && !codec.contains("noctx"),
                        ..base
                    }
                    .encode_shaped(&t.data, elem, &t.shape, &mut enc)
                    .unwrap();
                    g.prepare_rans(&enc, &g.config())
                } else {
                    planepack_bitplane::BitPlane::new()
                        .encode_shaped(&t.data, elem, &t.shape, &mut enc)
                        .unwrap();
                    g.prepare_bitplane(&enc, &g.config())
                };
                let Ok(p) = prepared else { continue };
                assert!(
                    std::env::var_os("PROBE_NO_CHECK").is_some() || g.run(&p).unwrap() == t.data,
                    "{}: GPU decode differs",
                    t.name
                );
                let times = g.time_each(&[&p, &copy], 15);
                let ratios: Vec<f64> = times[1]
                    .seconds
                    .iter()
                    .zip(&times[0].seconds)
                    .map(|(c, d)| c / d)
                    .collect();
                let s = times[0].median();
                println!(
                    "{:<48} {:<8} {:?} ratio {:.2}: decode {:.3} GB/s, decode / copy {:.3}",
                    format!("{}/{}", name, t.name),
                    codec,
                    t.shape,
                    t.data.len() as f64 / enc.len() as f64,
                    t.data.len() as f64 / s / 1e9,
                    median(ratios)
                );
            }
        }
    }
}
