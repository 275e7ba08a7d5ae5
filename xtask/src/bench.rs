//! `cargo xtask bench` and `cargo xtask tables`.

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use planepack_datasets::{datasets_dir, Manifest};
use planepack_harness::input::{groups_of, tensor_files};
use planepack_harness::{ibp_study, measure, plots, registry, report, Results, Settings};
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct BenchArgs {
    /// Few repetitions: a smoke run, speeds are rough.
    #[arg(long)]
    quick: bool,
    /// Only datasets whose name contains one of these (comma separated).
    #[arg(long, value_delimiter = ',')]
    filter: Vec<String>,
    /// Only these codecs, by exact name as the tables print them (comma separated, e.g.
    /// `bitplane,zstd-19,blosc2-shuffle-zstd-5`; a family alone means its default level).
    #[arg(long, value_delimiter = ',')]
    codecs: Vec<String>,
    /// Output folder (default: bench-results/<machine>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Machine name to record (default: CPU model and core count).
    #[arg(long)]
    machine: Option<String>,
    /// Skip the peers measured through their PyPI packages (ZipNN, python-blosc2).
    #[arg(long)]
    no_peers: bool,
    /// Measure the production-size workloads of target/workloads/ (`cargo xtask workloads`)
    /// instead of datasets/, streamed a 64 MiB batch at a time, into
    /// bench-results/<machine>/workloads/.
    #[arg(long)]
    workloads: bool,
    /// Your own .safetensors / .npy files or folders of them, instead of datasets/.
    paths: Vec<PathBuf>,
}

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// This machine's results folder, `bench-results/<machine slug>`.
pub(crate) fn default_dir(machine: &str) -> PathBuf {
    workspace_root()
        .join("bench-results")
        .join(planepack_harness::machine_slug(machine))
}

/// The commit measured, with `-dirty` when tracked code differs from it. The figures' own
/// outputs (`bench-results/`, the README's generated sections) do not count: one bench run
/// rewrites them before the next reads the version.
pub(crate) fn git_version() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(workspace_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let changed = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)bench-results",
        ":(exclude)README.md",
    ]);
    match changed {
        Some(c) if c.is_empty() => commit,
        _ => format!("{commit}-dirty"),
    }
}

/// The measurement groups of the committed datasets (those whose name contains one of
/// `filter`), or of the user's files.
pub fn load_groups(filter: &[String], paths: &[PathBuf]) -> Result<Vec<measure::Group>> {
    let mut groups = Vec::new();
    if paths.is_empty() {
        let dir = datasets_dir();
        let manifest = Manifest::read(&dir)?;
        for d in &manifest.datasets {
            if !filter.is_empty() && !filter.iter().any(|f| d.name.contains(f.as_str())) {
                continue;
            }
            d.verify(&dir)?;
            groups.extend(groups_of(&d.name, &d.category, &dir.join(&d.file))?);
        }
    } else {
        for f in tensor_files(paths) {
            let name = f
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("file")
                .to_owned();
            groups
                .extend(groups_of(&name, "user", &f).with_context(|| format!("{}", f.display()))?);
        }
    }
    Ok(groups)
}

/// `cargo xtask peers`: measure the PyPI peers and merge them into a results folder.
pub fn peers(quick: bool, filter: &[String], dir: Option<PathBuf>) -> Result<()> {
    let dir = dir.unwrap_or_else(|| default_dir(&planepack_harness::machine_name()));
    let path = dir.join("results.json");
    let mut results: Results = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?,
    )?;
    let groups = load_groups(filter, &[])?;
    let settings = if quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    let device = format!("cpu: {}", results.machine);
    let fresh = crate::peers::measure(&groups, settings, &device)?;
    crate::peers::merge(&mut results.records, fresh);
    std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
    // Not into the README: its headline is one `cargo xtask bench` run, planepack and the
    // peers measured side by side, and this folder's planepack figures may be of older code.
    write_tables(&results, &dir, false)?;
    println!("merged the peers into {}", path.display());
    Ok(())
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.workloads {
        return run_workloads(args);
    }
    let machine = args
        .machine
        .clone()
        .unwrap_or_else(planepack_harness::machine_name);
    let out_dir = args.out.clone().unwrap_or_else(|| default_dir(&machine));
    let settings = if args.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    let device = format!("cpu: {machine}");

    let groups = load_groups(&args.filter, &args.paths)?;
    anyhow::ensure!(!groups.is_empty(), "no tensors to measure");
    let codecs = registry::named(&args.codecs)?;

    let bar = ProgressBar::new((groups.len() * codecs.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    let mut records = Vec::new();
    for g in &groups {
        for c in &codecs {
            bar.set_message(format!("{} {} {}", g.dataset, g.dtype, c.name()));
            let mut rec = measure::measure_spec(*c, g, settings, &device)?;
            measure::annotate(&mut rec, g)?;
            records.push(rec);
            bar.inc(1);
        }
    }
    bar.finish_with_message("measured");
    crate::gpu::transfer(&mut records, &groups, if args.quick { 3 } else { 7 })?;
    if args.no_peers {
        println!("peers (ZipNN, python-blosc2 from PyPI): skipped (--no-peers)");
    } else {
        match crate::peers::measure(&groups, settings, &device) {
            Ok(fresh) => crate::peers::merge(&mut records, fresh),
            Err(e) => println!(
                "peers (ZipNN, python-blosc2 from PyPI): NOT measured: {e:#}. The tables have \
                 planepack's codecs and the Rust-bound peers (zstd, LZ4, C-Blosc2) only; \
                 `cargo xtask peers` adds them later."
            ),
        }
    }

    let mut command = String::from("cargo xtask bench");
    if args.quick {
        command += " --quick";
    }
    if !args.filter.is_empty() {
        command += &format!(" --filter {}", args.filter.join(","));
    }
    if !args.codecs.is_empty() {
        command += &format!(" --codecs {}", args.codecs.join(","));
    }
    for p in &args.paths {
        command += &format!(" {}", p.display());
    }
    let results = Results {
        schema_version: planepack_harness::SCHEMA_VERSION,
        machine: machine.clone(),
        command,
        quick: args.quick,
        code_version: git_version(),
        records,
    };
    std::fs::create_dir_all(&out_dir)?;
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    write_tables(&results, &out_dir, true)?;

    // IBP's threshold and sampling study on the row-structured datasets.
    if codecs
        .iter()
        .any(|c| c.id == planepack_container::CodecId::Ibp)
    {
        let mut study = Vec::new();
        for g in groups.iter().filter(|g| {
            matches!(
                g.category.as_str(),
                "embedding" | "gnn" | "kv-cache" | "user"
            )
        }) {
            for (i, (shape, data)) in g.tensors.iter().enumerate() {
                let row = shape.last().copied().unwrap_or(1) * g.elem.size();
                if let Some(r) = ibp_study::study(
                    &g.dataset,
                    &format!("{}#{i} {:?}", g.dtype, shape),
                    data,
                    row,
                ) {
                    study.push(r);
                }
            }
        }
        if !study.is_empty() {
            std::fs::write(
                out_dir.join("ibp-study.json"),
                serde_json::to_string_pretty(&study)?,
            )?;
            std::fs::write(
                out_dir.join("ibp-study.md"),
                ibp_study::markdown(&study, &machine),
            )?;
        }
    }
    println!("wrote {}", out_dir.display());
    Ok(())
}

/// Write `dir`'s tables and plots; with `readme`, also the README section of its corpus.
fn write_tables(results: &Results, dir: &Path, splice_readme: bool) -> Result<()> {
    std::fs::write(dir.join("results.csv"), report::csv(results))?;
    std::fs::write(dir.join("summary.md"), report::summary(results))?;
    plots::all(&results.records, dir)?;
    let root = workspace_root();
    let rel = dir.strip_prefix(&root).unwrap_or(dir);
    std::fs::write(
        dir.join("headline.md"),
        report::headline(
            results,
            &rel.join("ratio-by-codec.svg").display().to_string(),
        ),
    )?;
    // The README's headlines come from full runs over the committed datasets and over the
    // workloads only.
    let section = match results.command.as_str() {
        _ if !splice_readme => None,
        "cargo xtask bench" if !results.quick => {
            Some(("headline", "the dataset corpus (`datasets/`)"))
        }
        "cargo xtask bench --workloads" if !results.quick => Some((
            "headline-workloads",
            "the production-size workloads (`target/workloads/`, `datasets/workloads.toml`)",
        )),
        _ => None,
    };
    let dirty = results.code_version.ends_with("-dirty")
        && std::env::var_os("PLANEPACK_ALLOW_DIRTY").is_none();
    if section.is_some() && dirty {
        println!(
            "README not updated: {} was measured on a tree with uncommitted changes ({}); \
             commit and rerun, or set PLANEPACK_ALLOW_DIRTY=1",
            rel.display(),
            results.code_version
        );
    }
    if let Some((marker, corpus)) = section.filter(|_| !dirty) {
        let table = report::readme_headline(results, corpus, &rel.display().to_string());
        let readme_path = root.join("README.md");
        let readme = std::fs::read_to_string(&readme_path)?;
        if let Some(new) = report::splice(&readme, marker, &table) {
            std::fs::write(readme_path, new)?;
        }
    }
    Ok(())
}

/// Redraw the tables and plots of `dir`, or of every results folder under bench-results/.
pub fn tables(dir: Option<PathBuf>) -> Result<()> {
    let dirs: Vec<PathBuf> = match dir {
        Some(d) => vec![d],
        None => {
            let mut v: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("bench-results"))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("results.json").is_file())
                .collect();
            v.sort();
            v
        }
    };
    anyhow::ensure!(
        !dirs.is_empty(),
        "no results.json under bench-results/: run `cargo xtask bench` first"
    );
    // The README takes the figures of the folder named, never whichever folder comes last.
    let readme = dirs.len() == 1;
    for dir in dirs {
        let text = std::fs::read_to_string(dir.join("results.json"))
            .with_context(|| format!("{}/results.json", dir.display()))?;
        let results: Results = serde_json::from_str(&text)?;
        write_tables(&results, &dir, readme)?;
        println!("redrew tables and plots in {}", dir.display());
    }
    Ok(())
}

/// The strongest zstd settings code floats at 6-8 MB/s on one core (zstd's optimal parser):
/// over the 4.6 GB of workloads they would take about three of the four hours a full run
/// needs on two cores. They are measured on the corpus, where none of them has the best ratio
/// on a category the workloads hold (activations, KV caches, embeddings), and left out here;
/// name a codec with --codecs to include it. The same for OpenZL's single graphs: the best
/// of them per tensor (`openzl-best`) is measured.
const WORKLOAD_SKIP: &[&str] = &[
    "zstd-19",
    "blosc2-shuffle-zstd-9",
    "blosc2-bitshuffle-zstd-9",
    "pyblosc2-shuffle-bytedelta-zstd-9",
    "openzl-generic",
    "openzl-float-compress",
    "openzl-float-entropy",
];

/// The codecs measured on the workloads by default: the bench set without [`WORKLOAD_SKIP`].
fn workload_codecs() -> Vec<planepack_container::CodecSpec> {
    registry::all()
        .into_iter()
        .filter(|c| !WORKLOAD_SKIP.contains(&c.name().as_str()))
        .collect()
}

/// The category of a workload file, from its name.
pub(crate) fn workload_category(name: &str) -> &'static str {
    match name.split('-').next() {
        Some("cnn" | "transformer") => "activations",
        Some("kv") => "kv-cache",
        Some("emb") => "embedding",
        _ => "user",
    }
}

/// `cargo xtask bench --workloads`: every workload file in batches of at most 64 MiB (a
/// larger tensor in pieces cut as container parts), each batch measured by every codec and
/// then dropped, so memory stays bounded whatever the files' size; the batches of one
/// (file, dtype, size class, codec) are merged into one record.
fn run_workloads(args: BenchArgs) -> Result<()> {
    use planepack_harness::input::{Batches, BATCH_BYTES};
    let root = workspace_root();
    let files = crate::workloads::files(&root, &args.filter)?;
    let machine = args
        .machine
        .clone()
        .unwrap_or_else(planepack_harness::machine_name);
    let out_dir = args
        .out
        .clone()
        .unwrap_or_else(|| default_dir(&machine).join("workloads"));
    // Three timed runs of every 64 MiB batch: each run is long enough to time well.
    let settings = Settings {
        min_runs: 3,
        min_seconds: 0.0,
        max_runs: 3,
    };
    let device = format!("cpu: {machine}");
    let codecs = if args.codecs.is_empty() {
        workload_codecs()
    } else {
        registry::named(&args.codecs)?
    };
    anyhow::ensure!(!files.is_empty(), "no workload files match");
    let mut plans = Vec::new();
    for f in &files {
        let name = f.file_stem().and_then(|s| s.to_str()).unwrap_or("file");
        plans.push(Batches::open(
            name,
            workload_category(name),
            f,
            BATCH_BYTES,
        )?);
    }
    let total: usize = plans.iter().map(|b| b.len()).sum();
    let bar = ProgressBar::new((total * codecs.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    let mut records: Vec<planepack_harness::Record> = Vec::new();
    let mut peers = (!args.no_peers)
        .then(|| crate::peers::Input::new(&device))
        .transpose()?;
    if let Some(p) = peers.as_mut() {
        p.skip(WORKLOAD_SKIP);
    }
    for batches in &mut plans {
        for i in 0..batches.len() {
            let g = batches.load(i)?;
            for c in &codecs {
                bar.set_message(format!("{} {} {}", g.dataset, g.dtype, c.name()));
                let rec = measure::measure_spec(*c, &g, settings, &device)?;
                add_merged(&mut records, rec)?;
                bar.inc(1);
            }
            if let Some(p) = peers.as_mut() {
                p.add(&g)?;
            }
        }
    }
    bar.finish_with_message("measured");
    // Our codecs' records are written before the peers run (an hour of Python on the
    // workloads): whatever happens to the peers, this part of the run is kept.
    let partial = out_dir.join("results-without-peers.json");
    std::fs::create_dir_all(&out_dir)?;
    std::fs::write(&partial, serde_json::to_string_pretty(&records)?)?;
    if let Some(p) = peers {
        let fresh = p.run(settings).and_then(|fresh| {
            let mut merged = Vec::new();
            for r in fresh {
                add_merged(&mut merged, r)?;
            }
            Ok(merged)
        });
        match fresh {
            Ok(merged) => crate::peers::merge(&mut records, merged),
            Err(e) => println!("peers: NOT measured: {e:#}"),
        }
    }
    let mut command = String::from("cargo xtask bench --workloads");
    if !args.filter.is_empty() {
        command += &format!(" --filter {}", args.filter.join(","));
    }
    if !args.codecs.is_empty() {
        command += &format!(" --codecs {}", args.codecs.join(","));
    }
    let results = Results {
        schema_version: planepack_harness::SCHEMA_VERSION,
        machine,
        command,
        quick: args.quick,
        code_version: git_version(),
        records,
    };
    std::fs::create_dir_all(&out_dir)?;
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    write_tables(&results, &out_dir, true)?;
    std::fs::remove_file(&partial)?;
    println!("wrote {}", out_dir.display());
    Ok(())
}

/// Add `rec` to `records`, merged into the record of the same dataset, dtype, size class and
/// codec if there is one (a group measured in batches).
fn add_merged(
    records: &mut Vec<planepack_harness::Record>,
    rec: planepack_harness::Record,
) -> Result<()> {
    match records.iter_mut().find(|r| {
        r.dataset == rec.dataset
            && r.dtype == rec.dtype
            && r.size_class == rec.size_class
            && r.codec == rec.codec
    }) {
        Some(r) => r.merge(&rec).map_err(|e| anyhow::anyhow!(e)),
        None => {
            records.push(rec);
            Ok(())
        }
    }
}
