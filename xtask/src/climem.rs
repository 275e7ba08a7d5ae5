//! `cargo xtask cli-memory`: the `planepack` command's peak resident memory on a large file.
//!
//! The file is a safetensors of `--mib` MiB made by tiling a real activation tensor into
//! 128 MiB tensors: it exercises the command's memory behaviour, not compression, so no ratio
//! from it is reported. Each codec's compress and decompress run under `/usr/bin/time -v`; the
//! round trip is checked byte for byte; the table goes to `bench-results/cli-memory.md` and the
//! README.

use anyhow::{bail, Context, Result};
use planepack_datasets::{datasets_dir, load};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

const TENSOR_MIB: usize = 128;

fn build_file(path: &Path, mib: usize) -> Result<()> {
    let src = load(&datasets_dir().join("activations/smollm2-135m-bf16.safetensors"))?;
    let seed: Vec<u8> = src
        .iter()
        .filter(|t| t.dtype == "BF16")
        .flat_map(|t| t.data.iter().copied())
        .collect();
    anyhow::ensure!(!seed.is_empty(), "no BF16 activations to tile");
    let n = (mib / TENSOR_MIB).max(1);
    let bytes = TENSOR_MIB << 20;
    let cols = 512usize; // rows of 512 elements (128 MiB is not a multiple of 576)
    let mut json = String::from("{");
    for i in 0..n {
        if i > 0 {
            json.push(',');
        }
        json += &format!(
            "\"t{i:02}\":{{\"dtype\":\"BF16\",\"shape\":[{},{}],\"data_offsets\":[{},{}]}}",
            bytes / 2 / cols,
            cols,
            i * bytes,
            (i + 1) * bytes
        );
    }
    json.push('}');
    anyhow::ensure!(bytes % (2 * cols) == 0);
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    w.write_all(&(json.len() as u64).to_le_bytes())?;
    w.write_all(json.as_bytes())?;
    for _ in 0..n {
        let mut left = bytes;
        while left > 0 {
            let k = left.min(seed.len());
            w.write_all(&seed[..k])?;
            left -= k;
        }
    }
    w.flush()?;
    Ok(())
}

/// Run under `/usr/bin/time -v`; (peak RSS in MiB, wall seconds).
fn timed(args: &[&str]) -> Result<(f64, f64)> {
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .args(args)
        .output()
        .context("/usr/bin/time (apt-get install time)")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("{args:?} failed: {err}");
    }
    let field = |name: &str| {
        err.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_owned()))
    };
    let rss_kb: f64 = field("Maximum resident set size (kbytes):")
        .context("no RSS in time -v output")?
        .parse()?;
    let wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss):").unwrap_or_default();
    let secs = wall
        .split(':')
        .try_fold(0.0, |acc, p| p.parse::<f64>().map(|v| acc * 60.0 + v))
        .unwrap_or(f64::NAN);
    Ok((rss_kb / 1024.0, secs))
}

fn same(a: &Path, b: &Path) -> Result<bool> {
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let na = fa.read(&mut ba)?;
        let mut nb = 0;
        while nb < na {
            let k = fb.read(&mut bb[nb..na])?;
            if k == 0 {
                return Ok(false);
            }
            nb += k;
        }
        if na == 0 {
            return Ok(fb.read(&mut bb)? == 0);
        }
        if ba[..na] != bb[..na] {
            return Ok(false);
        }
    }
}

pub fn run(mib: usize, codecs: &[String], root: &Path) -> Result<()> {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "-p", "planepack-cli"])
        .current_dir(root)
        .status()?;
    anyhow::ensure!(status.success(), "building planepack failed");
    let bin = root.join("target/release/planepack");
    let dir = std::env::temp_dir().join("planepack-cli-memory");
    std::fs::create_dir_all(&dir)?;
    let input = dir.join("big.safetensors");
    build_file(&input, mib)?;
    let size_mib = std::fs::metadata(&input)?.len() as f64 / (1 << 20) as f64;
    let (packed, back) = (dir.join("big.ppk"), dir.join("big.out"));
    let s = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let mut table = format!(
        "Input: {size_mib:.0} MiB safetensors, {} BF16 tensors of {TENSOR_MIB} MiB (a real SmolLM2 \
         activation tiled; used for memory only, no ratio is reported from it). Peak resident \
         memory from `/usr/bin/time -v`; machine: {}. Command: `cargo xtask cli-memory`.\n\n\
         | codec | compress peak RSS | x input | compress s | decompress peak RSS | x input | decompress s | round trip |\n\
         |---|---|---|---|---|---|---|---|\n",
        (mib / TENSOR_MIB).max(1),
        planepack_harness::machine_name()
    );
    for codec in codecs {
        let (c_rss, c_s) = timed(&[
            &s(&bin),
            "compress",
            &s(&input),
            "-o",
            &s(&packed),
            "--codec",
            codec,
            "--force",
            "-q",
        ])?;
        let (d_rss, d_s) = timed(&[
            &s(&bin),
            "decompress",
            &s(&packed),
            "-o",
            &s(&back),
            "--force",
            "-q",
        ])?;
        let ok = same(&input, &back)?;
        anyhow::ensure!(ok, "{codec}: round trip differs");
        table += &format!(
            "| {codec} | {c_rss:.0} MiB | {:.2} | {c_s:.1} | {d_rss:.0} MiB | {:.2} | {d_s:.1} | identical |\n",
            c_rss / size_mib,
            d_rss / size_mib
        );
        println!("{codec}: compress {c_rss:.0} MiB, decompress {d_rss:.0} MiB");
    }
    // `planepack bench` reads a file in batches of tensors, not whole.
    let (b_rss, b_s) = timed(&[
        &s(&bin),
        "bench",
        &s(&input),
        "--codecs",
        "bitplane",
        "--quick",
    ])?;
    table += &format!(
        "\n`planepack bench` on the same file (`--codecs bitplane --quick`): peak {b_rss:.0} MiB \
         ({:.2} x input), {b_s:.1} s.\n",
        b_rss / size_mib
    );
    println!("bench: {b_rss:.0} MiB");
    std::fs::remove_dir_all(&dir)?;
    std::fs::write(
        root.join("bench-results/cli-memory.md"),
        format!("# `planepack` peak memory\n\n{table}"),
    )?;
    let readme = root.join("README.md");
    let text = std::fs::read_to_string(&readme)?;
    match planepack_harness::report::splice(&text, "CLI-MEMORY", &table) {
        Some(new) => std::fs::write(&readme, new)?,
        None => {
            println!("README has no CLI-MEMORY markers; table only in bench-results/cli-memory.md")
        }
    }
    print!("{table}");
    Ok(())
}
