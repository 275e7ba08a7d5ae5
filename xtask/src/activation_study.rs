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
//! gap. Writes `bench-results/activation-study.md` (`activation-study-workloads.md`).

use anyhow::Result;
use planepack_core::Codec;
use planepack_harness::{Group, Results};
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

/// Classify one tensor's elements.
fn classify(shape: &[usize], data: &[u8], width: usize) -> Shares {
    let v = elements(data, width);
    let row = if shape.len() >= 2 {
        *shape.last().unwrap_or(&0)
    } else {
        0
    };
    let plane = if shape.len() >= 3 {
        row * shape[shape.len() - 2]
    } else {
        0
    };
    let mut s = Shares {
        elements: v.len() as u64,
        ..Shares::default()
    };
    let mut counts: HashMap<u32, u32> = HashMap::new();
    let mut seen: HashMap<[u32; MIN_MATCH], usize> = HashMap::new();
    for start in (0..v.len()).step_by(CHUNK) {
        let c = &v[start..(start + CHUNK).min(v.len())];
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
    if row > 0 {
        let mut rows: std::collections::HashSet<&[u32]> = std::collections::HashSet::new();
        for r in v.chunks_exact(row) {
            if !rows.insert(r) {
                s.repeated_rows += row as u64;
            }
        }
    }
    s
}

/// Contexts of the exponent-conditioned estimate: the top byte relative to the tensor's most
/// frequent top byte, clamped to -3..=2 (six tables).
const EXP_CONTEXTS: usize = 6;
/// Bytes of one 256-symbol table in the format's plane-table layout (count, bitmap,
/// frequencies), what each extra context table would cost once per tensor.
const FULL_TABLE_BYTES: f64 = 1.0 + 32.0 + 512.0;

/// Order-0 entropy of counts, in bits.
fn entropy(counts: &[u64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| c as f64 * (n as f64 / c as f64).log2())
        .sum()
}

/// Structure left in the literal bytes (an estimate for the next coding stage, not something
/// the codec does): bytes saved if the byte below the exponent (plane 1 of the rotated
/// elements) were coded with the element's top byte as context, with tables shared by the
/// whole tensor, over coding it order-0 with one tensor table: `n (H(p1) - H(p1 | ctx))` less
/// the extra tables. (Float mantissas' top bits depend on the binade: at the distribution's
/// tails a binade's values crowd its low end.) 0 for single bytes.
fn exponent_context_saving(data: &[u8], width: usize) -> f64 {
    if width < 2 {
        return 0.0;
    }
    let bits = 8 * width as u32;
    let mut top = [0u64; 256];
    let mut joint = vec![[0u64; 256]; 256];
    for e in data.chunks_exact(width) {
        let mut v = [0u8; 4];
        v[..width].copy_from_slice(e);
        let v = u32::from_le_bytes(v);
        let t = ((v << 1) | (v >> (bits - 1))) & (u32::MAX >> (32 - bits));
        let (p0, p1) = (
            (t >> (bits - 8)) as usize,
            (t >> (bits - 16)) as usize & 255,
        );
        top[p0] += 1;
        joint[p0][p1] += 1;
    }
    let mode = (0..256)
        .max_by_key(|&i| (top[i], std::cmp::Reverse(i)))
        .unwrap_or(0) as i64;
    let mut ctx = vec![[0u64; 256]; EXP_CONTEXTS];
    let mut all = [0u64; 256];
    for (p0, row) in joint.iter().enumerate() {
        let c = (p0 as i64 - mode).clamp(-3, 2) + 3;
        for (p1, &n) in row.iter().enumerate() {
            ctx[c as usize][p1] += n;
            all[p1] += n;
        }
    }
    let used = ctx.iter().filter(|c| c.iter().any(|&n| n > 0)).count();
    let conditioned: f64 = ctx.iter().map(|c| entropy(c)).sum();
    ((entropy(&all) - conditioned) / 8.0 - (used.saturating_sub(1)) as f64 * FULL_TABLE_BYTES)
        .max(0.0)
}

/// One study row: a dataset's dtype, its shares and ratios.
struct Row {
    category: String,
    dataset: String,
    dtype: String,
    raw: u64,
    shares: Shares,
    /// Compressed bytes: rANS without and with the modelled chunk.
    nomodel: u64,
    modelled: u64,
    /// [`exponent_context_saving`], summed over the tensors.
    exp_saving: f64,
}

fn compressed(codec: &Rans, g: &Group) -> Result<u64> {
    let mut total = 0u64;
    for (shape, data) in &g.tensors {
        let mut enc = Vec::new();
        codec.encode_shaped(data, g.elem, shape, &mut enc)?;
        let mut out = vec![0u8; data.len()];
        codec.decode(&enc, &mut out)?;
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
    for (shape, data) in &g.tensors {
        shares.add(&classify(shape, data, width));
    }
    let nomodel = compressed(
        &Rans {
            modelled: false,
            ..Rans::default()
        },
        g,
    )?;
    let modelled = compressed(&Rans::default(), g)?;
    let exp_saving: f64 = g
        .tensors
        .iter()
        .map(|(_, data)| exponent_context_saving(data, width))
        .sum();
    let raw = g.raw_bytes();
    match rows
        .iter_mut()
        .find(|r| r.dataset == g.dataset && r.dtype == g.dtype)
    {
        Some(r) => {
            r.raw += raw;
            r.shares.add(&shares);
            r.nomodel += nomodel;
            r.modelled += modelled;
            r.exp_saving += exp_saving;
        }
        None => rows.push(Row {
            category: g.category.clone(),
            dataset: g.dataset.clone(),
            dtype: g.dtype.clone(),
            raw,
            shares,
            nomodel,
            modelled,
            exp_saving,
        }),
    }
    Ok(())
}

/// Best peer per (dataset, dtype) from a results file, size classes summed: (codec, ratio).
fn best_peers(results: &Path) -> Result<BTreeMap<(String, String), (String, f64)>> {
    let mut sums: BTreeMap<(String, String, String), (u64, u64)> = BTreeMap::new();
    if let Ok(text) = std::fs::read_to_string(results) {
        let res: Results = serde_json::from_str(&text)?;
        for r in res.records.iter().filter(|r| {
            r.codec != "raw"
                && crate::peers::PEER_CODECS
                    .iter()
                    .chain(["zstd-3", "zstd-19", "lz4"].iter())
                    .any(|p| *p == r.codec || r.codec.starts_with("blosc2"))
        }) {
            let e = sums
                .entry((r.dataset.clone(), r.dtype.clone(), r.codec.clone()))
                .or_default();
            e.0 += r.raw_bytes;
            e.1 += r.compressed_bytes;
        }
    }
    let mut best: BTreeMap<(String, String), (String, f64)> = BTreeMap::new();
    for ((d, t, c), (raw, comp)) in sums {
        let ratio = raw as f64 / comp.max(1) as f64;
        let e = best.entry((d, t)).or_insert((c.clone(), 0.0));
        if ratio > e.1 {
            *e = (c, ratio);
        }
    }
    Ok(best)
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
    let peers = best_peers(&results)?;
    let mut md = format!(
        "# Structure in the tensors, what the rANS modelled chunk takes, what is left\n\n\
         Generated by `cargo xtask activation-study{}` on {machine}, on {corpus}. Each element \
         is put in the first class that explains it, within 64 Ki-element chunks: **zero**, \
         **= left** neighbour, **= up** (the element one row back, row = last dimension), \
         **dict** (the chunk's most frequent nonzero value): the four the modelled chunk codes \
         as symbols (ARCHITECTURE.md, docs/format-rans.md). Then two it does not code: \
         **= channel** (one channel back: stride of the last two dimensions, rank >= 3) and \
         **match** (covered by a match of >= {MIN_MATCH} elements at any distance in the \
         chunk, as an LZ stage finds). The rest are **literals** (exponent as a symbol, the \
         other bytes as planes). **Repeated rows** (rows equal to an earlier row) are counted \
         apart: the row map takes them whole. Ratios: rANS without and with the modelled \
         chunk, measured here on the same bytes (every stream decoded and compared), and the \
         best peer (CPU coders, GPU-decodable or not, at every setting measured) from `{}` \
         of the same machine, size classes summed. Gap: rans over the best peer, minus one. \
         **Exponent context** estimates structure left in the literal bytes: how much smaller \
         the rans stream would be if the byte below the exponent (plane 1 of the rotated \
         elements) were coded with the element's top byte as context ({EXP_CONTEXTS} tables \
         shared by the tensor, their cost counted) instead of order-0; the codec does not do \
         this yet.\n\n",
        if workloads { " --workloads" } else { "" },
        results.strip_prefix(root).unwrap_or(&results).display()
    );
    let _ = writeln!(
        md,
        "| category | dataset | dtype | raw MB | zero % | = left % | = up % | dict % | = channel % | match % | literal % | repeated rows % | rans-nomodel | rans | best peer | gap | exponent context | structure left |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut cats: BTreeMap<String, (Shares, u64, u64, u64, Vec<f64>)> = BTreeMap::new();
    for r in &rows {
        let s = &r.shares;
        let rn = r.raw as f64 / r.nomodel.max(1) as f64;
        let rm = r.raw as f64 / r.modelled.max(1) as f64;
        let peer = peers.get(&(r.dataset.clone(), r.dtype.clone()));
        let (peer_cell, gap_cell, left_cell) = match peer {
            Some((c, p)) => {
                let gap = rm / p - 1.0;
                let left = if gap < 0.0 {
                    let mut kinds = [
                        ("channel repeats", s.channel),
                        ("matches at a distance", s.matched),
                    ];
                    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
                    let repeats = if kinds[0].1 > 0 {
                        format!("{} ({:.1} % of elements)", kinds[0].0, s.pct(kinds[0].1))
                    } else {
                        "no repeats left".to_string()
                    };
                    let exp = 100.0 * r.exp_saving / r.modelled.max(1) as f64;
                    if exp >= 0.5 {
                        format!("exponent context ({exp:.1} % of the stream); {repeats}")
                    } else {
                        repeats
                    }
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
            "| {} | {} | {} | {:.1} | {} | {:.1} | {rn:.3} | {rm:.3} | {peer_cell} | {gap_cell} | {:.1} % | {left_cell} |",
            r.category,
            r.dataset,
            r.dtype,
            r.raw as f64 / 1e6,
            s.class_cells(),
            s.pct(s.repeated_rows),
            100.0 * r.exp_saving / r.modelled.max(1) as f64,
        );
        let c = cats.entry(r.category.clone()).or_default();
        c.0.add(s);
        c.1 += r.raw;
        c.2 += r.nomodel;
        c.3 += r.modelled;
        if let Some((_, p)) = peer {
            c.4.push(r.raw as f64 / p);
        }
    }
    let _ = writeln!(
        md,
        "\n## Per category (bytes summed)\n\n| category | raw MB | zero % | = left % | = up % | dict % | = channel % | match % | literal % | rans-nomodel | rans | best peer (per dataset) | gap |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (cat, (s, raw, nm, m, peer_bytes)) in &cats {
        let rm = *raw as f64 / *m.max(&1) as f64;
        let n = rows.iter().filter(|r| &r.category == cat).count();
        let (peer_cell, gap_cell) = if peer_bytes.len() == n {
            let p = *raw as f64 / peer_bytes.iter().sum::<f64>();
            (
                format!("{p:.3}"),
                format!("{:+.1} %", 100.0 * (rm / p - 1.0)),
            )
        } else {
            ("-".into(), "-".into())
        };
        let _ = writeln!(
            md,
            "| {cat} | {:.1} | {} | {:.3} | {rm:.3} | {peer_cell} | {gap_cell} |",
            *raw as f64 / 1e6,
            s.class_cells(),
            *raw as f64 / *nm.max(&1) as f64,
        );
    }
    if peers.is_empty() {
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

    /// Where the byte below the exponent follows the exponent, the estimate finds about
    /// n * H(p1) bits less the tables; where the two are independent, nothing.
    #[test]
    fn exponent_context_saving_finds_dependence_only() {
        // BF16 (rotated: top byte = exponent): exponent e in 120..=123, low byte 2 * e or
        // 2 * e + 1, or pseudo-random.
        let n = 1 << 16;
        let mut seed = 7u32;
        let mut dependent = Vec::new();
        let mut independent = Vec::new();
        for i in 0..n {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let e = 120 + (seed >> 30) as u16;
            let r = (seed >> 8) as u16 & 0xff;
            for (out, low) in [
                (&mut dependent, (2 * e + (i as u16 & 1)) & 0xff),
                (&mut independent, r),
            ] {
                // t = e << 8 | low is the rotated element; store rotr(t, 1).
                let t = e << 8 | low;
                out.extend_from_slice(&t.rotate_right(1).to_le_bytes());
            }
        }
        let dep = exponent_context_saving(&dependent, 2);
        let ind = exponent_context_saving(&independent, 2);
        // 4 exponents, plane 1 one of 2 values each: H(p1) = 3 bits, H(p1 | e) = 1 bit (or
        // 1.5 where the clamp merges two exponents): at least 1.5 bits an element saved, less
        // the tables.
        assert!(dep > n as f64 * 1.5 / 8.0 - 3.0 * FULL_TABLE_BYTES, "{dep}");
        assert_eq!(ind, 0.0);
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
