//! `cargo xtask trace`: what compression buys a training step under a memory budget.
//!
//! For every trace in `datasets/traces/` and every budget from 30 % to 80 % of the step's peak
//! activation memory, on a platform preset (default: A100 40GB, PCIe 24 GB/s, 64 GB/s engine):
//!
//! * `none`: the planner without compression (PlaneZip's "BW" baseline);
//! * `fixed+<codec>`: that same plan, with transfers compressed (ratios predicted per
//!   activation from our real activation datasets);
//! * `replanned+<codec>`: the planner run again knowing the compressed transfer costs.
//!
//! Writes `bench-results/trace/` (overhead.md, overhead.json, ratios.md, SVG plots).

use anyhow::{Context, Result};
use planepack_core::{Codec, ElemType};
use planepack_datasets::{datasets_dir, load, Manifest};
use planepack_trace::planner::{plan, plan_best};
use planepack_trace::platform::{Platform, PRESETS};
use planepack_trace::ratios::{op_class, RatioTable};
use planepack_trace::sim::{simulate, Setup};
use planepack_trace::Trace;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

const BUDGETS: [f64; 6] = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8];
/// Codecs whose ratios drive the study (the bit-plane codec is PlaneZip's).
const CODECS: [&str; 6] = ["bitplane", "rans", "zstd-3", "lz4", "zvc", "ibp"];

fn codec(name: &str) -> Box<dyn Codec> {
    planepack_container::CodecSpec::parse(name)
        .expect("codec in the catalogue")
        .codec()
}

/// Measured ratios of every real activation, by codec, dtype and saving op.
fn measure_ratios() -> Result<RatioTable> {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir)?;
    let mut table = RatioTable::default();
    let codecs: Vec<Box<dyn Codec>> = CODECS.iter().map(|c| codec(c)).collect();
    for d in manifest
        .datasets
        .iter()
        .filter(|d| d.category == "activations")
    {
        for t in load(&dir.join(&d.file))? {
            let Some(elem) = t.elem() else { continue };
            let dtype = match elem {
                ElemType::BF16 => "bf16",
                ElemType::F32 => "fp32",
                _ => continue,
            };
            let op = t.name.split_once('.').map_or(t.name.as_str(), |x| x.1);
            add_tensor(&mut table, &codecs, &t.data, elem, &t.shape, dtype, op)?;
            // The paper's way: FP32 activations cast to BF16 (round to nearest even).
            if elem == ElemType::F32 {
                let cast = to_bf16(&t.data);
                add_tensor(
                    &mut table,
                    &codecs,
                    &cast,
                    ElemType::BF16,
                    &t.shape,
                    "bf16-cast",
                    op,
                )?;
            }
        }
    }
    Ok(table)
}

/// The GPU-decodable codecs whose best per tensor the `best` ratios take. With one engine
/// speed for all (the paper's B_CE), equation (2) prefers the smallest payload, so per tensor
/// the best is the smallest of their payloads.
const GPU_CODECS: [&str; 3] = ["bitplane", "rans", "ibp"];

/// One tensor's payload size under every codec, and under `best` the smallest of the
/// GPU-decodable codecs' (each codec encodes it once).
fn add_tensor(
    table: &mut RatioTable,
    codecs: &[Box<dyn Codec>],
    data: &[u8],
    elem: ElemType,
    shape: &[usize],
    dtype: &str,
    op: &str,
) -> Result<()> {
    let mut best = usize::MAX;
    for c in codecs {
        let mut out = Vec::new();
        c.encode_shaped(data, elem, shape, &mut out)?;
        table.add(&c.name(), dtype, op, data.len() as u64, out.len() as u64);
        if GPU_CODECS.contains(&c.name().as_str()) {
            best = best.min(out.len());
        }
    }
    table.add("best", dtype, op, data.len() as u64, best as u64);
    Ok(())
}

/// FP32 bytes to BF16 bytes, rounding to nearest even (NaNs stay NaNs, quietened), as
/// PyTorch's `tensor.to(torch.bfloat16)` does.
fn to_bf16(f32_bytes: &[u8]) -> Vec<u8> {
    f32_bytes
        .chunks_exact(4)
        .flat_map(|b| {
            let x = u32::from_le_bytes(b.try_into().unwrap());
            let h = if (x & 0x7fff_ffff) > 0x7f80_0000 {
                (x >> 16) | 0x40
            } else {
                (x + 0x7fff + ((x >> 16) & 1)) >> 16
            };
            (h as u16).to_le_bytes()
        })
        .collect()
}

#[derive(serde::Serialize)]
struct Row {
    platform: String,
    model: String,
    dtype: String,
    budget: f64,
    scheme: String,
    overhead: f64,
    stall_seconds: f64,
    recompute_seconds: f64,
    peak_fraction: f64,
    feasible: bool,
    swapped_gib: f64,
    dropped_gib: f64,
    planner_seconds: f64,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub fn run(root: &Path, platform_name: Option<String>) -> Result<()> {
    let mut traces: Vec<Trace> = Vec::new();
    let tdir = datasets_dir().join("traces");
    let mut paths: Vec<_> = std::fs::read_dir(&tdir)
        .with_context(|| tdir.display().to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    for p in paths {
        traces.push(Trace::load(&p)?);
    }
    anyhow::ensure!(!traces.is_empty(), "no traces in {}", tdir.display());
    println!("measuring ratios of the real activations...");
    let table = measure_ratios()?;
    let platforms: Vec<Platform> = match &platform_name {
        Some(n) => PRESETS
            .into_iter()
            .filter(|p| p.name.eq_ignore_ascii_case(n))
            .collect(),
        None => PRESETS.to_vec(),
    };
    let mut rows = Vec::new();
    for pf in &platforms {
        for t in &traces {
            let ones = vec![1.0; t.activations.len()];
            let raw = Setup::new(t, pf, &ones);
            let peak = simulate(
                &raw,
                &planepack_trace::Plan {
                    decisions: vec![planepack_trace::Decision::Keep; t.activations.len()],
                    prefetch_at: vec![0; t.activations.len()],
                    memory_budget: None,
                },
            )
            .peak_bytes;
            // The headline platform gets every budget; the others the 50 % point.
            let budgets: Vec<f64> = if pf.name == "A100-40GB" {
                BUDGETS.to_vec()
            } else {
                vec![0.5]
            };
            for &f in &budgets {
                let budget = (peak as f64 * f) as u64;
                let mut push =
                    |scheme: String, o: &planepack_trace::Outcome, feasible: bool, secs: f64| {
                        rows.push(Row {
                            platform: pf.name.into(),
                            model: t.model.clone(),
                            dtype: t.dtype.clone(),
                            budget: f,
                            scheme,
                            overhead: o.overhead,
                            stall_seconds: o.stall_seconds,
                            recompute_seconds: o.recompute_seconds,
                            peak_fraction: o.peak_bytes as f64 / peak as f64,
                            feasible,
                            swapped_gib: o.swapped_bytes as f64 / (1u64 << 30) as f64,
                            dropped_gib: o.dropped_bytes as f64 / (1u64 << 30) as f64,
                            planner_seconds: secs,
                        })
                    };
                let t0 = Instant::now();
                let base = plan(&raw, budget);
                let secs = t0.elapsed().as_secs_f64();
                push("none".into(), &base.outcome, base.feasible, secs);
                for c in CODECS {
                    let ratios = table.for_trace(c, t);
                    let comp = Setup::new(t, pf, &ratios);
                    let fixed = simulate(&comp, &base.plan);
                    push(
                        format!("fixed+{c}"),
                        &fixed,
                        fixed.peak_bytes <= budget,
                        0.0,
                    );
                    let t0 = Instant::now();
                    let re = plan_best(&comp, budget, &[&base.plan]);
                    let secs = t0.elapsed().as_secs_f64();
                    push(format!("replanned+{c}"), &re.outcome, re.feasible, secs);
                }
            }
            println!("{} {} {}: done", pf.name, t.model, t.dtype);
        }
    }
    let out = root.join("bench-results/trace");
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("overhead.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    std::fs::write(out.join("ratios.md"), ratios_md(&table, &traces))?;
    if platform_name.is_none() {
        let bf16: Vec<Trace> = traces
            .iter()
            .filter(|t| t.dtype == "bf16")
            .cloned()
            .collect();
        std::fs::write(
            out.join("paper.md"),
            crate::trace_paper::paper_md(&bf16, &table),
        )?;
    }
    let md = overhead_md(&rows, &traces);
    std::fs::write(out.join("overhead.md"), &md)?;
    // The reproduction table goes into the README when every platform was run.
    if platform_name.is_none() {
        let start = md.find("## Reproduction").context("reproduction section")?;
        let end = md[start + 3..]
            .find("\n## ")
            .map_or(md.len(), |i| start + 3 + i);
        let section = md[start..end].replacen("## ", "### ", 1);
        let readme = root.join("README.md");
        let text = std::fs::read_to_string(&readme)?;
        if let Some(new) = planepack_harness::report::splice(&text, "TRACE", &section) {
            std::fs::write(&readme, new)?;
        }
    }
    plots(&rows, &out)?;
    println!("wrote {}", out.display());
    Ok(())
}

fn get<'a>(
    rows: &'a [Row],
    pf: &str,
    model: &str,
    dtype: &str,
    budget: f64,
    scheme: &str,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.platform == pf
            && r.model == model
            && r.dtype == dtype
            && (r.budget - budget).abs() < 1e-9
            && r.scheme == scheme
    })
}

fn models(rows: &[Row]) -> Vec<String> {
    let mut m: Vec<String> = Vec::new();
    for r in rows {
        if !m.contains(&r.model) {
            m.push(r.model.clone());
        }
    }
    m
}

fn cell(r: Option<&Row>) -> String {
    match r {
        Some(r) if r.feasible => format!("{:.1}", r.overhead * 100.0),
        Some(r) => format!("{:.1}*", r.overhead * 100.0),
        None => "-".into(),
    }
}

/// The models for which every scheme met the budget on `pf` in `dtype`: means compare plans
/// that all fit (an infeasible plan is cheaper than a feasible one may be, so averaging it in
/// would make the scheme that fails look better).
fn comparable(rows: &[Row], pf: &str, dtype: &str, budget: f64) -> Vec<String> {
    models(rows)
        .into_iter()
        .filter(|m| {
            rows.iter()
                .filter(|r| {
                    r.platform == pf && &r.model == m && r.dtype == dtype && r.budget == budget
                })
                .all(|r| r.feasible)
        })
        .collect()
}

/// Mean overhead in percent of `scheme` over the [`comparable`] models.
fn mean_over(rows: &[Row], pf: &str, dtype: &str, budget: f64, scheme: &str) -> f64 {
    mean(
        comparable(rows, pf, dtype, budget)
            .iter()
            .filter_map(|m| get(rows, pf, m, dtype, budget, scheme))
            .map(|r| r.overhead * 100.0),
    )
}

/// `" (n of N models: left out ...)"` where some model's plans could not all meet the budget.
fn left_out(rows: &[Row], pf: &str, dtype: &str, budget: f64) -> String {
    let all = models(rows);
    let kept = comparable(rows, pf, dtype, budget);
    if kept.len() == all.len() {
        return String::new();
    }
    let out: Vec<&str> = all
        .iter()
        .filter(|m| !kept.contains(m))
        .map(|m| m.as_str())
        .collect();
    format!(
        " ({} of {} models; left out: {})",
        kept.len(),
        all.len(),
        out.join(", ")
    )
}

fn overhead_md(rows: &[Row], traces: &[Trace]) -> String {
    let a100 = "A100-40GB";
    let ms = models(rows);
    let mut s = String::from("# Training-step overhead under an activation-memory budget\n\n");
    let _ = writeln!(
        s,
        "Generated by `cargo xtask trace` from the traces in `datasets/traces/` (exported by \
         `datasets/traces/export.py`) and compression ratios measured on the real activations of \
         `datasets/activations/` (see `ratios.md`). Overhead = (simulated step time - step time \
         with unlimited memory) / the latter, in percent. Budget = fraction of the step's peak \
         activation memory when everything is kept. `*` = the planner could not meet the budget \
         (the figure is for its best plan). Means are over the models for which every scheme \
         met the budget; a row says which models it leaves out.\n"
    );
    let _ = writeln!(
        s,
        "## Reproduction: A100 40GB, BF16, PCIe 24 GB/s, 64 GB/s engine, 50 % budget\n"
    );
    let _ = writeln!(s, "| model | batch | none (BW) | fixed plan + bit-plane | replanned + bit-plane | planner s (none / replanned) | op times |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for m in &ms {
        let batch = traces.iter().find(|t| &t.model == m).map_or(0, |t| t.batch);
        // Where the op times come from: the trace's measured `seconds` or the platform's
        // roofline estimate (platform.rs).
        let source = traces
            .iter()
            .find(|t| &t.model == m && t.dtype == "bf16")
            .map_or("-".to_string(), |t| {
                let measured = t.ops.iter().filter(|o| o.seconds.is_some()).count();
                match measured {
                    0 => "roofline estimate".to_string(),
                    k if k == t.ops.len() => "measured".to_string(),
                    k => format!("{k} of {} measured, the rest roofline", t.ops.len()),
                }
            });
        let n = get(rows, a100, m, "bf16", 0.5, "none");
        let re = get(rows, a100, m, "bf16", 0.5, "replanned+bitplane");
        let _ = writeln!(
            s,
            "| {m} | {batch} | {} | {} | {} | {:.3} / {:.3} | {source} |",
            cell(n),
            cell(get(rows, a100, m, "bf16", 0.5, "fixed+bitplane")),
            cell(re),
            n.map_or(0.0, |r| r.planner_seconds),
            re.map_or(0.0, |r| r.planner_seconds)
        );
    }
    let _ = writeln!(
        s,
        "| **mean**{} | | **{:.1}** | **{:.1}** | **{:.1}** | | |\n| PlaneZip (paper) | | 13.0 | | 9.0 | | simulated platform presets |\n",
        left_out(rows, a100, "bf16", 0.5),
        mean_over(rows, a100, "bf16", 0.5, "none"),
        mean_over(rows, a100, "bf16", 0.5, "fixed+bitplane"),
        mean_over(rows, a100, "bf16", 0.5, "replanned+bitplane")
    );
    for dtype in ["bf16", "fp32"] {
        let _ = writeln!(
            s,
            "## Mean overhead (%) over the models, A100 40GB, {dtype}, by budget\n"
        );
        let schemes: Vec<String> = std::iter::once("none".to_string())
            .chain(
                CODECS
                    .iter()
                    .flat_map(|c| [format!("fixed+{c}"), format!("replanned+{c}")]),
            )
            .collect();
        let _ = writeln!(s, "| budget | {} |", schemes.join(" | "));
        let _ = writeln!(s, "|---|{}", "---|".repeat(schemes.len()));
        for b in BUDGETS {
            let cells: Vec<String> = schemes
                .iter()
                .map(|sc| format!("{:.1}", mean_over(rows, a100, dtype, b, sc)))
                .collect();
            let _ = writeln!(
                s,
                "| {:.0} %{} | {} |",
                b * 100.0,
                left_out(rows, a100, dtype, b),
                cells.join(" | ")
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(
        s,
        "## Per model, A100 40GB: overhead (%) none / fixed+bit-plane / replanned+bit-plane\n"
    );
    let _ = writeln!(
        s,
        "| model | dtype | {} |",
        BUDGETS.map(|b| format!("{:.0} %", b * 100.0)).join(" | ")
    );
    let _ = writeln!(s, "|---|---|{}", "---|".repeat(BUDGETS.len()));
    for m in &ms {
        for dtype in ["bf16", "fp32"] {
            let cells: Vec<String> = BUDGETS
                .iter()
                .map(|&b| {
                    format!(
                        "{} / {} / {}",
                        cell(get(rows, a100, m, dtype, b, "none")),
                        cell(get(rows, a100, m, dtype, b, "fixed+bitplane")),
                        cell(get(rows, a100, m, dtype, b, "replanned+bitplane"))
                    )
                })
                .collect();
            let _ = writeln!(s, "| {m} | {dtype} | {} |", cells.join(" | "));
        }
    }
    let _ = writeln!(
        s,
        "\n## Other platforms, 50 % budget, mean over models (%)\n"
    );
    let _ = writeln!(
        s,
        "| platform | dtype | none | fixed+bitplane | replanned+bitplane |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for pf in PRESETS {
        for dtype in ["bf16", "fp32"] {
            let _ = writeln!(
                s,
                "| {} (PCIe {} GB/s) | {dtype}{} | {:.1} | {:.1} | {:.1} |",
                pf.name,
                pf.pcie_gbps,
                left_out(rows, pf.name, dtype, 0.5),
                mean_over(rows, pf.name, dtype, 0.5, "none"),
                mean_over(rows, pf.name, dtype, 0.5, "fixed+bitplane"),
                mean_over(rows, pf.name, dtype, 0.5, "replanned+bitplane")
            );
        }
    }
    let worst = rows.iter().map(|r| r.planner_seconds).fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "\nSlowest planner run: {worst:.3} s (release build, this machine).\n"
    );
    s += METHOD;
    s
}

const METHOD: &str = "## How this differs from the paper's method\n\n\
* **Traces, not measurements.** Op times are roofline estimates from FLOPs and bytes \
(`crates/planepack-trace/src/platform.rs`), not profiled kernels. The paper's study is a \
simulation too, with platform presets (A100-40GB, 24 GB/s, among them); its per-op times are not \
known to us. Transformers use eager attention (attention matrices are saved), as without fused \
kernels.\n\
* **The CNNs are our choice.** The paper's summary names 3 CNNs beside ViT-B/16 and GPT-2 124M \
but not which; ResNet-50, VGG-16 and MobileNetV2 are ours.\n\
* **Batch sizes are ours** (64 for the CNNs and ViT, 8 x 1024 tokens for GPT-2); the paper's \
are not known to us. Overhead depends on the ratio of transfer to compute time, so batch and \
resolution move these figures.\n\
* **Ratios are predicted, not measured on these models**: each activation gets the ratio our \
codec reached on real activations saved by the same op in the same dtype (other models: \
EfficientNet-Lite0, ResNet-18, ViT, MiniLM, SmolLM2), see `ratios.md`. The paper compressed the \
real tensors of each model (BF16 geomean 1.71x vs our 1.44x).\n\
* **Infeasible budgets** (`*`): below `memory_lower_bound` (the bytes some op needs resident \
at once) no plan fits; that happens for VGG-16 at 30 %, whose first convolutions' outputs are \
each a large share of the total.\n\
* **The planner is a reconstruction** (`crates/planepack-trace/src/planner.rs`): greedy, the \
cheapest move per byte of excess memory, latest-possible prefetch; the replanned result is the \
better of the greedy plan made with compressed costs and the uncompressed plan run with them. The paper's planner is \
described only in a secondary summary. Recomputing a dropped tensor costs the whole chain: its \
producer and every input op whose output is not resident then, back to resident tensors (op \
input edges recorded in the traces; Checkmate's and DTR's model), and the outputs it does not \
keep hold memory until the chain's last op that reads them.\n\
* **The runtime waits for memory.** A plan carries its budget; a forward op that would start over \
it waits for the D2H copies in flight to free memory (a stall, which compression shortens). H2D \
prefetches are not held back for memory. The planner searches with and without these waits and \
keeps the better plan; `paper.md` shows the runtime that never waits beside it.\n\
* **The engine is one per direction at 64 GB/s**, as the paper's B_CE; whether the paper's \
engine is shared between directions is not known. Compression is bypassed per tensor when it \
does not pay (eq. 2).\n";

/// `cargo xtask trace --against-workloads`: the planner's predicted ratio for each codec and
/// dtype (from the corpus's activations, what every traced activation of an unknown op gets)
/// beside the ratio `cargo xtask bench --workloads` measured on the production-size
/// activations, bytes-weighted both, with the measured commit named.
pub fn against_workloads(root: &Path) -> Result<()> {
    let machine = planepack_harness::machine_name();
    let file = crate::bench::default_dir(&machine).join("workloads/results.json");
    let text = std::fs::read_to_string(&file).with_context(|| {
        format!(
            "{}: run `cargo xtask bench --workloads` first",
            file.display()
        )
    })?;
    let res: planepack_harness::Results = serde_json::from_str(&text)?;
    println!("measuring ratios of the corpus's activations...");
    let table = measure_ratios()?;
    let mut s = format!(
        "# The planner's ratio predictions against the workloads\n\n\
         Generated by `cargo xtask trace --against-workloads` on {machine}. `predicted`: the \
         ratio the trace planner gives an activation of an op it has no figure for (the dtype's \
         overall ratio over `datasets/activations/`, bytes-weighted; `ratios.md` has the per-op \
         figures). `measured`: the production-size activations of `cargo xtask workloads` (sum \
         of raw bytes over sum of compressed bytes of every activation record of that dtype in \
         `{}`, code `{}`). `error`: predicted / measured - 1.\n\n\
         | codec | dtype | predicted | measured | error | workload bytes measured |\n\
         |---|---|---|---|---|---|\n",
        file.strip_prefix(root).unwrap_or(&file).display(),
        res.code_version
    );
    for c in CODECS {
        for (dtype, rec_dtype) in [("bf16", "bf16"), ("fp32", "f32")] {
            let recs: Vec<_> = res
                .records
                .iter()
                .filter(|r| r.category == "activations" && r.codec == c && r.dtype == rec_dtype)
                .collect();
            let raw: u64 = recs.iter().map(|r| r.raw_bytes).sum();
            let comp: u64 = recs.iter().map(|r| r.compressed_bytes).sum();
            if raw == 0 || comp == 0 {
                continue;
            }
            let measured = raw as f64 / comp as f64;
            let (predicted, _) = table.predict(c, dtype, "*");
            let _ = writeln!(
                s,
                "| {c} | {dtype} | {predicted:.3} | {measured:.3} | {:+.1} % | {:.1} MB |",
                (predicted / measured - 1.0) * 100.0,
                raw as f64 / 1e6
            );
        }
    }
    let out = root.join("bench-results/trace/ratios-workloads.md");
    std::fs::write(&out, s)?;
    println!("wrote {}", out.display());
    Ok(())
}

fn ratios_md(table: &RatioTable, traces: &[Trace]) -> String {
    let mut s = String::from(
        "# Predicted compression ratios of traced activations\n\n\
         Ratio (bytes-weighted) measured on the real activations of `datasets/activations/`, \
         by the op that saved the tensor; traced activations take the ratio of their op, else \
         their op class, else the dtype's overall ratio (`crates/planepack-trace/src/ratios.rs`).\n\n",
    );
    for dtype in ["bf16", "fp32"] {
        let _ = writeln!(
            s,
            "## {dtype}\n\n| key | {} |\n|---|{}",
            CODECS.join(" | "),
            "---|".repeat(CODECS.len())
        );
        let keys: Vec<String> = table
            .totals
            .get("bitplane")
            .and_then(|c| c.get(dtype))
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for k in keys {
            let cells: Vec<String> = CODECS
                .iter()
                .map(|c| {
                    table.totals[*c][dtype]
                        .get(&k)
                        .map_or("-".into(), |&(r, cmp)| {
                            format!("{:.3}", r as f64 / cmp as f64)
                        })
                })
                .collect();
            let _ = writeln!(s, "| {k} | {} |", cells.join(" | "));
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "## Traced activation bytes by op class and the bit-plane ratio they get\n\n| model | dtype | class | GiB | ratio |\n|---|---|---|---|---|");
    for t in traces {
        let mut by: std::collections::BTreeMap<&str, (u64, f64)> = Default::default();
        for a in &t.activations {
            let e = by.entry(op_class(&a.saved_by)).or_default();
            e.0 += a.bytes;
            e.1 += a.bytes as f64 / table.predict("bitplane", &a.dtype, &a.saved_by).0;
        }
        for (c, (b, comp)) in by {
            let _ = writeln!(
                s,
                "| {} | {} | {c} | {:.2} | {:.3} |",
                t.model,
                t.dtype,
                b as f64 / (1u64 << 30) as f64,
                b as f64 / comp
            );
        }
    }
    s
}

fn plots(rows: &[Row], out: &Path) -> Result<()> {
    for dtype in ["bf16", "fp32"] {
        let mut series = Vec::new();
        let schemes = [
            "none",
            "fixed+bitplane",
            "replanned+bitplane",
            "replanned+rans",
            "replanned+zstd-3",
            "replanned+lz4",
            "replanned+zvc",
        ];
        for sc in schemes {
            let pts: Vec<(f64, f64)> = BUDGETS
                .iter()
                .map(|&b| (b * 100.0, mean_over(rows, "A100-40GB", dtype, b, sc)))
                .collect();
            series.push((sc.to_string(), pts));
        }
        planepack_harness::plots::lines(
            &out.join(format!("overhead-{dtype}.svg")),
            &format!("A100 40GB, {dtype}, PCIe 24 GB/s, 64 GB/s engine: mean step overhead"),
            "activation memory budget, % of peak",
            "overhead, % of step time",
            &series,
        )?;
    }
    Ok(())
}
