//! `cargo xtask shaders` and `cargo xtask gpu-bench`.
//!
//! `shaders`: naga parses, validates (with exactly the capabilities each needs) and translates
//! every kernel to SPIR-V, MSL and HLSL; any failure fails the command.
//!
//! `gpu-bench`: on the adapter wgpu picks (lavapipe here; any GPU elsewhere), every dataset's
//! tensors are encoded on the CPU, decoded on the GPU (checked bit-identical), and timed
//! against the copy kernel writing the same bytes, on the same device, in the same run:
//! decode throughput as a fraction of copy throughput. Also the upload of the raw bytes and of
//! the compressed bytes (+ decode), and the pipelined figure. Writes
//! `bench-results/gpu-<adapter>/gpu.md` and `gpu.json`, and puts the GPU decode speed into the
//! records of the CPU results (`--results`) so the harness tables show it.

use anyhow::{Context, Result};
use planepack_container::{CodecId, CodecSpec};
use planepack_core::Codec;
use planepack_datasets::{datasets_dir, Manifest};
use planepack_gpu::{Gpu, GpuOptions, KernelConfig, ScanPath};
use planepack_harness::input::{groups_of, Batches};
use planepack_harness::{Group, SizeClass};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// An external validator: its command and the arguments before the file.
struct Validator {
    name: &'static str,
    command: &'static str,
    args: &'static [&'static str],
    extension: &'static str,
}

/// SPIR-V 1.3 is Vulkan 1.1's; naga's GLSL for wgpu's GL backend is GLSL ES 3.10.
const VALIDATORS: [Validator; 2] = [
    Validator {
        name: "spirv-val",
        command: "spirv-val",
        args: &["--target-env", "vulkan1.1"],
        extension: "spv",
    },
    Validator {
        name: "glslangValidator",
        command: "glslangValidator",
        args: &["-S", "comp"],
        extension: "comp",
    },
];

pub fn shaders() -> Result<()> {
    // The validators where installed (CI installs them: there a missing one is a failure).
    let ci = std::env::var_os("CI").is_some();
    let mut present = Vec::new();
    for v in &VALIDATORS {
        let found = std::process::Command::new(v.command)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        match (found, ci) {
            (true, _) => present.push(v),
            (false, true) => anyhow::bail!("{} is not installed (CI needs it)", v.name),
            (false, false) => println!("{}: not installed, skipped", v.name),
        }
    }
    println!(
        "MSL and HLSL are translated by naga only: Apple's Metal compiler and Microsoft's DXC do \
         not run here."
    );
    let dir = std::env::temp_dir().join(format!("planepack-shaders-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "| shader | subgroups | SPIR-V words | MSL bytes | HLSL bytes | GLSL bytes | {} |\n|---|---|---|---|---|---|---|",
        present.iter().map(|v| v.name).collect::<Vec<_>>().join(", ")
    );
    let mut failures = Vec::new();
    for (name, src, subgroups) in planepack_gpu::shaders::all() {
        let (module, info) = planepack_gpu::shaders::validate(&src, subgroups)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let t = planepack_gpu::shaders::translate(&module, &info)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let mut verdicts = Vec::new();
        for v in &present {
            let file = dir.join(format!("{name}.{}", v.extension));
            match v.extension {
                "spv" => std::fs::write(
                    &file,
                    t.spirv
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .collect::<Vec<u8>>(),
                )?,
                _ => std::fs::write(&file, &t.glsl)?,
            }
            let out = std::process::Command::new(v.command)
                .args(v.args)
                .arg(&file)
                .output()
                .with_context(|| format!("running {}", v.command))?;
            if out.status.success() {
                verdicts.push("ok");
            } else {
                verdicts.push("REJECTED");
                failures.push(format!(
                    "{name}: {} rejects it:\n{}{}",
                    v.name,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            if subgroups { "yes" } else { "no" },
            t.spirv.len(),
            t.msl.len(),
            t.hlsl.len(),
            t.glsl.len(),
            verdicts.join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !failures.is_empty() {
        anyhow::bail!("{}", failures.join("\n"));
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct Row {
    dataset: String,
    dtype: String,
    /// The class of the tensors' (whole) sizes.
    size_class: SizeClass,
    /// Tensors (or pieces of tensors, in workload samples) measured.
    tensors: usize,
    codec: String,
    path: String,
    raw_bytes: u64,
    compressed_bytes: u64,
    decode_seconds: f64,
    copy_seconds: f64,
    decode_gbps: f64,
    copy_gbps: f64,
    decode_over_copy: f64,
    upload_raw_seconds: f64,
    upload_compressed_seconds: f64,
    /// Measured: every tensor's compressed bytes uploaded and decoded into device memory as
    /// soon as they are up, submissions back to back (upload of tensor i+1 overlapping the
    /// decode of tensor i), one wait at the end (`Gpu::time_pipelined`); median of the runs.
    pipelined_seconds: f64,
    /// The same loop uploading the raw tensors, in the same runs.
    pipelined_raw_seconds: f64,
    /// The same decode and copy times over the tensors of at least 1 MiB only.
    large_decode_seconds: f64,
    large_copy_seconds: f64,
    timestamps: bool,
    /// The encode direction (bit-plane and IBP, the codecs with a GPU encoder), None elsewhere.
    encode: Option<EncodeRow>,
}

/// The offload direction of one dataset's tensors: medians summed over the tensors.
#[derive(serde::Serialize, Default)]
struct EncodeRow {
    /// The encode kernel alone (IBP: packing with the mask given) against the copy kernel,
    /// alternating.
    pack_seconds: f64,
    copy_seconds: f64,
    large_pack_seconds: f64,
    large_copy_seconds: f64,
    /// Wall clock from rows in device memory to the `Ibp` stream on the host: mask search
    /// (counts, scores), packing, sizes down, starts up, condensing, compressed bytes down.
    offload_seconds: f64,
    /// Reading the raw rows back, in the same runs.
    download_raw_seconds: f64,
    /// The way back: the stream the GPU wrote uploaded and decoded into device memory (every
    /// one checked equal to the tensor), and the raw tensor uploaded, medians.
    reload_seconds: f64,
    upload_raw_seconds: f64,
    /// Bytes that crossed: compressed (with sizes and the row bitmask) and raw.
    download_bytes: u64,
    raw_bytes: u64,
}

impl EncodeRow {
    /// One tensor's medians: the encode kernel and the copy kernel, the offload and the raw
    /// download; the bytes that came down and the tensor's raw bytes.
    fn add(
        &mut self,
        kernel: f64,
        copy: f64,
        offload: f64,
        download_raw: f64,
        down: u64,
        raw: usize,
    ) {
        self.pack_seconds += kernel;
        self.copy_seconds += copy;
        if raw >= 1 << 20 {
            self.large_pack_seconds += kernel;
            self.large_copy_seconds += copy;
        }
        self.offload_seconds += offload;
        self.download_raw_seconds += download_raw;
        self.download_bytes += down;
        self.raw_bytes += raw as u64;
    }
}

/// One IBP gather of 1 % of a tensor's rows: bytes sent against the tensor's raw bytes.
#[derive(serde::Serialize)]
struct GatherRow {
    tensor: String,
    rows: usize,
    row_bytes: usize,
    gathered: usize,
    upload_bytes: usize,
    raw_bytes: usize,
}

/// IBP with at most 4 masks (one decode pass per cluster), measured beside one mask.
const CLUSTERED: CodecSpec = CodecSpec {
    id: CodecId::IbpClusters,
    level: 4,
};

/// The codecs with a GPU decoder, in the order the tables list them.
const GPU_CODECS: [CodecSpec; 4] = [
    CodecSpec {
        id: CodecId::Ibp,
        level: 0,
    },
    CLUSTERED,
    CodecSpec {
        id: CodecId::BitPlane,
        level: 0,
    },
    CodecSpec {
        id: CodecId::Rans,
        level: 0,
    },
];

/// Bytes of a workload sample: the first batch of each file's dtype and size class, tensors
/// over this size in pieces of it (lavapipe decodes at tens of MB/s: the whole 4.6 GB would
/// take hours).
const WORKLOAD_SAMPLE_BYTES: u64 = 16 << 20;

/// The groups measured: every dataset of the corpus, or samples of the workloads.
fn groups(filter: &[String], workloads: bool, root: &Path) -> Result<Vec<Group>> {
    let keep = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let mut out = Vec::new();
    if workloads {
        for f in crate::workloads::files(root, filter)? {
            let name = f
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("file")
                .to_owned();
            let category = crate::bench::workload_category(&name);
            let mut b = Batches::open(&name, category, &f, WORKLOAD_SAMPLE_BYTES)?;
            let mut seen: Vec<(String, SizeClass)> = Vec::new();
            for i in 0..b.len() {
                let (dtype, class) = b.kind(i).expect("in range");
                if seen.iter().any(|(d, c)| d == dtype && *c == class) {
                    continue;
                }
                seen.push((dtype.to_owned(), class));
                out.push(b.load(i)?);
            }
        }
    } else {
        let dir = datasets_dir();
        let manifest = Manifest::read(&dir)?;
        for d in &manifest.datasets {
            if keep(&d.name) {
                out.extend(groups_of(&d.name, &d.category, &dir.join(&d.file))?);
            }
        }
    }
    Ok(out)
}

pub fn bench(
    out: Option<PathBuf>,
    results: Option<PathBuf>,
    runs: usize,
    filter: &[String],
    only: &[String],
    workloads: bool,
    root: &Path,
) -> Result<()> {
    let gpu = Gpu::new(&GpuOptions::from_env())?;
    for name in only {
        anyhow::ensure!(
            GPU_CODECS.iter().any(|s| s.name() == *name),
            "--codecs: no GPU codec {name}"
        );
    }
    let device = gpu.describe();
    println!("GPU: {device}");
    let out = out.unwrap_or_else(|| {
        let d = root.join("bench-results").join(format!(
            "gpu-{}",
            planepack_harness::machine_slug(gpu.adapter_name())
        ));
        if workloads {
            d.join("workloads")
        } else {
            d
        }
    });
    let codecs: Vec<(Box<dyn Codec>, CodecSpec)> = GPU_CODECS
        .iter()
        .filter(|s| only.is_empty() || only.contains(&s.name()))
        .map(|&s| (s.codec(), s))
        .collect();
    let mut paths = vec![ScanPath::Workgroup];
    if gpu.has_subgroups() {
        paths.insert(0, ScanPath::Subgroup);
    }
    let mut rows = Vec::new();
    let mut gathers = Vec::new();
    {
        for g in groups(filter, workloads, root)? {
            for (codec, spec) in &codecs {
                let name = spec.name();
                // IBP with clusters only where rows have structure (on activations and
                // weights IBP stores raw whatever the mask count: ibp-clusters.md).
                if *spec == CLUSTERED
                    && !matches!(g.category.as_str(), "embedding" | "gnn" | "kv-cache")
                {
                    continue;
                }
                let encoded: Vec<Vec<u8>> = g
                    .tensors
                    .iter()
                    .map(|(shape, data)| {
                        let mut e = Vec::new();
                        codec.encode_shaped(data, g.elem, shape, &mut e).map(|_| e)
                    })
                    .collect::<planepack_core::Result<_>>()?;
                for &path in &paths {
                    let mut r = Row {
                        dataset: g.dataset.clone(),
                        dtype: g.dtype.clone(),
                        size_class: g.size_class,
                        tensors: 0,
                        codec: name.clone(),
                        path: format!("{path:?}").to_lowercase(),
                        raw_bytes: 0,
                        compressed_bytes: 0,
                        decode_seconds: 0.0,
                        copy_seconds: 0.0,
                        decode_gbps: 0.0,
                        copy_gbps: 0.0,
                        decode_over_copy: 0.0,
                        upload_raw_seconds: 0.0,
                        upload_compressed_seconds: 0.0,
                        pipelined_seconds: 0.0,
                        pipelined_raw_seconds: 0.0,
                        large_decode_seconds: 0.0,
                        large_copy_seconds: 0.0,
                        timestamps: gpu.has_timestamps(),
                        encode: None,
                    };
                    let cfg = gpu.config().with_path(path);
                    let mut launches = Vec::new();
                    for ((_, data), enc) in g.tensors.iter().zip(&encoded) {
                        let Some(prepared) = prepare(&gpu, *spec, enc, &cfg)? else {
                            continue;
                        };
                        let got = gpu.run(&prepared)?;
                        anyhow::ensure!(
                            &got == data,
                            "{} {} {name}: GPU decode differs",
                            g.dataset,
                            g.dtype
                        );
                        // Decode and copy runs alternate, so both see the same machine.
                        let copy = gpu.prepare_copy(data)?;
                        let t = gpu.time_each(&[&prepared, &copy], runs);
                        let (dec, copy) = (t[0].median(), t[1].median());
                        let up_raw = gpu.time_upload(data, runs);
                        let up_comp = gpu.time_upload(enc, runs);
                        r.tensors += 1;
                        r.raw_bytes += data.len() as u64;
                        r.compressed_bytes += enc.len() as u64;
                        r.decode_seconds += dec;
                        r.copy_seconds += copy;
                        r.upload_raw_seconds += up_raw;
                        r.upload_compressed_seconds += up_comp;
                        if data.len() >= 1 << 20 {
                            r.large_decode_seconds += dec;
                            r.large_copy_seconds += copy;
                        }
                        launches.push((prepared, enc.as_slice(), data.as_slice()));
                    }
                    if r.raw_bytes == 0 {
                        continue;
                    }
                    let items: Vec<_> = launches.iter().map(|(p, e, d)| (p, *e, *d)).collect();
                    let t = gpu.time_pipelined(&items, runs)?;
                    r.pipelined_seconds = median(t.compressed);
                    r.pipelined_raw_seconds = median(t.raw);
                    if matches!(spec.id, CodecId::BitPlane | CodecId::Ibp | CodecId::Rans)
                        && path == paths[0]
                    {
                        r.encode = encode_direction(&gpu, &g, spec.id, &encoded, runs)?;
                        if let Some(e) = &r.encode {
                            println!(
                                "{} {} {name} encode: {:.3} of copy, offload {:.3} of raw download",
                                r.dataset,
                                r.dtype,
                                e.copy_seconds / e.pack_seconds,
                                e.download_raw_seconds / e.offload_seconds
                            );
                        }
                        if spec.id == CodecId::Ibp {
                            gathers.extend(gather_fraction(&gpu, &g, &encoded)?);
                        }
                    }
                    r.decode_gbps = r.raw_bytes as f64 / r.decode_seconds / 1e9;
                    r.copy_gbps = r.raw_bytes as f64 / r.copy_seconds / 1e9;
                    r.decode_over_copy = r.copy_seconds / r.decode_seconds;
                    println!(
                        "{} {} {} {name} {}: {:.3} GB/s, {:.3} of copy",
                        r.dataset,
                        r.dtype,
                        r.size_class.label(),
                        r.path,
                        r.decode_gbps,
                        r.decode_over_copy
                    );
                    rows.push(r);
                }
            }
        }
    }
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("gpu.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "device": device,
            "runs": runs,
            "rows": rows,
            "gathers": gathers,
        }))?,
    )?;
    let md = markdown(&rows, &gathers, &device, runs, workloads);
    std::fs::write(out.join("gpu.md"), &md)?;
    // The summary goes into the README when every dataset was measured.
    if filter.is_empty() && only.is_empty() && !workloads {
        // The decode summary, the encoders' summary table and the gathers' worst case; the
        // per-dataset tables stay in gpu.md.
        let end = md
            .find("## Encode on the GPU")
            .or_else(|| md.find("## Per dataset"));
        if let (Some(a), Some(b)) = (md.find("## Summary"), end) {
            // Tables only: gpu.md explains the columns.
            let tables: Vec<&str> = md[a..b]
                .lines()
                .filter(|l| l.starts_with('|') || l.is_empty() || l.ends_with(':'))
                .collect();
            let mut section = format!(
                "Device: {device}. Decode kernel against a copy kernel writing the same bytes on \
                 the same device, runs alternating ([`gpu.md`]({}/gpu.md) explains every \
                 column):\n{}\n",
                out.strip_prefix(root).unwrap_or(&out).display(),
                tables.join("\n").replace("\n\n\n", "\n\n").trim_end()
            );
            if let Some(e) = md.find("| codec | kernel / copy") {
                let table: Vec<&str> = md[e..].lines().take_while(|l| l.starts_with('|')).collect();
                section += &format!(
                    "\nEncode on the GPU (offload direction; gpu.md explains the columns):\n\n{}\n",
                    table.join("\n")
                );
            }
            if let Some(worst) = gathers
                .iter()
                .map(|g| g.upload_bytes as f64 / g.raw_bytes as f64)
                .max_by(f64::total_cmp)
            {
                section += &format!(
                    "\nIBP gathers of 1 % of the rows upload at most {:.2} % of the tensor's raw bytes \
                     ({} tensors; target <= 2 %).\n",
                    100.0 * worst,
                    gathers.len()
                );
            }
            // Best effort: a binary carried to another machine has no checkout to update.
            let readme = root.join("README.md");
            if let Ok(text) = std::fs::read_to_string(&readme) {
                if let Some(new) = planepack_harness::report::splice(&text, "GPU", &section) {
                    std::fs::write(&readme, new)?;
                }
            }
        }
    }
    if let Some(res) = results {
        patch_results(&res, &rows, gpu.adapter_name())?;
    }
    println!("wrote {}", out.display());
    Ok(())
}

/// The offload direction for a group's tensors, for the codecs with a GPU encoder (bit-plane,
/// IBP): per tensor, the tensor uploaded once (not timed: in an offload it is already on the
/// device), then the encode kernel timed against the copy kernel (IBP: the packing kernel with
/// the stream's mask), and the whole device-to-host encode against reading the raw bytes back;
/// every stream checked equal to the CPU encoder's (`cpu`).
fn encode_direction(
    gpu: &Gpu,
    g: &planepack_harness::Group,
    codec: CodecId,
    cpu: &[Vec<u8>],
    runs: usize,
) -> Result<Option<EncodeRow>> {
    let mut e = EncodeRow::default();
    let spec = GPU_CODECS
        .into_iter()
        .find(|s| s.id == codec)
        .expect("a codec with a GPU decoder");
    for ((shape, data), cpu) in g.tensors.iter().zip(cpu) {
        if codec == CodecId::Rans {
            let stream = rans_offload(gpu, g, data, runs, &mut e)?;
            reload(gpu, spec, &stream, data, runs, &mut e)?;
            continue;
        }
        // (what the offload times, the kernel alone, the raw bytes on the device, compressed
        // bytes a run brings back)
        type Offload<'a> = Box<dyn Fn() -> Result<Vec<u8>> + 'a>;
        let (offload, kernel, raw, down): (Offload, planepack_gpu::Prepared, _, u64) = if codec
            == CodecId::BitPlane
        {
            let t = gpu.upload(data)?;
            let width = g.elem.bits();
            let enc = gpu.prepare_bitplane_encode(&t.buffer, data.len(), width, &gpu.config())?;
            let (stream, down) = gpu.run_bitplane_encode(&enc)?;
            anyhow::ensure!(
                stream == *cpu,
                "{} {}: GPU bit-plane stream differs",
                g.dataset,
                g.dtype
            );
            let buf = t.buffer.clone();
            let len = data.len();
            (
                Box::new(move || Ok(gpu.encode_bitplane_on_device(&buf, len, width)?)),
                enc.launch,
                t,
                down as u64,
            )
        } else {
            let row_bytes = planepack_ibp::shaped_row_bytes(data.len(), g.elem, shape);
            let ibp = planepack_ibp::Ibp::default();
            let Some((width, whole @ 1..)) = ibp.split_rows(data.len(), row_bytes) else {
                continue;
            };
            if !row_bytes.is_multiple_of(4) {
                continue;
            }
            let rows = gpu.upload_rows(&data[..whole], row_bytes, width)?;
            let tail = &data[whole..];
            let stream = gpu.encode_ibp_on_device(&rows, tail)?;
            anyhow::ensure!(
                stream == *cpu,
                "{} {}: GPU IBP stream differs",
                g.dataset,
                g.dtype
            );
            let pre = gpu.ibp_preprocess(&rows, planepack_ibp::Threshold::Sweep)?;
            let pack = gpu.prepare_ibp_pack(&rows, &pre.mask)?;
            let down = if pre.mask.invariant_bits() > 0 {
                gpu.run_ibp_pack(&pack)?.download_bytes as u64
            } else {
                whole as u64
            };
            let raw = planepack_gpu::DeviceTensor {
                buffer: rows.buffer.clone(),
                offset: 0,
                len: whole,
            };
            (
                Box::new(move || Ok(gpu.encode_ibp_on_device(&rows, tail)?)),
                pack.launch,
                raw,
                down,
            )
        };
        let copy = gpu.prepare_copy(&data[..raw.len])?;
        let t = gpu.time_each(&[&kernel, &copy], runs);
        let (p, c) = (t[0].median(), t[1].median());
        let (mut off, mut back) = (Vec::new(), Vec::new());
        for _ in 0..runs.max(1) {
            let t = std::time::Instant::now();
            std::hint::black_box(offload()?);
            off.push(t.elapsed().as_secs_f64());
            let t = std::time::Instant::now();
            std::hint::black_box(gpu.read_back(&raw)?);
            back.push(t.elapsed().as_secs_f64());
        }
        e.add(p, c, median(off), median(back), down, raw.len);
        reload(gpu, spec, cpu, data, runs, &mut e)?;
    }
    Ok((e.raw_bytes > 0).then_some(e))
}

/// The way back for a stream the GPU wrote: uploaded and decoded into device memory (checked
/// equal to the tensor), against uploading the raw tensor; medians added to `e`.
fn reload(
    gpu: &Gpu,
    spec: CodecSpec,
    stream: &[u8],
    data: &[u8],
    runs: usize,
    e: &mut EncodeRow,
) -> Result<()> {
    let Some(p) = prepare(gpu, spec, stream, &gpu.config())? else {
        anyhow::bail!("{}: no GPU decode of the GPU-written stream", spec.name());
    };
    anyhow::ensure!(
        gpu.run(&p)? == data,
        "{}: GPU decode of the GPU-written stream differs",
        spec.name()
    );
    let decode = gpu.time_each(&[&p], runs)[0].median();
    e.reload_seconds += gpu.time_upload(stream, runs) + decode;
    e.upload_raw_seconds += gpu.time_upload(data, runs);
    Ok(())
}

/// The rANS offload of one tensor: the encoder's kernels (three or four submissions, each
/// timed from submission to its small readback, the host's planning between them left out)
/// against the copy kernel, and the whole device-to-host encode against reading the raw bytes
/// back; the stream checked equal to the CPU encoder's at the GPU encoder's settings
/// (`GPU_RANS`: byte planes only, so not the `rans` stream the decode rows use). Returns the
/// stream.
fn rans_offload(
    gpu: &Gpu,
    g: &planepack_harness::Group,
    data: &[u8],
    runs: usize,
    e: &mut EncodeRow,
) -> Result<Vec<u8>> {
    let rans = planepack_gpu::GPU_RANS;
    let t = gpu.upload(data)?;
    let cpu = rans.encode_to_vec(data, g.elem)?;
    let first = gpu.encode_rans_on_device(&t.buffer, data.len(), g.elem, &rans)?;
    anyhow::ensure!(
        first.stream == cpu,
        "{} {}: GPU rANS stream differs",
        g.dataset,
        g.dtype
    );
    let copy = gpu.prepare_copy(data)?;
    let (mut kernel, mut copies, mut off, mut back) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs.max(1) {
        let clock = std::time::Instant::now();
        let enc = gpu.encode_rans_on_device(&t.buffer, data.len(), g.elem, &rans)?;
        off.push(clock.elapsed().as_secs_f64());
        kernel.push(enc.kernel_seconds);
        copies.push(gpu.time_each(&[&copy], 1)[0].median());
        let clock = std::time::Instant::now();
        std::hint::black_box(gpu.read_back(&t)?);
        back.push(clock.elapsed().as_secs_f64());
    }
    e.add(
        median(kernel),
        median(copies),
        median(off),
        median(back),
        first.download_bytes as u64,
        data.len(),
    );
    Ok(first.stream)
}

/// For each IBP-coded tensor with at least 1000 rows: a gather of 1 % of its rows (evenly
/// spread), the bytes it uploads against the tensor's raw bytes, the rows checked.
fn gather_fraction(
    gpu: &Gpu,
    g: &planepack_harness::Group,
    encoded: &[Vec<u8>],
) -> Result<Vec<GatherRow>> {
    let mut v = Vec::new();
    for (k, ((shape, data), enc)) in g.tensors.iter().zip(encoded).enumerate() {
        let Ok(l) = planepack_ibp::stream_layout(enc) else {
            continue;
        };
        if l.rows < 1000 || shape.len() < 2 {
            continue;
        }
        let row = l.columns * (l.width / 8) as usize;
        let pick: Vec<usize> = (0..l.rows / 100).map(|i| i * 100 + 37).collect();
        let p = match gpu.prepare_ibp(enc, Some(&pick), &gpu.config()) {
            Ok(p) => p,
            Err(planepack_gpu::GpuError::Unsupported(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        let got = gpu.run(&p)?;
        for (i, &r) in pick.iter().enumerate() {
            anyhow::ensure!(got[i * row..(i + 1) * row] == data[r * row..(r + 1) * row]);
        }
        v.push(GatherRow {
            tensor: format!("{} {} #{k}", g.dataset, g.dtype),
            rows: l.rows,
            row_bytes: row,
            gathered: pick.len(),
            upload_bytes: p.upload_bytes,
            raw_bytes: data.len(),
        });
    }
    Ok(v)
}

/// A whole-tensor decode of `enc` by codec `name`; None for a tensor the GPU kernel cannot
/// take (16-bit rows of odd length), which is left out of its dataset's sums.
fn prepare(
    gpu: &Gpu,
    spec: CodecSpec,
    enc: &[u8],
    cfg: &KernelConfig,
) -> Result<Option<planepack_gpu::Prepared>> {
    let prepared = match spec.id {
        CodecId::BitPlane => gpu.prepare_bitplane(enc, cfg),
        CodecId::Rans => gpu.prepare_rans(enc, cfg),
        CodecId::Ibp | CodecId::IbpClusters => gpu.prepare_ibp(enc, None, cfg),
        _ => anyhow::bail!("no GPU decoder for {}", spec.name()),
    };
    match prepared {
        Ok(p) => Ok(Some(p)),
        Err(planepack_gpu::GpuError::Unsupported(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// For `cargo xtask bench`: where a GPU adapter exists, measure per group and GPU-decodable
/// codec the upload of the compressed bytes + decode into device memory against the upload of
/// the raw bytes, on that device, in the same run, every decode checked; into the records.
pub fn transfer(
    records: &mut [planepack_harness::Record],
    groups: &[planepack_harness::Group],
    runs: usize,
) -> Result<()> {
    let gpu = match Gpu::new(&GpuOptions::from_env()) {
        Ok(g) => g,
        Err(e) => {
            println!("GPU transfer-and-decode: not measured, no GPU adapter ({e})");
            return Ok(());
        }
    };
    let device = if gpu.is_emulated() {
        format!(
            "{} (emulated GPU on the CPU: upload is a host-memory copy)",
            gpu.describe()
        )
    } else {
        gpu.describe()
    };
    println!("GPU transfer-and-decode on {device}");
    for rec in records.iter_mut() {
        let Some(spec) = rec.spec else {
            continue;
        };
        if !spec.gpu_decoder() {
            continue;
        }
        let Some(g) = groups.iter().find(|g| {
            g.dataset == rec.dataset
                && g.dtype == rec.dtype
                && rec.size_class.is_none_or(|c| c == g.size_class)
        }) else {
            continue;
        };
        let codec = spec.codec();
        let (mut bytes, mut dec_s, mut up_s) = (0u64, 0.0, 0.0);
        for (shape, data) in &g.tensors {
            let mut enc = Vec::new();
            codec.encode_shaped(data, g.elem, shape, &mut enc)?;
            let Some(p) = prepare(&gpu, spec, &enc, &gpu.config())? else {
                continue;
            };
            anyhow::ensure!(
                gpu.run(&p)? == *data,
                "{} {} {}: GPU decode differs",
                g.dataset,
                g.dtype,
                rec.codec
            );
            let (d, u) = gpu.time_transfer(&p, &enc, data, runs)?;
            bytes += data.len() as u64;
            dec_s += median(d);
            up_s += median(u);
        }
        if bytes > 0 {
            rec.gpu_transfer_gbps = Some(bytes as f64 / dec_s / 1e9);
            rec.gpu_upload_raw_gbps = Some(bytes as f64 / up_s / 1e9);
            rec.gpu_device = Some(device.clone());
        }
    }
    Ok(())
}

fn median(v: Vec<f64>) -> f64 {
    planepack_core::stats::median(&v)
}

fn geomean(v: impl Iterator<Item = f64>) -> f64 {
    planepack_core::stats::geomean(&v.collect::<Vec<f64>>())
}

fn markdown(
    rows: &[Row],
    gathers: &[GatherRow],
    device: &str,
    runs: usize,
    workloads: bool,
) -> String {
    let emulated = device.contains(", Cpu,");
    let what = if workloads {
        format!(
            "`cargo xtask gpu-bench --workloads`, on samples of the production-size workloads \
             (`cargo xtask workloads`): of each file, dtype and size class the first {} MiB \
             (whole tensors, or the first {} MiB piece of a larger one, cut as the container \
             cuts parts; the size class is the whole tensor's). Each tensor or piece",
            WORKLOAD_SAMPLE_BYTES >> 20,
            WORKLOAD_SAMPLE_BYTES >> 20
        )
    } else {
        "`cargo xtask gpu-bench`, on the dataset corpus. Every tensor of every dataset".to_owned()
    };
    let mut s = format!(
        "# GPU decode and encode\n\nDevice: {device}.\nGenerated by {what} is encoded on the CPU, decoded on the GPU and checked bit-identical, then the decode \
         kernel and the copy kernel (same output bytes, same device, same run) are each timed {runs} \
         times, their runs alternating; medians are summed over a dataset's tensors. `decode / copy` is decode throughput \
         over copy throughput. The return trip of an offload is measured, not modelled: `pipelined` is \
         every tensor's compressed bytes written to the device and decoded into device memory, \
         submissions back to back (the upload of tensor i+1 overlapping the decode of tensor i, \
         through wgpu's staging buffers), one wait at the end, against the same loop writing the raw \
         tensors (`Gpu::time_pipelined`).{}\n\n",
        if emulated {
            " This device is a CPU (lavapipe): its \"link\" is a copy within host memory, so the \
             transfer columns compare memory copies, not PCIe."
        } else {
            ""
        }
    );
    let _ = writeln!(s, "## Summary\n");
    // Tensors per size class, from one codec's rows on one path (every codec but the
    // clustered IBP sees every tensor).
    // (The bit-plane codec's rows when it was measured, else the first codec's.)
    let census_codec = if rows.iter().any(|r| r.codec == "bitplane") {
        "bitplane".to_owned()
    } else {
        rows.first().map(|r| r.codec.clone()).unwrap_or_default()
    };
    let census: Vec<&Row> = rows
        .iter()
        .filter(|r| r.codec == census_codec && r.path == rows[0].path)
        .collect();
    let _ = writeln!(
        s,
        "Tensors measured{}:\n\n| size class | tensors | MB |\n|---|---|---|",
        if workloads {
            " (pieces of larger tensors count one each)"
        } else {
            ""
        }
    );
    for c in SizeClass::ALL {
        let sel: Vec<&&Row> = census.iter().filter(|r| r.size_class == c).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} |",
            c.label(),
            sel.iter().map(|r| r.tensors).sum::<usize>(),
            sel.iter().map(|r| r.raw_bytes).sum::<u64>() as f64 / 1e6
        );
    }
    let _ = writeln!(
        s,
        "\nPer dataset: geometric mean over datasets of decode / copy. All tensors: total copy time \
         over total decode time, dominated by the small tensors where there are many (a launch's \
         fixed cost makes the copy kernel slow too). Per size class: the same over the tensors \
         of that class only (the table above says which and how many); on tensors >= 1 MiB the \
         copy kernel runs at full speed, the honest figure for large transfers. Return trip: \
         total raw-upload time over total compressed-upload-and-decode time, pipelined (above \
         1: the compressed path is faster). Targets on lavapipe: decode / copy >= 0.25 for IBP \
         (>= 0.35 on >= 1 MiB), >= 0.10 for the bit-plane codec (>= 0.15 on >= 1 MiB) and for \
         rANS on tensors >= 1 MiB. \
         `ibp-clusters-4` (IBP with at most 4 masks, one decode pass per cluster) is measured \
         on the embedding, GNN and KV-cache tensors only, so compare it with `ibp` there \
         (per-dataset tables).\n"
    );
    let _ = write!(
        s,
        "| codec | path | decode GB/s (per dataset) | decode / copy (per dataset) | decode / copy (all tensors) |"
    );
    for c in SizeClass::ALL {
        let _ = write!(s, " decode / copy ({}) |", c.label());
    }
    let _ = writeln!(
        s,
        " decode / copy (tensors >= 1 MiB) | return trip: raw / (compressed + decode), pipelined | target |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for spec in GPU_CODECS {
        let codec = spec.name();
        for path in ["subgroup", "workgroup"] {
            let sel: Vec<&Row> = rows
                .iter()
                .filter(|r| r.codec == codec && r.path == path)
                .collect();
            if sel.is_empty() {
                continue;
            }
            let copy: f64 = sel.iter().map(|r| r.copy_seconds).sum();
            let dec: f64 = sel.iter().map(|r| r.decode_seconds).sum();
            let lc: f64 = sel.iter().map(|r| r.large_copy_seconds).sum();
            let ld: f64 = sel.iter().map(|r| r.large_decode_seconds).sum();
            let pr: f64 = sel.iter().map(|r| r.pipelined_raw_seconds).sum();
            let pc: f64 = sel.iter().map(|r| r.pipelined_seconds).sum();
            let _ = write!(
                s,
                "| {codec} | {path} | {:.3} | {:.3} | {:.3} |",
                geomean(sel.iter().map(|r| r.decode_gbps)),
                geomean(sel.iter().map(|r| r.decode_over_copy)),
                copy / dec,
            );
            for c in SizeClass::ALL {
                let class: Vec<&&Row> = sel.iter().filter(|r| r.size_class == c).collect();
                if class.is_empty() {
                    let _ = write!(s, " - |");
                } else {
                    let cc: f64 = class.iter().map(|r| r.copy_seconds).sum();
                    let cd: f64 = class.iter().map(|r| r.decode_seconds).sum();
                    let _ = write!(s, " {:.3} |", cc / cd);
                }
            }
            let large = if ld > 0.0 {
                format!("{:.3}", lc / ld)
            } else {
                "-".to_owned()
            };
            let _ = writeln!(
                s,
                " {large} | {:.3} | {} |",
                pr / pc,
                match spec.id {
                    CodecId::Ibp => ">= 0.25 (>= 0.35 on >= 1 MiB)",
                    CodecId::IbpClusters => "none (embeddings, GNN, KV caches only)",
                    CodecId::Rans => ">= 0.10 (>= 1 MiB)",
                    _ => ">= 0.10 (>= 0.15 on >= 1 MiB)",
                }
            );
        }
    }
    let enc: Vec<(&Row, &EncodeRow)> = rows
        .iter()
        .filter_map(|r| r.encode.as_ref().map(|e| (r, e)))
        .collect();
    if !enc.is_empty() {
        let _ = writeln!(
            s,
            "\n## Encode on the GPU\n\nThe offload direction, for the codecs with a GPU encoder \
             (bit-plane, IBP and rANS, byte-identical to the CPU encoders: every stream below was \
             checked equal; rANS at the GPU encoder's settings, `GPU_RANS`, byte planes only, \
             so its bytes down are those of that stream, not of the `rans` rows above). \
             `kernel / copy`: the encode kernel (bit-plane: sizing every mode and \
             writing the chunk slots; IBP: packing rows in place with the stream's mask; rANS: \
             its counting, lane-coding and assembly submissions, each to its small readback \
             (count records, lane states; not the stream), the host's planning between them \
             left out) against \
             the copy kernel on the same bytes, alternating. `offload`: from the tensor in device \
             memory to the stream on the host (bit-plane: encode, chunk lengths down, starts up, \
             chunks condensed and read back; IBP: mask search by counts and scores on the device, \
             packing, sizes down and row starts up, condensing, compressed bytes down; rANS: \
             counts down, plan, lanes coded, their states and word counts down, segments up, \
             the stream assembled and read back), wall \
             clock, against reading the raw bytes back in the same runs (above 1: the compressed \
             path is faster). `round trip`: the offload, then the stream the GPU wrote uploaded \
             and decoded into device memory (checked equal to the tensor), against the raw bytes \
             down and up again. Targets on lavapipe: encode / copy >= 0.05 for the \
             bit-plane and rANS codecs and >= 0.10 for IBP, on tensors >= 1 MiB.\n\n\
             | codec | kernel / copy (all tensors) | kernel / copy (tensors >= 1 MiB) | offload: raw download / (encode + compressed download) | round trip: raw (download + upload) / (encode + download + upload + decode) | bytes down / raw | target (>= 1 MiB) |\n|---|---|---|---|---|---|---|"
        );
        for codec in ["bitplane", "ibp", "rans"] {
            let sel: Vec<&EncodeRow> = enc
                .iter()
                .filter(|(r, _)| r.codec == codec)
                .map(|(_, e)| *e)
                .collect();
            if sel.is_empty() {
                continue;
            }
            let sum = |f: fn(&EncodeRow) -> f64| sel.iter().map(|e| f(e)).sum::<f64>();
            let _ = writeln!(
                s,
                "| {codec} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} |",
                sum(|e| e.copy_seconds) / sum(|e| e.pack_seconds),
                sum(|e| e.large_copy_seconds) / sum(|e| e.large_pack_seconds),
                sum(|e| e.download_raw_seconds) / sum(|e| e.offload_seconds),
                sum(|e| e.download_raw_seconds + e.upload_raw_seconds)
                    / sum(|e| e.offload_seconds + e.reload_seconds),
                sum(|e| e.download_bytes as f64) / sum(|e| e.raw_bytes as f64),
                if codec == "ibp" { ">= 0.10" } else { ">= 0.05" },
            );
        }
        let _ = writeln!(
            s,
            "\n| dataset | dtype | codec | raw MB | kernel / copy | offload ms | raw download ms | offload speed-up | bytes down / raw |\n|---|---|---|---|---|---|---|---|---|"
        );
        for (r, e) in &enc {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                r.dataset,
                r.dtype,
                r.codec,
                e.raw_bytes as f64 / 1e6,
                e.copy_seconds / e.pack_seconds,
                e.offload_seconds * 1e3,
                e.download_raw_seconds * 1e3,
                e.download_raw_seconds / e.offload_seconds,
                e.download_bytes as f64 / e.raw_bytes as f64
            );
        }
    }
    if !gathers.is_empty() {
        let _ = writeln!(
            s,
            "\n## IBP gathers: bytes sent for 1 % of the rows\n\nRows stay compressed in host memory; a \
             gather of 1 % of them (every 100th) uploads only those rows' stored bytes, the mask and \
             bitval, their participation bits, their spans and output indices. Target: \
             <= 2 % of the tensor's raw bytes.\n\n| tensor | rows | row bytes | rows gathered | bytes uploaded | raw bytes | uploaded / raw |\n|---|---|---|---|---|---|---|"
        );
        for g in gathers {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.4} |",
                g.tensor,
                g.rows,
                g.row_bytes,
                g.gathered,
                g.upload_bytes,
                g.raw_bytes,
                g.upload_bytes as f64 / g.raw_bytes as f64
            );
        }
    }
    let _ = writeln!(
        s,
        "\n## Per dataset\n\n| dataset | dtype | size class | tensors | codec | path | ratio | decode GB/s | copy GB/s | decode / copy | upload raw ms | upload compressed + decode ms | pipelined raw ms | pipelined compressed + decode ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            r.dataset,
            r.dtype,
            r.size_class.label(),
            r.tensors,
            r.codec,
            r.path,
            r.raw_bytes as f64 / r.compressed_bytes as f64,
            r.decode_gbps,
            r.copy_gbps,
            r.decode_over_copy,
            r.upload_raw_seconds * 1e3,
            (r.upload_compressed_seconds + r.decode_seconds) * 1e3,
            r.pipelined_raw_seconds * 1e3,
            r.pipelined_seconds * 1e3
        );
    }
    s
}

/// Put the GPU decode speed (the device's default path) into the harness records.
fn patch_results(path: &Path, rows: &[Row], adapter: &str) -> Result<()> {
    let file = path.join("results.json");
    let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
    let mut res: planepack_harness::Results = serde_json::from_str(&text)?;
    for rec in &mut res.records {
        let hit = rows
            .iter()
            .find(|r| r.dataset == rec.dataset && r.dtype == rec.dtype && r.codec == rec.codec);
        if let Some(r) = hit {
            rec.gpu_decode_gbps = Some(r.decode_gbps);
            rec.gpu_device = Some(format!("{adapter} ({} path)", r.path));
        }
    }
    std::fs::write(&file, serde_json::to_string_pretty(&res)?)?;
    Ok(())
}
