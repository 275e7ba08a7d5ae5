//! Tables: `results.json`, `results.csv` and `summary.md`, all derived from the records.

use crate::{Record, Results};
use planepack_core::transfer::{effective_gbps, LINKS};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

pub use planepack_core::stats::geomean;

/// The link the summary's "best by effective bandwidth" column uses.
pub const SUMMARY_LINK: &str = "pcie4-x16-typical";

/// Distinct values of `key` over the records, in first-seen order.
fn first_seen<K: Ord + Clone>(r: &[Record], key: impl Fn(&Record) -> K) -> Vec<K> {
    let mut seen = BTreeSet::new();
    r.iter()
        .map(key)
        .filter(|k| seen.insert(k.clone()))
        .collect()
}

/// Codecs in first-seen order.
pub fn codecs(r: &[Record]) -> Vec<String> {
    first_seen(r, |x| x.codec.clone())
}

/// A record's size class as tables print it.
pub fn class_label(x: &Record) -> &'static str {
    x.size_class.map_or("all sizes", |c| c.label())
}

/// (category, dataset, dtype, size class) groups in first-seen order.
pub fn groups(r: &[Record]) -> Vec<(String, String, String, &'static str)> {
    first_seen(r, |x| {
        (
            x.category.clone(),
            x.dataset.clone(),
            x.dtype.clone(),
            class_label(x),
        )
    })
}

/// Whether `codec` has a record for every group among the records that `within` keeps. A
/// geomean over part of a category is not comparable with one over all of it (a peer that
/// refuses FP32 tensors would be averaged over its 16-bit ones alone), so tables show such a
/// cell as [`PARTIAL`] and rankings leave the codec out.
pub fn covers(r: &[Record], codec: &str, within: impl Fn(&Record) -> bool) -> bool {
    let key = |x: &Record| (x.dataset.clone(), x.dtype.clone(), class_label(x));
    let have: std::collections::BTreeSet<_> = r
        .iter()
        .filter(|x| x.codec == codec && within(x))
        .map(key)
        .collect();
    r.iter()
        .filter(|x| within(x))
        .all(|x| have.contains(&key(x)))
}

/// A table cell for a codec that did not take every tensor of its row or column.
pub const PARTIAL: &str = "part";

/// The note under a table that may hold [`PARTIAL`] cells.
pub const PARTIAL_NOTE: &str = "`part`: the codec did not take every tensor there (OpenZL's \
     float-entropy graph takes 16-bit floats only), so no geomean is given; its figures per \
     dataset are in `summary.md`.";

/// Per size class: (label, tensors, raw bytes) of the groups measured (each group counted
/// once, from the first codec's records), classes in order.
pub fn class_totals(r: &[Record]) -> Vec<(&'static str, usize, u64)> {
    let first = codecs(r).into_iter().next().unwrap_or_default();
    let mut out: Vec<(&'static str, usize, u64)> = Vec::new();
    let mut recs: Vec<&Record> = r.iter().filter(|x| x.codec == first).collect();
    recs.sort_by_key(|x| x.size_class);
    for x in recs {
        let label = class_label(x);
        match out.iter_mut().find(|(l, _, _)| *l == label) {
            Some(t) => {
                t.1 += x.tensors;
                t.2 += x.raw_bytes;
            }
            None => out.push((label, x.tensors, x.raw_bytes)),
        }
    }
    out
}

/// Geomean ratio per size class for every codec, with the exact count and bytes of the
/// tensors in each class (ratio, headers and tables amortised, changes with a tensor's size).
pub fn size_class_table(r: &[Record]) -> String {
    let classes = class_totals(r);
    let mut s = String::new();
    let _ = write!(s, "| codec |");
    for (label, n, bytes) in &classes {
        let _ = write!(s, " {label}: {n} tensors, {:.1} MB |", *bytes as f64 / 1e6);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|".repeat(classes.len()));
    for codec in codecs(r) {
        let _ = write!(s, "| {codec} |");
        for (label, _, _) in &classes {
            let v: Vec<f64> = r
                .iter()
                .filter(|x| x.codec == codec && class_label(x) == *label)
                .map(|x| x.ratio)
                .collect();
            let cell = if v.is_empty() {
                "-".to_owned()
            } else if !covers(r, &codec, |x| class_label(x) == *label) {
                PARTIAL.to_owned()
            } else {
                format!("{:.3}", geomean(&v))
            };
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
    }
    note_partial(&mut s);
    s
}

pub fn categories(r: &[Record]) -> Vec<String> {
    first_seen(r, |x| x.category.clone())
}

/// The records of `codec`, optionally only those of `category`.
pub fn select<'a>(r: &'a [Record], category: Option<&str>, codec: &str) -> Vec<&'a Record> {
    r.iter()
        .filter(|x| x.codec == codec && category.is_none_or(|c| x.category == c))
        .collect()
}

/// Geometric mean of `f` over `recs`.
pub fn geomean_by(recs: &[&Record], f: impl Fn(&Record) -> f64) -> f64 {
    geomean(&recs.iter().map(|x| f(x)).collect::<Vec<_>>())
}

/// A text field of the CSV: quoted, its quotes doubled (RFC 4180), where it holds a comma, a
/// quote or a line break (device names do: "llvmpipe (LLVM 15.0.6, 256 bits)").
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// CSV with one line per record.
pub fn csv(res: &Results) -> String {
    let mut s = String::from(
        "dataset,category,dtype,size_class,codec,tensors,raw_bytes,compressed_bytes,ratio,encode_gbps,encode_gbps_min,encode_gbps_max,\
         decode_gbps,decode_gbps_min,decode_gbps_max,decode_allcore_gbps,memcpy_gbps,device,gpu_decode_gbps,gpu_device,encode_allcore_gbps\n",
    );
    for r in &res.records {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.5},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{},{},{},{:.4}",
            r.dataset,
            r.category,
            r.dtype,
            class_label(r),
            r.codec,
            r.tensors,
            r.raw_bytes,
            r.compressed_bytes,
            r.ratio,
            r.encode_gbps,
            r.encode_gbps_spread[0],
            r.encode_gbps_spread[1],
            r.decode_gbps,
            r.decode_gbps_spread[0],
            r.decode_gbps_spread[1],
            r.decode_allcore_gbps,
            r.memcpy_gbps,
            csv_field(&r.device),
            r.gpu_decode_gbps.map(|g| format!("{g:.3}")).unwrap_or_default(),
            csv_field(r.gpu_device.as_deref().unwrap_or_default()),
            r.encode_allcore_gbps
        );
    }
    s
}

fn find<'a>(
    r: &'a [Record],
    dataset: &str,
    dtype: &str,
    class: &str,
    codec: &str,
) -> Option<&'a Record> {
    r.iter().find(|x| {
        x.dataset == dataset && x.dtype == dtype && class_label(x) == class && x.codec == codec
    })
}

/// Effective bandwidth of a record on a link, with B = all-core CPU decode.
pub fn eff(r: &Record, link_gbps: f64) -> f64 {
    effective_gbps(r.ratio, link_gbps, r.decode_allcore_gbps)
}

/// Geomean ratio of `codec` over the groups of `category` (optionally one dtype).
pub fn category_geomean(
    r: &[Record],
    category: &str,
    dtype: Option<&str>,
    codec: &str,
) -> Option<f64> {
    let v: Vec<f64> = r
        .iter()
        .filter(|x| {
            x.category == category && x.codec == codec && dtype.is_none_or(|d| x.dtype == d)
        })
        .map(|x| x.ratio)
        .collect();
    let complete = covers(r, codec, |x| {
        x.category == category && dtype.is_none_or(|d| x.dtype == d)
    });
    (!v.is_empty() && complete).then(|| geomean(&v))
}

/// The whole markdown summary.
pub fn summary(res: &Results) -> String {
    let r = &res.records;
    let codecs = codecs(r);
    let cats = categories(r);
    let mut s = String::new();
    let _ = writeln!(s, "# planepack results\n");
    let _ = writeln!(
        s,
        "Machine: **{}**. Command: `{}`{}. Code: `{}`.\n",
        res.machine,
        res.command,
        if res.quick {
            " (quick run: few repetitions, speeds are rough)"
        } else {
            ""
        },
        res.code_version
    );
    let _ = writeln!(
        s,
        "Every figure below comes from tensors that were encoded, decoded and compared bit for bit \
         with the input in the same run. Ratios count every byte a decoder needs (headers, tables, \
         IBP's mask, bitval and row bitmask, padding). Speeds are single-core medians in GB/s of raw \
         bytes unless marked; memcpy of the same bytes was timed in the same run, its runs alternating with the \
         decode runs, each under its own clock. All datasets \
         are real tensors (see `datasets/README.md`).\n"
    );

    let gpu: Vec<&Record> = r.iter().filter(|x| x.gpu_decode_gbps.is_some()).collect();
    if gpu.is_empty() {
        let _ = writeln!(
            s,
            "GPU decode: not measured for these records (`cargo xtask gpu-bench --results <this \
             folder>` adds it); every transfer figure below uses the CPU decode speed measured here.\n"
        );
    } else {
        let _ = writeln!(
            s,
            "GPU decode (WGSL kernels through wgpu, `cargo xtask gpu-bench`; the device and the \
             copy-kernel reference are in the gpu-bench folder's gpu.md), GB/s of raw output:\n"
        );
        let _ = writeln!(s, "| dataset | dtype | codec | GPU decode GB/s | CPU 1-core decode GB/s | device |\n|---|---|---|---|---|---|");
        for x in &gpu {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.3} | {:.3} | {} |",
                x.dataset,
                x.dtype,
                x.codec,
                x.gpu_decode_gbps.unwrap_or(0.0),
                x.decode_gbps,
                x.gpu_device.clone().unwrap_or_default()
            );
        }
        let _ = writeln!(s);
    }

    let measured: Vec<&Record> = r.iter().filter(|x| x.gpu_transfer_gbps.is_some()).collect();
    if !measured.is_empty() {
        let _ = writeln!(
            s,
            "## Measured transfer and GPU decode\n\nPer dataset and codec with a GPU decoder, \
             on {}: upload of the compressed bytes and decode into device memory (no readback) \
             against upload of the raw bytes, alternating in the same run, every decode checked; \
             GB/s of raw bytes, medians summed over the dataset's tensors.\n",
            measured[0].gpu_device.clone().unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "| dataset | dtype | codec | ratio | upload + decode GB/s | raw upload GB/s | speed-up |\n|---|---|---|---|---|---|---|"
        );
        for x in &measured {
            let (t, u) = (
                x.gpu_transfer_gbps.unwrap_or(0.0),
                x.gpu_upload_raw_gbps.unwrap_or(f64::NAN),
            );
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.3} | {t:.3} | {u:.3} | {:.3} |",
                x.dataset,
                x.dtype,
                x.codec,
                x.ratio,
                t / u
            );
        }
        let _ = writeln!(s);
    }

    // Headline: geomean ratio per category.
    let _ = writeln!(s, "## Compression ratio, geometric mean per category\n");
    s += &ratio_speed_table(r);
    let _ = writeln!(
        s,
        "\n## Compression ratio per size class\n\nGeomean over the groups of each class of tensor \
         size; the header gives the exact count and bytes of the tensors in each class.\n"
    );
    s += &size_class_table(r);
    let _ = writeln!(s, "\n## Best per category\n");
    s += &best_per_category(r);
    if r.iter().any(|x| x.codec == "rans") && r.iter().any(|x| is_peer(&x.codec)) {
        let _ = writeln!(s, "\n## rans beside each peer: speed at ratio\n");
        s += &peer_comparison(r);
    }
    // Against the papers.
    let _ = writeln!(
        s,
        "\n## Side by side with the published figures (not the same data)\n"
    );
    let act = |dtype: &str| {
        let v: Vec<f64> = r
            .iter()
            .filter(|x| x.category == "activations" && x.codec == "bitplane" && x.dtype == dtype)
            .map(|x| x.ratio)
            .collect();
        (geomean(&v), v.len())
    };
    let (bf, nbf) = act("bf16");
    let (fp, nfp) = act("f32");
    let _ = writeln!(s, "| claim | published | planepack, measured here |");
    let _ = writeln!(s, "|---|---|---|");
    let _ = writeln!(
        s,
        "| PlaneZip, BF16 activations, geomean ratio | 1.71x (3 CNNs, ViT-B/16, GPT2-124M) | {bf:.2}x (bitplane, {nbf} BF16 activation groups) |"
    );
    let _ = writeln!(
        s,
        "| PlaneZip, FP32 activations, geomean ratio | 1.39x | {fp:.2}x (bitplane, {nfp} FP32 activation groups, incl. the FP32 tensors of autocast runs) |"
    );
    for (cat, claim, published) in [
        (
            "gnn",
            "IBP space saving, GNN features",
            "about 10-12% (dense GNN); sparse GNN much more",
        ),
        ("embedding", "IBP space saving, DLRM embeddings", "about 8%"),
        ("kv-cache", "IBP space saving, KV cache", "up to 10%"),
    ] {
        let ours: Vec<String> = r
            .iter()
            .filter(|x| x.category == cat && x.codec == "ibp")
            .map(|x| format!("{} {:.1}%", x.dataset, x.saving_pct()))
            .collect();
        if !ours.is_empty() {
            let _ = writeln!(s, "| {claim} | {published} | {} |", ours.join("; "));
        }
    }
    let _ = writeln!(
        s,
        "\nPlaneZip measured activations of ResNet/VGG/MobileNet, ViT-B/16 and GPT2-124M; ours come from \
         EfficientNet-Lite0, ResNet-18 and a small ViT (Fashion-MNIST), MiniLM and SmolLM2-135M. IBP measured \
         Cora/PubMed/Reddit/products features, Criteo DLRM tables and OPT/Gemma KV caches; ours are the \
         man-pages graph, MiniLM's word embeddings and SmolLM2's KV cache. The PlaneZip format as published \
         has 3-bit tags only; planepack adds a per-block length (see below)."
    );

    // Per category detail.
    for cat in &cats {
        let _ = writeln!(s, "\n## {cat}\n");
        let _ = writeln!(
            s,
            "Ratio (decode GB/s, 1 core) per dataset, dtype and size class, and codec.\n"
        );
        let _ = write!(s, "| dataset | dtype | size class | tensors | MB |");
        for c in &codecs {
            let _ = write!(s, " {c} |");
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "|---|---|---|---|---|{}", "---|".repeat(codecs.len()));
        for (gc, ds, dt, class) in groups(r) {
            if &gc != cat {
                continue;
            }
            let (n, mb) = find(r, &ds, &dt, class, &codecs[0])
                .map(|x| (x.tensors, x.raw_bytes as f64 / 1e6))
                .unwrap_or((0, 0.0));
            let _ = write!(s, "| {ds} | {dt} | {class} | {n} | {mb:.2} |");
            for c in &codecs {
                match find(r, &ds, &dt, class, c) {
                    Some(x) => {
                        let _ = write!(s, " {:.3} ({:.2}) |", x.ratio, x.decode_gbps);
                    }
                    None => {
                        let _ = write!(s, " - |");
                    }
                }
            }
            let _ = writeln!(s);
        }
    }

    // Best per dataset.
    let link = LINKS.iter().find(|l| l.name == SUMMARY_LINK).unwrap();
    let _ = writeln!(s, "\n## Best codec per dataset\n");
    let _ = writeln!(
        s,
        "By ratio, and by effective bandwidth over {} ({} GB/s) with eq. (2), B = measured all-core CPU decode \
         on this machine. A codec slower than the link is bypassed (sent raw), so raw wins where nothing decodes fast enough.\n",
        link.name, link.gbps
    );
    let _ = writeln!(
        s,
        "| dataset | dtype | size class | best ratio | best effective bandwidth |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for (_, ds, dt, class) in groups(r) {
        let recs: Vec<&Record> = r
            .iter()
            .filter(|x| x.dataset == ds && x.dtype == dt && class_label(x) == class)
            .collect();
        let best_ratio = recs
            .iter()
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
            .unwrap();
        let best_bw = recs
            .iter()
            .max_by(|a, b| eff(a, link.gbps).total_cmp(&eff(b, link.gbps)))
            .unwrap();
        let bw = eff(best_bw, link.gbps);
        let bw_cell = if bw <= link.gbps * (1.0 + 1e-9) {
            format!(
                "raw {:.1} GB/s (no codec decodes faster than the link here)",
                link.gbps
            )
        } else {
            format!("{} {bw:.1} GB/s", best_bw.codec)
        };
        let _ = writeln!(
            s,
            "| {ds} | {dt} | {class} | {} {:.3} | {bw_cell} |",
            best_ratio.codec, best_ratio.ratio
        );
    }

    // Transfer model.
    let _ = writeln!(
        s,
        "\n## Transfer model: effective bandwidth per link (geomean over all groups)\n"
    );
    let _ = writeln!(
        s,
        "time = min(m/g, max(m/(c g), m/B)); B = all-core CPU decode measured here ({}). \
         Speedup = effective bandwidth / link bandwidth.\n",
        res.machine
    );
    let _ = write!(s, "| codec |");
    for l in LINKS {
        let _ = write!(s, " {} ({} GB/s) |", l.name, l.gbps);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|".repeat(LINKS.len()));
    for c in &codecs {
        let recs = select(r, None, c);
        let _ = write!(s, "| {c} |");
        for l in LINKS {
            let g = geomean_by(&recs, |x| eff(x, l.gbps));
            let _ = write!(s, " {g:.1} ({:.2}x) |", g / l.gbps);
        }
        let _ = writeln!(s);
    }

    // What the ratios would buy with a decoder as fast as PlaneZip's engine.
    let _ = writeln!(
        s,
        "\n## Transfer model with a 64 GB/s decode engine (PlaneZip's assumption)\n"
    );
    let _ = writeln!(
        s,
        "The same model with B = 64 GB/s for every codec, i.e. what each ratio buys once decoding is not the \
         bottleneck (a GPU decoder; the GPU issue measures real ones). Geomean effective GB/s over all groups.\n"
    );
    let _ = write!(s, "| codec |");
    for l in LINKS {
        let _ = write!(s, " {} |", l.name);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|".repeat(LINKS.len()));
    for c in &codecs {
        let recs = select(r, None, c);
        let _ = write!(s, "| {c} |");
        for l in LINKS {
            let g = geomean_by(&recs, |x| effective_gbps(x.ratio, l.gbps, 64.0));
            let _ = write!(s, " {g:.1} ({:.2}x) |", g / l.gbps);
        }
        let _ = writeln!(s);
    }

    // Bit-plane deviations.
    let bp: Vec<&Record> = r
        .iter()
        .filter(|x| x.codec == "bitplane" && x.notes.contains_key("paper_layout_ratio"))
        .collect();
    if !bp.is_empty() {
        let _ = writeln!(
            s,
            "\n## Bit-plane codec: modes and the cost of each format deviation\n"
        );
        let _ = writeln!(
            s,
            "\"paper layout\" = the same block choices with 3-bit tags only (no per-block length field); \
             \"ZERO saved\" = bytes the ZERO mode saved over an empty-mask ZVC block, as % of the compressed size.\n"
        );
        let _ = writeln!(s, "| dataset | dtype | ratio | paper layout | length-field cost | ZERO saved | modes (share of blocks) |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for x in bp {
            let n = |k: &str| x.notes.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
            let modes = x.notes.get("modes").and_then(|v| v.as_str()).unwrap_or("");
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} | {:.3} | {:.2}% | {:.2}% | {} |",
                x.dataset,
                x.dtype,
                x.ratio,
                n("paper_layout_ratio"),
                100.0 * (n("paper_layout_ratio") / x.ratio - 1.0),
                n("zero_mode_saved_pct"),
                modes
            );
        }
    }
    let _ = writeln!(
        s,
        "\nPer-record figures with spreads: `results.csv`, `results.json`. Plots: `*.svg`."
    );
    s
}

/// Per-category geomean ratios, for plots.
pub fn ratio_table(r: &[Record]) -> BTreeMap<(String, String), f64> {
    let mut m = BTreeMap::new();
    for c in categories(r) {
        for k in codecs(r) {
            if let Some(g) = category_geomean(r, &c, None, &k) {
                m.insert((c.clone(), k.clone()), g);
            }
        }
    }
    m
}

/// Geomean ratio per category for every codec, with single-core decode GB/s and decode over
/// memcpy (geomeans over all groups): the headline of both the summary and the README.
pub fn ratio_speed_table(r: &[Record]) -> String {
    let cats = categories(r);
    let mut s = String::new();
    let _ = write!(s, "| codec |");
    for c in &cats {
        let _ = write!(s, " {c} |");
    }
    let _ = writeln!(
        s,
        " encode GB/s | encode GB/s, all cores | decode GB/s | decode / memcpy | decode GB/s, all cores | GPU decoder | implementation |"
    );
    let _ = writeln!(
        s,
        "|---|{}---|---|---|---|---|---|---|",
        "---|".repeat(cats.len())
    );
    for codec in codecs(r) {
        let _ = write!(s, "| {codec} |");
        for c in &cats {
            let measured = r.iter().any(|x| x.codec == codec && x.category == *c);
            let cell = match category_geomean(r, c, None, &codec) {
                Some(g) => format!("{g:.3}"),
                None if measured => PARTIAL.to_owned(),
                None => "-".to_owned(),
            };
            let _ = write!(s, " {cell} |");
        }
        let recs = select(r, None, &codec);
        let enc = geomean_by(&recs, |x| x.encode_gbps);
        let enc_all = if recs.iter().all(|x| x.encode_allcore_gbps > 0.0) {
            format!("{:.2}", geomean_by(&recs, |x| x.encode_allcore_gbps))
        } else {
            "-".to_owned()
        };
        let dec = geomean_by(&recs, |x| x.decode_gbps);
        let rel = geomean_by(&recs, |x| x.decode_gbps / x.memcpy_gbps);
        let all = geomean_by(&recs, |x| x.decode_allcore_gbps);
        let gpu = if recs.iter().any(|x| x.gpu_decoder) {
            "yes"
        } else {
            "no"
        };
        let imp = recs
            .first()
            .map(|x| x.implementation.as_str())
            .unwrap_or("");
        let _ = writeln!(
            s,
            " {enc:.2} | {enc_all} | {dec:.2} | {rel:.3} | {all:.2} | {gpu} | {imp} |"
        );
    }
    note_partial(&mut s);
    s
}

/// Append [`PARTIAL_NOTE`] under a table that has a [`PARTIAL`] cell.
fn note_partial(s: &mut String) {
    if s.contains(&format!(" {PARTIAL} |")) {
        let _ = writeln!(s, "\n{PARTIAL_NOTE}");
    }
}

/// Per category: the best ratio of any codec, the best a GPU can decode, the best modelled
/// transfer-and-decode with this machine's CPU decoders, and (where measured) the best GPU
/// upload + decode against uploading raw.
pub fn best_per_category(r: &[Record]) -> String {
    let link = LINKS.iter().find(|l| l.name == SUMMARY_LINK).unwrap();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| category | best ratio, any codec | best ratio, GPU-decodable | best transfer + CPU decode, eq. (2), {} GB/s link, all cores | best measured GPU upload + decode vs raw upload |",
        link.gbps
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for cat in categories(r) {
        let best = |keep: &dyn Fn(&Record) -> bool, score: &dyn Fn(&Record) -> f64| {
            let mut by: Vec<(String, f64)> = codecs(r)
                .into_iter()
                .filter(|c| covers(r, c, |x| x.category == cat))
                .filter_map(|c| {
                    let recs: Vec<&Record> = select(r, Some(&cat), &c)
                        .into_iter()
                        .filter(|x| keep(x))
                        .collect();
                    (!recs.is_empty()).then(|| (c, geomean_by(&recs, score)))
                })
                .collect();
            by.sort_by(|a, b| b.1.total_cmp(&a.1));
            by.into_iter().next()
        };
        let any = best(&|_| true, &|x| x.ratio);
        let gpu = best(&|x| x.gpu_decoder, &|x| x.ratio);
        let bw = best(&|_| true, &|x| eff(x, link.gbps) / link.gbps);
        let measured = best(&|x| x.gpu_transfer_gbps.is_some(), &|x| {
            x.gpu_transfer_gbps.unwrap_or(0.0) / x.gpu_upload_raw_gbps.unwrap_or(f64::MAX)
        });
        let cell = |b: Option<(String, f64)>, unit: &str| {
            b.map_or("-".to_owned(), |(c, v)| format!("{c} {v:.3}{unit}"))
        };
        let bw_cell = match bw {
            Some((_, v)) if v <= 1.0 + 1e-9 => {
                "raw (no CPU decoder here outruns the link)".to_owned()
            }
            b => cell(b, "x"),
        };
        let _ = writeln!(
            s,
            "| {cat} | {} | {} | {bw_cell} | {} |",
            cell(any, "x"),
            cell(gpu, "x"),
            cell(measured, "x")
        );
    }
    s
}

/// The CPU coders `rans` is held against: ZipNN, OpenZL and C-Blosc2 (its C library and
/// python-blosc2), every setting measured.
pub fn is_peer(codec: &str) -> bool {
    ["zipnn", "openzl", "blosc2-", "pyblosc2-"]
        .iter()
        .any(|p| codec.starts_with(p))
}

/// Per category and peer: geomean ratio, single-core encode and decode GB/s of the peer and of
/// `rans` over the category's groups, and whether `rans` is at least as fast both ways at a
/// ratio at least as high; where not, which of the three it is behind on (the legend under
/// the table says why).
pub fn peer_comparison(r: &[Record]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Geomeans over the category's groups (single core). `rans` ahead: at least as fast to \
         encode and to decode as the peer, at a ratio at least as high. Where not, the column \
         names what it is behind on; the legend below says why.\n"
    );
    let _ = writeln!(
        s,
        "| category | peer | ratio, peer / rans | encode GB/s, peer / rans | decode GB/s, peer / rans | rans ahead | behind on |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let mut behind = BTreeSet::new();
    for cat in categories(r) {
        if !covers(r, "rans", |x| x.category == cat) {
            continue;
        }
        let rans = select(r, Some(&cat), "rans");
        let stats = |recs: &[&Record]| {
            (
                geomean_by(recs, |x| x.ratio),
                geomean_by(recs, |x| x.encode_gbps),
                geomean_by(recs, |x| x.decode_gbps),
            )
        };
        let (rr, re, rd) = stats(&rans);
        for peer in codecs(r)
            .into_iter()
            .filter(|c| is_peer(c) && covers(r, c, |x| x.category == cat))
        {
            let (pr, pe, pd) = stats(&select(r, Some(&cat), &peer));
            let mut why = Vec::new();
            if rr < pr {
                why.push("ratio");
            }
            if re < pe {
                why.push("encode");
            }
            if rd < pd {
                why.push("decode");
            }
            behind.extend(why.iter().copied());
            let _ = writeln!(
                s,
                "| {cat} | {peer} | {pr:.3} / {rr:.3} | {pe:.2} / {re:.2} | {pd:.2} / {rd:.2} | {} | {} |",
                if why.is_empty() { "yes" } else { "no" },
                if why.is_empty() { "-".to_owned() } else { why.join(", ") }
            );
        }
    }
    for (what, text) in PEER_GAPS {
        if behind.contains(what) {
            let _ = writeln!(s, "\n- **{what}**: {text}");
        }
    }
    s
}

/// Why `rans` is behind a peer, by what it is behind on (the legend of [`peer_comparison`];
/// the measurements behind each sentence are in `docs/performance.md`).
const PEER_GAPS: [(&str, &str); 3] = [
    (
        "encode",
        "`rans` models before it codes: it counts each tensor's exponent contexts, samples \
         chunks for the modelled and difference layouts and plans every plane from its \
         histogram, then codes each byte plane with 12-bit rANS through up to 32 lanes \
         (eight at a time in AVX2, a division per symbol done in f32). ZipNN Huffman-codes \
         its byte groups (Huff0, four streams) and stores a group raw where that saves under \
         5 %; C-Blosc2 with LZ4 shuffles and matches with no entropy stage at all. On small \
         tensors `rans`'s per-tensor passes (samples, tables) weigh most.",
    ),
    (
        "decode",
        "every symbol of a `rans` plane costs two gathers on the lane's dependency chain (its \
         decode-table slot and, every other round, its next words); tensors with context \
         tables read six tables, and modelled chunks add a gather per literal plane. Where \
         the peer stores bytes raw (ZipNN's mantissas) or copies long matches (zstd), its \
         decoder moves those bytes at memory speed.",
    ),
    (
        "ratio",
        "the peer finds what `rans` does not model: repeats at a distance (the LZ matches of \
         zstd, behind C-Blosc2's shuffle and OpenZL's graphs; on KV caches), and on small \
         tensors OpenZL's choice of graph per tensor against `rans`'s tables and lane headers, \
         which weigh most there; `bench-results/activation-study*.md` measures the gap per \
         record.",
    ),
];

/// The README's headline: geomean ratio per category and single-core decode speed relative to
/// memcpy, for every codec, with the machine and the command that produced it.
pub fn headline(res: &Results, plot: &str) -> String {
    let r = &res.records;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Measured by `{}` on {} (code `{}`); every figure decoded and verified bit-exact first. \
         Geomean compression ratio per dataset category (all headers and metadata counted), and single-core \
         decode speed as a fraction of memcpy of the same bytes in the same run.\n",
        res.command, res.machine, res.code_version
    );
    s += &ratio_speed_table(r);
    let _ = writeln!(s, "\nPer size class of the tensors (geomean ratio):\n");
    s += &size_class_table(r);
    let _ = writeln!(s, "\n![ratio per codec and category]({plot})\n");
    let _ = writeln!(
        s,
        "Best per category (geomeans over the category's datasets; ratio, or speed-up over \
         sending raw):\n"
    );
    s += &best_per_category(r);
    s
}

/// The codecs the README's short table shows (where measured): ours, and each peer family
/// at its strongest setting; `summary.md` has every codec and setting.
pub const README_CODECS: &[&str] = &[
    "rans",
    "rans-1",
    "bitplane",
    "ibp",
    "zstd-19",
    "blosc2-shuffle-zstd-9",
    "pyblosc2-shuffle-bytedelta-zstd-9",
    "zipnn",
    "openzl-best",
];

/// The README's short headline: what was measured on which tensors (count and bytes per size
/// class), the ratio and decode table of [`README_CODECS`], and the best per category over
/// every codec.
pub fn readme_headline(res: &Results, corpus: &str, folder: &str) -> String {
    let r = &res.records;
    let classes: Vec<String> = class_totals(r)
        .iter()
        .map(|(label, n, bytes)| format!("{n} of {label} ({:.1} MB)", *bytes as f64 / 1e6))
        .collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "`{}` on {} (code `{}`), on {corpus}: tensors {}. Geomean ratio per category, \
         single-core decode GB/s and decode / memcpy in the same run; every figure decoded and \
         verified first. Every codec and setting: [`{folder}/summary.md`]({folder}/summary.md).\n",
        res.command,
        res.machine,
        res.code_version,
        classes.join(", ")
    );
    let shown: Vec<Record> = r
        .iter()
        .filter(|x| README_CODECS.contains(&x.codec.as_str()))
        .cloned()
        .collect();
    s += &ratio_speed_table(&shown);
    let _ = writeln!(s);
    s += &best_per_category(r);
    s
}

/// Replace the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` (generated sections
/// of hand-written markdown files).
pub fn splice(text: &str, name: &str, content: &str) -> Option<String> {
    let (a, b) = (
        format!("<!-- {name}:start -->"),
        format!("<!-- {name}:end -->"),
    );
    let i = text.find(&a)? + a.len();
    let j = text.find(&b)?;
    (i <= j).then(|| format!("{}\n{}{}", &text[..i], content, &text[j..]))
}
