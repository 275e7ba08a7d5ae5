//! `cargo xtask fuzz`: seed the cargo-fuzz targets of `fuzz/` from the real datasets, run each
//! for a while under AddressSanitizer, and say how far each got.
//!
//! Seeds: a slice of the first tensor of every dataset, encoded by every codec (for `decode`;
//! and the first FP32 tensor whose rANS stream has tail dictionaries, for `decode` and
//! `roundtrip`;
//! the bit-plane stream alone for `tiers`), raw with a codec and no header edits (for
//! `headers`, which encodes it and then edits header fields),
//! raw (for `roundtrip`, and for `rans_scaled`, which reads any bytes as blocks), as a small safetensors file (for `tensor_files`) and as a container
//! of that file (for `container`), and every input that once crashed a reader
//! (`fuzz/regressions/<target>/`). They go to `target/fuzz-corpus/<target>/`, which is also
//! where libFuzzer keeps what it finds, so a later run starts where the last one stopped.
//! Needs `cargo-fuzz` and a nightly toolchain (`cargo install cargo-fuzz`); a crash fails the
//! command with libFuzzer's report and the reproducer under `fuzz/artifacts/`.

use anyhow::{bail, Context, Result};
use planepack_container::{CodecId, CodecSpec, CompressOptions, Policy};
use planepack_core::ElemType;
use planepack_datasets::{datasets_dir, load, Manifest};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every target in `fuzz/Cargo.toml`.
pub const TARGETS: [&str; 8] = [
    "decode",
    "headers",
    "roundtrip",
    "rans_scaled",
    "ibp_rows",
    "tiers",
    "container",
    "tensor_files",
];

/// Bytes of each dataset's first tensor taken as a seed (small inputs fuzz faster).
const SEED_BYTES: usize = 4096;

pub fn run(
    root: &Path,
    seconds: u64,
    runs: Option<u64>,
    targets: &[String],
    record: bool,
    accumulate: bool,
) -> Result<()> {
    let targets: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in targets {
            if !TARGETS.contains(&t.as_str()) {
                bail!("no fuzz target {t:?}; targets are {}", TARGETS.join(", "));
            }
        }
        targets.iter().map(|t| t.as_str()).collect()
    };
    let probe = Command::new("cargo").args(["fuzz", "--version"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        bail!("cargo-fuzz is not installed: `cargo install cargo-fuzz` (and `rustup toolchain install nightly`)");
    }
    let corpus = root.join("target/fuzz-corpus");
    seed(&corpus).context("writing the seed corpora")?;
    regressions(&root.join("fuzz/regressions"), &corpus).context("copying the regressions")?;
    let mut rows: Vec<(String, String)> = Vec::new();
    for t in &targets {
        let dir = corpus.join(t);
        println!("fuzzing {t} for {seconds} s (AddressSanitizer)");
        // Built first, so that the seconds recorded are fuzzing, not compiling.
        let built = Command::new("cargo")
            .current_dir(root.join("fuzz"))
            .args(["+nightly", "fuzz", "build", t])
            .status()
            .with_context(|| format!("building fuzz target {t}"))?;
        if !built.success() {
            bail!("fuzz target {t} does not build");
        }
        let started = std::time::Instant::now();
        let out = Command::new("cargo")
            .current_dir(root.join("fuzz"))
            .args(["+nightly", "fuzz", "run", t])
            .arg(&dir)
            .args([
                "--",
                &format!("-max_total_time={seconds}"),
                "-rss_limit_mb=2560",
                "-malloc_limit_mb=2048",
                "-timeout=20",
                "-print_final_stats=1",
            ])
            .args(runs.map(|r| format!("-runs={r}")))
            .output()
            .with_context(|| format!("running cargo fuzz run {t}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!("fuzz target {t} failed:\n{}", tail.join("\n"));
        }
        let stat = |name: &str| -> String {
            log.lines()
                .rev()
                .find_map(|l| {
                    l.strip_prefix(&format!("stat::{name}:"))
                        .map(|v| v.trim().to_owned())
                })
                .unwrap_or_else(|| "?".into())
        };
        // The last status line: `#N DONE cov: C ft: F corp: K/...`.
        let done = log.lines().rev().find(|l| l.contains("DONE")).unwrap_or("");
        let field = |key: &str| -> String {
            let mut words = done.split_whitespace();
            words
                .by_ref()
                .find(|w| *w == key)
                .and_then(|_| words.next())
                .unwrap_or("?")
                .to_owned()
        };
        let line = format!(
            "| {t} | {} | {} | {} | {} | {} | {} | none |\n",
            started.elapsed().as_secs(),
            stat("number_of_executed_units"),
            stat("average_exec_per_sec"),
            field("cov:"),
            field("ft:"),
            field("corp:"),
        );
        print!("{line}");
        rows.push((t.to_string(), line));
    }
    if record {
        let path = root.join("bench-results/fuzz.md");
        // Rows of targets not run this time are kept, so targets can be run one at a time.
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        for l in old
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| target"))
        {
            let name = l[2..].split(' ').next().unwrap_or("");
            match rows.iter_mut().find(|(t, _)| t == name) {
                // With --accumulate, a target's new run adds to its recorded one (libFuzzer
                // restarts from the same corpus): seconds and executions add up.
                Some((_, new)) if accumulate => *new = add_runs(l, new),
                Some(_) => {}
                None if TARGETS.contains(&name) => rows.push((name.to_string(), format!("{l}\n"))),
                None => {}
            }
        }
        rows.sort_by_key(|(t, _)| TARGETS.iter().position(|x| x == t));
        let cpu = planepack_harness::machine_name();
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Fuzzing\n\n`cargo xtask fuzz --seconds S [--runs N] --record` on {cpu}: each target \
             of `fuzz/` under AddressSanitizer (cargo-fuzz's default), seeded from `datasets/`, \
             libFuzzer's malloc limit 2 GiB, for S seconds or N executions. What each target \
             checks is in its file's header. A run that finds a crash fails the command, so \
             every row here ended without a finding. Rows recorded with `--accumulate` add a \
             later run from the same corpus to the earlier one (seconds and executions summed; \
             coverage and corpus from the last run).\n"
        );
        md += "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | findings |\n|---|---|---|---|---|---|---|---|\n";
        for (_, l) in &rows {
            md += l;
        }
        std::fs::write(&path, md).with_context(|| format!("{}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// A table row whose seconds and executions are those of `old` plus `new` (the other cells:
/// `new`'s).
fn add_runs(old: &str, new: &str) -> String {
    let cells = |l: &str| -> Vec<String> {
        l.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let (o, mut n) = (cells(old), cells(new));
    let num = |c: &str| c.parse::<f64>().unwrap_or(0.0);
    let secs = num(&o[1]) + num(&n[1]);
    let execs = num(&o[2]) + num(&n[2]);
    n[1] = format!("{secs:.0}");
    n[2] = format!("{execs:.0}");
    n[3] = format!("{:.0}", execs / secs.max(1.0));
    format!("| {} |\n", n.join(" | "))
}

/// Write the seed corpora under `corpus/<target>/`.
fn seed(corpus: &Path) -> Result<()> {
    let dir = datasets_dir();
    let manifest = Manifest::read(&dir)?;
    let mk = |t: &str| -> Result<PathBuf> {
        let d = corpus.join(t);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    };
    let (decode, roundtrip, files, container) = (
        mk("decode")?,
        mk("roundtrip")?,
        mk("tensor_files")?,
        mk("container")?,
    );
    mk("ibp_rows")?;
    // Any bytes are blocks of a scale and 32 integers to `rans_scaled`: the datasets' slices.
    let scaled = mk("rans_scaled")?;
    let tiers = mk("tiers")?;
    let headers = mk("headers")?;
    for d in &manifest.datasets {
        let tensors = load(&dir.join(&d.file))?;
        let Some(t) = tensors
            .iter()
            .find(|t| t.elem().is_some() && !t.data.is_empty())
        else {
            continue;
        };
        let elem = t.elem().expect("filtered");
        let take = t.data.len().min(SEED_BYTES) / elem.size() * elem.size();
        let slice = &t.data[..take];
        let cols = t.shape.last().copied().unwrap_or(1).clamp(1, 64);
        let shape_byte = elem_code(elem) | ((cols as u8 - 1) << 2);
        for (i, id) in CodecId::ALL.iter().enumerate() {
            let codec = CodecSpec::from(*id).codec();
            let n = take / elem.size();
            let dims = if n % cols == 0 && n / cols > 1 {
                vec![n / cols, cols]
            } else {
                vec![n]
            };
            let mut enc = vec![i as u8];
            codec.encode_shaped(slice, elem, &dims, &mut enc)?;
            if *id == CodecId::BitPlane {
                std::fs::write(tiers.join(&d.name), &enc[1..])?;
            }
            std::fs::write(decode.join(format!("{}-{}", d.name, id.name())), enc)?;
            let mut raw = vec![i as u8, shape_byte];
            raw.extend_from_slice(slice);
            std::fs::write(roundtrip.join(format!("{}-{}", d.name, id.name())), raw)?;
            if i == 0 {
                std::fs::write(scaled.join(&d.name), slice)?;
            }
            // headers: codec, element type, row length, no edits yet, then the tensor.
            let mut h = vec![i as u8, elem_code(elem), cols as u8 - 1, 0];
            h.extend_from_slice(&slice[..slice.len().min(1024)]);
            std::fs::write(headers.join(format!("{}-{}", d.name, id.name())), h)?;
        }
        // The first FP32 tensor whose rANS stream has tail-dictionary chunks (flag T), where the
        // dataset has one (MiniLM's attention scores): a first tensor does not show every form.
        let rans = CodecId::ALL
            .iter()
            .position(|c| *c == CodecId::Rans)
            .expect("rans is a codec") as u8;
        let with_tails = tensors
            .iter()
            .filter(|t| t.elem() == Some(ElemType::F32))
            .find_map(|t| {
                let slice = &t.data[..t.data.len().min(SEED_BYTES) / 4 * 4];
                let mut enc = vec![rans];
                CodecSpec::from(CodecId::Rans)
                    .codec()
                    .encode(slice, ElemType::F32, &mut enc)
                    .ok()?;
                let tails = planepack_rans::parse_header(&enc[1..]).ok()?.tails;
                tails.then_some((slice, enc))
            });
        if let Some((slice, enc)) = with_tails {
            std::fs::write(decode.join(format!("{}-rans-tails", d.name)), enc)?;
            let mut raw = vec![rans, elem_code(ElemType::F32)];
            raw.extend_from_slice(slice);
            std::fs::write(roundtrip.join(format!("{}-rans-tails", d.name)), raw)?;
        }
        // The first 2-byte tensor whose (whole) rANS stream has sign planes (version 8), where
        // the dataset has one (the KV caches): they need tensors of 64 KiB and more, which no
        // slice above is. Decoded only (encoding it whole each run would fuzz slowly).
        let with_signs = tensors
            .iter()
            .filter(|t| t.elem().is_some_and(|e| e.size() == 2) && t.shape.len() >= 2)
            .find_map(|t| {
                let mut enc = vec![rans];
                CodecSpec::from(CodecId::Rans)
                    .codec()
                    .encode_shaped(&t.data, t.elem()?, &t.shape, &mut enc)
                    .ok()?;
                let v8 = planepack_rans::internals::sign_contexts::VERSION_SIGN;
                (enc[1 + 4] == v8).then_some(enc)
            });
        if let Some(enc) = with_signs {
            std::fs::write(decode.join(format!("{}-rans-signs", d.name)), enc)?;
        }
        // A one-tensor safetensors file of the slice, and its container.
        let header = format!(
            "{{\"t\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[0,{take}]}}}}",
            t.dtype,
            take / elem.size()
        );
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend_from_slice(slice);
        let path = files.join(format!("{}.safetensors", d.name));
        std::fs::write(&path, &file)?;
        let opts = CompressOptions::new(Policy::BestRatio, "x");
        let mut ppk = std::io::Cursor::new(Vec::new());
        planepack_container::compress(&std::fs::File::open(&path)?, &mut ppk, &opts, |_| {})
            .with_context(|| format!("container of {}", path.display()))?;
        let ppk = ppk.into_inner();
        // The target's last input byte is a flag, not the file: odd, it reseals the metadata
        // checksum so that mutations reach the checks behind it.
        for flag in [0u8, 1] {
            let mut seed = ppk.clone();
            seed.push(flag);
            std::fs::write(container.join(format!("{}-{flag}", d.name)), seed)?;
        }
    }
    Ok(())
}

/// Every input that once crashed a reader (`fuzz/regressions/<target>/`, committed) joins its
/// target's corpus, so each run starts by replaying them.
fn regressions(from: &Path, corpus: &Path) -> Result<()> {
    for t in TARGETS {
        let Ok(entries) = std::fs::read_dir(from.join(t)) else {
            continue;
        };
        for e in entries {
            let e = e?;
            std::fs::copy(e.path(), corpus.join(t).join(e.file_name()))?;
        }
    }
    Ok(())
}

/// The roundtrip target's element code (its second byte, low two bits).
fn elem_code(e: ElemType) -> u8 {
    match e {
        ElemType::U8 => 0,
        ElemType::BF16 => 1,
        ElemType::F16 => 2,
        ElemType::F32 => 3,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn accumulated_rows_add_seconds_and_executions() {
        let old = "| roundtrip | 2400 | 6000000 | 2500 | 3700 | 12000 | 900/2Mb | none |";
        let new = "| roundtrip | 1600 | 4000000 | 2500 | 3800 | 12500 | 950/2Mb | none |\n";
        assert_eq!(
            super::add_runs(old, new),
            "| roundtrip | 4000 | 10000000 | 2500 | 3800 | 12500 | 950/2Mb | none |\n"
        );
    }
}
