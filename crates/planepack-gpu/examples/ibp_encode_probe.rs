//! Where does the GPU IBP encoder's time go? For kernel work and tuning, not for figures
//! (`cargo xtask gpu-bench` makes those). Per tensor of at least 1 MiB with rows (or those
//! whose file name contains one of the arguments): wall-clock medians of 7 runs of each step
//! (column counts, candidate scores, packing with the chosen mask and condensing with the
//! downloads, the whole encode) against reading the raw rows back.
//!
//! `cargo run --release -p planepack-gpu --example ibp_encode_probe [name ...]`
use planepack_datasets::{datasets_dir, load, Manifest};
use planepack_gpu::{DeviceTensor, Gpu, GpuOptions};
use std::time::Instant;

fn time<T>(mut f: impl FnMut() -> T) -> f64 {
    let mut v: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[3] * 1e3
}

fn main() {
    let g = Gpu::new(&GpuOptions::from_env()).expect("a GPU adapter");
    println!("{}", g.describe());
    let which: Vec<String> = std::env::args().skip(1).collect();
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir).expect("datasets/manifest.toml");
    for d in &manifest.datasets {
        if !which.is_empty() && !which.iter().any(|w| d.file.contains(w.as_str())) {
            continue;
        }
        for t in load(&dir.join(&d.file)).expect("dataset") {
            let Some(elem) = t.elem() else { continue };
            let row = planepack_ibp::shaped_row_bytes(t.data.len(), elem, &t.shape);
            let ibp = planepack_ibp::Ibp::default();
            let Some((width, whole)) = ibp.split_rows(t.data.len(), row) else {
                continue;
            };
            if whole < 1 << 20 || !row.is_multiple_of(4) {
                continue;
            }
            let rows = g.upload_rows(&t.data[..whole], row, width).unwrap();
            let pre = g
                .ibp_preprocess(&rows, planepack_ibp::Threshold::Sweep)
                .unwrap();
            let masks: Vec<_> = planepack_ibp::internals::SWEEP
                .iter()
                .map(|&x| g.ibp_bit_counts(&rows).unwrap().mask(x))
                .collect();
            let raw = DeviceTensor {
                buffer: rows.buffer.clone(),
                offset: 0,
                len: whole,
            };
            println!(
                "{:<48} {:>8} rows x {:>5} B: counts {:.2} ms, scores {:.2}, pack+condense {:.2}, \
                 whole encode {:.2}; raw download {:.2} ms",
                format!("{}/{}", d.name, t.name),
                rows.rows,
                row,
                time(|| g.ibp_bit_counts(&rows).unwrap()),
                time(|| g.ibp_scores(&rows, &masks).unwrap()),
                time(|| g.encode_ibp_rows(&rows, &pre.mask).unwrap()),
                time(|| g.encode_ibp_on_device(&rows, &[]).unwrap()),
                time(|| g.read_back(&raw).unwrap()),
            );
        }
    }
}
