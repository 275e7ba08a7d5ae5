//! `cargo xtask criterion`: run the criterion benchmarks and write their medians, as GB/s and
//! as fractions of memcpy measured in the same run, to `bench-results/criterion.md`.
//!
//! The suite runs several times (`--runs`, default 3) and each benchmark reports the median
//! of its runs' medians, with their range. Why: on the shared machines this project is
//! measured on, compute-bound code slows by up to a third for minutes at a time while
//! memcpy holds, so a single run's figure depends on when it ran; the runs interleave all
//! benchmarks, so a slow spell lowers one run, not one benchmark's every sample.

use anyhow::{Context, Result};
use planepack_harness::measure::median;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// (crate, bench, groups)
const BENCHES: &[(&str, &str, &[&str])] = &[
    ("planepack-bitplane", "codecs", &["f32", "bf16"]),
    (
        "planepack-ibp",
        "ibp",
        &["embedding", "gnn-dense", "gnn-bow"],
    ),
    (
        "planepack-rans",
        "rans",
        &[
            "rans-act-f32",
            "rans-act-bf16",
            "rans-kv-bf16",
            "rans-gnn-bow-f32",
        ],
    ),
];

/// `--workloads`: one benchmark of the harness crate on the production-size workloads.
const WORKLOAD_BENCHES: &[(&str, &str, &[&str])] = &[(
    "planepack-harness",
    "workloads",
    &[
        "wl-transformer-bf16",
        "wl-kv-bf16",
        "wl-cnn-bf16",
        "wl-transformer-fp32",
    ],
)];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every benchmark of a criterion group: (id, median GB/s).
fn group(dir: &Path) -> Result<Vec<(String, f64)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let est = d.join("new/estimates.json");
        if est.exists() {
            let e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&est)?)?;
            let b: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(d.join("new/benchmark.json"))?)?;
            let ns = e["median"]["point_estimate"].as_f64().context("median")?;
            let bytes = b["throughput"]["Bytes"].as_f64().context("throughput")?;
            let id = b["full_id"].as_str().unwrap_or("?").to_owned();
            out.push((id, bytes / ns));
            continue;
        }
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "report") {
                stack.push(p);
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// One benchmark after one run: id, GB/s, fraction of that run's memcpy.
type Row = (String, f64, Option<f64>);
/// One group over all runs: id -> (GB/s of each run, fraction of memcpy of each run).
type Runs = BTreeMap<String, (Vec<f64>, Vec<f64>)>;

/// Every group's benchmarks after one run, groups in the order of `benches`.
fn collect(root: &Path, benches: &[(&str, &str, &[&str])]) -> Result<Vec<(String, Vec<Row>)>> {
    let mut out = Vec::new();
    for (_, _, groups) in benches {
        for g in *groups {
            let dir = root.join("target/criterion").join(g);
            if !dir.exists() {
                continue;
            }
            let rows = group(&dir)?;
            let memcpy = rows.iter().find(|r| r.0.ends_with("/memcpy")).map(|r| r.1);
            let rows = rows
                .into_iter()
                .map(|(id, gbps)| (id, gbps, memcpy.map(|m| gbps / m)))
                .collect();
            out.push((g.to_string(), rows));
        }
    }
    Ok(out)
}

pub fn run(skip_run: bool, runs: usize, workloads: bool) -> Result<()> {
    let root = root();
    let benches = if workloads { WORKLOAD_BENCHES } else { BENCHES };
    let runs = if skip_run { 1 } else { runs.max(1) };
    let mut all: Vec<(String, Runs)> = Vec::new();
    for run in 0..runs {
        if !skip_run {
            println!("criterion run {} of {runs}", run + 1);
            for (krate, bench, _) in benches {
                let status = std::process::Command::new(env!("CARGO"))
                    .args(["bench", "-p", krate, "--bench", bench])
                    .current_dir(&root)
                    .status()?;
                anyhow::ensure!(status.success(), "cargo bench -p {krate} failed");
            }
        }
        for (g, rows) in collect(&root, benches)? {
            let ids = match all.iter().position(|(name, _)| *name == g) {
                Some(i) => &mut all[i].1,
                None => {
                    all.push((g, Runs::new()));
                    &mut all.last_mut().unwrap().1
                }
            };
            for (id, gbps, rel) in rows {
                let e = ids.entry(id).or_default();
                e.0.push(gbps);
                e.1.extend(rel);
            }
        }
    }
    let machine = planepack_harness::machine_name();
    let mut s = String::new();
    let _ = writeln!(s, "# Criterion benchmarks\n");
    if workloads {
        let _ = writeln!(
            s,
            "Generated by `cargo xtask criterion --workloads` on {machine}: single core (the ids \
             `encode-parallel` / `decode-parallel`: rANS's parallel encoder and decoder, chunks over a pool \
             of as many threads as the id says), medians, the \
             production-size workloads of `cargo xtask workloads` (`datasets/workloads.toml`): per file, the first \
             batch of its largest size class (tensors of 16 MiB or more; the KV cache's layers are 3 MiB each), \
             up to 64 MiB, as `cargo xtask bench --workloads` cuts them \
             (`wl-transformer-bf16`: MiniLM's saved activations at 16 x 512 tokens; `wl-kv-bf16`: SmolLM2's KV \
             cache of 8192 tokens; `wl-cnn-bf16`: EfficientNet-Lite0's saved activations at batch 40, 224 x 224; \
             `wl-transformer-fp32`: MiniLM's saved activations in FP32, 16 x 512 tokens). \
             memcpy of the same bytes was measured in the same run. GB/s of raw bytes. Runs of the whole suite: \
             {runs}. Each figure is the median of the runs' medians (the fraction of memcpy is taken within each \
             run first), with the runs' range.\n"
        );
    } else {
        let _ = writeln!(
        s,
        "Generated by `cargo xtask criterion` on {machine}: single core, medians, real tensors from `datasets/` \
         (bit-plane, with the baselines beside it: all FP32 / BF16 tensors of the EfficientNet-Lite0 activation \
         files, concatenated; IBP: the embedding rows and GNN features; rANS, with the bit-plane codec beside \
         it: the EfficientNet-Lite0 activations, SmolLM2's BF16 KV cache and the bag-of-words GNN features). memcpy of the same bytes was measured in the same run. GB/s of raw \
         (decoded) bytes; for gathers, of output bytes. Runs of the whole suite: {runs}. Each figure is the median \
         of the runs' medians (the fraction of memcpy is taken within each run first), with the runs' range.\n"
    );
        let _ = writeln!(
        s,
        "Targets set for this machine: bit-plane decode >= 1.5 GB/s and encode >= 0.5 GB/s; IBP decode >= 3 GB/s, \
         gather of 4096 random rows >= 1.5 GB/s; rANS decode >= 1.0 GB/s on the AVX2 tier and encode >= 0.3 GB/s.\n"
    );
    }
    for (g, ids) in &all {
        let _ = writeln!(s, "## {g}\n");
        if workloads {
            // The batch's size, as criterion recorded it for the memcpy of it.
            let json = root
                .join("target/criterion")
                .join(g)
                .join("memcpy/new/benchmark.json");
            let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
            let bytes = b["throughput"]["Bytes"].as_f64().context("throughput")?;
            let _ = writeln!(
                s,
                "On {bytes:.0} bytes ({:.1} MiB).\n",
                bytes / (1 << 20) as f64
            );
        }
        let _ = writeln!(s, "| benchmark | GB/s | runs' range | / memcpy |");
        let _ = writeln!(s, "|---|---|---|---|");
        for (id, (gbps, rel)) in ids {
            let lo = gbps.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = gbps.iter().copied().fold(0.0, f64::max);
            let rel = if rel.is_empty() {
                String::new()
            } else {
                format!("{:.3}", median(rel))
            };
            let _ = writeln!(
                s,
                "| {id} | {:.3} | {lo:.3}-{hi:.3} | {rel} |",
                median(gbps)
            );
        }
        if workloads {
            scaling(&mut s, ids);
        }
        let _ = writeln!(s);
    }
    let out = root.join(if workloads {
        "bench-results/criterion-workloads.md"
    } else {
        "bench-results/criterion.md"
    });
    std::fs::create_dir_all(out.parent().unwrap())?;
    std::fs::write(&out, s)?;
    println!("wrote {}", out.display());
    Ok(())
}

/// Under a workloads group: rANS's parallel encode and decode per thread count, as speed-up
/// over one thread of the same parallel code (medians of the runs' medians).
fn scaling(s: &mut String, ids: &Runs) {
    let at = |what: &str, t: usize| {
        ids.iter()
            .find(|(id, _)| id.ends_with(&format!("/{what}/rans-{t}-threads")))
            .map(|(_, (gbps, _))| median(gbps))
    };
    let (Some(enc1), Some(dec1)) = (at("encode-parallel", 1), at("decode-parallel", 1)) else {
        return;
    };
    let _ = writeln!(
        s,
        "\nrANS scaling (parallel encoder and decoder, over one thread of the same code):\n"
    );
    let _ = writeln!(
        s,
        "| threads | encode GB/s | encode speed-up | decode GB/s | decode speed-up |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for t in 1.. {
        let (Some(e), Some(d)) = (at("encode-parallel", t), at("decode-parallel", t)) else {
            break;
        };
        let _ = writeln!(
            s,
            "| {t} | {e:.3} | {:.2}x | {d:.3} | {:.2}x |",
            e / enc1,
            d / dec1
        );
    }
}
