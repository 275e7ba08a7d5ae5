//! `planepack`: compress, decompress, inspect and bench your own tensor files.
//!
//! This binary is a thin shell over `planepack-container` (the file format and the per-tensor
//! codec choice) and `planepack-harness` (the measurements). What lives here is what a command
//! line owns: arguments, which files to read and write, never leaving a half-written output
//! behind ([`output`]), progress bars, human and JSON reports, and exit codes that scripts can
//! rely on ([`fail`]).

mod bench;
mod compress;
mod device;
mod fail;
mod inspect;
mod output;

use clap::{Parser, Subcommand};
use fail::Fail;
use std::path::PathBuf;
use std::process::ExitCode;

/// Lossless compression for ML tensors (safetensors, .npy).
///
/// Exit codes: 0 success; 1 internal error; 2 bad arguments; 3 an input file is not a valid or
/// supported tensor file; 4 a compressed file is corrupt (checksum or structure); 5 a file
/// could not be read or written; 6 an output exists (use --force).
#[derive(Parser)]
#[command(name = "planepack", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compress a .safetensors or .npy file (or a folder of them) into planepack containers.
    Compress(compress::CompressArgs),
    /// Give back the original file, byte for byte, from a container (or a folder of them).
    Decompress(compress::DecompressArgs),
    /// Per tensor: dtype, shape, codec, sizes and ratio (a container), or what each codec
    /// would give (a plain .safetensors / .npy file).
    Inspect(inspect::InspectArgs),
    /// Measure every codec on your files: ratio, encode and decode speed, decode over memcpy.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    output::remove_temps_on_signal();
    let result = match cli.command {
        Command::Compress(a) => compress::compress(a),
        Command::Decompress(a) => compress::decompress(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Bench(a) => bench::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            // Not eprintln!, which panics when stderr cannot be written (`2>/dev/full`).
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "planepack: error: {}", f.message);
            ExitCode::from(f.code as u8)
        }
    }
}

/// The stem used to name a `.npy` file's single array.
pub(crate) fn npy_name(path: &std::path::Path) -> String {
    let name = path.file_name().and_then(|s| s.to_str()).unwrap_or("array");
    let name = name.strip_suffix(".ppk").unwrap_or(name);
    name.strip_suffix(".npy").unwrap_or(name).to_owned()
}

/// Files to work on: `input` itself, or the matching files under it (recursively, sorted).
pub(crate) fn files_under(
    input: &std::path::Path,
    keep: impl Fn(&std::path::Path) -> bool,
) -> Result<Vec<PathBuf>, Fail> {
    if !input.is_dir() {
        // A file named on the command line (a link to one is followed): only a regular file,
        // so a FIFO or a device is refused instead of blocking or being read forever.
        return match std::fs::metadata(input) {
            Ok(m) if m.is_file() => Ok(vec![input.to_owned()]),
            Ok(_) => Err(Fail::new(
                fail::Code::InvalidInput,
                format!("{}: not a regular file", input.display()),
            )),
            Err(e) => Err(Fail::io(input, e)),
        };
    }
    // Inside a folder, symbolic links are not followed (a link loop cannot recurse, a link
    // cannot pull in files from elsewhere) and only regular files are taken.
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(input)
        .follow_links(false)
        .sort_by_file_name()
    {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(input).to_owned();
            match e.into_io_error() {
                Some(io) => Fail::io(&path, io),
                None => Fail::new(fail::Code::Io, format!("{}: cannot walk", path.display())),
            }
        })?;
        if entry.file_type().is_file() && keep(entry.path()) {
            out.push(entry.into_path());
        }
    }
    out.sort();
    Ok(out)
}

/// Write a report to stdout. A closed pipe (`planepack inspect f | head`) is not an error.
pub(crate) fn print_out(text: &str) -> Result<(), Fail> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Fail::new(fail::Code::Io, format!("stdout: {e}")))
        }
        _ => Ok(()),
    }
}
