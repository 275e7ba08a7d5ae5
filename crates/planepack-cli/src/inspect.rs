//! `planepack inspect`: what is in a container, or what each codec would make of a plain file.

use crate::bench::human_bytes;
use crate::fail::{Code, Fail};
use crate::{files_under, npy_name, print_out};
use clap::Args;
use planepack_container::select::{Candidate, Policy};
use planepack_container::write::{read_source, Discard};
use planepack_container::{
    compress, CodecId, CodecSpec, CompressOptions, Container, Event, ReadAt,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct InspectArgs {
    /// A .ppk container, a plain .safetensors / .npy file, or a folder of them (searched
    /// recursively; JSON is then an array, one report per file).
    pub file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// For a container: also decode every tensor and check both checksums (plain files are
    /// reported as without it: their report decodes and compares every codec's payload).
    #[arg(long)]
    pub verify: bool,
}

#[derive(serde::Serialize)]
struct Row {
    name: String,
    dtype: String,
    shape: Vec<usize>,
    /// The codec used (container) or the one with the best ratio (plain file).
    codec: CodecSpec,
    /// Parts the tensor is (or would be) stored as; `codec` is its first part's.
    parts: usize,
    raw_bytes: u64,
    compressed_bytes: u64,
    ratio: f64,
    /// Plain files: every codec's outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    candidates: Vec<Candidate>,
}

#[derive(serde::Serialize)]
struct Report {
    /// The JSON shape's version, shared with `planepack bench --json` and `results.json`.
    schema_version: u32,
    file: PathBuf,
    /// `--verify` on a container: every tensor was decoded and both checksums matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    verified: Option<bool>,
    kind: &'static str,
    file_bytes: u64,
    /// For a container: the original file's size; for a plain file: the container size with
    /// the best codec per tensor.
    other_file_bytes: u64,
    raw_tensor_bytes: u64,
    compressed_tensor_bytes: u64,
    tensors: Vec<Row>,
}

fn ratio(raw: u64, comp: u64) -> f64 {
    if comp == 0 {
        1.0
    } else {
        raw as f64 / comp as f64
    }
}

pub fn run(a: InspectArgs) -> Result<(), Fail> {
    let folder = a.file.is_dir();
    let wanted = |p: &Path| {
        matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("ppk" | "safetensors" | "npy")
        )
    };
    // One file (a regular one: a FIFO would block), or every container and tensor file under
    // a folder, walked as compress and decompress walk folders.
    let files = files_under(&a.file, wanted)?;
    if folder && files.is_empty() {
        return Err(Fail::new(
            Code::InvalidInput,
            format!(
                "{}: no .ppk, .safetensors or .npy files in this folder",
                a.file.display()
            ),
        ));
    }
    let mut reports = Vec::new();
    for path in &files {
        reports.push(one(path, a.verify)?);
    }
    if a.json {
        let s = if folder {
            serde_json::to_string_pretty(&reports)
        } else {
            serde_json::to_string_pretty(&reports[0])
        }
        .map_err(|e| Fail::new(Code::Internal, e.to_string()))?;
        print_out(&(s + "\n"))
    } else {
        let tables: Vec<String> = reports.iter().map(table).collect();
        print_out(&tables.join("\n"))
    }
}

fn one(path: &Path, verify: bool) -> Result<Report, Fail> {
    let mut magic = [0u8; 4];
    let file = std::fs::File::open(path).map_err(|e| Fail::io(path, e))?;
    let len = ReadAt::size(&file).map_err(|e| Fail::at(path, e))?;
    if len >= 4 {
        ReadAt::read_exact_at(&file, 0, &mut magic).map_err(|e| Fail::at(path, e))?;
    }
    if magic == planepack_container::format::MAGIC {
        container(path, verify)
    } else {
        // A plain file has no checksums to verify; its report decodes every codec's payload
        // and compares it with the tensor anyway, so `--verify` over a folder that mixes
        // containers and tensor files verifies the containers and reports the others.
        plain(path, &file)
    }
}

fn container(path: &Path, verify: bool) -> Result<Report, Fail> {
    let c = Container::open(path, &npy_name(path)).map_err(|e| Fail::at(path, e))?;
    if verify {
        c.verify().map_err(|e| Fail::at(path, e))?;
    }
    let tensors: Vec<Row> = c
        .source
        .tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let parts = &c.entries[c.parts(i)];
            let compressed = parts.iter().map(|e| e.payload_len).sum();
            Row {
                name: t.name.clone(),
                dtype: t.dtype.clone(),
                shape: t.shape.clone(),
                codec: parts[0].spec(),
                parts: parts.len(),
                raw_bytes: t.len,
                compressed_bytes: compressed,
                ratio: ratio(t.len, compressed),
                candidates: vec![],
            }
        })
        .collect();
    Ok(Report {
        schema_version: planepack_harness::SCHEMA_VERSION,
        file: path.to_owned(),
        verified: verify.then_some(true),
        kind: "container",
        file_bytes: c.file_len(),
        other_file_bytes: c.header.original_len,
        raw_tensor_bytes: tensors.iter().map(|t| t.raw_bytes).sum(),
        compressed_tensor_bytes: tensors.iter().map(|t| t.compressed_bytes).sum(),
        tensors,
    })
}

/// A plain file: what the writer would make of it with the best codec per part, measured by
/// compressing into a sink (the same code as `compress`, so the sizes are the container's).
fn plain(path: &Path, file: &std::fs::File) -> Result<Report, Fail> {
    let name = npy_name(path);
    let (source, _) = read_source(file, &name).map_err(|e| Fail::at(path, e))?;
    let mut rows = Vec::new();
    let opts = CompressOptions::new(Policy::BestRatio, name);
    let written = compress(file, &mut Discard::default(), &opts, |ev| {
        if let Event::Tensor(t) = ev {
            rows.push(Row {
                ratio: ratio(t.raw_bytes, t.compressed_bytes),
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                codec: t.codec,
                parts: t.parts,
                raw_bytes: t.raw_bytes,
                compressed_bytes: t.compressed_bytes,
                candidates: t.candidates,
            });
        }
    })
    .map_err(|e| Fail::at(path, e))?;
    Ok(Report {
        schema_version: planepack_harness::SCHEMA_VERSION,
        file: path.to_owned(),
        verified: None,
        kind: source_kind(&source),
        file_bytes: written.original_len,
        other_file_bytes: written.container_len,
        raw_tensor_bytes: rows.iter().map(|r| r.raw_bytes).sum(),
        compressed_tensor_bytes: rows.iter().map(|r| r.compressed_bytes).sum(),
        tensors: rows,
    })
}

fn source_kind(s: &planepack_container::Source) -> &'static str {
    match s.kind {
        planepack_container::SourceKind::Safetensors => "safetensors",
        planepack_container::SourceKind::Npy => "npy",
    }
}

/// The longest shape the table prints whole; `--json` always has the full shape.
const SHAPE_CELL: usize = 40;

/// A shape as the table prints it: `[2048, 384]`, or for a shape whose text would be longer
/// than [`SHAPE_CELL`] its first dimensions and the count (`[1, 1, 1, ... 22000 dims]`), so
/// that one tensor with thousands of dimensions cannot stretch every line (nor exceed the
/// widths `format!` can pad to).
fn shape_cell(shape: &[usize]) -> String {
    let full = format!("{shape:?}");
    if full.len() <= SHAPE_CELL {
        return full;
    }
    let count = format!(", ... {} dims]", shape.len());
    let mut s = String::from("[");
    for (i, d) in shape.iter().enumerate() {
        let next = if i == 0 {
            d.to_string()
        } else {
            format!(", {d}")
        };
        if s.len() + next.len() + count.len() > SHAPE_CELL {
            break;
        }
        s += &next;
    }
    s + &count
}

fn table(r: &Report) -> String {
    let mut s = String::new();
    let plain = r.kind != "container";
    let _ = writeln!(
        s,
        "{} ({}, {})",
        r.file.display(),
        r.kind,
        human_bytes(r.file_bytes)
    );
    // Tensor names are the file's: printed escaped, so control characters cannot reach the
    // terminal.
    let names: Vec<String> = r
        .tensors
        .iter()
        .map(|t| t.name.escape_debug().to_string())
        .collect();
    let name_w = names
        .iter()
        .map(|n| n.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 48);
    let shapes: Vec<String> = r.tensors.iter().map(|t| shape_cell(&t.shape)).collect();
    let shape_w = shapes.iter().map(|n| n.len()).max().unwrap_or(5).max(5);
    let codec_w = r
        .tensors
        .iter()
        .map(|t| t.codec.name().len())
        .max()
        .unwrap_or(5)
        .max(5);
    let others: Vec<CodecSpec> = CodecSpec::auto_candidates()
        .into_iter()
        .filter(|c| c.id != CodecId::Raw)
        .collect();
    let mut head = format!(
        "{:name_w$}  {:6}  {:shape_w$}  {:codec_w$}  {:>10}  {:>10}  {:>7}",
        "name",
        "dtype",
        "shape",
        if plain { "best" } else { "codec" },
        "raw",
        "compressed",
        "ratio"
    );
    if plain {
        for c in &others {
            head += &format!("  {:>8}", c.name());
        }
    }
    let _ = writeln!(s, "{head}");
    for ((t, name), shape) in r.tensors.iter().zip(&names).zip(&shapes) {
        let mut line = format!(
            "{:name_w$}  {:6}  {:shape_w$}  {:codec_w$}  {:>10}  {:>10}  {:>7.3}",
            name,
            t.dtype,
            shape,
            t.codec.name(),
            human_bytes(t.raw_bytes),
            human_bytes(t.compressed_bytes),
            t.ratio
        );
        if plain {
            for c in &others {
                let cell = t
                    .candidates
                    .iter()
                    .find(|x| x.codec == *c)
                    .map(|x| format!("{:.3}", ratio(t.raw_bytes, x.payload_len)))
                    .unwrap_or("-".into());
                line += &format!("  {cell:>8}");
            }
        }
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(
        s,
        "total: {} tensors, {} raw -> {} compressed (ratio {:.3})",
        r.tensors.len(),
        human_bytes(r.raw_tensor_bytes),
        human_bytes(r.compressed_tensor_bytes),
        ratio(r.raw_tensor_bytes, r.compressed_tensor_bytes)
    );
    if plain {
        let _ = writeln!(
            s,
            "as a container with the best codec per tensor: {} (ratio {:.3} over the file)",
            human_bytes(r.other_file_bytes),
            ratio(r.file_bytes, r.other_file_bytes)
        );
    } else {
        let _ = writeln!(
            s,
            "original file {}, container {} (ratio {:.3})",
            human_bytes(r.other_file_bytes),
            human_bytes(r.file_bytes),
            ratio(r.other_file_bytes, r.file_bytes)
        );
    }
    if r.verified == Some(true) {
        let _ = writeln!(
            s,
            "verified: all {} tensors decoded; every payload and decoded tensor matched its \
             xxh3-64 checksum, and the metadata checksum matched",
            r.tensors.len()
        );
    }
    s
}
