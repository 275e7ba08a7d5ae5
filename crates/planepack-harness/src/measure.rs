//! Timing: repeated runs after a warm-up, medians and spreads, memcpy interleaved.

use crate::Record;
use anyhow::{bail, Result};
use planepack_container::CodecSpec;
use planepack_core::{Codec, ElemType};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

/// How long to measure.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// At least this many timed runs...
    pub min_runs: usize,
    /// ...and keep going until this much time was spent, up to `max_runs`.
    pub min_seconds: f64,
    pub max_runs: usize,
}

impl Settings {
    pub fn full() -> Self {
        Settings {
            min_runs: 5,
            min_seconds: 0.3,
            max_runs: 40,
        }
    }
    pub fn quick() -> Self {
        Settings {
            min_runs: 3,
            min_seconds: 0.05,
            max_runs: 5,
        }
    }
}

/// The tensors of one dataset that share a dtype and a size class.
pub struct Group {
    pub dataset: String,
    pub category: String,
    pub elem: ElemType,
    pub dtype: String,
    /// The class of the tensors' sizes (of the whole tensors, where a large one is measured
    /// in pieces).
    pub size_class: crate::SizeClass,
    /// (shape, bytes) per tensor (or piece of one).
    pub tensors: Vec<(Vec<usize>, Vec<u8>)>,
}

impl Group {
    pub fn raw_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.1.len() as u64).sum()
    }
}

/// Run `f` repeatedly; returns per-run seconds (after one untimed warm-up).
fn time_runs(s: Settings, mut f: impl FnMut()) -> Vec<f64> {
    f();
    let mut runs = Vec::new();
    let start = Instant::now();
    while runs.len() < s.max_runs
        && (runs.len() < s.min_runs || start.elapsed().as_secs_f64() < s.min_seconds)
    {
        let t = Instant::now();
        f();
        runs.push(t.elapsed().as_secs_f64());
    }
    runs
}

/// Run `a` and `b` alternately, each timed on its own; returns (seconds of each `a` run,
/// seconds of each `b` run), one warm-up of each first. The two alternate so that both see the
/// same machine state (frequency, cache, a noisy neighbour), which makes their ratio
/// meaningful; each is timed alone so that neither figure contains the other.
pub fn time_interleaved(
    s: Settings,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Vec<f64>, Vec<f64>) {
    a();
    b();
    let (mut ra, mut rb) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while ra.len() < s.max_runs
        && (ra.len() < s.min_runs || start.elapsed().as_secs_f64() < 2.0 * s.min_seconds)
    {
        let t = Instant::now();
        a();
        ra.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        b();
        rb.push(t.elapsed().as_secs_f64());
    }
    (ra, rb)
}

pub use planepack_core::stats::median;

/// How [`measure_group`] times a group's encode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EncodeWay {
    /// Each tensor in turn on one core.
    OneCore,
    /// Each tensor in turn with the codec's own parallel encoder.
    ItsParallelEncoder,
    /// Several tensors at once, each on one core.
    TensorsAtOnce,
}

/// Of two ways' runs, those with the shorter median.
fn faster(a: Vec<f64>, b: Vec<f64>) -> Vec<f64> {
    if median(&b) < median(&a) {
        b
    } else {
        a
    }
}

/// GB/s median and [min, max] for `bytes` moved in each of `secs`.
fn rates(bytes: u64, secs: &[f64]) -> (f64, [f64; 2]) {
    let r: Vec<f64> = secs
        .iter()
        .map(|s| bytes as f64 / s.max(1e-12) / 1e9)
        .collect();
    let lo = r.iter().cloned().fold(f64::MAX, f64::min);
    let hi = r.iter().cloned().fold(0.0, f64::max);
    (median(&r), [lo, hi])
}

/// [`measure_group`] for a codec of planepack's catalogue: the record carries its spec and
/// says whether planepack has a GPU decoder for it.
pub fn measure_spec(spec: CodecSpec, g: &Group, s: Settings, device: &str) -> Result<Record> {
    let mut r = measure_group(spec.codec().as_ref(), g, s, device)?;
    r.spec = Some(spec);
    r.gpu_decoder = spec.gpu_decoder();
    Ok(r)
}

/// Measure one codec on one group. Fails if any tensor does not round-trip bit-exactly. The
/// record has no spec: [`measure_spec`] is for codecs of the catalogue.
pub fn measure_group(codec: &dyn Codec, g: &Group, s: Settings, device: &str) -> Result<Record> {
    let name = codec.name();
    let encoded: Vec<Vec<u8>> = g
        .tensors
        .iter()
        .map(|(shape, data)| {
            let mut out = Vec::new();
            codec
                .encode_shaped(data, g.elem, shape, &mut out)
                .map(|_| out)
        })
        .collect::<planepack_core::Result<_>>()?;
    // Verify before any figure counts.
    let mut outs: Vec<Vec<u8>> = g.tensors.iter().map(|t| vec![0u8; t.1.len()]).collect();
    type Decoder<'c> = &'c dyn Fn(&[u8], &mut [u8]) -> planepack_core::Result<()>;
    let decoders: [(&str, Decoder); 2] = [
        ("decode", &|c, o| codec.decode(c, o)),
        ("parallel decode", &|c, o| codec.decode_parallel(c, o)),
    ];
    for (((shape, data), enc), out) in g.tensors.iter().zip(&encoded).zip(&mut outs) {
        for (what, decode) in decoders {
            out.fill(0);
            decode(enc, out)?;
            if out != data {
                bail!(
                    "{name} does not round-trip on {} ({:?} {shape:?}): {what} gives different bytes",
                    g.dataset,
                    g.dtype
                );
            }
        }
    }
    let raw = g.raw_bytes();
    let compressed: u64 = encoded.iter().map(|e| e.len() as u64).sum();

    // Every tensor encoded in turn into one reused buffer, by one core or by the codec's own
    // parallel encoder (one core for the codecs without one); or several tensors at once,
    // each on one core, as the container writes a file's parts in parallel windows.
    let mut scratch = Vec::new();
    let mut time_encode = |way: EncodeWay| {
        time_runs(s, || {
            if way == EncodeWay::TensorsAtOnce {
                use rayon::prelude::*;
                g.tensors
                    .par_iter()
                    .for_each_init(Vec::new, |out, (shape, data)| {
                        out.clear();
                        codec
                            .encode_shaped(black_box(data), g.elem, shape, out)
                            .unwrap();
                    });
                return;
            }
            for (shape, data) in &g.tensors {
                scratch.clear();
                let data = black_box(data);
                if way == EncodeWay::ItsParallelEncoder {
                    codec.encode_shaped_parallel(data, g.elem, shape, &mut scratch)
                } else {
                    codec.encode_shaped(data, g.elem, shape, &mut scratch)
                }
                .unwrap();
            }
        })
    };
    let enc_runs = time_encode(EncodeWay::OneCore);
    // Decode and memcpy interleaved, each under its own clock: run i of each sees the same
    // machine state, and neither's time contains the other's.
    // Both write into the same output buffers (verified above, so no longer needed): the
    // memcpy reference costs no memory of its own, and both write to the same addresses.
    let outs = std::cell::RefCell::new(outs);
    let (dec_runs, memcpy_runs) = time_interleaved(
        s,
        || {
            for (enc, out) in encoded.iter().zip(outs.borrow_mut().iter_mut()) {
                codec.decode(black_box(enc), out).unwrap();
            }
        },
        || {
            for ((_, data), dst) in g.tensors.iter().zip(outs.borrow_mut().iter_mut()) {
                dst.copy_from_slice(black_box(data));
            }
        },
    );
    let mut outs = outs.into_inner();
    // All cores, what a user gets: each tensor in turn with the codec's own parallel decoder
    // (planepack's codecs split a tensor's chunks over rayon, C-Blosc2 its blocks over its
    // thread pool; zstd and LZ4 frames as we write them have no parallel decoder and use one
    // core); and for a group of tensors under 1 MiB also several tensors at once, each on
    // one core, as the container reads a file's parts; the faster counts. (Several large
    // tensors at once on top of their own parallel decoders would oversubscribe the
    // libraries' own threads.)
    let at_once = g.size_class == crate::SizeClass::Small && g.tensors.len() > 1;
    let mut all_runs = time_runs(s, || {
        for (enc, out) in encoded.iter().zip(outs.iter_mut()) {
            codec.decode_parallel(enc, out).unwrap();
        }
    });
    let mut enc_all_runs = time_encode(EncodeWay::ItsParallelEncoder);
    if at_once {
        use rayon::prelude::*;
        let runs = time_runs(s, || {
            encoded
                .par_iter()
                .zip(outs.par_iter_mut())
                .for_each(|(enc, out)| codec.decode(black_box(enc), out).unwrap());
        });
        all_runs = faster(all_runs, runs);
        enc_all_runs = faster(enc_all_runs, time_encode(EncodeWay::TensorsAtOnce));
    }
    let (encode_gbps, encode_gbps_spread) = rates(raw, &enc_runs);
    let (encode_allcore_gbps, _) = rates(raw, &enc_all_runs);
    let (decode_gbps, decode_gbps_spread) = rates(raw, &dec_runs);
    let (decode_allcore_gbps, _) = rates(raw, &all_runs);
    let (memcpy_gbps, _) = rates(raw, &memcpy_runs);
    Ok(Record {
        dataset: g.dataset.clone(),
        category: g.category.clone(),
        dtype: g.dtype.clone(),
        size_class: Some(g.size_class),
        codec: name,
        tensors: g.tensors.len(),
        raw_bytes: raw,
        compressed_bytes: compressed,
        ratio: raw as f64 / compressed.max(1) as f64,
        encode_gbps,
        encode_gbps_spread,
        decode_gbps,
        decode_gbps_spread,
        decode_allcore_gbps,
        encode_allcore_gbps,
        memcpy_gbps,
        device: device.to_owned(),
        spec: None,
        gpu_decode_gbps: None,
        gpu_device: None,
        gpu_transfer_gbps: None,
        gpu_upload_raw_gbps: None,
        implementation: codec.implementation(),
        simd_tier: simd_tier(codec),
        cpu: crate::cpu_model(),
        threads: rayon::current_num_threads(),
        gpu_decoder: false,
        notes: BTreeMap::new(),
    })
}

/// The SIMD tier a codec ran at: ours for planepack's code, the library's own dispatch for a
/// C library (which picks its SIMD at run time, whatever our switches say).
fn simd_tier(codec: &dyn Codec) -> String {
    let ours = planepack_core::cpu::tier_name();
    let imp = codec.implementation();
    if imp.starts_with("planepack") || imp.starts_with("lz4_flex") {
        ours.to_owned()
    } else {
        format!("{imp}'s own run-time dispatch")
    }
}

/// Codec-specific observations for a record: bit-plane mode shares and the cost of its format
/// deviations; the thresholds IBP picked.
pub fn annotate(rec: &mut Record, g: &Group) -> Result<()> {
    use serde_json::json;
    match rec.codec.as_str() {
        "bitplane" => {
            let mut total = planepack_bitplane::Stats::default();
            for (_, data) in &g.tensors {
                let mut out = Vec::new();
                total.add(
                    &planepack_bitplane::BitPlane::new()
                        .encode_with_stats(data, g.elem, &mut out)?,
                );
            }
            let blocks = total.total_blocks().max(1) as f64;
            let modes: Vec<String> = planepack_bitplane::Mode::ALL
                .iter()
                .filter(|m| total.blocks[**m as usize] > 0)
                .map(|m| {
                    format!(
                        "{} {:.1}%",
                        m.name(),
                        100.0 * total.blocks[*m as usize] as f64 / blocks
                    )
                })
                .collect();
            rec.notes.insert("modes".into(), json!(modes.join(", ")));
            rec.notes.insert(
                "paper_layout_ratio".into(),
                json!(total.paper_layout_ratio()),
            );
            let saved = total.zero_mode_saved_bits(g.elem.bits()) as f64 / 8.0;
            rec.notes.insert(
                "zero_mode_saved_pct".into(),
                json!(100.0 * saved / total.compressed_bytes.max(1) as f64),
            );
        }
        "ibp" => {
            let mut thresholds: BTreeMap<String, usize> = BTreeMap::new();
            for (shape, data) in &g.tensors {
                let mut out = Vec::new();
                let row = shape.last().copied().unwrap_or(1) * g.elem.size();
                let pre = planepack_ibp::Ibp::default().encode_rows(data, row, &mut out)?;
                let key = match pre.first() {
                    Some(p) if p.mask.invariant_bits() > 0 => format!("{:.2}", p.threshold),
                    _ => "empty".to_string(),
                };
                *thresholds.entry(key).or_default() += 1;
            }
            rec.notes.insert("thresholds".into(), json!(thresholds));
        }
        _ => {}
    }
    Ok(())
}
