//! `cargo xtask workloads`: real tensors at production size (tens to hundreds of MB each),
//! generated, never committed, and checked against a committed manifest.
//!
//! Why: the committed datasets are small pieces of tensors (43 MB in all); users offload whole
//! tensors of 10-500 MB, and ratio (headers and tables amortised), CPU scaling and GPU
//! occupancy all change with size. The generator (`xtask/workloads/workloads.py`, run in the
//! environment of `datasets/requirements.txt`) writes every saved activation of one training
//! step of a pretrained CNN and a pretrained transformer, a KV cache of 8192 tokens and full
//! embedding tables under `target/workloads/`. This module makes the environment (once),
//! runs the generator with its threads and instruction-set paths pinned, hashes every file
//! and compares it with `datasets/workloads.toml`: files made only of loads and casts
//! (`portable = true`) must match on every machine; files computed by a model must match on a
//! machine whose kernels give the same floats (recorded on an AMD EPYC, AVX2), and a
//! difference elsewhere is reported, not fatal.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the workloads are written (under `target/`: generated, not committed).
pub fn dir(root: &Path) -> PathBuf {
    root.join("target/workloads")
}

/// The generated workload files whose name contains one of `filter` (all when empty), in name
/// order; an error if `cargo xtask workloads` has not run.
pub fn files(root: &Path, filter: &[String]) -> Result<Vec<PathBuf>> {
    let dir = dir(root);
    anyhow::ensure!(
        dir.join("generated.json").is_file(),
        "no workloads in {}: run `cargo xtask workloads` first",
        dir.display()
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .filter(|p| {
            let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// One generated file, as the committed manifest records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub file: String,
    pub description: String,
    /// Made only of loads and casts: the same bytes on every machine.
    pub portable: bool,
    pub bytes: u64,
    pub tensors: usize,
    pub sha256: String,
    /// Registry packages its inputs come from.
    pub sources: Vec<String>,
    /// Written only when asked for (`--cnn-fp32`); never recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
struct ManifestFile {
    /// Where the model-computed hashes were recorded.
    recorded_on: String,
    /// The generator's environment then (versions, threads, instruction-set settings).
    environment: String,
    file: Vec<Entry>,
}

/// The instruction-set paths pinned for the generator: an AVX-512 machine runs the kernels an
/// AVX2 machine runs (PyTorch's own kernels, oneDNN's, MKL's conditional reproducibility).
const PINNED_ISA: [(&str, &str); 3] = [
    ("ATEN_CPU_CAPABILITY", "avx2"),
    ("DNNL_MAX_CPU_ISA", "AVX2"),
    ("MKL_CBWR", "AVX2"),
];

/// The generator's Python: `PLANEPACK_DATA_PYTHON`, or the environment of
/// `datasets/requirements.txt` under `~/.cache/planepack-data/` (made on first use; PyTorch,
/// transformers, a few GB), keyed by the requirements' contents.
fn python(root: &Path) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PLANEPACK_DATA_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let reqs = root.join("datasets/requirements.txt");
    let wanted = std::fs::read_to_string(&reqs).context("datasets/requirements.txt")?;
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    let venv = PathBuf::from(home).join(".cache/planepack-data/venv");
    let py = venv.join("bin/python");
    let stamp = venv.join("planepack-requirements.txt");
    if py.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(py);
    }
    let system = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    if !Command::new(&system)
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .with_context(|| format!("running {system}"))?
        .success()
    {
        bail!("{system} -m venv failed");
    }
    eprintln!(
        "installing datasets/requirements.txt into {} (once; a few GB)",
        venv.display()
    );
    if !Command::new(&py)
        .args(["-m", "pip", "install", "-q", "-r"])
        .arg(&reqs)
        .status()?
        .success()
    {
        bail!("pip install -r datasets/requirements.txt failed");
    }
    std::fs::write(&stamp, wanted)?;
    Ok(py)
}

fn sha256_file(path: &Path) -> Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// What the generator reported (`generated.json`).
#[derive(Deserialize)]
struct Generated {
    files: Vec<GeneratedFile>,
    versions: std::collections::BTreeMap<String, String>,
    threads: u32,
    isa: std::collections::BTreeMap<String, Option<String>>,
}

#[derive(Deserialize)]
struct GeneratedFile {
    file: String,
    description: String,
    portable: bool,
    sources: Vec<String>,
    tensors: usize,
    #[serde(default)]
    optional: bool,
}

pub struct Options {
    pub out: Option<PathBuf>,
    pub smoke: bool,
    pub cnn_fp32: bool,
    /// Only hash and check what is there.
    pub check: bool,
    /// Write the hashes seen into datasets/workloads.toml.
    pub record: bool,
}

pub fn run(root: &Path, o: Options) -> Result<()> {
    let out = o.out.clone().unwrap_or_else(|| dir(root));
    if !o.check {
        let py = python(root)?;
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)?;
        let started = std::time::Instant::now();
        let mut cmd = Command::new(&py);
        cmd.arg(root.join("xtask/workloads/workloads.py")).arg(&out);
        if o.smoke {
            cmd.arg("--smoke");
        }
        if o.cnn_fp32 {
            cmd.arg("--cnn-fp32");
        }
        cmd.envs(PINNED_ISA)
            .env("PLANEPACK_GEN_THREADS", "2")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("TQDM_DISABLE", "1");
        if !cmd.status().context("running the generator")?.success() {
            bail!("xtask/workloads/workloads.py failed");
        }
        println!("generated in {:.0} s", started.elapsed().as_secs_f64());
    }
    let generated: Generated = serde_json::from_str(
        &std::fs::read_to_string(out.join("generated.json"))
            .with_context(|| format!("{}: run `cargo xtask workloads` first", out.display()))?,
    )?;
    let mut entries = Vec::new();
    for g in &generated.files {
        let path = out.join(&g.file);
        entries.push(Entry {
            file: g.file.clone(),
            description: g.description.clone(),
            portable: g.portable,
            bytes: std::fs::metadata(&path)?.len(),
            tensors: g.tensors,
            sha256: sha256_file(&path)?,
            sources: g.sources.clone(),
            optional: g.optional,
        });
    }
    let environment = format!(
        "{}; {} threads; {}",
        generated
            .versions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        generated.threads,
        generated
            .isa
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("unset")))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let sizes = size_summary(&out, &entries)?;
    println!("{sizes}");
    let manifest_path = root.join(if o.smoke {
        "datasets/workloads-smoke.toml"
    } else {
        "datasets/workloads.toml"
    });
    let machine = planepack_harness::machine_name();
    if o.record {
        let m = ManifestFile {
            recorded_on: machine,
            environment,
            file: entries.into_iter().filter(|e| !e.optional).collect(),
        };
        std::fs::write(&manifest_path, header(o.smoke) + &toml::to_string(&m)?)?;
        println!("wrote {}", manifest_path.display());
        return Ok(());
    }
    let recorded: ManifestFile = toml::from_str(
        &std::fs::read_to_string(&manifest_path)
            .with_context(|| format!("{}", manifest_path.display()))?,
    )?;
    let mut failures = 0;
    for e in &entries {
        let Some(r) = recorded.file.iter().find(|r| r.file == e.file) else {
            if e.optional {
                println!("{:<48} not recorded (an optional file)", e.file);
            } else {
                println!("{:<48} NEW (not in the manifest)", e.file);
                failures += 1;
            }
            continue;
        };
        let same = r.sha256 == e.sha256 && r.bytes == e.bytes;
        let verdict = match (same, e.portable) {
            (true, _) => "same",
            (false, true) => {
                failures += 1;
                "DIFFERENT (a portable file: a bug or another package version)"
            }
            (false, false) => "differs from the recording (model-computed: other CPU kernels)",
        };
        println!("{:<48} {verdict}", e.file);
    }
    for r in &recorded.file {
        if !entries.iter().any(|e| e.file == r.file) {
            println!("MISSING {}", r.file);
            failures += 1;
        }
    }
    if failures > 0 {
        bail!(
            "{failures} workload files disagree with {}",
            manifest_path.display()
        );
    }
    println!(
        "every workload file checked against {} (recorded on {})",
        manifest_path.display(),
        recorded.recorded_on
    );
    Ok(())
}

fn header(smoke: bool) -> String {
    format!(
        "# {}: written by `cargo xtask workloads{} --record`; checked by every\n\
         # `cargo xtask workloads`. `portable` files are loads and casts (the same bytes on every\n\
         # machine); the others are computed by models and match where the CPU's kernels give the\n\
         # same floats (the generator pins threads and AVX2 paths).\n\n",
        if smoke {
            "The smoke workloads (toy sizes, the same code)"
        } else {
            "The production-size workloads"
        },
        if smoke { " --smoke" } else { "" }
    )
}

/// Files, tensors, bytes and the size classes (< 1 MiB, 1-16 MiB, >= 16 MiB).
fn size_summary(out: &Path, entries: &[Entry]) -> Result<String> {
    let mut classes = [(0usize, 0u64); 3];
    for e in entries {
        let f = planepack_container::source::TensorFile::open(&out.join(&e.file), "x")?;
        for t in &f.source().tensors {
            let c = planepack_harness::SizeClass::of(t.len) as usize;
            classes[c].0 += 1;
            classes[c].1 += t.len;
        }
    }
    let total: u64 = entries.iter().map(|e| e.bytes).sum();
    Ok(format!(
        "{} files, {:.2} GB: {}",
        entries.len(),
        total as f64 / 1e9,
        planepack_harness::SizeClass::ALL
            .iter()
            .zip(classes)
            .map(|(c, (n, b))| format!("{} {n} tensors ({:.0} MB)", c.label(), b as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
