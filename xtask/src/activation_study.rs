//! `cargo xtask activation-study`: which structure each dataset has that order-0 byte planes
//! cannot see, how much of it the rANS modelled chunk takes, and what is left against the best
//! peer of the same bench run (issue 34).
//!
//! Every element (of its tensor, in 64 Ki-element chunks, as the codec sees it) is put in the
//! first class that explains it: zero; equal to its left neighbour; equal to the element one
//! row up (row = the last dimension); equal to the chunk's most frequent nonzero value (the
//! dictionary). These four the modelled chunk codes as symbols. Then two kinds of structure
//! it does not code: equal to the element one channel back (stride = the last two
//! dimensions, tensors of rank >= 3), and covered by a match of >= 4 elements at any distance
//! within the chunk (what an LZ stage such as zstd's finds). What remains is a literal. Rows
//! equal to an earlier row are counted apart (the row map takes them whole).
//!
//! Beside the shares: the ratios of rANS without the modelled chunk (`rans-nomodel`) and with
//! it (`rans`), measured here on the same bytes, and the best peer's ratio from the same
//! machine's `results.json` (the corpus) or `workloads/results.json` (`--workloads`), with the
//! gap; one row per bench record (dataset, dtype, size class), because the bench's headline
//! ranks codecs by the geomean over records, where a few hundred small tensors weigh as much
//! as gigabytes of large ones. Then the ratio with the codec's difference chunks on (off by
//! default until the bench has measured them), and where rans trails the best peer, what they
//! would make of the gap and which repeats remain, and an estimate of what contexts by channel
//! class would save ([`channel_context_bits`]: statistics, not repeats). (An earlier column estimated plane 1 with
//! the exponent as context, which became stream version 4, and then the steps between
//! neighbours, which became version 5.) Writes
//! `bench-results/activation-study.md` (`activation-study-workloads.md`).

use anyhow::Result;
use planepack_core::Codec;
use planepack_harness::{Group, Results, SizeClass};
use planepack_rans::Rans;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

/// Elements per chunk of the analysis (the rANS codec's default chunk).
const CHUNK: usize = 1 << 16;
/// The shortest match at a distance counted.
const MIN_MATCH: usize = 4;

/// Element counts per class, summed over a group's tensors.
#[derive(Default, Clone, Copy)]
struct Shares {
    elements: u64,
    zero: u64,
    left: u64,
    up: u64,
    dict: u64,
    channel: u64,
    matched: u64,
    literal: u64,
    /// Elements in rows equal to an earlier row (counted apart: any class above).
    repeated_rows: u64,
    /// FP32 elements in pieces of a codec chunk (64 KiB) whose low three bytes, as the codec
    /// rotates them, take at most 256 values (counted apart: what a tail dictionary takes).
    few_tails: u64,
}

impl Shares {
    fn add(&mut self, o: &Shares) {
        self.elements += o.elements;
        self.zero += o.zero;
        self.left += o.left;
        self.up += o.up;
        self.dict += o.dict;
        self.channel += o.channel;
        self.matched += o.matched;
        self.literal += o.literal;
        self.repeated_rows += o.repeated_rows;
        self.few_tails += o.few_tails;
    }
    fn pct(&self, n: u64) -> f64 {
        100.0 * n as f64 / self.elements.max(1) as f64
    }

    /// The table cells of the element classes, in column order (zero to literal).
    fn class_cells(&self) -> String {
        [
            self.zero,
            self.left,
            self.up,
            self.dict,
            self.channel,
            self.matched,
            self.literal,
        ]
        .map(|n| format!("{:.1}", self.pct(n)))
        .join(" | ")
    }
}

fn elements(data: &[u8], width: usize) -> Vec<u32> {
    data.chunks_exact(width)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..width].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect()
}

/// Elements of FP32 in 64 KiB pieces whose tails (the low three bytes of the element rotated
/// left by one bit) take at most 256 values: what the codec's tail dictionaries can take.
fn few_tails(v: &[u32], width: usize) -> u64 {
    if width != 4 {
        return 0;
    }
    let piece = (1 << 16) / 4;
    v.chunks(piece)
        .filter(|p| {
            let mut tails: Vec<u32> = p.iter().map(|x| x.rotate_left(1) & 0x00ff_ffff).collect();
            tails.sort_unstable();
            tails.dedup();
            tails.len() <= planepack_rans::internals::tails::MAX_TAILS
        })
        .map(|p| p.len() as u64)
        .sum()
}

/// Classes a tensor's channels are put in for [`channel_context_bits`].
const CHANNEL_CLASSES: usize = 8;
/// What one entry of a frequency table costs in [`channel_context_bits`] (a compact table's
/// frequency byte or two and the symbol's share of its set).
const TABLE_ENTRY_BITS: f64 = 10.0;

/// Bits of planes 0 and 1 (as the codec rotates them) of one tensor under the contexts `rans`
/// codes them with, and under the same contexts split by the element's channel class:
/// `(rans's contexts, with channel classes)`, from the tensor's own counts (conditional
/// entropy, every nonzero table entry at [`TABLE_ENTRY_BITS`]). `rans` codes plane 0 with the
/// row context of the exponent one row up (row tables) and plane 1 with its element's exponent
/// context (context tables), as the codec defines them (row shift 0, `E0` the most frequent
/// nonzero element's plane-0 byte); here plane 0's context is also the class of the channel's mean exponent
/// byte, plane 1's the class of the channel's share of negative elements (for BF16 and FP16
/// the sign is plane 1's low bit after the rotation), each of [`CHANNEL_CLASSES`] quantiles of
/// the tensor's channels. The channel is the last dimension (rank 2 and 3: a transformer's
/// hidden features) or dimension 1 (rank 4 and more: a CNN's NCHW channels). `None` where the
/// codec's own chunk tables already follow the channels (a channel block of more than an
/// eighth of a chunk: early CNN layers), or the tensor has no channels or is too small to
/// tell. An estimate of what a GPU-decodable context by channel could take, not a coder: its
/// tables would cost what is counted here.
fn channel_context_bits(shape: &[usize], data: &[u8], width: usize) -> Option<(f64, f64)> {
    let n = data.len() / width.max(1);
    if width < 2 || shape.len() < 2 || n < 4096 {
        return None;
    }
    let (channels, inner) = match shape.len() {
        2 | 3 => (*shape.last()?, 1usize),
        _ => (shape[1], shape[2..].iter().product()),
    };
    let chunk_elems = (1usize << planepack_rans::DEFAULT_CHUNK_LOG2) / width;
    if channels < 2 || inner.checked_mul(8)? > chunk_elems {
        return None;
    }
    let row = *shape.last()?;
    // Planes 0 and 1 and the sign of each element.
    let planes: Vec<(u8, u8, bool)> = data
        .chunks_exact(width)
        .map(|c| {
            let (t, sign) = match width {
                2 => {
                    let v = u16::from_le_bytes([c[0], c[1]]);
                    ((v.rotate_left(1) as u32) << 16, v >> 15 == 1)
                }
                _ => {
                    let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    (v.rotate_left(1), v >> 31 == 1)
                }
            };
            ((t >> 24) as u8, (t >> 16) as u8, sign)
        })
        .collect();
    let channel = |i: usize| (i / inner) % channels;
    // Each channel's class: its rank among the tensor's channels by a mean, in quantiles.
    let classes = |value: &dyn Fn(&(u8, u8, bool)) -> f64| -> Vec<usize> {
        let mut sum = vec![0f64; channels];
        let mut count = vec![0u64; channels];
        for (i, e) in planes.iter().enumerate() {
            sum[channel(i)] += value(e);
            count[channel(i)] += 1;
        }
        let mut order: Vec<usize> = (0..channels).collect();
        let mean = |c: usize| sum[c] / count[c].max(1) as f64;
        order.sort_by(|&a, &b| mean(a).total_cmp(&mean(b)));
        let mut class = vec![0usize; channels];
        for (rank, &c) in order.iter().enumerate() {
            class[c] = rank * CHANNEL_CLASSES / channels;
        }
        class
    };
    let by_exponent = classes(&|e| e.0 as f64);
    let by_sign = classes(&|e| e.2 as u8 as f64);
    // Counts of (context, symbol) under `rans`'s contexts: plane 0 by the row context of the
    // byte one row up (the first row's own), plane 1 by its element's exponent context, both
    // relative to the tensor's most frequent nonzero plane-0 byte (`E0`; the row shift 0).
    use planepack_rans::internals::contexts::{context, CONTEXTS};
    use planepack_rans::internals::row_contexts::{row_context, ROW_CONTEXTS, ROW_FIRST};
    let mut modes = [0u64; 256];
    for (&(e, ..), element) in planes.iter().zip(data.chunks_exact(width)) {
        modes[e as usize] += u64::from(element.iter().any(|&b| b != 0));
    }
    let e0 = (0..256)
        .max_by_key(|&e| (modes[e], std::cmp::Reverse(e)))
        .unwrap_or(0) as u8;
    let mut p0 = vec![0u32; ROW_CONTEXTS * 256];
    let mut p0_classed = vec![0u32; CHANNEL_CLASSES * ROW_CONTEXTS * 256];
    let mut p1 = vec![0u32; CONTEXTS * 256];
    let mut p1_classed = vec![0u32; CHANNEL_CLASSES * CONTEXTS * 256];
    for (i, &(e, m, _)) in planes.iter().enumerate() {
        let up = match i >= row {
            true => row_context(planes[i - row].0, e0, 0),
            false => ROW_FIRST,
        };
        let own = context(e, e0);
        let c = channel(i);
        p0[up * 256 + e as usize] += 1;
        p0_classed[(by_exponent[c] * ROW_CONTEXTS + up) * 256 + e as usize] += 1;
        p1[own * 256 + m as usize] += 1;
        p1_classed[(by_sign[c] * CONTEXTS + own) * 256 + m as usize] += 1;
    }
    // Bits of symbols under their contexts' tables (256 symbols a context), tables included.
    let bits = |counts: &[u32]| -> f64 {
        counts
            .chunks_exact(256)
            .map(|t| {
                let total = t.iter().map(|&c| c as f64).sum::<f64>();
                t.iter()
                    .filter(|&&c| c > 0)
                    .map(|&c| c as f64 * (total / c as f64).log2() + TABLE_ENTRY_BITS)
                    .sum::<f64>()
            })
            .sum()
    };
    Some((bits(&p0) + bits(&p1), bits(&p0_classed) + bits(&p1_classed)))
}

/// Classify one tensor's elements.
fn classify(shape: &[usize], data: &[u8], width: usize) -> Shares {
    let v = elements(data, width);
    // The shape's rows, or (a flat tensor) each chunk's repeat distance, as the encoder takes.
    let shape_row = if shape.len() >= 2 {
        *shape.last().unwrap_or(&0)
    } else {
        0
    };
    let plane = if shape.len() >= 3 {
        shape_row * shape[shape.len() - 2]
    } else {
        0
    };
    let mut s = Shares {
        elements: v.len() as u64,
        few_tails: few_tails(&v, width),
        ..Shares::default()
    };
    let mut counts: HashMap<u32, u32> = HashMap::new();
    let mut seen: HashMap<[u32; MIN_MATCH], usize> = HashMap::new();
    for start in (0..v.len()).step_by(CHUNK) {
        let c = &v[start..(start + CHUNK).min(v.len())];
        let row = match shape_row {
            0 => planepack_rans::internals::modelled::repeat_distance(
                &data[start * width..(start + c.len()) * width],
                width,
            ),
            r => r,
        };
        counts.clear();
        for &x in c.iter().filter(|&&x| x != 0) {
            *counts.entry(x).or_default() += 1;
        }
        let dict = counts
            .iter()
            .max_by_key(|&(&x, &n)| (n, std::cmp::Reverse(x)))
            .map(|(&x, _)| x);
        seen.clear();
        // Elements still to be covered by a match already found (as an LZ parse would).
        let mut covered = 0usize;
        for (i, &x) in c.iter().enumerate() {
            let key = (i + MIN_MATCH <= c.len()).then(|| {
                let mut k = [0u32; MIN_MATCH];
                k.copy_from_slice(&c[i..i + MIN_MATCH]);
                k
            });
            let earlier = key.and_then(|k| seen.insert(k, i));
            if x == 0 {
                s.zero += 1;
            } else if i > 0 && c[i - 1] == x {
                s.left += 1;
            } else if row > 0 && i >= row && c[i - row] == x {
                s.up += 1;
            } else if Some(x) == dict {
                s.dict += 1;
            } else if plane > 0 && start + i >= plane && v[start + i - plane] == x {
                s.channel += 1;
            } else if covered > 0 {
                s.matched += 1;
            } else if let Some(j) = earlier {
                // Extend the match as far as it goes; it covers this element and the rest.
                let mut len = MIN_MATCH;
                while i + len < c.len() && c[j + len] == c[i + len] {
                    len += 1;
                }
                s.matched += 1;
                covered = len;
            } else {
                s.literal += 1;
            }
            covered = covered.saturating_sub(1);
        }
    }
    if shape_row > 0 {
        let mut rows: std::collections::HashSet<&[u32]> = std::collections::HashSet::new();
        for r in v.chunks_exact(shape_row) {
            if !rows.insert(r) {
                s.repeated_rows += shape_row as u64;
            }
        }
    }
    s
}

/// One study row: a bench record (dataset, dtype, size class), its shares and ratios.
struct Row {
    category: String,
    dataset: String,
    dtype: String,
    size_class: SizeClass,
    raw: u64,
    shares: Shares,
    /// Compressed bytes: rANS without the modelled chunk, without the difference chunks,
    /// without the tail dictionaries, and the default encoder (all on).
    nomodel: u64,
    nodiff: u64,
    notails: u64,
    modelled: u64,
    /// Bits that contexts by channel class would save on planes 0 and 1, summed over the
    /// tensors where they save any ([`channel_context_bits`]).
    channel_saving_bits: f64,
}

/// Bytes of `g` through `codec` (every stream decoded and compared).
fn compressed(codec: &Rans, g: &Group) -> Result<u64> {
    let mut total = 0u64;
    for (shape, data) in &g.tensors {
        let mut enc = Vec::new();
        // (The parallel coder writes the same bytes as one core's, on every core.)
        codec.encode_shaped_parallel(data, g.elem, shape, &mut enc)?;
        let mut out = vec![0u8; data.len()];
        codec.decode_parallel(&enc, &mut out)?;
        anyhow::ensure!(
            out == *data,
            "{} does not round-trip on {}",
            codec.name(),
            g.dataset
        );
        total += enc.len() as u64;
    }
    Ok(total)
}

fn add_group(rows: &mut Vec<Row>, g: &Group) -> Result<()> {
    let width = g.elem.size();
    let mut shares = Shares::default();
    let mut channel_saving_bits = 0.0;
    for (shape, data) in &g.tensors {
        shares.add(&classify(shape, data, width));
        if let Some((now, classed)) = channel_context_bits(shape, data, width) {
            channel_saving_bits += (now - classed).max(0.0);
        }
    }
    let nomodel = compressed(
        &Rans {
            modelled: false,
            ..Rans::default()
        },
        g,
    )?;
    let nodiff = compressed(
        &Rans {
            differences: false,
            ..Rans::default()
        },
        g,
    )?;
    let notails = compressed(
        &Rans {
            tails: false,
            ..Rans::default()
        },
        g,
    )?;
    let modelled = compressed(&Rans::default(), g)?;
    let raw = g.raw_bytes();
    match rows
        .iter_mut()
        .find(|r| r.dataset == g.dataset && r.dtype == g.dtype && r.size_class == g.size_class)
    {
        Some(r) => {
            r.raw += raw;
            r.shares.add(&shares);
            r.nomodel += nomodel;
            r.nodiff += nodiff;
            r.notails += notails;
            r.modelled += modelled;
            r.channel_saving_bits += channel_saving_bits;
        }
        None => rows.push(Row {
            category: g.category.clone(),
            dataset: g.dataset.clone(),
            dtype: g.dtype.clone(),
            size_class: g.size_class,
            raw,
            shares,
            nomodel,
            nodiff,
            notails,
            modelled,
            channel_saving_bits,
        }),
    }
    Ok(())
}

/// What the same machine's bench measured of the peers: the best peer's ratio per record
/// (dataset, dtype, size class), and per category the peer whose geomean over the category's
/// records is highest (how the bench's headline ranks codecs).
struct Peers {
    best: BTreeMap<(String, String, SizeClass), (String, f64)>,
    category_best: BTreeMap<String, (String, f64)>,
}

fn peers(results: &Path) -> Result<Peers> {
    let mut best: BTreeMap<(String, String, SizeClass), (String, f64)> = BTreeMap::new();
    let mut per_codec: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut record_category: BTreeMap<(String, String, SizeClass), String> = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(results) {
        let res: Results = serde_json::from_str(&text)?;
        for r in res.records.iter().filter(|r| {
            r.codec != "raw"
                && crate::peers::PEER_CODECS
                    .iter()
                    .chain(["zstd-3", "zstd-19", "lz4"].iter())
                    .any(|p| *p == r.codec || r.codec.starts_with("blosc2"))
        }) {
            let Some(class) = r.size_class else { continue };
            record_category.insert(
                (r.dataset.clone(), r.dtype.clone(), class),
                r.category.clone(),
            );
            let e = best
                .entry((r.dataset.clone(), r.dtype.clone(), class))
                .or_insert((r.codec.clone(), 0.0));
            if r.ratio > e.1 {
                *e = (r.codec.clone(), r.ratio);
            }
            per_codec
                .entry((r.category.clone(), r.codec.clone()))
                .or_default()
                .push(r.ratio);
        }
    }
    // A peer ranks in a category only if it measured every record there (OpenZL's float
    // entropy graph takes no FP32, for one).
    let mut records: BTreeMap<String, usize> = BTreeMap::new();
    for cat in record_category.values() {
        *records.entry(cat.clone()).or_default() += 1;
    }
    let mut category_best: BTreeMap<String, (String, f64)> = BTreeMap::new();
    for ((cat, codec), ratios) in per_codec {
        if Some(&ratios.len()) != records.get(&cat) {
            continue;
        }
        let g = planepack_harness::report::geomean(&ratios);
        let e = category_best.entry(cat).or_insert((codec.clone(), 0.0));
        if g > e.1 {
            *e = (codec, g);
        }
    }
    Ok(Peers {
        best,
        category_best,
    })
}

pub fn run(root: &Path, workloads: bool) -> Result<()> {
    let machine = planepack_harness::machine_name();
    let machine_dir = root
        .join("bench-results")
        .join(planepack_harness::machine_slug(&machine));
    let mut rows: Vec<Row> = Vec::new();
    let (results, out, corpus) = if workloads {
        use planepack_harness::input::{Batches, BATCH_BYTES};
        for f in &crate::workloads::files(root, &[])? {
            let name = f.file_stem().and_then(|s| s.to_str()).unwrap_or("file");
            let mut b = Batches::open(name, crate::bench::workload_category(name), f, BATCH_BYTES)?;
            for i in 0..b.len() {
                let g = b.load(i)?;
                add_group(&mut rows, &g)?;
            }
            println!("{name}");
        }
        (
            machine_dir.join("workloads/results.json"),
            root.join("bench-results/activation-study-workloads.md"),
            "the production-size workloads (`cargo xtask workloads`, datasets/workloads.toml)",
        )
    } else {
        for g in crate::bench::load_groups(&[], &[])? {
            add_group(&mut rows, &g)?;
            println!("{} {}", g.dataset, g.dtype);
        }
        (
            machine_dir.join("results.json"),
            root.join("bench-results/activation-study.md"),
            "the dataset corpus (datasets/manifest.toml)",
        )
    };
    rows.sort_by(|a, b| {
        (&a.category, &a.dataset, &a.dtype, a.size_class).cmp(&(
            &b.category,
            &b.dataset,
            &b.dtype,
            b.size_class,
        ))
    });
    // A machine without its own bench run of these tensors takes another's peer ratios.
    let results = match results.exists() {
        true => results,
        false => {
            let rel = results
                .strip_prefix(&machine_dir)
                .unwrap_or(&results)
                .to_owned();
            let mut others: Vec<_> = std::fs::read_dir(root.join("bench-results"))?
                .filter_map(|d| d.ok().map(|d| d.path().join(&rel)))
                .filter(|p| p.exists())
                .collect();
            others.sort();
            others.into_iter().next().unwrap_or(results)
        }
    };
    let peers = peers(&results)?;
    let mut md = format!(
        "# Structure in the tensors, what the rANS modelled chunk takes, what is left\n\n\
         Generated by `cargo xtask activation-study{}` on {machine}, on {corpus}. One row per \
         bench record (dataset, dtype, size class of the tensors), as the bench's geomeans \
         count them. Each element \
         is put in the first class that explains it, within 64 Ki-element chunks: **zero**, \
         **= left** neighbour, **= up** (the element one row back, row = last dimension, or \
         in a flat tensor the chunk's repeat distance, as the encoder takes it: where pairs of \
         neighbours most often recur), \
         **dict** (the chunk's most frequent nonzero value): the four the modelled chunk codes \
         as symbols (ARCHITECTURE.md, docs/format-rans.md). Then two it does not code: \
         **= channel** (one channel back: stride of the last two dimensions, rank >= 3) and \
         **match** (covered by a match of >= {MIN_MATCH} elements at any distance in the \
         chunk, as an LZ stage finds). The rest are **literals** (exponent as a symbol, the \
         other bytes as planes). **Repeated rows** (rows equal to an earlier row) are counted \
         apart: the row map takes them whole; so are **few tails** (FP32 elements in 64 KiB \
         pieces whose low three bytes, rotated as the codec does, take at most 256 values: \
         what the tail dictionaries take). Ratios: rANS without the modelled chunk, \
         without the difference chunks (stream version 5: the steps between neighbouring \
         elements as planes, for smooth values), without the tail dictionaries (header flag \
         T) and as the default encoder writes it, measured here on the same bytes (every stream decoded and compared), and the \
         best peer of the record (CPU coders, GPU-decodable or not, at every setting \
         measured) from `{}` (the same machine's where it has one: a peer's ratio does not \
         depend on the machine). Gap: rans over the best peer, minus one; \
         where rans trails the best peer, the structure left says which repeats remain. \
         **rans + channel contexts, est.**: what is not repeats but statistics, the values' \
         distributions per channel (a CNN's channels of a few pixels each, a transformer's \
         hidden features), which a chunk's tables mix: the default stream less the bits that \
         planes 0 and 1 would save with their contexts (the exponent one row up, the \
         element's own exponent) also split by the channel's class ({CHANNEL_CLASSES} \
         quantiles of the tensor's channels by mean exponent byte, by share of negative \
         elements), estimated from each tensor's counts with every table entry at \
         {TABLE_ENTRY_BITS} bits, on the tensors where that saves any and a channel block \
         is at most an eighth of a chunk. An estimate for the next modelling step, not a \
         coder.\n\n",
        if workloads { " --workloads" } else { "" },
        results.strip_prefix(root).unwrap_or(&results).display()
    );
    let _ = writeln!(
        md,
        "| category | dataset | dtype | size class | raw MB | zero % | = left % | = up % | dict % | = channel % | match % | literal % | repeated rows % | few tails % | rans-nomodel | rans-nodiff | rans-notails | rans | rans + channel contexts, est. | best peer | gap | structure left |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    // Per category: shares, raw, nomodel, modelled, rans ratios and best-peer ratios per record,
    // rans-nodiff ratios per record.
    type Cat = (
        Shares,
        u64,
        u64,
        u64,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
        Vec<f64>,
    );
    let mut cats: BTreeMap<String, Cat> = BTreeMap::new();
    for r in &rows {
        let s = &r.shares;
        let rn = r.raw as f64 / r.nomodel.max(1) as f64;
        let rm = r.raw as f64 / r.modelled.max(1) as f64;
        let rd = r.raw as f64 / r.nodiff.max(1) as f64;
        let rt = r.raw as f64 / r.notails.max(1) as f64;
        let channel_bytes = r.channel_saving_bits / 8.0;
        let rc = r.raw as f64 / (r.modelled as f64 - channel_bytes).max(1.0);
        let peer = peers
            .best
            .get(&(r.dataset.clone(), r.dtype.clone(), r.size_class));
        let (peer_cell, gap_cell, left_cell) = match peer {
            Some((c, p)) => {
                let gap = rm / p - 1.0;
                let left = if gap < 0.0 {
                    let mut repeats = [
                        ("channel repeats", s.channel),
                        ("matches at a distance", s.matched),
                    ];
                    repeats.sort_by_key(|k| std::cmp::Reverse(k.1));
                    let mut left = if repeats[0].1 > 0 {
                        format!(
                            "{} ({:.1} % of elements)",
                            repeats[0].0,
                            s.pct(repeats[0].1)
                        )
                    } else {
                        "no repeats left".to_string()
                    };
                    let saving = channel_bytes / r.modelled.max(1) as f64;
                    if saving >= 0.001 {
                        let _ = write!(
                            left,
                            "; per-channel distributions (est. {:.1} % of the bytes)",
                            100.0 * saving
                        );
                    }
                    left
                } else {
                    "-".to_string()
                };
                (
                    format!("{c} {p:.3}"),
                    format!("{:+.1} %", 100.0 * gap),
                    left,
                )
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {rn:.3} | {rd:.3} | {rt:.3} | {rm:.3} | {rc:.3} | {peer_cell} | {gap_cell} | {left_cell} |",
            r.category,
            r.dataset,
            r.dtype,
            r.size_class.label(),
            r.raw as f64 / 1e6,
            s.class_cells(),
            s.pct(s.repeated_rows),
            s.pct(s.few_tails),
        );
        let c = cats.entry(r.category.clone()).or_default();
        c.0.add(s);
        c.1 += r.raw;
        c.2 += r.nomodel;
        c.3 += r.modelled;
        c.4.push(rm);
        if let Some((_, p)) = peer {
            c.5.push(*p);
        }
        c.6.push(rd);
        c.7.push(rc);
    }
    let _ = writeln!(
        md,
        "\n## Per category\n\nBytes summed over the records, and the geomean over records the bench's headline ranks by: rans against the peer with the highest geomean in the category.\n\n| category | raw MB | zero % | = left % | = up % | dict % | = channel % | match % | literal % | rans-nomodel | rans | rans-nodiff, geomean of records | rans, geomean of records | rans + channel contexts (est.), geomean of records | best peer, geomean of records | gap | gap with channel contexts (est.) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (cat, (s, raw, nm, m, rans_records, _, diff_records, channel_records)) in &cats {
        let g = planepack_harness::report::geomean(rans_records);
        let gd = planepack_harness::report::geomean(diff_records);
        let gc = planepack_harness::report::geomean(channel_records);
        let (peer_cell, gap_cell, channel_gap_cell) = match peers.category_best.get(cat) {
            Some((c, p)) => (
                format!("{c} {p:.3}"),
                format!("{:+.1} %", 100.0 * (g / p - 1.0)),
                format!("{:+.1} %", 100.0 * (gc / p - 1.0)),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            md,
            "| {cat} | {:.1} | {} | {:.3} | {:.3} | {gd:.3} | {g:.3} | {gc:.3} | {peer_cell} | {gap_cell} | {channel_gap_cell} |",
            *raw as f64 / 1e6,
            s.class_cells(),
            *raw as f64 / *nm.max(&1) as f64,
            *raw as f64 / *m.max(&1) as f64,
        );
    }
    if peers.best.is_empty() {
        let _ = writeln!(
            md,
            "\nNo peer results found at `{}`: run `cargo xtask bench{}` first.",
            results.display(),
            if workloads { " --workloads" } else { "" }
        );
    }
    std::fs::write(&out, md)?;
    println!("wrote {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BF16 elements of `rows` rows of `channels` features, each feature `f(row, channel)`.
    fn bf16(rows: usize, channels: usize, f: impl Fn(usize, usize) -> f32) -> Vec<u8> {
        (0..rows * channels)
            .flat_map(|i| ((f(i / channels, i % channels).to_bits() >> 16) as u16).to_le_bytes())
            .collect()
    }

    #[test]
    fn channel_contexts_pay_only_where_channels_differ() {
        // Magnitudes over four binades, alike in every channel; the sign is the channel's
        // (even channels positive) or the element's own. Neither the exponent one row up nor
        // the element's own tells the sign; the channel does.
        let hash = |r: usize, c: usize| (r * 7919 + c * 104_729).wrapping_mul(2_654_435_761) >> 7;
        let magnitude = |r: usize, c: usize| {
            (1.0 + (hash(r, c) % 1024) as f32 / 1024.0) * (1 << (hash(c, r) % 4)) as f32
        };
        let by_channel = bf16(2048, 64, |r, c| match c % 2 {
            0 => magnitude(r, c),
            _ => -magnitude(r, c),
        });
        let (now, classed) = channel_context_bits(&[2048, 64], &by_channel, 2).unwrap();
        assert!(classed < 0.95 * now, "{classed} vs {now}");
        let own = bf16(2048, 64, |r, c| match hash(r + 1, c) % 2 {
            0 => magnitude(r, c),
            _ => -magnitude(r, c),
        });
        let (now, classed) = channel_context_bits(&[2048, 64], &own, 2).unwrap();
        assert!(classed > now, "{classed} vs {now}: only the tables' cost");
        // No channels to split, or chunk tables that already follow them.
        assert!(channel_context_bits(&[2048 * 64], &own, 2).is_none());
        assert!(channel_context_bits(&[1, 2, 1024, 64], &own, 2).is_none());
    }

    #[test]
    fn every_element_has_one_class() {
        // 2 rows of 8 BF16 elements: zeros, a run, a row repeated, literals.
        let v: [u16; 16] = [
            0, 0x3f80, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, //
            0, 0x3f80, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0,
        ];
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let s = classify(&[2, 8], &data, 2);
        assert_eq!(s.elements, 16);
        assert_eq!(
            s.zero + s.left + s.up + s.dict + s.channel + s.matched + s.literal,
            16
        );
        assert_eq!(s.zero, 2);
        assert_eq!(s.left, 2);
        assert_eq!(s.up, 6);
        assert_eq!(s.dict, 1);
        assert_eq!(s.literal, 5);
        assert_eq!(s.repeated_rows, 8);
    }
}
