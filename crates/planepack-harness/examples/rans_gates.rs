//! Where the rANS encoder's per-tensor gates lose: every tensor of a workload encoded by the
//! default encoder and with each of its choices turned off in turn (the rotation, context,
//! row and sign planes, modelled, difference and tail-dictionary chunks, the row map, the zero
//! mask); per dtype and size class, the default's ratio, each variant against it, and the
//! best of them all per tensor against the default (what a perfect gate on these choices
//! would add). A tool for finding encoder decisions to fix, not a figure.
//! `cargo run --release -p planepack-harness --example rans_gates -- STEM`
//! (target/workloads/STEM.safetensors).
use planepack_core::Codec;
use planepack_harness::input::{Batches, BATCH_BYTES};
use planepack_rans::Rans;
fn main() {
    let stem = std::env::args().nth(1).unwrap();
    let path = std::path::Path::new("target/workloads").join(format!("{stem}.safetensors"));
    let mut b = Batches::open(&stem, "w", &path, BATCH_BYTES).unwrap();
    let d = Rans::default();
    let knobs: Vec<(&str, Rans)> = vec![
        ("default", d),
        ("norot", Rans { rotate: false, ..d }),
        (
            "noctx",
            Rans {
                contexts: false,
                ..d
            },
        ),
        (
            "norowctx",
            Rans {
                row_contexts: false,
                ..d
            },
        ),
        (
            "nosign",
            Rans {
                sign_contexts: false,
                ..d
            },
        ),
        (
            "nomodel",
            Rans {
                modelled: false,
                ..d
            },
        ),
        (
            "nodiff",
            Rans {
                differences: false,
                ..d
            },
        ),
        ("norows", Rans { rows: false, ..d }),
        ("notails", Rans { tails: false, ..d }),
        (
            "nozero",
            Rans {
                zero_mask: false,
                ..d
            },
        ),
    ];
    let mut tot = std::collections::BTreeMap::<String, (usize, Vec<usize>, usize)>::new();
    for i in 0..b.len() {
        let g = b.load(i).unwrap();
        let cls = format!("{} {:?}", g.dtype, g.size_class);
        for (shape, data) in &g.tensors {
            let t = tot
                .entry(cls.clone())
                .or_insert((0, vec![0; knobs.len()], 0));
            t.0 += data.len();
            let mut best = usize::MAX;
            for (k, (_, c)) in knobs.iter().enumerate() {
                let mut o = Vec::new();
                c.encode_shaped(data, g.elem, shape, &mut o).unwrap();
                t.1[k] += o.len();
                best = best.min(o.len());
            }
            t.2 += best;
        }
    }
    for (c, t) in tot {
        let r: Vec<String> =
            t.1.iter()
                .zip(&knobs)
                .skip(1)
                .map(|(&n, (name, _))| {
                    format!("{name} {:+.2}%", (t.1[0] as f64 / n as f64 - 1.0) * 100.0)
                })
                .collect();
        println!(
            "{stem} {c}: default {:.4} best-of-all {:+.2}% | {}",
            t.0 as f64 / t.1[0] as f64,
            (t.1[0] as f64 / t.2 as f64 - 1.0) * 100.0,
            r.join(" ")
        );
    }
}
