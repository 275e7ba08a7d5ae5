//! `cargo xtask ibp-clusters`: does IBP gain from several masks per group (rows clustered by
//! Hamming k-means, one mask per cluster, the reference's experimental `preprocess_kmeans`)?
//!
//! Every tensor of every dataset is encoded by the codec itself, `Ibp { clusters: C }` for
//! C = 1, 2, 4, 8 (the tensor's last dimension is the row, as `compress` cuts it), and decoded
//! and compared. Sizes are the streams' bytes: header, every cluster's mask and bitval, the
//! cluster ids, row bitmask, rows and tail. A second table checks the encoder's shortcut of
//! fitting centroids on at most `FIT_ROWS` rows against fitting on every row (sizes from the
//! same per-cluster accounting; no tensor of ours has more than `FIT_ROWS` rows, so the check
//! fits on `FIT_ROWS / 4` on those with more than that). Writes
//! `bench-results/<machine>/ibp-clusters.md`.

use anyhow::{ensure, Result};
use planepack_core::Codec;
use planepack_harness::ibp_study::stored_with;
use planepack_ibp::internals::{self as cluster, FIT_ROWS};
use planepack_ibp::{preprocess, Ibp, Rows, Sample, Threshold};
use std::fmt::Write as _;
use std::time::Instant;

const CLUSTERS: [usize; 4] = [1, 2, 4, 8];

struct DatasetRow {
    name: String,
    category: String,
    tensors: usize,
    raw: usize,
    /// Stream bytes per C.
    sizes: [usize; CLUSTERS.len()],
    /// Per tensor the smallest of the four (what `auto` keeps among them).
    best_of: usize,
    /// Tensors whose smallest stream has clusters.
    cluster_wins: usize,
    /// Encode seconds per C (one run, the whole dataset).
    encode_s: [f64; CLUSTERS.len()],
    decode_s: [f64; CLUSTERS.len()],
}

/// Model size (no header) of `rows` coded with the clusters `cluster` (`0..c`).
fn stored(rows: &Rows, cluster: &[u8], c: usize) -> Result<usize> {
    let rb = rows.row_bytes();
    let mut total = 0;
    let mut members = Vec::new();
    for k in 0..c {
        members.clear();
        for (i, row) in rows.data.chunks_exact(rb).enumerate() {
            if cluster[i] as usize == k {
                members.extend_from_slice(row);
            }
        }
        if members.is_empty() {
            continue;
        }
        let group = Rows::new(&members, rb, rows.width)?;
        let mask = preprocess(&group, Threshold::Sweep, Sample::All).mask;
        total += stored_with(&group, &mask);
    }
    Ok(total + (rows.count * cluster::id_bits(c)).div_ceil(8))
}

/// Rows of the fitting check's sample.
const CHECK_FIT_ROWS: usize = FIT_ROWS / 4;

/// Fit on every row against a fit on `CHECK_FIT_ROWS` rows, for a tensor with more rows:
/// (rows, their raw bytes, size fitting all, size fitting the sample), C = 8.
fn fit_check(
    t: &planepack_datasets::Tensor,
    ibp: &Ibp,
) -> Result<Option<(usize, usize, usize, usize)>> {
    let Some(elem) = t.elem() else {
        return Ok(None);
    };
    let row_bytes = planepack_ibp::shaped_row_bytes(t.data.len(), elem, &t.shape);
    let Some((width, whole)) = ibp.split_rows(t.data.len(), row_bytes) else {
        return Ok(None);
    };
    let rows = Rows::new(&t.data[..whole], row_bytes, width)?;
    if rows.count <= CHECK_FIT_ROWS {
        return Ok(None);
    }
    let c = 8;
    let all = cluster::kmeans(&rows, c, cluster::ITERATIONS, cluster::SEED);
    let (sampled, used) = cluster::assign_fitted_on(&rows, c, CHECK_FIT_ROWS);
    Ok(Some((
        rows.count,
        whole,
        stored(&rows, &all, c)?,
        stored(&rows, &sampled, used)?,
    )))
}

pub fn run() -> Result<()> {
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir)?;
    let mut table = Vec::new();
    let mut fits = Vec::new();
    for d in &manifest.datasets {
        let tensors = planepack_datasets::load(&dir.join(&d.file))?;
        let mut row = DatasetRow {
            name: d.name.clone(),
            category: d.category.clone(),
            tensors: 0,
            raw: 0,
            sizes: [0; CLUSTERS.len()],
            best_of: 0,
            cluster_wins: 0,
            encode_s: [0.0; CLUSTERS.len()],
            decode_s: [0.0; CLUSTERS.len()],
        };
        for t in &tensors {
            let Some(elem) = t.elem() else { continue };
            row.tensors += 1;
            row.raw += t.data.len();
            let mut per = [0usize; CLUSTERS.len()];
            for (i, &c) in CLUSTERS.iter().enumerate() {
                let ibp = Ibp {
                    clusters: c,
                    ..Ibp::default()
                };
                let mut enc = Vec::new();
                let t0 = Instant::now();
                ibp.encode_shaped(&t.data, elem, &t.shape, &mut enc)?;
                row.encode_s[i] += t0.elapsed().as_secs_f64();
                let mut back = vec![0u8; t.data.len()];
                let t0 = Instant::now();
                ibp.decode(&enc, &mut back)?;
                row.decode_s[i] += t0.elapsed().as_secs_f64();
                ensure!(
                    back == t.data,
                    "{} {}: C = {c} does not round-trip",
                    d.name,
                    t.name
                );
                per[i] = enc.len();
                row.sizes[i] += enc.len();
            }
            let best = (0..CLUSTERS.len()).min_by_key(|&i| (per[i], i)).expect("C");
            row.best_of += per[best];
            row.cluster_wins += usize::from(best > 0);
            if let Some((rows, raw, all, sampled)) = fit_check(t, &Ibp::default())? {
                fits.push((format!("{} {}", d.name, t.name), rows, raw, all, sampled));
            }
        }
        if row.tensors == 0 {
            continue;
        }
        println!("{}: {} tensors", d.name, row.tensors);
        table.push(row);
    }
    let machine = planepack_harness::machine_name();
    let s = report(&table, &fits, &machine)?;
    let out = crate::bench::default_dir(&machine);
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("ibp-clusters.md"), &s)?;
    println!("{s}");
    Ok(())
}

fn pct(stored: usize, raw: usize) -> f64 {
    100.0 * (1.0 - stored as f64 / raw.max(1) as f64)
}

fn report(
    table: &[DatasetRow],
    fits: &[(String, usize, usize, usize, usize)],
    machine: &str,
) -> Result<String> {
    let mut s = String::new();
    writeln!(s, "# IBP with several masks per group (k-means clusters)\n")?;
    writeln!(
        s,
        "Generated by `cargo xtask ibp-clusters` on {machine}. Every tensor of every dataset is encoded by \
         the codec, `Ibp {{ clusters: C }}` (`--codec ibp` for C = 1, `ibp-clusters-C` otherwise; rows are the \
         tensor's last dimension), decoded and compared byte for byte. C clusters by Hamming k-means \
         ({} rounds, the reference's `preprocess_kmeans`, fitted on at most {FIT_ROWS} rows), each \
         cluster's mask by the sweep; a cluster without rows is dropped. Sizes are whole streams: header, every \
         cluster's mask and bitval, ceil(log2 C) bits of cluster id per row, row bitmask, rows, tail (a \
         tensor IBP cannot shrink is stored, 32 bytes over raw). Space saving = 1 - stream / raw. \
         \"best of 4\" keeps per tensor the smallest of the four streams, which is what `auto` does \
         among them (it also tries every other codec).\n",
        cluster::ITERATIONS
    )?;
    write!(s, "| dataset | category | tensors | raw MiB |")?;
    for c in CLUSTERS {
        write!(s, " C = {c} |")?;
    }
    writeln!(s, " best C | best of 4 | tensors won by clusters |")?;
    writeln!(
        s,
        "|---|---|---:|---:|{}---:|---:|---:|",
        "---:|".repeat(CLUSTERS.len())
    )?;
    let mut wins = [0usize; CLUSTERS.len()];
    for r in table {
        write!(
            s,
            "| {} | {} | {} | {:.2} |",
            r.name,
            r.category,
            r.tensors,
            r.raw as f64 / (1 << 20) as f64
        )?;
        for &z in &r.sizes {
            write!(s, " {:+.2} % |", pct(z, r.raw))?;
        }
        let best = (0..CLUSTERS.len())
            .min_by_key(|&i| (r.sizes[i], i))
            .expect("clusters");
        wins[best] += 1;
        writeln!(
            s,
            " {} | {:+.2} % | {} of {} |",
            CLUSTERS[best],
            pct(r.best_of, r.raw),
            r.cluster_wins,
            r.tensors
        )?;
    }
    let raw: usize = table.iter().map(|t| t.raw).sum();
    write!(s, "| **all** | | | {:.2} |", raw as f64 / (1 << 20) as f64)?;
    for i in 0..CLUSTERS.len() {
        let z: usize = table.iter().map(|t| t.sizes[i]).sum();
        write!(s, " {:+.2} % |", pct(z, raw))?;
    }
    let best_of: usize = table.iter().map(|t| t.best_of).sum();
    writeln!(
        s,
        " | {:+.2} % | {} of {} |\n",
        pct(best_of, raw),
        table.iter().map(|t| t.cluster_wins).sum::<usize>(),
        table.iter().map(|t| t.tensors).sum::<usize>()
    )?;
    writeln!(
        s,
        "Best C per dataset: {}.\n",
        CLUSTERS
            .iter()
            .zip(wins)
            .map(|(c, w)| format!("C = {c} on {w}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    writeln!(
        s,
        "## What clusters cost in time\n\nOne single-threaded run over all datasets on {machine} (encode includes \
         the k-means fit, the sweep per cluster and packing; decode places rows, decodes each cluster's rows \
         with its mask and copies them to their places):\n"
    )?;
    writeln!(
        s,
        "| | {} |",
        CLUSTERS.map(|c| format!("C = {c}")).join(" | ")
    )?;
    writeln!(s, "|---|{}", "---:|".repeat(CLUSTERS.len()))?;
    for (what, pick) in [("encode MB/s", 0), ("decode MB/s", 1)] {
        write!(s, "| {what} |")?;
        for i in 0..CLUSTERS.len() {
            let secs: f64 = table
                .iter()
                .map(|t| {
                    if pick == 0 {
                        t.encode_s[i]
                    } else {
                        t.decode_s[i]
                    }
                })
                .sum();
            write!(s, " {:.0} |", raw as f64 / 1e6 / secs.max(1e-9))?;
        }
        writeln!(s)?;
    }
    writeln!(
        s,
        "\n## Fitting on a sample of rows against fitting on all\n\nThe encoder fits its centroids on at \
         most {FIT_ROWS} rows at an even stride and then assigns every row once, so that a large tensor's \
         k-means costs what a {FIT_ROWS}-row one does. No tensor here has more than {FIT_ROWS} rows (every \
         figure above fitted on all rows), so this checks a fit on {CHECK_FIT_ROWS} rows against a fit on \
         all, C = 8, on the tensors with more than {CHECK_FIT_ROWS} rows; sizes from per-cluster \
         accounting (rows, masks, bitmasks, ids; no header).\n"
    )?;
    writeln!(
        s,
        "| tensor | rows | fit on all rows | fit on {CHECK_FIT_ROWS} rows |"
    )?;
    writeln!(s, "|---|---:|---:|---:|")?;
    for (name, rows, raw, all, sampled) in fits {
        writeln!(
            s,
            "| {name} | {rows} | {:+.2} % | {:+.2} % |",
            pct(*all, *raw),
            pct(*sampled, *raw)
        )?;
    }
    if fits.is_empty() {
        writeln!(s, "| (no tensor has more rows) | | | |")?;
    }
    Ok(s)
}
