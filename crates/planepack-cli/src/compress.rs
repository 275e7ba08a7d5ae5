//! `planepack compress` and `planepack decompress`.

use crate::device::{engine, Device};
use crate::fail::{Code, Fail};
use crate::output::{check_outputs, persist, temp_beside};
use crate::{files_under, npy_name, print_out};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use planepack_container::{
    compress as write_container, CodecSpec, CompressOptions, Container, Event, Policy, TensorReport,
};
use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct CompressArgs {
    /// A .safetensors or .npy file, or a folder (searched recursively).
    pub input: PathBuf,
    /// Output file (default INPUT.ppk); for a folder input, the output folder (default INPUT.ppk).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Codec for every tensor, or `auto` to choose per tensor.
    ///
    /// Any codec `planepack bench` measures, by the name its table prints: `bitplane`, `ibp`,
    /// `ibp-clusters` (IBP with a mask per k-means cluster of rows, at most 4) or
    /// `ibp-clusters-2` .. `ibp-clusters-16`, `rans` or `rans-1` (the chunk size searched per
    /// tensor: 0-1.1 % smaller on the workloads' activations, 2-5 times the encode time),
    /// `zstd` (level 3) or `zstd-1` .. `zstd-22`, `lz4`, `zvc`, `raw`,
    /// `blosc2-shuffle-zstd` (level 5) or `blosc2-shuffle-zstd-9`, `blosc2-bitshuffle-zstd[-L]`,
    /// `blosc2-shuffle-lz4[-L]`, `blosc2-bitshuffle-lz4[-L]`.
    #[arg(long, default_value = "auto")]
    pub codec: String,
    /// Level for a codec that has levels (zstd 1-22, Blosc2 1-9, rans 0-1: 1 searches the chunk
    /// size per tensor); same as `--codec NAME-LEVEL`.
    #[arg(long)]
    pub level: Option<u8>,
    /// With `auto`: choose by modelled transfer time over a link of this many GB/s (equation 2
    /// of PlaneZip, with each codec's decode speed measured on the tensor). Without it, `auto`
    /// chooses the best ratio.
    #[arg(long, value_name = "GBPS")]
    pub link: Option<f64>,
    /// With `--link`: the decoder's throughput in GB/s for the model (a GPU decoder, a
    /// compression engine) instead of each codec's single-core CPU decode speed measured on
    /// the tensor.
    #[arg(long, value_name = "GBPS", requires = "link")]
    pub engine: Option<f64>,
    /// Replace existing outputs.
    #[arg(long)]
    pub force: bool,
    /// Print a JSON report on stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Where the codecs run: `gpu` encodes bit-plane and IBP (one mask) on the GPU
    /// (byte-identical to the CPU; the other codecs' encoders run on the CPU) through wgpu (Vulkan, Metal, DX12).
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: Device,
}

#[derive(Args)]
pub struct DecompressArgs {
    /// A .ppk container, or a folder of them (searched recursively).
    pub input: PathBuf,
    /// Output file (default: INPUT without .ppk); for a folder input, the output folder.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Replace existing outputs.
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Where the codecs run: `gpu` decodes bit-plane, IBP and rANS parts on the GPU (every
    /// part's checksum is checked as on the CPU).
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: Device,
}

/// Input/output pairs: one file, or every matching file under a folder mapped to the same
/// relative path under the output folder. Existing outputs are refused here, before any work,
/// unless `force`.
fn plan(
    input: &Path,
    output: Option<&Path>,
    keep: impl Fn(&Path) -> bool,
    rename: impl Fn(&Path) -> Option<PathBuf>,
    what: &str,
    force: bool,
) -> Result<Vec<(PathBuf, PathBuf)>, Fail> {
    let pairs = pairs_of(input, output, keep, rename, what)?;
    check_outputs(&pairs, force)?;
    Ok(pairs)
}

fn pairs_of(
    input: &Path,
    output: Option<&Path>,
    keep: impl Fn(&Path) -> bool,
    rename: impl Fn(&Path) -> Option<PathBuf>,
    what: &str,
) -> Result<Vec<(PathBuf, PathBuf)>, Fail> {
    // `-o -` means standard output to most tools; here it would be a file named `-`. An
    // output is written beside its destination and renamed into place when verified, which a
    // pipe cannot do, so it is refused like the other special outputs.
    if output == Some(Path::new("-")) {
        return Err(Fail::new(
            Code::Usage,
            "-o -: writing to standard output is not supported (outputs are verified, then \
             renamed into place); name a file",
        ));
    }
    if !input.exists() {
        return Err(Fail::new(
            Code::Io,
            format!("{}: no such file or folder", input.display()),
        ));
    }
    if !input.is_dir() {
        // Only a regular file (a FIFO or a device would block or never end).
        files_under(input, |_| true)?;
        let out = match output {
            Some(o) => o.to_owned(),
            None => rename(input).ok_or_else(|| {
                Fail::new(
                    Code::Usage,
                    format!("{}: name the output with -o", input.display()),
                )
            })?,
        };
        return Ok(vec![(input.to_owned(), out)]);
    }
    let root = match output {
        Some(o) => o.to_owned(),
        None => rename(input).ok_or_else(|| {
            Fail::new(
                Code::Usage,
                format!("{}: name the output folder with -o", input.display()),
            )
        })?,
    };
    let files = files_under(input, keep)?;
    if files.is_empty() {
        return Err(Fail::new(
            Code::InvalidInput,
            format!("{}: no {what} files in this folder", input.display()),
        ));
    }
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(input).unwrap_or(&f).to_owned();
            let out = rename(&rel).map(|r| root.join(r));
            out.map(|o| (f, o))
                .ok_or_else(|| Fail::new(Code::Internal, "output name"))
        })
        .collect()
}

fn bar(total: u64, quiet: bool) -> ProgressBar {
    let b = ProgressBar::new(total);
    if quiet {
        b.set_draw_target(ProgressDrawTarget::hidden());
    }
    b.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap()
        .progress_chars("=> "),
    );
    b
}

fn total_size(pairs: &[(PathBuf, PathBuf)]) -> u64 {
    pairs
        .iter()
        .map(|(i, _)| std::fs::metadata(i).map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn ensure_parent(out: &Path, create: bool) -> Result<(), Fail> {
    if let Some(p) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        if create {
            std::fs::create_dir_all(p).map_err(|e| Fail::io(p, e))?;
        } else if !p.is_dir() {
            return Err(Fail::new(
                Code::Io,
                format!(
                    "{}: cannot write: folder {} does not exist",
                    out.display(),
                    p.display()
                ),
            ));
        }
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct FileReport {
    input: PathBuf,
    output: PathBuf,
    original_bytes: u64,
    container_bytes: u64,
    ratio: f64,
    /// Tensors per codec (of their first part).
    #[serde(skip)]
    by_codec: BTreeMap<String, usize>,
    /// Kept only for `--json`: a file of millions of tensors would otherwise hold a report
    /// for each.
    #[serde(skip_serializing_if = "Option::is_none")]
    tensors: Option<Vec<TensorReport>>,
}

/// The codec `--codec NAME [--level L]` names.
fn codec_spec(name: &str, level: Option<u8>) -> Result<CodecSpec, Fail> {
    let unknown = || {
        Fail::new(
            Code::Usage,
            format!(
                "unknown codec {name:?}; codecs are: auto, {}",
                CodecSpec::spellings()
            ),
        )
    };
    let spec = CodecSpec::parse(name).ok_or_else(unknown)?;
    match level {
        None => Ok(spec),
        // `zstd-19 --level 3`: two levels, and neither silently wins.
        Some(l) if name != spec.id.name() => Err(Fail::new(
            Code::Usage,
            format!("--codec {name} already names a level; drop it or --level {l}"),
        )),
        Some(l) => CodecSpec::parse(&format!("{}-{l}", spec.id.name())).ok_or_else(|| {
            Fail::new(
                Code::Usage,
                match spec.id.levels() {
                    Some((_, lo, hi)) => format!("--level for {} is {lo} to {hi}", spec.id.name()),
                    None => format!("{} has no levels", spec.id.name()),
                },
            )
        }),
    }
}

pub fn compress(a: CompressArgs) -> Result<(), Fail> {
    if a.level.is_some() && a.codec == "auto" {
        return Err(Fail::new(
            Code::Usage,
            "--level needs --codec with a codec that has levels (zstd, blosc2-*, rans)",
        ));
    }
    let positive = |g: Option<f64>| g.is_none_or(|g| g.is_finite() && g > 0.0);
    if !positive(a.link) || !positive(a.engine) {
        return Err(Fail::new(
            Code::Usage,
            "--link and --engine take a positive number of GB/s",
        ));
    }
    let policy = match (a.codec.as_str(), a.link) {
        ("auto", Some(gbps)) => Policy::Link {
            gbps,
            engine_gbps: a.engine,
        },
        ("auto", None) => Policy::BestRatio,
        (_, Some(_)) => {
            return Err(Fail::new(
                Code::Usage,
                "--link applies to --codec auto only",
            ))
        }
        (name, None) => Policy::Fixed(codec_spec(name, a.level)?),
    };
    let is_tensor_file = |p: &Path| {
        matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("safetensors" | "npy")
        )
    };
    let add_ppk = |p: &Path| {
        let mut s = p.as_os_str().to_owned();
        s.push(".ppk");
        Some(PathBuf::from(s))
    };
    let pairs = plan(
        &a.input,
        a.output.as_deref(),
        is_tensor_file,
        add_ppk,
        ".safetensors or .npy",
        a.force,
    )?;
    let folder = a.input.is_dir();
    let gpu = engine(a.device)?;
    let progress = bar(total_size(&pairs), a.quiet);
    let mut reports = Vec::new();
    for (input, out) in &pairs {
        progress.set_message(input.display().to_string());
        let file = std::fs::File::open(input).map_err(|e| Fail::io(input, e))?;
        ensure_parent(out, folder)?;
        let tmp = temp_beside(out)?;
        let mut opts = CompressOptions::new(policy, npy_name(input));
        opts.engine = gpu.clone().map(|g| g as _);
        // Small tensors' parts several at once on every core, within one part's bytes (so the
        // command's memory stays that of one part: a large part is coded alone, by its codec's
        // own parallel encoder where it has one); one at a time where the policy times each
        // codec's decode on the part (`--link` without `--engine`), which other parts' work
        // would disturb.
        opts.window_bytes = opts.part_len;
        if !matches!(
            policy,
            Policy::Link {
                engine_gbps: None,
                ..
            }
        ) {
            opts.threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        }
        let mut by_codec: BTreeMap<String, usize> = BTreeMap::new();
        let mut tensors = a.json.then(Vec::new);
        {
            let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file());
            write_container(&file, &mut w, &opts, |ev| match ev {
                Event::Part { raw_bytes } => progress.inc(raw_bytes),
                Event::Tensor(t) => {
                    *by_codec.entry(t.codec.name()).or_default() += 1;
                    if let Some(v) = tensors.as_mut() {
                        v.push(t);
                    }
                }
            })
            .map_err(|e| Fail::between(input, out, e))?;
        }
        tmp.as_file().sync_all().map_err(|e| Fail::io(out, e))?;
        // Re-read what was written: the metadata must parse before the file gets its name.
        // Through the handle it was written with, not by path: the permission bits it is
        // about to get (the input's, which may not allow its owner to read) do not matter.
        let handle = tmp.as_file().try_clone().map_err(|e| Fail::io(out, e))?;
        let written = Container::parse(handle, &opts.npy_name).map_err(|e| {
            Fail::new(
                Code::Internal,
                format!("{}: written container does not parse: {e}", out.display()),
            )
        })?;
        let container_bytes = written.file_len();
        let original_bytes = written.header.original_len;
        drop(written);
        // The input's permission bits, last: after every read of the output.
        tmp.permissions_of(input)?;
        persist(tmp, out, a.force)?;
        reports.push(FileReport {
            input: input.clone(),
            output: out.clone(),
            original_bytes,
            container_bytes,
            ratio: original_bytes as f64 / container_bytes.max(1) as f64,
            by_codec,
            tensors,
        });
    }
    progress.finish_and_clear();
    let raw = planepack_container::CodecId::Raw.name();
    let all_raw = reports.iter().all(|r| r.by_codec.keys().all(|c| c == raw));
    if let (Some(gbps), None, true) = (a.link, a.engine, all_raw) {
        // Not an error (raw is the right answer for a CPU decoder), but never silent.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "planepack: note: every tensor is stored raw: with --link {gbps} and no --engine the \
             model uses one CPU core's decode speed, and no codec decodes faster than the link \
             there. Pass --engine GBPS for the decoder that will run (a GPU decoder), or drop \
             --link for the best ratio."
        );
    }
    let mut text = String::new();
    if a.json {
        text = serde_json::to_string_pretty(&reports)
            .map_err(|e| Fail::new(Code::Internal, e.to_string()))?
            + "\n";
    } else {
        for r in &reports {
            let codecs: Vec<String> = r
                .by_codec
                .iter()
                .map(|(c, n)| format!("{c} x{n}"))
                .collect();
            text += &format!(
                "{} -> {}: {} -> {} bytes, ratio {:.3} ({} tensors: {})\n",
                r.input.display(),
                r.output.display(),
                r.original_bytes,
                r.container_bytes,
                r.ratio,
                r.by_codec.values().sum::<usize>(),
                codecs.join(", ")
            );
        }
    }
    if let Some(g) = &gpu {
        if a.json {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "planepack: {}", g.summary());
        } else {
            text += &format!("{}\n", g.summary());
        }
    }
    print_out(&text)
}

pub fn decompress(a: DecompressArgs) -> Result<(), Fail> {
    let is_container = |p: &Path| p.extension().and_then(|e| e.to_str()) == Some("ppk");
    // On the OS string, not UTF-8: any file name the system allows works.
    let strip_ppk = |p: &Path| {
        (p.extension()? == "ppk")
            .then(|| p.with_extension(""))
            .filter(|s| s.file_name().is_some())
    };
    let pairs = plan(
        &a.input,
        a.output.as_deref(),
        is_container,
        strip_ppk,
        ".ppk",
        a.force,
    )?;
    let folder = a.input.is_dir();
    let gpu = engine(a.device)?;
    let progress = bar(0, a.quiet);
    let mut containers = Vec::new();
    // Open every container first: a corrupt one fails before anything is written.
    for (input, out) in &pairs {
        let mut c = Container::open(input, &npy_name(input)).map_err(|e| Fail::at(input, e))?;
        c.set_engine(gpu.clone().map(|g| g as _));
        progress.inc_length(c.header.original_len);
        containers.push((input, out, c));
    }
    for (input, out, c) in &containers {
        progress.set_message(input.display().to_string());
        ensure_parent(out, folder)?;
        let tmp = temp_beside(out)?;
        {
            let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file());
            c.decompress_to(&mut w, |n| progress.inc(n))
                .map_err(|e| Fail::between(input, out, e))?;
        }
        progress.inc(c.header.preamble_len);
        tmp.permissions_of(input)?;
        tmp.as_file().sync_all().map_err(|e| Fail::io(out, e))?;
        persist(tmp, out, a.force)?;
    }
    progress.finish_and_clear();
    let mut text = String::new();
    for (input, out, c) in &containers {
        text += &format!(
            "{} -> {}: {} bytes\n",
            input.display(),
            out.display(),
            c.header.original_len
        );
    }
    if let Some(g) = &gpu {
        text += &format!("{}\n", g.summary());
    }
    print_out(&text)
}
