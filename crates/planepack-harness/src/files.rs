//! The harness on a user's own tensor files: what `planepack bench` and the Python package's
//! `planepack.bench` run, so both produce the same records from the same code.
//!
//! Why its own module: the dataset run (`cargo xtask bench`) reads a manifest and measures the
//! committed datasets; a user hands us arbitrary paths, so this loop validates them first (a
//! FIFO or device would block forever), reads only headers up front and each batch of tensors
//! when it is measured (a file larger than memory can be benched), and merges the batches of
//! one (file, dtype) into one record.

use crate::input::{tensor_files, Batches, BATCH_BYTES};
use crate::{measure, registry, Record, Results, Settings, SCHEMA_VERSION};
use std::path::PathBuf;

/// Why a bench of files failed, by class (the command maps each class to its exit code).
#[derive(Debug)]
pub enum FilesError {
    /// A path does not exist or a file cannot be read.
    Io(String),
    /// A path is not a regular file or folder, or no file holds a tensor the codecs take.
    InvalidInput(String),
    /// An unknown codec name.
    Usage(String),
    /// A codec failed to round-trip (a bug: the harness checks every decode).
    Internal(String),
}

impl std::fmt::Display for FilesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (FilesError::Io(m)
        | FilesError::InvalidInput(m)
        | FilesError::Usage(m)
        | FilesError::Internal(m)) = self;
        f.write_str(m)
    }
}

impl std::error::Error for FilesError {}

/// Measure `codecs` (exact names, or a family for its default level; empty for every codec)
/// on every `.safetensors`/`.npy` file of `paths` (folders are walked). `progress` is called
/// with `(done, total, what)` before each measurement. `command` is stored in the results.
pub fn bench_files(
    paths: &[PathBuf],
    codecs: &[String],
    quick: bool,
    command: String,
    mut progress: impl FnMut(usize, usize, &str),
) -> Result<Results, FilesError> {
    for f in paths {
        match std::fs::metadata(f) {
            Err(_) => {
                return Err(FilesError::Io(format!(
                    "{}: no such file or folder",
                    f.display()
                )))
            }
            Ok(m) if !m.is_dir() && !m.is_file() => {
                return Err(FilesError::InvalidInput(format!(
                    "{}: not a regular file",
                    f.display()
                )))
            }
            Ok(_) => {}
        }
    }
    let files = tensor_files(paths);
    if files.is_empty() {
        return Err(FilesError::InvalidInput(
            "no .safetensors or .npy files given".into(),
        ));
    }
    let mut plans = Vec::new();
    for f in &files {
        let name = f
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("file")
            .to_owned();
        let batches = Batches::open(&name, "user", f, BATCH_BYTES)
            .map_err(|e| FilesError::InvalidInput(format!("{}: {e:#}", f.display())))?;
        if !batches.is_empty() {
            plans.push((f, batches));
        }
    }
    if plans.is_empty() {
        return Err(FilesError::InvalidInput(
            "no tensors of a dtype the codecs take (F32, F16, BF16, 8-bit)".into(),
        ));
    }
    let codecs = registry::named(codecs).map_err(|e| FilesError::Usage(format!("{e:#}")))?;
    let settings = if quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    let device = format!("cpu: {}", crate::machine_name());
    let total: usize = plans.iter().map(|(_, b)| b.len()).sum::<usize>() * codecs.len();
    let mut done = 0;
    let mut records: Vec<Record> = Vec::new();
    for (f, batches) in &mut plans {
        let first = records.len();
        for i in 0..batches.len() {
            let g = batches
                .load(i)
                .map_err(|e| FilesError::Io(format!("{}: {e:#}", f.display())))?;
            for c in &codecs {
                progress(
                    done,
                    total,
                    &format!("{} {} {}", g.dataset, g.dtype, c.name()),
                );
                let rec = measure::measure_spec(*c, &g, settings, &device).map_err(|e| {
                    FilesError::Internal(format!("{} {}: {e:#}", g.dataset, c.name()))
                })?;
                // The next batch of a dtype already measured adds to its record.
                match records[first..]
                    .iter_mut()
                    .find(|r| r.dtype == rec.dtype && r.codec == rec.codec)
                {
                    Some(r) => r.merge(&rec).map_err(FilesError::Internal)?,
                    None => records.push(rec),
                }
                done += 1;
            }
        }
    }
    Ok(Results {
        schema_version: SCHEMA_VERSION,
        machine: crate::machine_name(),
        command,
        quick,
        code_version: env!("CARGO_PKG_VERSION").to_owned(),
        records,
    })
}
