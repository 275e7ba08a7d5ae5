//! `cargo xtask kv-stream`: IBP's KV-cache stream on the real KV caches of `datasets/kv/`, the
//! way the authors' LLM integration (InfiniGen-IBP) uses it.
//!
//! Rows are single (token, head) vectors of `head_dim` values, token-major, viewed as 64-bit
//! chunks. The first half of the tokens is the prompt: mask and bitval come from its rows at
//! the fixed threshold 0.8 (`KvStream::from_prompt`), then every later token's rows are appended
//! one by one with that mask, as decode steps would. Reported per layer and K/V:
//! * the ratio over the generated tokens' rows with the prompt's mask, against a mask rebuilt
//!   on all tokens (threshold 0.8, and the sweep), payload only (the bytes a fetch moves; the
//!   authors' in-place layout needs no offsets) and with the metadata (mask, bitval, row bitmask);
//! * append speed (GB/s of raw rows appended, median of runs) and fetch speed of 10 % of the
//!   generated tokens (all heads, seeded choice), on the CPU and on the GPU adapter found (its
//!   time includes uploading the fetched rows, which stay compressed in host memory, with the
//!   mask, and reading the decoded rows back: on lavapipe the "link" is host memory). Every
//!   fetched row is compared with the original.
//!
//! Writes `bench-results/<machine>/kv-stream.md`.

use anyhow::{ensure, Context, Result};
use planepack_harness::measure::median;
use planepack_ibp::{
    compress, preprocess, Columns, KvStream, Layout, Mask, Rows, Sample, Threshold,
};
use std::fmt::Write as _;
use std::time::Instant;

/// The authors' KV threshold.
const THRESHOLD: f32 = 0.8;
/// Fraction of the generated tokens a fetch asks for.
const FETCH_FRACTION: f64 = 0.10;
/// Timed runs per measurement (median reported).
const RUNS: usize = 11;

struct Record {
    dataset: String,
    tensor: String,
    heads: usize,
    tokens: usize,
    prefill: usize,
    head_dim: usize,
    /// Generated rows' raw bytes.
    generated_bytes: usize,
    /// Payload ratio with the prompt's mask / a mask on all tokens (0.8) / the sweep on all.
    ratio_prefill: f64,
    ratio_all: f64,
    ratio_all_sweep: f64,
    /// The same with metadata counted (mask, bitval, row bitmask of the generated rows).
    ratio_prefill_meta: f64,
    ratio_all_meta: f64,
    packed_prefill: f64,
    packed_all: f64,
    append_gbps: f64,
    fetch_cpu_gbps: f64,
    fetch_gpu_gbps: Option<f64>,
}

/// (payload bytes, metadata bytes, packed fraction) of `rows` compressed with `mask`.
fn cost(rows: &Rows, mask: &Mask) -> (usize, usize, f64) {
    let c = compress(rows, &Columns::new(mask), Layout::Condensed);
    let packed = (0..c.rows).filter(|&i| c.is_packed(i)).count();
    (
        c.payload_bytes,
        mask.metadata_bytes() + 4 * c.row_bitmask.len(),
        packed as f64 / c.rows.max(1) as f64,
    )
}

fn study(
    dataset: &str,
    tensor: &planepack_datasets::Tensor,
    gpu: Option<&planepack_gpu::Gpu>,
) -> Result<Record> {
    // [batch 1, heads, tokens, head_dim], 16-bit values, head-major: rows token-major.
    let [1, heads, tokens, head_dim] = tensor.shape[..] else {
        anyhow::bail!("{}: expected [1, heads, tokens, head_dim]", tensor.name);
    };
    let row_bytes = head_dim * 2;
    let mut rows = vec![0u8; tensor.data.len()];
    for t in 0..tokens {
        for h in 0..heads {
            let from = (h * tokens + t) * row_bytes;
            let to = (t * heads + h) * row_bytes;
            rows[to..to + row_bytes].copy_from_slice(&tensor.data[from..from + row_bytes]);
        }
    }
    let prefill = tokens / 2;
    let split = prefill * heads * row_bytes;
    let (prompt, generated) = rows.split_at(split);
    let prompt_rows = Rows::new(prompt, row_bytes, 64)?;
    let gen_rows = Rows::new(generated, row_bytes, 64)?;
    let all_rows = Rows::new(&rows, row_bytes, 64)?;

    // The stream: prompt, then one generated row at a time. Append timed over fresh streams
    // (a warm-up, then RUNS); the last one is kept.
    let mut append = Vec::new();
    let mut last = None;
    for run in 0..=RUNS {
        let mut s = KvStream::from_prompt(&prompt_rows, THRESHOLD);
        let prompt_payload = s.rows().payload_bytes;
        let start = Instant::now();
        for row in generated.chunks_exact(row_bytes) {
            s.append(row)?;
        }
        if run > 0 {
            append.push(start.elapsed().as_secs_f64());
        }
        last = Some((s, prompt_payload));
    }
    let (stream, prompt_payload) = last.expect("at least one run");
    let gen_payload = stream.rows().payload_bytes - prompt_payload;
    let (p_payload, p_meta, p_packed) = cost(&gen_rows, &stream.mask);
    ensure!(
        p_payload == gen_payload,
        "appended rows differ from a batch compress"
    );
    let all_mask = preprocess(&all_rows, Threshold::Fixed(THRESHOLD), Sample::All).mask;
    let (a_payload, a_meta, a_packed) = cost(&gen_rows, &all_mask);
    let sweep_mask = preprocess(&all_rows, Threshold::Sweep, Sample::All).mask;
    let (s_payload, _, _) = cost(&gen_rows, &sweep_mask);

    // Fetch 10 % of the generated tokens, all heads, in a seeded random order.
    let gen_tokens = tokens - prefill;
    let want = ((gen_tokens as f64 * FETCH_FRACTION).ceil() as usize).max(1);
    let mut state = 0x5eed_u64 ^ tokens as u64;
    let mut picked: Vec<usize> = (prefill..tokens).collect();
    for i in (1..picked.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        picked.swap(i, (state >> 33) as usize % (i + 1));
    }
    picked.truncate(want);
    let indices: Vec<usize> = picked
        .iter()
        .flat_map(|&t| (0..heads).map(move |h| t * heads + h))
        .collect();
    let mut expected = Vec::with_capacity(indices.len() * row_bytes);
    for &i in &indices {
        expected.extend_from_slice(&rows[i * row_bytes..(i + 1) * row_bytes]);
    }
    let mut out = vec![0u8; expected.len()];
    stream.gather(&indices, &mut out)?;
    ensure!(out == expected, "CPU fetch differs from the rows");
    let mut fetch = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        stream.gather(&indices, &mut out)?;
        fetch.push(start.elapsed().as_secs_f64());
    }
    let fetch_gpu_gbps = match gpu {
        Some(gpu) => {
            let got = gpu.gather_rows(stream.rows(), &stream.mask, Some(&indices))?;
            ensure!(got == expected, "GPU fetch differs from the rows");
            let mut t = Vec::new();
            for _ in 0..RUNS {
                let start = Instant::now();
                gpu.gather_rows(stream.rows(), &stream.mask, Some(&indices))?;
                t.push(start.elapsed().as_secs_f64());
            }
            Some(expected.len() as f64 / median(&t) / 1e9)
        }
        None => None,
    };
    let gb = generated.len() as f64;
    Ok(Record {
        dataset: dataset.to_owned(),
        tensor: tensor.name.clone(),
        heads,
        tokens,
        prefill,
        head_dim,
        generated_bytes: generated.len(),
        ratio_prefill: gb / p_payload as f64,
        ratio_all: gb / a_payload as f64,
        ratio_all_sweep: gb / s_payload as f64,
        ratio_prefill_meta: gb / (p_payload + p_meta) as f64,
        ratio_all_meta: gb / (a_payload + a_meta) as f64,
        packed_prefill: p_packed,
        packed_all: a_packed,
        append_gbps: gb / median(&append) / 1e9,
        fetch_cpu_gbps: expected.len() as f64 / median(&fetch) / 1e9,
        fetch_gpu_gbps,
    })
}

pub fn run() -> Result<()> {
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir)?;
    let gpu = match planepack_gpu::Gpu::new(&planepack_gpu::GpuOptions::from_env()) {
        Ok(g) => Some(g),
        Err(e) => {
            println!("no GPU adapter ({e}); CPU figures only");
            None
        }
    };
    let adapter = gpu.as_ref().map(|g| g.adapter_name().to_owned());
    let mut records = Vec::new();
    for d in manifest
        .datasets
        .iter()
        .filter(|d| d.category == "kv-cache")
    {
        let tensors =
            planepack_datasets::load(&dir.join(&d.file)).with_context(|| d.name.clone())?;
        for t in &tensors {
            let r = study(&d.name, t, gpu.as_ref())?;
            println!(
                "{} {}: prompt mask {:.3}, all-token mask {:.3}",
                r.dataset, r.tensor, r.ratio_prefill, r.ratio_all
            );
            records.push(r);
        }
    }
    ensure!(!records.is_empty(), "no KV datasets in the manifest");
    let machine = planepack_harness::machine_name();
    let mut s = String::new();
    let first = &records[0];
    writeln!(s, "# IBP's KV stream on real KV caches\n")?;
    writeln!(
        s,
        "Generated by `cargo xtask kv-stream` on {machine}; GPU: {}.\n",
        adapter.as_deref().unwrap_or("none found")
    )?;
    writeln!(
        s,
        "The authors' use (InfiniGen-IBP): rows are (token, head) vectors of head_dim values, token-major, \
         64-bit chunks. **Prefill / generated split: the first {} of {} tokens are the prompt**; mask and bitval \
         come from the prompt's rows at threshold {THRESHOLD}, then each later token's {} rows are appended one \
         by one with that mask. The ratios are over the generated tokens' rows only: raw bytes over the payload \
         a fetch moves (the authors' in-place layout needs no offsets), and with the metadata (mask, bitval, \
         row bitmask). Beside them: a mask rebuilt on all {} tokens at {THRESHOLD}, and the sweep on all tokens.\n",
        first.prefill, first.tokens, first.heads, first.tokens
    )?;
    writeln!(
        s,
        "Append: GB/s of raw rows appended (median of {RUNS} runs, one core). Fetch: {:.0} % of the generated \
         tokens, all heads, seeded random order, GB/s of rows delivered (median of {RUNS}); every fetched row \
         checked. The GPU fetch time includes preparing and uploading only the fetched rows (compressed, with \
         the mask, bitval and their participation bits), the launch, and reading the decoded rows back: \
         for these small groups (512 generated tokens of 128-byte rows per head group) the launch and \
         the round trip dominate{}.\n",
        FETCH_FRACTION * 100.0,
        if adapter.as_deref().is_some_and(|a| a.contains("llvmpipe")) {
            "; on lavapipe the \"link\" is host memory and the GPU is the CPU"
        } else {
            ""
        }
    )?;
    writeln!(
        s,
        "| dataset | tensor | prompt mask | all-token mask | sweep, all tokens | prompt mask + meta | all-token + meta | rows packed (prompt / all) | append GB/s | fetch CPU GB/s | fetch GPU GB/s |"
    )?;
    writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for r in &records {
        writeln!(
            s,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} / {:.2} | {:.3} | {:.3} | {} |",
            r.dataset,
            r.tensor,
            r.ratio_prefill,
            r.ratio_all,
            r.ratio_all_sweep,
            r.ratio_prefill_meta,
            r.ratio_all_meta,
            r.packed_prefill,
            r.packed_all,
            r.append_gbps,
            r.fetch_cpu_gbps,
            r.fetch_gpu_gbps
                .map_or("-".to_owned(), |g| format!("{g:.3}"))
        )?;
    }
    let total = |f: fn(&Record) -> f64| {
        let raw: f64 = records.iter().map(|r| r.generated_bytes as f64).sum();
        raw / records
            .iter()
            .map(|r| r.generated_bytes as f64 / f(r))
            .sum::<f64>()
    };
    writeln!(
        s,
        "\nAll tensors (total raw / total payload): prompt mask {:.3}, all-token mask {:.3}, sweep on all tokens {:.3}; \
         with metadata {:.3} / {:.3}. Head dim {}.",
        total(|r| r.ratio_prefill),
        total(|r| r.ratio_all),
        total(|r| r.ratio_all_sweep),
        total(|r| r.ratio_prefill_meta),
        total(|r| r.ratio_all_meta),
        first.head_dim
    )?;
    let out = crate::bench::default_dir(&machine);
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("kv-stream.md"), &s)?;
    println!("{s}");
    println!(
        "wrote bench-results/{}/kv-stream.md",
        planepack_harness::machine_slug(&machine)
    );
    Ok(())
}
