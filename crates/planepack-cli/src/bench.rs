//! `planepack bench`: the comparison harness on the user's own files.

use crate::fail::{Code, Fail};
use crate::print_out;
use clap::Args;
use planepack_harness::files::{bench_files, FilesError};
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
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let results = bench_files(
        &a.files,
        &a.codecs,
        a.quick,
        command,
        |done, total, what| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(what.to_owned());
        },
    )
    .map_err(|e| match e {
        FilesError::Io(m) => Fail::new(Code::Io, m),
        FilesError::InvalidInput(m) => Fail::new(Code::InvalidInput, m),
        FilesError::Usage(m) => Fail::new(Code::Usage, m),
        FilesError::Internal(m) => Fail::new(Code::Internal, m),
    })?;
    bar.finish_and_clear();
    if a.json {
        let s = serde_json::to_string_pretty(&results)
            .map_err(|e| Fail::new(Code::Internal, e.to_string()))?;
        return print_out(&(s + "\n"));
    }
    let records = &results.records;
    let device = format!("cpu: {}", results.machine);
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
    for r in records {
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
