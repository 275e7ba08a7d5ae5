//! `cargo xtask vs-openzl FILE...`: `rans` against OpenZL's best graph, tensor by tensor.
//!
//! Why: a category's geomean says that a peer stores fewer bytes, not where. Both of the
//! corpus's last ratio gains (the tail dictionaries, the modelled chunk's repeat distance)
//! were found by putting `rans`'s size beside OpenZL's for each tensor and reading the
//! tensors it lost. This command does that for any `.safetensors` / `.npy` file: every
//! floating-point tensor, cut into pieces as `cargo xtask bench` cuts them (parts of at most
//! 64 MiB, whole rows), coded by the default `rans` encoder with the tensor's shape (each
//! stream decoded and compared) and by every OpenZL graph the bench's `openzl-best` tries
//! (`xtask/peers/openzl_pieces.py`, in the peers' virtual environment, through peers.py's
//! own `OpenZLBest`; the chosen output decoded and compared). It prints totals per dtype, then the pieces where `rans` is furthest
//! behind and furthest ahead, in bytes. Nothing is written to `bench-results/`: this is a
//! tool for finding structure, the bench makes the figures.

use anyhow::{bail, Context, Result};
use planepack_container::source::TensorFile;
use planepack_container::write::parts_of;
use planepack_container::CodecSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One piece of a tensor: its tensor's name and dtype, shape, place in the file, and `rans`'s
/// size.
struct Piece {
    name: String,
    part: usize,
    dtype: String,
    shape: Vec<usize>,
    offset: u64,
    len: u64,
    rans: usize,
}

/// The dtypes OpenZL's float graphs take (the generic graph takes them too).
const FLOATS: [&str; 3] = ["BF16", "F16", "F32"];

/// Bytes of a piece at most, as the bench cuts tensors
/// ([`planepack_harness::input::BATCH_BYTES`]).
const PIECE_BYTES: u64 = planepack_harness::input::BATCH_BYTES;

pub fn run(root: &Path, files: &[PathBuf], top: usize) -> Result<()> {
    if files.is_empty() {
        bail!("name one or more .safetensors / .npy files");
    }
    let python = crate::peers::python()?;
    let script = root.join("xtask/peers/openzl_pieces.py");
    let rans = CodecSpec::parse("rans").expect("a catalogue name").codec();
    for path in files {
        let pieces = rans_pieces(path, rans.as_ref())?;
        if pieces.is_empty() {
            println!("{}: no BF16, F16 or F32 tensors", path.display());
            continue;
        }
        let openzl = openzl_sizes(&python, &script, path, &pieces)?;
        report(path, &pieces, &openzl, top);
    }
    Ok(())
}

/// Every floating-point tensor's pieces, coded by `rans` (and decoded and compared).
fn rans_pieces(path: &Path, rans: &dyn planepack_core::Codec) -> Result<Vec<Piece>> {
    let mut file = TensorFile::open(path, &planepack_datasets::npy_array_name(path))
        .with_context(|| format!("opening {}", path.display()))?;
    let spans = file.source().tensors.clone();
    let mut pieces = Vec::new();
    let (mut out, mut back) = (Vec::new(), Vec::new());
    for (i, t) in spans.iter().enumerate() {
        let Some(elem) = planepack_datasets::elem_of(&t.dtype) else {
            continue;
        };
        if !FLOATS.contains(&t.dtype.as_str()) {
            continue;
        }
        for (part, p) in parts_of(t, PIECE_BYTES).enumerate() {
            let data = file.read_range(i, p.offset - t.offset..p.offset - t.offset + p.len)?;
            out.clear();
            rans.encode_shaped(&data, elem, &p.shape, &mut out)?;
            back.clear();
            back.resize(data.len(), 0);
            rans.decode(&out, &mut back)?;
            if back != data {
                bail!("rans does not round-trip {} part {part}", t.name);
            }
            pieces.push(Piece {
                name: t.name.clone(),
                part,
                dtype: t.dtype.clone(),
                shape: p.shape.clone(),
                offset: p.offset,
                len: p.len,
                rans: out.len(),
            });
        }
    }
    Ok(pieces)
}

/// OpenZL's best graph per piece: (bytes, graph).
fn openzl_sizes(
    python: &Path,
    script: &Path,
    path: &Path,
    pieces: &[Piece],
) -> Result<Vec<(usize, String)>> {
    let dir = std::env::temp_dir().join(format!("planepack-vs-openzl-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let spec = dir.join("pieces.json");
    let sizes = dir.join("openzl.json");
    let list: Vec<serde_json::Value> = pieces
        .iter()
        .map(|p| serde_json::json!({"dtype": p.dtype, "offset": p.offset, "len": p.len}))
        .collect();
    let file = std::fs::canonicalize(path)?;
    std::fs::write(
        &spec,
        serde_json::to_string(&serde_json::json!({"file": file, "pieces": list}))?,
    )?;
    let ok = std::process::Command::new(python)
        .arg(script)
        .arg(&spec)
        .arg(&sizes)
        .status()
        .with_context(|| format!("running {}", script.display()))?
        .success();
    if !ok {
        bail!("{} failed on {}", script.display(), path.display());
    }
    let got: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&sizes)?)?;
    std::fs::remove_dir_all(&dir)?;
    if got.len() != pieces.len() {
        bail!("OpenZL sized {} pieces of {}", got.len(), pieces.len());
    }
    got.iter()
        .map(|v| {
            Ok((
                v["bytes"].as_u64().context("bytes")? as usize,
                v["graph"].as_str().context("graph")?.to_owned(),
            ))
        })
        .collect()
}

/// Totals per dtype, then the `top` pieces where `rans` trails OpenZL most and leads most.
fn report(path: &Path, pieces: &[Piece], openzl: &[(usize, String)], top: usize) {
    println!("\n## {}\n", path.display());
    println!("| dtype | pieces | raw MB | rans | OpenZL best graph | rans over OpenZL |");
    println!("|---|---|---|---|---|---|");
    let mut by_dtype: BTreeMap<&str, (usize, u64, usize, usize)> = BTreeMap::new();
    for (p, o) in pieces.iter().zip(openzl) {
        let e = by_dtype.entry(p.dtype.as_str()).or_default();
        *e = (e.0 + 1, e.1 + p.len, e.2 + p.rans, e.3 + o.0);
    }
    for (dtype, (n, raw, r, o)) in &by_dtype {
        println!(
            "| {dtype} | {n} | {:.1} | {:.4}x | {:.4}x | {:+.2} % |",
            *raw as f64 / 1e6,
            *raw as f64 / *r as f64,
            *raw as f64 / *o as f64,
            (*o as f64 / *r as f64 - 1.0) * 100.0
        );
    }
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    // Bytes rans stores beyond OpenZL, most first.
    order.sort_by_key(|&i| std::cmp::Reverse(pieces[i].rans as i64 - openzl[i].0 as i64));
    let row = |i: usize| {
        let (p, o) = (&pieces[i], &openzl[i]);
        println!(
            "| {} | {} | {} | {:?} | {} | {:.4}x | {:.4}x ({}) | {:+} |",
            p.name,
            p.part,
            p.dtype,
            p.shape,
            p.len,
            p.len as f64 / p.rans as f64,
            p.len as f64 / o.0 as f64,
            o.1,
            p.rans as i64 - o.0 as i64
        );
    };
    let header = "| tensor | part | dtype | shape | raw bytes | rans | OpenZL (graph) | rans - OpenZL bytes |\n|---|---|---|---|---|---|---|---|";
    println!("\nWhere `rans` trails most:\n\n{header}");
    for &i in order
        .iter()
        .take(top)
        .filter(|&&i| pieces[i].rans > openzl[i].0)
    {
        row(i);
    }
    println!("\nWhere `rans` leads most:\n\n{header}");
    for &i in order
        .iter()
        .rev()
        .take(top)
        .filter(|&&i| pieces[i].rans < openzl[i].0)
    {
        row(i);
    }
}
