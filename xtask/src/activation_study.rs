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
//! would make of the gap and which repeats remain, and estimates of what two contexts `rans`
//! lacks would save ([`ContextSavings`]: statistics, not repeats). (An earlier column estimated plane 1 with
//! the exponent as context, which became stream version 4, and then the steps between
//! neighbours, which became version 5.) Writes
//! `bench-results/activation-study.md` (`activation-study-workloads.md`).

use anyhow::Result;
use planepack_core::Codec;
use planepack_harness::{Group, SizeClass};
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

/// Classes a tensor's channels are put in for [`context_estimates`].
const CHANNEL_CLASSES: usize = 8;
/// What one entry of a frequency table costs in [`context_estimates`] (a compact table's
/// frequency byte or two and the symbol's share of its set).
const TABLE_ENTRY_BITS: f64 = 10.0;

/// Bits contexts `rans` does not have would save on one tensor (negative: they would cost
/// more in tables than they save), each estimated from the tensor's own counts (conditional
/// entropies, every nonzero table entry at [`TABLE_ENTRY_BITS`]) against the contexts `rans`
/// codes with: plane 0 by the row context of the exponent one row up (row tables), plane 1 by
/// its element's exponent context (context tables) and, for 2-byte elements, the class of the
/// sign one row up (sign tables), as the codec defines them (row shift 0, `E0` the most
/// frequent nonzero element's plane-0 byte), the other planes order 0.
/// Statistics, not repeats, and both decodable in parallel as row planes are (a symbol's
/// context is in an earlier plane, or a row back in its own):
#[derive(Default, Clone, Copy)]
struct ContextSavings {
    /// Planes 0 and 1 with their contexts also split by the class of the element's channel
    /// ([`CHANNEL_CLASSES`] quantiles of the tensor's channels: by mean exponent byte for
    /// plane 0, by share of negative elements for plane 1). The channel is the last dimension
    /// (rank 2 and 3: a transformer's hidden features) or dimension 1 (rank 4 and more: a CNN's
    /// NCHW channels). `None` where the codec's own chunk tables already follow the channels
    /// (a channel block of more than an eighth of a chunk: early CNN layers) or there are none.
    channel: Option<f64>,
    /// FP32's plane 3, which holds the sign after the codec's rotation (its low bit), with the
    /// sign of the element one row up as context (positive, negative, or zero or none): what
    /// `rans`'s sign planes do for 2-byte elements (for those, 0).
    up_sign: f64,
    /// The sign's plane with the left neighbour's sign too (in its row; none at a row's
    /// start), over the up sign's: what lanes of contiguous elements would allow, where the
    /// lanes interleave elements now (the left neighbour is another lane's symbol of the same
    /// round).
    left_sign: f64,
}

/// One element as [`context_estimates`] sees it: planes 0 and 1 and its last plane, rotated
/// as the codec does, and its sign (0 positive, 1 negative, 2 zero).
struct Elem {
    top: u8,
    second: u8,
    last: u8,
    sign: u8,
}

/// [`ContextSavings`] of one tensor; `None` for bytes, flat tensors and tensors too small to
/// tell.
fn context_estimates(shape: &[usize], v: &[u32], width: usize) -> Option<ContextSavings> {
    use planepack_rans::internals::contexts::{context, CONTEXTS};
    use planepack_rans::internals::plan::entropy_bits;
    use planepack_rans::internals::row_contexts::{row_context, ROW_CONTEXTS, ROW_FIRST};
    if width < 2 || shape.len() < 2 || v.len() < 4096 {
        return None;
    }
    let row = *shape.last()?;
    let elems: Vec<Elem> = v
        .iter()
        .map(|&v| {
            let t = match width {
                2 => ((v as u16).rotate_left(1) as u32) << 16,
                _ => v.rotate_left(1),
            };
            let sign = match v {
                0 => 2,
                _ => (v >> (8 * width - 1)) as u8,
            };
            let last = if width == 2 { t >> 16 } else { t };
            Elem {
                top: (t >> 24) as u8,
                second: (t >> 16) as u8,
                last: last as u8,
                sign,
            }
        })
        .collect();
    let mut modes = [0u64; 256];
    for x in &elems {
        modes[x.top as usize] += u64::from(x.sign != 2);
    }
    let e0 = (0..256)
        .max_by_key(|&e| (modes[e], std::cmp::Reverse(e)))
        .unwrap_or(0) as u8;
    // Bits of symbols under their contexts' tables (256 symbols a context), tables included.
    let bits = |counts: &[u32]| -> f64 {
        counts
            .as_chunks::<256>()
            .0
            .iter()
            .map(|t| {
                let entries = t.iter().filter(|&&c| c > 0).count();
                entropy_bits(t) + entries as f64 * TABLE_ENTRY_BITS
            })
            .sum()
    };
    let up_context = |i: usize| match i >= row {
        true => row_context(elems[i - row].top, e0, 0),
        false => ROW_FIRST,
    };
    let up_sign = |i: usize| {
        if i >= row {
            elems[i - row].sign as usize
        } else {
            2
        }
    };
    let left_sign = |i: usize| match i % row {
        0 => 2,
        _ => elems[i - 1].sign as usize,
    };
    // The sign's plane as `rans` codes it, with the sign one row up, and with both
    // neighbours' signs: its byte and its context under `rans` (BF16 and FP16: plane 1 by
    // the exponent's context and the class of the sign one row up, as the sign tables take
    // it: none, positive or zero, negative; FP32: plane 3, order 0).
    let rans_class = |i: usize| match i.checked_sub(row) {
        None => 0,
        Some(j) => 1 + usize::from(elems[j].sign == 1),
    };
    let up_class = |i: usize| match width {
        2 => rans_class(i),
        _ => up_sign(i),
    };
    let (sign_plane, own_contexts) = match width {
        2 => (
            elems
                .iter()
                .map(|x| (x.second, context(x.top, e0)))
                .collect::<Vec<_>>(),
            CONTEXTS,
        ),
        _ => (elems.iter().map(|x| (x.last, 0)).collect(), 1),
    };
    let mut now = vec![0u32; 3 * own_contexts * 256];
    let mut up = vec![0u32; 3 * own_contexts * 256];
    let mut both = vec![0u32; 9 * own_contexts * 256];
    for (i, &(byte, own)) in sign_plane.iter().enumerate() {
        let b = byte as usize;
        let rans_now = if width == 2 { rans_class(i) } else { 0 };
        now[(rans_now * own_contexts + own) * 256 + b] += 1;
        up[(up_class(i) * own_contexts + own) * 256 + b] += 1;
        both[((3 * up_class(i) + left_sign(i)) * own_contexts + own) * 256 + b] += 1;
    }
    let (sign_saving, left_saving) = (bits(&now) - bits(&up), bits(&up) - bits(&both));
    let (channels, inner) = match shape.len() {
        2 | 3 => (row, 1usize),
        _ => (shape[1], shape[2..].iter().product()),
    };
    let chunk_elems = (1usize << planepack_rans::DEFAULT_CHUNK_LOG2) / width;
    let channel_saving = (channels >= 2 && inner.saturating_mul(8) <= chunk_elems).then(|| {
        let channel = |i: usize| (i / inner) % channels;
        // Each channel's class: its rank among the tensor's channels by a mean, in quantiles.
        let classes = |value: fn(&Elem) -> f64| -> Vec<usize> {
            let mut sum = vec![0f64; channels];
            let mut count = vec![0u64; channels];
            for (i, x) in elems.iter().enumerate() {
                sum[channel(i)] += value(x);
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
        let by_exponent = classes(|x| x.top as f64);
        let by_sign = classes(|x| (x.sign == 1) as u8 as f64);
        let mut p0 = vec![0u32; ROW_CONTEXTS * 256];
        let mut p0_classed = vec![0u32; CHANNEL_CLASSES * ROW_CONTEXTS * 256];
        let mut p1 = vec![0u32; CONTEXTS * 256];
        let mut p1_classed = vec![0u32; CHANNEL_CLASSES * CONTEXTS * 256];
        for (i, x) in elems.iter().enumerate() {
            let (up, own, c) = (up_context(i), context(x.top, e0), channel(i));
            let (e, m) = (x.top as usize, x.second as usize);
            p0[up * 256 + e] += 1;
            p0_classed[(by_exponent[c] * ROW_CONTEXTS + up) * 256 + e] += 1;
            p1[own * 256 + m] += 1;
            p1_classed[(by_sign[c] * CONTEXTS + own) * 256 + m] += 1;
        }
        bits(&p0) + bits(&p1) - bits(&p0_classed) - bits(&p1_classed)
    });
    Some(ContextSavings {
        channel: channel_saving,
        up_sign: sign_saving,
        left_sign: left_saving,
    })
}

/// Classify one tensor's elements.
fn classify(shape: &[usize], data: &[u8], v: &[u32], width: usize) -> Shares {
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
        few_tails: few_tails(v, width),
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
    /// without the tail dictionaries, without the sign planes, and the default encoder (all
    /// on).
    nomodel: u64,
    nodiff: u64,
    notails: u64,
    nosign: u64,
    modelled: u64,
    /// The default encoder with the chunk size searched per tensor (`rans-1`).
    searched: u64,
    /// Bits each context of [`ContextSavings`] would save, summed over the tensors where it
    /// saves any.
    channel_saving_bits: f64,
    up_sign_saving_bits: f64,
    left_sign_saving_bits: f64,
}

/// Bytes of `g` through `codec` (every stream decoded and compared).
pub(crate) fn compressed(codec: &Rans, g: &Group) -> Result<u64> {
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
    let (mut channel_saving_bits, mut up_sign_saving_bits, mut left_sign_saving_bits) =
        (0.0, 0.0, 0.0);
    for (shape, data) in &g.tensors {
        let v = elements(data, width);
        shares.add(&classify(shape, data, &v, width));
        if let Some(saving) = context_estimates(shape, &v, width) {
            channel_saving_bits += saving.channel.unwrap_or(0.0).max(0.0);
            up_sign_saving_bits += saving.up_sign.max(0.0);
            left_sign_saving_bits += saving.left_sign.max(0.0);
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
    let nosign = compressed(
        &Rans {
            sign_contexts: false,
            ..Rans::default()
        },
        g,
    )?;
    let modelled = compressed(&Rans::default(), g)?;
    let searched = compressed(&Rans::SEARCH, g)?;
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
            r.nosign += nosign;
            r.modelled += modelled;
            r.searched += searched;
            r.channel_saving_bits += channel_saving_bits;
            r.up_sign_saving_bits += up_sign_saving_bits;
            r.left_sign_saving_bits += left_sign_saving_bits;
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
            nosign,
            modelled,
            searched,
            channel_saving_bits,
            up_sign_saving_bits,
            left_sign_saving_bits,
        }),
    }
    Ok(())
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
    let results = crate::peer_results::with_fallback(root, &machine_dir, results)?;
    let peers = crate::peer_results::peers(&results)?;
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
         T), without the sign planes (stream version 8: plane 1 of BF16 and FP16 by the sign \
         one row up too), as the default encoder writes it and as `rans-1` writes it (the default \
         encoder at a chunk size chosen per tensor, 4 KiB to 2^17 elements, by a descent from \
         64 KiB that keeps the shortest stream it meets), measured here on the same bytes (every stream decoded and compared), and the \
         best peer of the record (CPU coders, GPU-decodable or not, at every setting \
         measured) from `{}` (the same machine's where it has one: a peer's ratio does not \
         depend on the machine). Gap: rans (and rans-1) over the best peer, minus one; \
         where rans trails the best peer, the structure left says which repeats remain. \
         Two estimates of structure that is statistics, not repeats, each the default \
         stream less the bits a context `rans` lacks would save, from each tensor's counts \
         (conditional entropies against `rans`'s own contexts: the exponent one row up for \
         plane 0, the element's own exponent for plane 1 and for BF16 and FP16 the sign one \
         row up; every table entry at \
         {TABLE_ENTRY_BITS} bits), on the tensors where it saves any; both contexts are \
         in an earlier plane or a row back, so a GPU would decode them in parallel as it \
         does row planes. **rans + channel contexts, est.**: the values' distributions per \
         channel (a CNN's channels of a few pixels each, a transformer's hidden features), \
         which a chunk's tables mix: planes 0 and 1 with their contexts also split by the \
         channel's class ({CHANNEL_CLASSES} quantiles of the tensor's channels by mean \
         exponent byte, by share of negative elements; tensors whose channel blocks are at \
         most an eighth of a chunk). **rans + FP32 up-sign context, est.**: the plane that \
         holds the sign after the rotation in FP32 (plane 3) with the sign of the element one \
         row up (positive, negative, zero) as context, as the sign planes do for BF16 and \
         FP16 (the per-category table adds the left neighbour's sign as well, for every \
         width: what lanes of contiguous elements would allow). \
         Estimates for the next modelling step, not coders.\n\n",
        if workloads { " --workloads" } else { "" },
        results.strip_prefix(root).unwrap_or(&results).display()
    );
    let _ = writeln!(
        md,
        "| category | dataset | dtype | size class | raw MB | zero % | = left % | = up % | dict % | = channel % | match % | literal % | repeated rows % | few tails % | rans-nomodel | rans-nodiff | rans-notails | rans-nosign | rans | rans-1 | rans + channel contexts, est. | rans + FP32 up-sign context, est. | best peer | gap | gap, rans-1 | structure left |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    /// A category's records: shares and bytes summed, and each record's ratios.
    #[derive(Default)]
    struct Cat {
        shares: Shares,
        raw: u64,
        nomodel: u64,
        modelled: u64,
        rans: Vec<f64>,
        searched: Vec<f64>,
        nodiff: Vec<f64>,
        nosign: Vec<f64>,
        channel: Vec<f64>,
        up_sign: Vec<f64>,
        left_sign: Vec<f64>,
    }
    let mut cats: BTreeMap<String, Cat> = BTreeMap::new();
    for r in &rows {
        let s = &r.shares;
        let rn = r.raw as f64 / r.nomodel.max(1) as f64;
        let rm = r.raw as f64 / r.modelled.max(1) as f64;
        let rsearch = r.raw as f64 / r.searched.max(1) as f64;
        let rd = r.raw as f64 / r.nodiff.max(1) as f64;
        let rt = r.raw as f64 / r.notails.max(1) as f64;
        let rns = r.raw as f64 / r.nosign.max(1) as f64;
        // The default stream's ratio had it `bits` fewer.
        let ratio_less = |bits: f64| r.raw as f64 / (r.modelled as f64 - bits / 8.0).max(1.0);
        let (channel_bytes, sign_bytes) =
            (r.channel_saving_bits / 8.0, r.up_sign_saving_bits / 8.0);
        let (rc, rs) = (
            ratio_less(r.channel_saving_bits),
            ratio_less(r.up_sign_saving_bits),
        );
        let peer = peers
            .best
            .get(&(r.dataset.clone(), r.dtype.clone(), r.size_class));
        let (peer_cell, gap_cell, search_gap_cell, left_cell) = match peer {
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
                    for (what, bytes) in [
                        ("FP32's sign one row up", sign_bytes),
                        ("per-channel distributions", channel_bytes),
                    ] {
                        let saving = bytes / r.modelled.max(1) as f64;
                        if saving >= 0.001 {
                            let _ = write!(
                                left,
                                "; {what} (est. {:.1} % of the bytes)",
                                100.0 * saving
                            );
                        }
                    }
                    left
                } else {
                    "-".to_string()
                };
                (
                    format!("{c} {p:.3}"),
                    format!("{:+.1} %", 100.0 * gap),
                    format!("{:+.1} %", 100.0 * (rsearch / p - 1.0)),
                    left,
                )
            }
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {rn:.3} | {rd:.3} | {rt:.3} | {rns:.3} | {rm:.3} | {rsearch:.3} | {rc:.3} | {rs:.3} | {peer_cell} | {gap_cell} | {search_gap_cell} | {left_cell} |",
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
        c.shares.add(s);
        c.raw += r.raw;
        c.nomodel += r.nomodel;
        c.modelled += r.modelled;
        c.rans.push(rm);
        c.searched.push(rsearch);
        c.nodiff.push(rd);
        c.nosign.push(rns);
        c.channel.push(rc);
        c.up_sign.push(rs);
        c.left_sign
            .push(ratio_less(r.up_sign_saving_bits + r.left_sign_saving_bits));
    }
    let _ = writeln!(
        md,
        "\n## Per category\n\nBytes summed over the records, and the geomean over records the bench's headline ranks by: rans against the peer with the highest geomean in the category.\n\n| category | raw MB | zero % | = left % | = up % | dict % | = channel % | match % | literal % | rans-nomodel | rans | rans-nodiff, geomean of records | rans-nosign, geomean of records | rans, geomean of records | rans-1, geomean of records | rans + channel contexts (est.), geomean of records | rans + FP32 up-sign context (est.), geomean of records | best peer, geomean of records | gap | gap, rans-1 | gap with channel contexts (est.) | gap with FP32's up-sign context (est.) | gap with the left-sign context too (est., lanes of contiguous elements) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (cat, c) in &cats {
        let g = planepack_harness::report::geomean(&c.rans);
        let g1 = planepack_harness::report::geomean(&c.searched);
        let gd = planepack_harness::report::geomean(&c.nodiff);
        let gn = planepack_harness::report::geomean(&c.nosign);
        let gc = planepack_harness::report::geomean(&c.channel);
        let gs = planepack_harness::report::geomean(&c.up_sign);
        let gb = planepack_harness::report::geomean(&c.left_sign);
        let gap = |x: f64, p: f64| format!("{:+.1} %", 100.0 * (x / p - 1.0));
        let cells = match peers.category_best.get(cat) {
            Some((best, p)) => [
                format!("{best} {p:.3}"),
                gap(g, *p),
                gap(g1, *p),
                gap(gc, *p),
                gap(gs, *p),
                gap(gb, *p),
            ],
            None => std::array::from_fn(|_| "-".to_string()),
        };
        let [peer_cell, gap_cell, search_gap_cell, channel_gap_cell, sign_gap_cell, both_gap_cell] =
            cells;
        let _ = writeln!(
            md,
            "| {cat} | {:.1} | {} | {:.3} | {:.3} | {gd:.3} | {gn:.3} | {g:.3} | {g1:.3} | {gc:.3} | {gs:.3} | {peer_cell} | {gap_cell} | {search_gap_cell} | {channel_gap_cell} | {sign_gap_cell} | {both_gap_cell} |",
            c.raw as f64 / 1e6,
            c.shares.class_cells(),
            c.raw as f64 / c.nomodel.max(1) as f64,
            c.raw as f64 / c.modelled.max(1) as f64,
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
    fn contexts_pay_only_where_their_structure_is() {
        // Magnitudes over four binades, alike in every channel; the sign is the channel's
        // (even channels positive) or the element's own. Neither the exponent one row up nor
        // the element's own tells the sign; the channel, and the sign one row up, do (which
        // `rans` codes for BF16: nothing left for the left neighbour's sign; for FP32 the
        // up sign is left).
        let hash = |r: usize, c: usize| (r * 7919 + c * 104_729).wrapping_mul(2_654_435_761) >> 7;
        let magnitude = |r: usize, c: usize| {
            (1.0 + (hash(r, c) % 1024) as f32 / 1024.0) * (1 << (hash(c, r) % 4)) as f32
        };
        let by_channel = bf16(2048, 64, |r, c| match c % 2 {
            0 => magnitude(r, c),
            _ => -magnitude(r, c),
        });
        let n = (2048 * 64) as f64;
        let saving = context_estimates(&[2048, 64], &elements(&by_channel, 2), 2).unwrap();
        assert!(saving.channel.unwrap() > 0.5 * n, "{:?}", saving.channel);
        assert_eq!(saving.up_sign, 0.0, "the sign planes' own context");
        assert!(saving.left_sign < 0.0, "only the tables' cost");
        let fp32: Vec<u8> = elements(&by_channel, 2)
            .iter()
            .flat_map(|&v| (v << 16).to_le_bytes())
            .collect();
        let saving = context_estimates(&[2048, 64], &elements(&fp32, 4), 4).unwrap();
        assert!(saving.up_sign > 0.5 * n, "{}", saving.up_sign);
        // The sign a row's: the row up does not tell it, the left neighbour does.
        let by_row = bf16(2048, 64, |r, c| match hash(r + 7, 3) % 2 {
            0 => magnitude(r, c),
            _ => -magnitude(r, c),
        });
        let saving = context_estimates(&[2048, 64], &elements(&by_row, 2), 2).unwrap();
        assert!(saving.left_sign > 0.5 * n, "{}", saving.left_sign);
        let own = bf16(2048, 64, |r, c| match hash(r + 1, c) % 2 {
            0 => magnitude(r, c),
            _ => -magnitude(r, c),
        });
        let saving = context_estimates(&[2048, 64], &elements(&own, 2), 2).unwrap();
        assert!(saving.channel.unwrap() < 0.0, "only the tables' cost");
        assert!(saving.left_sign < 0.0, "only the tables' cost");
        // No rows, or chunk tables that already follow the channels.
        assert!(context_estimates(&[2048 * 64], &elements(&own, 2), 2).is_none());
        let early_layer = context_estimates(&[1, 2, 1024, 64], &elements(&own, 2), 2).unwrap();
        assert!(early_layer.channel.is_none());
    }

    #[test]
    fn every_element_has_one_class() {
        // 2 rows of 8 BF16 elements: zeros, a run, a row repeated, literals.
        let v: [u16; 16] = [
            0, 0x3f80, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, //
            0, 0x3f80, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0,
        ];
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let s = classify(&[2, 8], &data, &elements(&data, 2), 2);
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
