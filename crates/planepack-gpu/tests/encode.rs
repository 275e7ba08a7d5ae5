//! The GPU encoders equal the CPU encoders byte for byte. IBP: each step against its CPU twin
//! (column bit counts, candidate scores, packed rows with sizes and row bitmask), the whole
//! `Ibp` stream on every dataset, and adversarial patterns in every chunk width. Bit-plane and
//! rANS: the whole stream on every dataset and on adversarial patterns and tails, both scan
//! paths.

use planepack_bitplane::BitPlane;
use planepack_core::{Codec, ElemType};
use planepack_ibp::internals::{score, BitCounts, SWEEP};
use planepack_ibp::{compress, Columns, Ibp, Layout, Mask, Rows};
use planepack_testkit::{generate, Pattern, Rng};

mod common;
use common::gpu;

/// The steps on one group: counts, the six candidate masks' scores, packing with the chosen
/// mask and with a mask that makes some rows raw.
fn check_steps(g: &planepack_gpu::Gpu, data: &[u8], row_bytes: usize, width: u32, what: &str) {
    let rows = Rows::new(data, row_bytes, width).unwrap();
    let dev = g.upload_rows(data, row_bytes, width).unwrap();
    let counts = g.ibp_bit_counts(&dev).unwrap();
    let cpu = BitCounts::of(&rows, 0..rows.count);
    assert_eq!(counts.counts, cpu.counts, "{what}: bit counts");
    let masks: Vec<Mask> = SWEEP.iter().map(|&t| cpu.mask(t)).collect();
    let scores = g.ibp_scores(&dev, &masks).unwrap();
    for (m, s) in masks.iter().zip(&scores) {
        assert_eq!(*s, score(&rows, 0..rows.count, m), "{what}: score");
    }
    let mut strict = masks[0].clone();
    // Every bit invariant at the first row's values: other rows mostly stay raw.
    for (j, x) in rows.row_chunks(0).enumerate() {
        strict.mask[j] = u64::MAX >> (64 - width);
        strict.bitval[j] = x;
    }
    for m in masks
        .iter()
        .chain([&strict, &Mask::empty(width, rows.columns)])
    {
        let enc = g.encode_ibp_rows(&dev, m).unwrap();
        let cpu = compress(&rows, &Columns::new(m), Layout::Condensed);
        assert_eq!(
            enc.group.row_bitmask, cpu.row_bitmask,
            "{what}: row bitmask"
        );
        assert_eq!(enc.group.offsets, cpu.offsets, "{what}: offsets");
        assert!(enc.group.data == cpu.data, "{what}: packed rows");
        assert_eq!(
            enc.download_bytes,
            4 * rows.count + 4 * rows.count.div_ceil(32) + cpu.data.len()
        );
    }
}

#[test]
fn encoder_steps_match_the_cpu_on_adversarial_patterns() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(41);
    for pat in Pattern::ALL {
        for (elem, cols, rows) in [
            (ElemType::F32, 64usize, 70usize),
            (ElemType::BF16, 96, 33),
            (ElemType::F16, 6, 100),
            (ElemType::U8, 24, 50),
            (ElemType::F32, 1, 9),
            (ElemType::BF16, 2, 65),
            (ElemType::F32, 600, 5),
        ] {
            let row = cols * elem.size();
            let mut data = generate(pat, elem, row * rows, rng.next_u64());
            // Some rows share bits, as rows of a real tensor do.
            for r in (0..rows).step_by(3) {
                let (a, b) = data.split_at_mut(r * row);
                if r > 0 {
                    b[..row / 2].copy_from_slice(&a[..row / 2]);
                }
            }
            for width in [64u32, 32, 16] {
                if row % (width as usize / 8) != 0 || row % 4 != 0 {
                    continue;
                }
                check_steps(
                    g,
                    &data,
                    row,
                    width,
                    &format!("{pat:?} {elem} {cols}x{rows} W={width}"),
                );
            }
        }
    }
}

/// Each step on real tensors with rows (the first of each dataset's 2-D tensors), also where
/// the stream ends up storing the tensor whole.
#[test]
fn encoder_steps_match_the_cpu_on_real_tensors() {
    let Some(g) = gpu() else { return };
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir).unwrap();
    let mut checked = 0;
    for d in &manifest.datasets {
        let tensors = planepack_datasets::load(&dir.join(&d.file)).unwrap();
        let Some((t, elem)) = tensors
            .iter()
            .filter_map(|t| t.elem().map(|e| (t, e)))
            .find(|(t, e)| t.shape.len() >= 2 && (t.shape.last().unwrap() * e.size()) % 4 == 0)
        else {
            continue;
        };
        let row = t.shape.last().unwrap() * elem.size();
        let width = Ibp::default().pick_width(row).unwrap();
        let whole = t.data.len() / row * row;
        check_steps(g, &t.data[..whole], row, width, &t.name);
        checked += 1;
    }
    assert!(checked >= 5, "{checked}");
}

#[test]
fn stream_encoder_matches_the_cpu_on_every_dataset() {
    let Some(g) = gpu() else { return };
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir).unwrap();
    let (mut same, mut refused, mut with_rows) = (0, 0, 0);
    for d in &manifest.datasets {
        for t in planepack_datasets::load(&dir.join(&d.file)).unwrap() {
            let Some(elem) = t.elem() else { continue };
            let mut cpu = Vec::new();
            Ibp::default()
                .encode_shaped(&t.data, elem, &t.shape, &mut cpu)
                .unwrap();
            match g.encode_ibp(&t.data, elem, &t.shape) {
                Ok(gpu) => {
                    assert!(gpu == cpu, "{}: GPU stream differs", t.name);
                    same += 1;
                    // Streams with rows, not the whole tensor stored.
                    with_rows +=
                        usize::from(u64::from_le_bytes(cpu[16..24].try_into().unwrap()) > 0);
                }
                // Rows too long for one invocation's loop budget: the CPU encodes them.
                Err(planepack_gpu::GpuError::Unsupported(m)) if m.contains("would loop") => {
                    eprintln!("{}: {m}", t.name);
                    refused += 1;
                }
                // Rows of an odd number of 16-bit chunks: the kernels read whole words.
                Err(planepack_gpu::GpuError::Unsupported(m)) => {
                    let row = t.shape.last().copied().unwrap_or(0) * elem.size();
                    assert!(row % 4 == 2, "{}: {m}", t.name);
                    refused += 1;
                }
                Err(e) => panic!("{}: {e}", t.name),
            }
        }
    }
    eprintln!(
        "{same} tensors encoded identically ({with_rows} with IBP rows), {refused} refused (odd 16-bit rows, rows too long)"
    );
    assert!(with_rows >= 10, "{with_rows}");
}

/// Tensors IBP cannot shrink, tails, and shapes without rows give the CPU's stream too.
#[test]
fn stream_encoder_matches_the_cpu_at_the_edges() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(43);
    for pat in Pattern::ALL {
        for (elem, shape) in [
            (ElemType::F32, vec![10usize, 7]),
            (ElemType::BF16, vec![33, 10]),
            (ElemType::F32, vec![0, 8]),
            (ElemType::U8, vec![1000]),
            (ElemType::F32, vec![]),
        ] {
            let n: usize = shape.iter().product::<usize>().max(1) * elem.size();
            let mut data = generate(pat, elem, n, rng.next_u64());
            // A tail: bytes past the last whole row.
            data.extend_from_slice(&[1, 2, 3]);
            let mut cpu = Vec::new();
            Ibp::default()
                .encode_shaped(&data, elem, &shape, &mut cpu)
                .unwrap();
            let gpu = g.encode_ibp(&data, elem, &shape).unwrap();
            assert!(gpu == cpu, "{pat:?} {elem} {shape:?}");
        }
    }
}

/// Rows too long for one invocation (a row per invocation scores and packs; llvmpipe stops
/// an invocation's loops after 65535 iterations in all): refused before anything runs, never
/// a stream from loops cut short. The CPU encodes them.
#[test]
fn rows_too_long_for_one_invocation_are_refused() {
    let Some(g) = gpu() else { return };
    let (rows, cols) = (16, 100_001);
    let mut rng = Rng(44);
    let data: Vec<u8> = (0..rows * cols)
        .flat_map(|_| (0x3f80_0000 | (rng.next_u64() as u32 & 0x7f_ffff)).to_le_bytes())
        .collect();
    match g.encode_ibp(&data, ElemType::F32, &[rows, cols]) {
        Err(planepack_gpu::GpuError::Unsupported(m)) => assert!(m.contains("would loop"), "{m}"),
        other => panic!("{:?}", other.map(|s| s.len())),
    }
    let dev = g.upload_rows(&data, cols * 4, 32).unwrap();
    let mask = Mask::empty(32, cols);
    assert!(matches!(
        g.encode_ibp_rows(&dev, &mask),
        Err(planepack_gpu::GpuError::Unsupported(_))
    ));
}

#[test]
fn encoder_refuses_what_it_cannot_do() {
    let Some(g) = gpu() else { return };
    let data = vec![0u8; 64 * 8];
    let dev = g.upload_rows(&data, 64, 32).unwrap();
    assert!(g.encode_ibp_rows(&dev, &Mask::empty(64, 8)).is_err());
    assert!(g.encode_ibp_rows(&dev, &Mask::empty(32, 15)).is_err());
    let mut bad = Mask::empty(32, 16);
    bad.bitval[3] = 1;
    assert!(g.encode_ibp_rows(&dev, &bad).is_err());
    assert!(g.upload_rows(&data[..100], 64, 32).is_err());
    assert!(g.upload_rows(&data, 6, 32).is_err());
    let odd = g.upload_rows(&data[..6 * 8], 6, 16).unwrap();
    assert!(g.ibp_bit_counts(&odd).is_err());
}

/// A storage buffer of `data` in whole words, then 8 bytes of garbage the encoder must not read
/// as the tensor.
fn with_garbage_after(g: &planepack_gpu::Gpu, data: &[u8]) -> wgpu::Buffer {
    use wgpu::util::DeviceExt;
    let mut v = data.to_vec();
    v.resize((data.len().div_ceil(4) + 2) * 4, 0xCD);
    g.device()
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: &v,
            usage: wgpu::BufferUsages::STORAGE,
        })
}

/// The GPU bit-plane encoder on one path: upload, encode, stream back.
fn bitplane_on(
    g: &planepack_gpu::Gpu,
    cfg: &planepack_gpu::KernelConfig,
    data: &[u8],
    elem: ElemType,
) -> Vec<u8> {
    let buf = with_garbage_after(g, data);
    let e = g
        .prepare_bitplane_encode(&buf, data.len(), elem.bits(), cfg)
        .unwrap();
    g.run_bitplane_encode(&e).unwrap().0
}

fn paths(g: &planepack_gpu::Gpu) -> Vec<planepack_gpu::KernelConfig> {
    let mut v = vec![g.config().with_path(planepack_gpu::ScanPath::Workgroup)];
    if g.has_subgroups() {
        v.push(g.config().with_path(planepack_gpu::ScanPath::Subgroup));
    }
    v
}

/// Every mode, width and tail length class: the GPU's bit-plane stream is the CPU's, on both
/// scan paths, with garbage after the tensor in its buffer.
#[test]
fn bitplane_encoder_matches_the_cpu_on_patterns_and_tails() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(51);
    for cfg in paths(g) {
        for pat in Pattern::ALL {
            for elem in [ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::U8] {
                for len in [
                    0usize, 1, 3, 127, 128, 129, 4095, 4096, 4097, 10_001, 70_003,
                ] {
                    let data = generate(pat, elem, len, rng.next_u64());
                    let cpu = BitPlane::new().encode_to_vec(&data, elem).unwrap();
                    let got = bitplane_on(g, &cfg, &data, elem);
                    assert!(got == cpu, "{:?} {pat:?} {elem} {len}", cfg.path);
                }
            }
        }
    }
}

#[test]
fn bitplane_encoder_matches_the_cpu_on_every_dataset() {
    let Some(g) = gpu() else { return };
    let mut n = 0;
    for t in planepack_datasets::load_all(&planepack_datasets::datasets_dir()).unwrap() {
        let Some(elem) = t.elem() else { continue };
        let cpu = BitPlane::new().encode_to_vec(&t.data, elem).unwrap();
        let got = g.encode_bitplane(&t.data, elem).unwrap();
        assert!(got == cpu, "{}: GPU bit-plane stream differs", t.name);
        n += 1;
    }
    assert!(n > 1000, "{n}");
}

/// The GPU rANS encoder on one path, from a buffer with garbage after the tensor.
fn rans_on(
    g: &planepack_gpu::Gpu,
    cfg: &planepack_gpu::KernelConfig,
    data: &[u8],
    elem: ElemType,
    rans: &planepack_rans::Rans,
) -> planepack_gpu::EncodedRans {
    let buf = with_garbage_after(g, data);
    g.encode_rans_with(&buf, data.len(), elem, rans, cfg)
        .unwrap()
}

/// Every pattern, width and tail length class, at the smallest and the default chunk size,
/// with and without the zero mask and the rotation: the GPU's rANS stream is the CPU's, on
/// both scan paths, with garbage after the tensor in its buffer.
#[test]
fn rans_encoder_matches_the_cpu_on_patterns_and_tails() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(52);
    let settings = [
        planepack_gpu::GPU_RANS,
        planepack_rans::Rans {
            chunk_log2: 12,
            ..planepack_gpu::GPU_RANS
        },
        planepack_rans::Rans {
            zero_mask: false,
            rotate: false,
            ..planepack_gpu::GPU_RANS
        },
    ];
    for cfg in paths(g) {
        for rans in &settings {
            for pat in Pattern::ALL {
                for elem in [ElemType::F32, ElemType::BF16, ElemType::U8] {
                    for len in [0usize, 1, 3, 33, 4095, 4097, 70_003] {
                        let data = generate(pat, elem, len, rng.next_u64());
                        let cpu = rans.encode_to_vec(&data, elem).unwrap();
                        let got = rans_on(g, &cfg, &data, elem, rans);
                        assert!(
                            got.stream == cpu,
                            "{:?} {} {pat:?} {elem} {len}: {} vs {} bytes",
                            cfg.path,
                            rans.name(),
                            got.stream.len(),
                            cpu.len()
                        );
                    }
                }
            }
        }
    }
}

/// Every tensor of `datasets/`, on both scan paths: the GPU's stream is the CPU's.
#[test]
fn rans_encoder_matches_the_cpu_on_every_dataset() {
    let Some(g) = gpu() else { return };
    let rans = planepack_gpu::GPU_RANS;
    let mut n = 0;
    for t in planepack_datasets::load_all(&planepack_datasets::datasets_dir()).unwrap() {
        let Some(elem) = t.elem() else { continue };
        let cpu = rans.encode_to_vec(&t.data, elem).unwrap();
        for cfg in paths(g) {
            let got = rans_on(g, &cfg, &t.data, elem, &rans).stream;
            assert!(
                got == cpu,
                "{}: GPU rANS stream differs ({:?})",
                t.name,
                cfg.path
            );
        }
        n += 1;
    }
    assert!(n > 1000, "{n}");
}

/// What the GPU rANS encoder does not write is refused as unsupported (the CLI then encodes
/// on the CPU), never written differently.
#[test]
fn rans_encoder_refuses_what_it_cannot_do() {
    let Some(g) = gpu() else { return };
    let data = vec![1u8; 64];
    for rans in [
        planepack_rans::Rans::default(),
        planepack_rans::Rans {
            scaled: true,
            contexts: false,
            ..planepack_gpu::GPU_RANS
        },
        planepack_rans::Rans {
            chunk_log2: 11,
            ..planepack_gpu::GPU_RANS
        },
    ] {
        assert!(matches!(
            g.encode_rans(&data, ElemType::F32, &rans),
            Err(planepack_gpu::GpuError::Unsupported(_))
        ));
    }
}

/// Counts that do not fit 16 bits: a chunk of 65536 single bytes of one value (its count
/// written as 65535 and rebuilt on the host), and chunks of 2^18 and 2^20 elements (counts as
/// 32 bits), each with runs, zeros and noise; both paths.
#[test]
fn rans_encoder_matches_the_cpu_on_large_counts() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(53);
    let mut mixed = vec![7u8; 1 << 20];
    for (i, b) in mixed.iter_mut().enumerate() {
        if i % 3 == 0 {
            *b = 0;
        } else if i % 7 == 0 {
            *b = rng.next_u64() as u8;
        }
    }
    let cases: [(&[u8], ElemType, u8); 5] = [
        (&[9u8; 65536 + 5], ElemType::U8, 16),
        (&[0u8; 3 << 16], ElemType::BF16, 17),
        (&mixed[..(1 << 18) + 3], ElemType::U8, 18),
        (&mixed, ElemType::U8, 20),
        (&mixed, ElemType::BF16, 20),
    ];
    for cfg in paths(g) {
        for (data, elem, log2) in cases {
            let rans = planepack_rans::Rans {
                chunk_log2: log2,
                ..planepack_gpu::GPU_RANS
            };
            let cpu = rans.encode_to_vec(data, elem).unwrap();
            let got = rans_on(g, &cfg, data, elem, &rans);
            assert!(got.stream == cpu, "{:?} {elem} 2^{log2}", cfg.path);
        }
    }
}
