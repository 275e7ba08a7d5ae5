//! `cargo xtask rans-study`: what each part of the rANS codec's model buys, and which chunk
//! size to use, measured on every dataset (ratios only: encode, decode, compare).
//!
//! Steps, each adding one part: byte planes alone (no rotation, no zero mask, no row map);
//! then the sign rotated to the bottom where a sample says it pays (exponent bytes whole);
//! then the zero mask; then the row map (the default codec). Then the default model at chunk
//! sizes 4 KiB to 1 MiB. Beside them the best CPU peer of the same run's `results.json`, where
//! there is one. Writes `bench-results/rans-study.md`; with `--workloads`, the same on the
//! production-size workloads, one row per bench record (dataset, dtype, size class), peers from
//! `workloads/results.json` (`bench-results/rans-study-workloads.md`): the corpus's tensors are
//! mostly a chunk or two, so only these say what the chunk size does to the large tensors a user
//! offloads.

use anyhow::Result;
use planepack_harness::report::geomean;
use planepack_harness::{Group, SizeClass};
use planepack_rans::Rans;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// (category, dataset, dtype, size class (workloads), ratios per step, ratios per chunk size).
type StudyRow = (
    String,
    String,
    String,
    Option<SizeClass>,
    Vec<f64>,
    Vec<f64>,
);
/// A row's key: (category, dataset, dtype, size class (workloads)).
type RowKey = (String, String, String, Option<SizeClass>);

pub fn run(root: &Path, workloads: bool) -> Result<()> {
    let base = Rans::default();
    // The parts in the order they were added: the tables wide and plane 0 without row
    // contexts until the last two steps.
    let wide = Rans {
        compact_tables: false,
        row_contexts: false,
        ..base
    };
    let steps: Vec<(&str, Rans)> = vec![
        (
            "byte planes",
            Rans {
                rotate: false,
                zero_mask: false,
                rows: false,
                ..wide
            },
        ),
        (
            "+ sign rotated (where it pays)",
            Rans {
                zero_mask: false,
                rows: false,
                ..wide
            },
        ),
        (
            "+ zero mask",
            Rans {
                rows: false,
                ..wide
            },
        ),
        ("+ row map", wide),
        (
            "+ compact tables",
            Rans {
                row_contexts: false,
                ..base
            },
        ),
        ("+ row contexts (default)", base),
    ];
    let chunks: Vec<(String, Rans)> = (12..=20)
        .step_by(2)
        .map(|c| {
            (
                format!("{} KiB", (1u32 << c) / 1024),
                Rans {
                    chunk_log2: c,
                    ..base
                },
            )
        })
        .collect();
    // Best CPU peer per row, from this machine's results (or, for the workloads, another
    // machine's where this one has none).
    let machine = planepack_harness::machine_name();
    let machine_dir = root
        .join("bench-results")
        .join(planepack_harness::machine_slug(&machine));
    let mut peer: BTreeMap<(String, String, Option<SizeClass>), (String, f64)> = BTreeMap::new();
    if workloads {
        let results = crate::peer_results::with_fallback(
            root,
            &machine_dir,
            machine_dir.join("workloads/results.json"),
        )?;
        for ((dataset, dtype, class), best) in crate::peer_results::peers(&results)?.best {
            peer.insert((dataset, dtype, Some(class)), best);
        }
    } else if let Ok(text) = std::fs::read_to_string(machine_dir.join("results.json")) {
        let res: planepack_harness::Results = serde_json::from_str(&text)?;
        for r in res
            .records
            .iter()
            .filter(|r| !r.gpu_decoder && r.codec != "raw" && !r.codec.starts_with("rans"))
        {
            let e = peer
                .entry((r.dataset.clone(), r.dtype.clone(), None))
                .or_insert((r.codec.clone(), 0.0));
            if r.ratio > e.1 {
                *e = (r.codec.clone(), r.ratio);
            }
        }
    }
    // Each row's raw and compressed bytes under every configuration (the steps, then the
    // chunk sizes), summed over its groups: a dataset's dtype in the corpus, a bench record's
    // batches in the workloads.
    let configs: Vec<Rans> = steps
        .iter()
        .map(|s| s.1)
        .chain(chunks.iter().map(|c| c.1))
        .collect();
    let mut sums: BTreeMap<RowKey, Vec<(u64, u64)>> = BTreeMap::new();
    let mut add = |g: &Group, class: Option<SizeClass>| -> Result<()> {
        let key = (
            g.category.clone(),
            g.dataset.clone(),
            g.dtype.clone(),
            class,
        );
        let row = sums
            .entry(key)
            .or_insert_with(|| vec![(0, 0); configs.len()]);
        for (c, acc) in configs.iter().zip(row.iter_mut()) {
            // (The parallel coder writes one core's bytes, on every core.)
            let comp = crate::activation_study::compressed(c, g)?;
            *acc = (acc.0 + g.raw_bytes(), acc.1 + comp);
        }
        Ok(())
    };
    let data = if workloads {
        use planepack_harness::input::{Batches, BATCH_BYTES};
        for f in &crate::workloads::files(root, &[])? {
            let name = f.file_stem().and_then(|s| s.to_str()).unwrap_or("file");
            let mut b = Batches::open(name, crate::bench::workload_category(name), f, BATCH_BYTES)?;
            for i in 0..b.len() {
                let g = b.load(i)?;
                add(&g, Some(g.size_class))?;
            }
            println!("{name}");
        }
        "the production-size workloads (`cargo xtask workloads`, datasets/workloads.toml), one \
         row per bench record (dataset, dtype, size class of the tensors; every batch of it, the \
         encoder and decoder on all cores)"
    } else {
        for g in crate::bench::load_groups(&[], &[])? {
            add(&g, None)?;
            println!("{} {}", g.dataset, g.dtype);
        }
        "the dataset corpus (datasets/manifest.toml)"
    };
    let ratio = |(raw, comp): (u64, u64)| raw as f64 / comp.max(1) as f64;
    let rows: Vec<StudyRow> = sums
        .into_iter()
        .map(|((cat, dataset, dtype, class), v)| {
            let (s, c) = v.split_at(steps.len());
            let ratios = |v: &[(u64, u64)]| v.iter().map(|&x| ratio(x)).collect();
            (cat, dataset, dtype, class, ratios(s), ratios(c))
        })
        .collect();
    let mut md = format!(
        "# What each part of the rANS codec buys\n\nGenerated by `cargo xtask rans-study{}` on {machine}, \
         on {data}. \
         Compression ratio (raw bytes over every byte of the streams), every stream decoded and \
         compared first. Table precision is fixed at 12 bits (4096) by the format: on exponent \
         planes that is within about 0.01 bit per symbol of the entropy (`../shared` reference, \
         entropy.md section 9), and the decode table fits a GPU workgroup's memory. A chunk's \
         planes have at most 32 lanes each (the format's limit; the encoder gives a plane one \
         lane per 1024 symbols), so a tensor gives a GPU, or a CPU's vector lanes, independent \
         lanes in proportion to its chunks: chunks four times larger store fewer lane headers \
         and tables but leave a quarter of the lanes, each four times as long.\n\n",
        if workloads { " --workloads" } else { "" }
    );
    let cats: Vec<String> = {
        let mut v: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        v.dedup();
        v
    };
    let table =
        |md: &mut String, title: &str, names: &[String], pick: &dyn Fn(&StudyRow) -> &Vec<f64>| {
            let _ = writeln!(md, "## {title}\n");
            let _ = write!(md, "| category |");
            for n in names {
                let _ = write!(md, " {n} |");
            }
            let _ = writeln!(
                md,
                " best CPU peer (same data) |\n|---|{}---|",
                "---|".repeat(names.len())
            );
            for cat in &cats {
                let sel: Vec<_> = rows.iter().filter(|r| &r.0 == cat).collect();
                let _ = write!(md, "| {cat} |");
                for i in 0..names.len() {
                    let _ = write!(
                        md,
                        " {:.3} |",
                        geomean(&sel.iter().map(|r| pick(r)[i]).collect::<Vec<_>>())
                    );
                }
                let peers: Vec<f64> = sel
                    .iter()
                    .filter_map(|r| peer.get(&(r.1.clone(), r.2.clone(), r.3)).map(|p| p.1))
                    .collect();
                if peers.len() == sel.len() {
                    let _ = writeln!(md, " {:.3} |", geomean(&peers));
                } else {
                    let _ = writeln!(md, " - |");
                }
            }
            let _ = writeln!(md);
        };
    let step_names: Vec<String> = steps.iter().map(|s| s.0.to_string()).collect();
    let chunk_names: Vec<String> = chunks.iter().map(|s| s.0.clone()).collect();
    table(
        &mut md,
        "Model parts (64 KiB chunks), geomean ratio per category",
        &step_names,
        &|r| &r.4,
    );
    table(
        &mut md,
        "Chunk size (full model), geomean ratio per category",
        &chunk_names,
        &|r| &r.5,
    );
    let _ = writeln!(md, "## Per dataset\n");
    let class_head = if workloads { " size class |" } else { "" };
    let _ = write!(md, "| dataset | dtype |{class_head}");
    for n in step_names.iter().chain(&chunk_names) {
        let _ = write!(md, " {n} |");
    }
    let _ = writeln!(
        md,
        " best CPU peer |\n|---|---|{}{}---|",
        if workloads { "---|" } else { "" },
        "---|".repeat(step_names.len() + chunk_names.len())
    );
    for r in &rows {
        let _ = write!(md, "| {} | {} |", r.1, r.2);
        if let Some(class) = r.3 {
            let _ = write!(md, " {} |", class.label());
        }
        for v in r.4.iter().chain(&r.5) {
            let _ = write!(md, " {v:.3} |");
        }
        match peer.get(&(r.1.clone(), r.2.clone(), r.3)) {
            Some((c, v)) => {
                let _ = writeln!(md, " {c} {v:.3} |");
            }
            None => {
                let _ = writeln!(md, " - |");
            }
        }
    }
    let out = root.join(match workloads {
        true => "bench-results/rans-study-workloads.md",
        false => "bench-results/rans-study.md",
    });
    std::fs::write(&out, md)?;
    println!("wrote {}", out.display());
    Ok(())
}
