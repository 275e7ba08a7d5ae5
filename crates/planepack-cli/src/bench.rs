//! `planepack bench`: the comparison harness on the user's own files.

use crate::fail::{Code, Fail};
use crate::print_out;
use clap::Args;
use planepack_harness::input::{tensor_files, Batches, BATCH_BYTES};
use planepack_harness::{measure, registry, Settings};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    /// .safetensors / .npy files or folders of them.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Only these codecs, by exact name (comma separated), e.g. `bitplane,zstd-19`; a family
    /// alone means its default level.
    #[arg(long, value_delimiter = ',')]
    pub codecs: Vec<String>,
    /// Few repetitions: rough speeds, quick answer.
    #[arg(long)]
    pub quick: bool,
    /// Print the measurements as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BenchArgs) -> Result<(), Fail> {
    for f in &a.files {
        match std::fs::metadata(f) {
            Err(_) => {
                return Err(Fail::new(
                    Code::Io,
                    format!("{}: no such file or folder", f.display()),
                ))
            }
            // A FIFO or a device would block or never end.
            Ok(m) if !m.is_dir() && !m.is_file() => {
                return Err(Fail::new(
                    Code::InvalidInput,
                    format!("{}: not a regular file", f.display()),
                ))
            }
            Ok(_) => {}
        }
    }
    let files = tensor_files(&a.files);
    if files.is_empty() {
        return Err(Fail::new(
            Code::InvalidInput,
            "no .safetensors or .npy files given",
        ));
    }
    // Headers only here: each batch of tensors is read when it is measured and dropped after,
    // so a file larger than memory can be benched.
    let mut plans = Vec::new();
    for f in &files {
        let name = f
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("file")
            .to_owned();
        let batches = Batches::open(&name, "user", f, BATCH_BYTES)
            .map_err(|e| Fail::new(Code::InvalidInput, format!("{}: {e:#}", f.display())))?;
        if !batches.is_empty() {
            plans.push((f, batches));
        }
    }
    if plans.is_empty() {
        return Err(Fail::new(
            Code::InvalidInput,
            "no tensors of a dtype the codecs take (F32, F16, BF16, 8-bit)",
        ));
    }
    let codecs: Vec<_> = registry::named(&a.codecs)
        .map_err(|e| Fail::new(Code::Usage, format!("{e:#}")))?
        .into_iter()
        .map(|c| c.codec())
        .collect();
    let settings = if a.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    let device = format!("cpu: {}", planepack_harness::machine_name());
    let steps: usize = plans.iter().map(|(_, b)| b.len()).sum::<usize>() * codecs.len();
    let bar = indicatif::ProgressBar::new(steps as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut records: Vec<planepack_harness::Record> = Vec::new();
    for (f, batches) in &mut plans {
        let first = records.len();
        for i in 0..batches.len() {
            let g = batches
                .load(i)
                .map_err(|e| Fail::new(Code::Io, format!("{}: {e:#}", f.display())))?;
            for c in &codecs {
                bar.set_message(format!("{} {} {}", g.dataset, g.dtype, c.name()));
                let rec =
                    measure::measure_group(c.as_ref(), &g, settings, &device).map_err(|e| {
                        Fail::new(Code::Internal, format!("{} {}: {e:#}", g.dataset, c.name()))
                    })?;
                // The next batch of a dtype already measured adds to its record.
                match records[first..]
                    .iter_mut()
                    .find(|r| r.dtype == rec.dtype && r.codec == rec.codec)
                {
                    Some(r) => r.merge(&rec).map_err(|e| Fail::new(Code::Internal, e))?,
                    None => records.push(rec),
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    if a.json {
        let results = planepack_harness::Results {
            schema_version: planepack_harness::SCHEMA_VERSION,
            machine: planepack_harness::machine_name(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            quick: a.quick,
            code_version: env!("CARGO_PKG_VERSION").to_owned(),
            records,
        };
        let s = serde_json::to_string_pretty(&results)
            .map_err(|e| Fail::new(Code::Internal, e.to_string()))?;
        return print_out(&(s + "\n"));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{device}; single-core medians; decode and memcpy timed separately, interleaved in the same run"
    );
    let wf = records
        .iter()
        .map(|r| r.dataset.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let wc = records
        .iter()
        .map(|r| r.codec.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let _ = writeln!(
        s,
        "{:wf$}  {:5} {:wc$} {:>10} {:>10} {:>8} {:>9} {:>9} {:>10}",
        "file",
        "dtype",
        "codec",
        "raw",
        "compressed",
        "ratio",
        "enc GB/s",
        "dec GB/s",
        "dec/memcpy"
    );
    for r in &records {
        let _ = writeln!(
            s,
            "{:wf$}  {:5} {:wc$} {:>10} {:>10} {:>8.3} {:>9.2} {:>9.2} {:>10.3}",
            r.dataset,
            r.dtype,
            r.codec,
            human_bytes(r.raw_bytes),
            human_bytes(r.compressed_bytes),
            r.ratio,
            r.encode_gbps,
            r.decode_gbps,
            r.decode_gbps / r.memcpy_gbps
        );
    }
    print_out(&s)
}

/// Bytes in binary units with three significant digits (`1.50 MiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v < 10.0 {
        format!("{v:.2} {}", UNITS[u])
    } else if v < 100.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.0} {}", UNITS[u])
    }
}
