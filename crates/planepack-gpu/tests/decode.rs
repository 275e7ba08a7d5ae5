//! GPU decodes equal the CPU reference: adversarial patterns, every tail length class, every
//! dataset, both scan paths; mutated streams give an error (never a hang, never data the CPU
//! decoder would refuse).
//!
//! Without an adapter these tests skip with a message, except in CI (`CI` set), where a
//! missing adapter is a failure: CI installs lavapipe.

use planepack_bitplane::{BitPlane, Mode};
use planepack_core::{Codec, ElemType};
use planepack_gpu::{Gpu, GpuError, KernelConfig, ScanPath};
use planepack_ibp::Ibp;
use planepack_rans::Rans;
use planepack_testkit::{generate, mutate, Mutation, Pattern, Rng};
mod common;
use common::gpu;

/// The paths this device can run.
fn paths(g: &Gpu) -> Vec<ScanPath> {
    if g.has_subgroups() {
        vec![ScanPath::Subgroup, ScanPath::Workgroup]
    } else {
        vec![ScanPath::Workgroup]
    }
}

/// A device and one launch configuration: the decodes of the tests, on a chosen path.
#[derive(Clone, Copy)]
struct Dec<'a> {
    g: &'a Gpu,
    cfg: KernelConfig,
}

impl Dec<'_> {
    fn decode_bitplane(&self, s: &[u8]) -> Result<Vec<u8>, GpuError> {
        self.g.run(&self.g.prepare_bitplane(s, &self.cfg)?)
    }
    fn decode_rans(&self, s: &[u8]) -> Result<Vec<u8>, GpuError> {
        self.g.run(&self.g.prepare_rans(s, &self.cfg)?)
    }
    fn decode_ibp(&self, s: &[u8]) -> Result<Vec<u8>, GpuError> {
        self.g.run(&self.g.prepare_ibp(s, None, &self.cfg)?)
    }
    fn gather_ibp(&self, s: &[u8], rows: &[usize]) -> Result<Vec<u8>, GpuError> {
        self.g.run(&self.g.prepare_ibp(s, Some(rows), &self.cfg)?)
    }
    fn gather_rows(
        &self,
        group: &planepack_ibp::CompressedRows,
        mask: &planepack_ibp::Mask,
        rows: Option<&[usize]>,
    ) -> Result<Vec<u8>, GpuError> {
        self.g
            .run(&self.g.prepare_rows(group, mask, rows, &self.cfg)?)
    }
}

/// Run `f` on each scan path the device has (the configuration is per call: tests running in
/// parallel do not disturb each other).
fn on_each_path(g: &Gpu, mut f: impl FnMut(Dec)) {
    for path in paths(g) {
        f(Dec {
            g,
            cfg: g.config().with_path(path),
        });
    }
}

/// Run `f` on each scan path with each rANS decode shape under test ([`rans_shapes`]): a
/// workgroup per chunk and plane-parallel (`KernelConfig::rans_planes`; lavapipe's default is
/// the first, a GPU's the second).
fn on_each_rans_config(g: &Gpu, mut f: impl FnMut(Dec)) {
    for path in paths(g) {
        for planes in rans_shapes(g) {
            f(Dec {
                g,
                cfg: g.config().with_path(path).with_rans_planes(planes),
            });
        }
    }
}

/// The rANS decode shapes to test: both, unless `PLANEPACK_TEST_RANS_SHAPES=default`, which
/// keeps the device's default shape only (CI's GL run: one test thread, where each shape of
/// these tests takes minutes; CI's Vulkan runs test both).
fn rans_shapes(g: &Gpu) -> Vec<bool> {
    if std::env::var("PLANEPACK_TEST_RANS_SHAPES").is_ok_and(|v| v == "default") {
        vec![g.config().rans_planes]
    } else {
        vec![false, true]
    }
}

impl<'a> Dec<'a> {
    /// The same device and path in each rANS decode shape under test.
    fn rans_shapes(self) -> Vec<Dec<'a>> {
        rans_shapes(self.g)
            .into_iter()
            .map(|planes| Dec {
                cfg: self.cfg.with_rans_planes(planes),
                ..self
            })
            .collect()
    }
}

#[test]
fn bitplane_patterns_and_tails() {
    let Some(g) = gpu() else { return };
    let codec = BitPlane::new();
    let mut rng = Rng(7);
    on_each_path(g, |d| {
        let p = d.cfg.path;
        for pat in Pattern::ALL {
            for elem in [ElemType::F32, ElemType::BF16, ElemType::F16, ElemType::U8] {
                for len in [
                    0usize, 1, 3, 127, 128, 129, 4095, 4096, 4097, 10_000, 70_001,
                ] {
                    let data = generate(pat, elem, len, rng.next_u64());
                    let enc = codec.encode_to_vec(&data, elem).unwrap();
                    let got = g
                        .decode_bitplane(&enc)
                        .unwrap_or_else(|e| panic!("{p:?} {pat:?} {elem} {len}: {e}"));
                    assert!(got == data, "{p:?} {pat:?} {elem} {len}");
                }
            }
        }
    });
}

/// Every block mode on every element width: the encoder forced to one mode wherever it
/// applies, so each of the shader's plane layouts (32-, 16-, 8-bit elements) meets BX, DBX
/// (deltas) and ZBX (packed nonzeros) and not only the mixes the normal encoder picks.
#[test]
fn bitplane_every_mode_every_width() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(9);
    on_each_path(g, |d| {
        let p = d.cfg.path;
        for mode in Mode::ALL {
            let codec = BitPlane::forcing(mode);
            for pat in Pattern::ALL {
                for elem in [ElemType::F32, ElemType::BF16, ElemType::U8] {
                    let data = generate(pat, elem, 4096 + 300, rng.next_u64());
                    let enc = codec.encode_to_vec(&data, elem).unwrap();
                    let got = g
                        .decode_bitplane(&enc)
                        .unwrap_or_else(|e| panic!("{p:?} {mode:?} {pat:?} {elem}: {e}"));
                    assert!(got == data, "{p:?} {mode:?} {pat:?} {elem}");
                }
            }
        }
    });
}

/// Tensors with rows: (elements per row, rows) in several element types, so that IBP meets
/// chunk widths 64, 32 and 16, raw and packed rows, and tails.
fn ibp_cases() -> Vec<(Vec<u8>, ElemType, Vec<usize>)> {
    let mut v = Vec::new();
    let mut rng = Rng(11);
    for pat in Pattern::ALL {
        for (elem, cols, rows) in [
            (ElemType::F32, 64usize, 40usize),
            (ElemType::BF16, 96, 33),
            (ElemType::F16, 6, 100),
            (ElemType::U8, 24, 50),
            (ElemType::F32, 3, 17),
            (ElemType::BF16, 2, 5),
        ] {
            let n = cols * rows * elem.size();
            // Some rows share bits (a real tensor's structure), some are the pattern's.
            let mut data = generate(pat, elem, n, rng.next_u64());
            let row = cols * elem.size();
            for r in (0..rows).step_by(3) {
                let (a, b) = data.split_at_mut(r * row);
                if r > 0 {
                    b[..row].copy_from_slice(&a[..row]);
                }
            }
            // A few bytes past the last row: a tail.
            data.extend_from_slice(&[1, 2, 3]);
            v.push((data, elem, vec![rows, cols]));
        }
    }
    v
}

/// rANS encoders that between them write every chunk mode, every plane kind, lane counts
/// from 1 to 32, row maps, and both rotations.
fn rans_codecs() -> Vec<Rans> {
    let d = Rans::default();
    vec![
        d,
        Rans {
            chunk_log2: 12,
            ..d
        },
        Rans {
            zero_mask: false,
            rotate: false,
            rows: false,
            ..d
        },
        // The wide tables of streams written before the compact form.
        Rans {
            compact_tables: false,
            ..d
        },
    ]
}

#[test]
fn rans_patterns_tails_widths_and_rows() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(17);
    let mut cases: Vec<(Vec<u8>, ElemType, Vec<usize>)> = Vec::new();
    for pat in Pattern::ALL {
        for elem in [ElemType::U8, ElemType::F16, ElemType::BF16, ElemType::F32] {
            // Every tail length, tiny tensors, chunk boundaries (4 KiB and 64 KiB) and beyond.
            for len in [
                0usize, 1, 2, 3, 5, 7, 64, 1001, 4096, 4099, 40_000, 65_536, 200_003,
            ] {
                cases.push((generate(pat, elem, len, rng.next_u64()), elem, vec![len]));
            }
        }
    }
    cases.extend(ibp_cases().into_iter().map(|(mut d, e, shape)| {
        // Row maps need the data to be whole rows.
        d.truncate(shape[0] * shape[1] * e.size());
        (d, e, shape)
    }));
    let codecs = rans_codecs();
    let streams: Vec<(usize, Vec<u8>)> = cases
        .iter()
        .enumerate()
        .flat_map(|(i, (d, e, shape))| {
            codecs.iter().map(move |c| {
                let mut b = Vec::new();
                c.encode_shaped(d, *e, shape, &mut b).unwrap();
                (i, b)
            })
        })
        .collect();
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (i, b) in &streams {
            let (data, elem, shape) = &cases[*i];
            let got = g
                .decode_rans(b)
                .unwrap_or_else(|e| panic!("{p:?} {elem:?} {shape:?}: {e}"));
            assert!(
                got == *data,
                "{p:?} rANS {elem:?} {shape:?}: got {:?}.. want {:?}.., stream {:?}",
                &got[..got.len().min(16)],
                &data[..data.len().min(16)],
                &b[..b.len().min(40)]
            );
        }
    });
}

/// Chunk modes of a rANS stream (the first byte of each chunk).
fn chunk_modes(stream: &[u8]) -> Vec<u8> {
    let h = planepack_rans::parse_header(stream).unwrap();
    planepack_rans::chunk_spans(stream, &h)
        .unwrap()
        .iter()
        .map(|&(o, _)| stream[o])
        .collect()
}

/// Modelled chunks (mode 3: zero, left, up, dictionary and literal symbols in up to 8 lanes)
/// at every width, both rotations, with and without rows, every lane-length class the kernel
/// takes, on both scan paths; damaged ones agree with the CPU. Lanes longer than the kernel
/// takes are refused as unsupported, never decoded wrongly.
#[test]
fn modelled_chunks_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let modelled = planepack_rans::internals::modelled::CHUNK_MODELLED;
    let mut cases: Vec<(Vec<u8>, ElemType, Vec<usize>, Rans)> = Vec::new();
    for (elem, width) in [
        (ElemType::U8, 1),
        (ElemType::BF16, 2),
        (ElemType::F16, 2),
        (ElemType::F32, 4),
    ] {
        for (len, row) in [
            (1001usize, 0usize),
            (4100, 50),
            (65_536, 64),
            (200_003, 0),
            (131_072, 512),
        ] {
            let data =
                planepack_testkit::activation_like(len, width, row, len as u64 ^ width as u64);
            let shape = match len.checked_div(row) {
                Some(rows) => vec![rows, row],
                None => vec![len],
            };
            for rotate in [true, false] {
                for chunk_log2 in [12u8, 16] {
                    let c = Rans {
                        rotate,
                        chunk_log2,
                        // Both table forms, with each rotation.
                        compact_tables: rotate == (chunk_log2 == 16),
                        ..Rans::default()
                    };
                    cases.push((data.clone(), elem, shape.clone(), c));
                }
            }
        }
    }
    let streams: Vec<Vec<u8>> = cases
        .iter()
        .map(|(d, e, shape, c)| {
            let mut b = Vec::new();
            c.encode_shaped(d, *e, shape, &mut b).unwrap();
            b
        })
        .collect();
    let with_modelled = streams
        .iter()
        .filter(|s| chunk_modes(s).contains(&modelled))
        .count();
    assert!(
        with_modelled * 4 >= streams.len() * 3,
        "only {with_modelled} of {} streams have a modelled chunk",
        streams.len()
    );
    let mut rng = Rng(1234);
    let mut each = |d: Dec, damage: bool| {
        let p = d.cfg.path;
        let slots = d.cfg.model_slots;
        for ((data, elem, shape, c), s) in cases.iter().zip(&streams) {
            decodes_to(
                d,
                s,
                data,
                &format!("{p:?} slots {slots} modelled {elem:?} {shape:?} {c:?}"),
            );
            if !damage || !chunk_modes(s).contains(&modelled) {
                continue;
            }
            damaged_rans_agree(d, c, s, &mut rng, &format!("modelled {elem:?}"));
        }
    };
    on_each_rans_config(g, |d| each(d, true));
    // The lanes' other way to a symbol, searching the ranks (where the decode slots would not
    // fit the device's storage binding), in the device's default configuration; its
    // refusals are the element function's, which the damaged streams above exercise.
    each(
        Dec {
            g,
            cfg: g.config().with_model_slots(false),
        },
        false,
    );
    // 1 MiB chunks: 8 lanes of 131072 elements, past the kernel's lane limit.
    let data = planepack_testkit::activation_like(1 << 20, 2, 0, 9);
    let c = Rans {
        chunk_log2: 20,
        ..Rans::default()
    };
    let s = c.encode_to_vec(&data, ElemType::BF16).unwrap();
    assert!(chunk_modes(&s).contains(&modelled));
    match g.decode_rans(&s) {
        Err(GpuError::Unsupported(_)) => {}
        other => panic!("long modelled lanes: {:?}", other.map(|v| v.len())),
    }
}

/// The largest chunks `rans-1`'s search writes (2^17 elements: a modelled chunk's 8 lanes
/// of 16384, the kernel's limit exactly) decode on the GPU at every width, on every path;
/// and a whole `rans-1` stream does. (One chunk each: llvmpipe takes about ten seconds a
/// decode of lanes this long.)
#[test]
fn the_largest_searched_chunks_decode() {
    let Some(g) = gpu() else { return };
    let modelled = planepack_rans::internals::modelled::CHUNK_MODELLED;
    for (elem, width) in [(ElemType::U8, 1), (ElemType::BF16, 2), (ElemType::F32, 4)] {
        let n = planepack_rans::SEARCH_MAX_CHUNK_ELEMENTS;
        // Bytes: runs of 7 and zero stretches, where the modelled chunk pays (the
        // generator's bytes are too random for it).
        let data = match width {
            1 => (0..n)
                .map(|i| match (i / 37) % 3 {
                    0 => 0,
                    _ => (i / 7 * 13 % 251) as u8,
                })
                .collect(),
            _ => planepack_testkit::activation_like(n, width, 512, 17 + width as u64),
        };
        let shape = [n / 512, 512];
        let largest = planepack_rans::search_chunk_log2(width)[3];
        let encode = |c: &Rans| {
            let mut s = Vec::new();
            c.encode_shaped(&data, elem, &shape, &mut s).unwrap();
            s
        };
        let s = encode(&Rans {
            chunk_log2: largest,
            ..Rans::default()
        });
        assert!(chunk_modes(&s).contains(&modelled), "{elem}");
        let searched = encode(&Rans::SEARCH);
        on_each_path(g, |d| {
            decodes_to(d, &s, &data, &format!("{elem} 2^{largest}-byte chunks"));
        });
        let d = Dec { g, cfg: g.config() };
        decodes_to(d, &searched, &data, &format!("{elem} rans-1"));
    }
}

/// Block-scaled chunks (mode 4: a scale per block of 32 times int8, as dequantized Q8_0
/// tables) at both rotations, 4 KiB and 64 KiB chunks, flat and with repeated rows, every
/// short length class, on both scan paths; damaged ones agree with the CPU.
#[test]
fn scaled_chunks_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let scaled = planepack_rans::internals::scaled::CHUNK_SCALED;
    let mut cases: Vec<(Vec<u8>, Vec<usize>, Rans)> = Vec::new();
    for len in [132usize, 4096, 70_004, 400_000] {
        let data = planepack_testkit::block_scaled_f32(len, len as u64, 6);
        let rows = [&data[..], &data[..]].concat();
        for rotate in [true, false] {
            for chunk_log2 in [12u8, 16] {
                let c = Rans {
                    rotate,
                    chunk_log2,
                    ..Rans::default()
                };
                cases.push((data.clone(), vec![len / 4], c));
                if len >= 4096 {
                    cases.push((rows.clone(), vec![2 * len / 128, 32], c));
                }
            }
        }
    }
    let streams: Vec<Vec<u8>> = cases
        .iter()
        .map(|(d, shape, c)| {
            let mut b = Vec::new();
            c.encode_shaped(d, ElemType::F32, shape, &mut b).unwrap();
            assert!(chunk_modes(&b).contains(&scaled), "{c:?} {shape:?}");
            b
        })
        .collect();
    let mut rng = Rng(4321);
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for ((data, shape, c), s) in cases.iter().zip(&streams) {
            decodes_to(d, s, data, &format!("{p:?} scaled {shape:?} {c:?}"));
            damaged_rans_agree(d, c, s, &mut rng, "scaled");
        }
        // Every element of a block off the grid (the block-size byte, a scale, an integer):
        // the CPU and the GPU both refuse or both decode the same bytes.
        let (_, _, c) = &cases[4];
        let s = &streams[4];
        let at =
            planepack_rans::chunk_spans(s, &planepack_rans::parse_header(s).unwrap()).unwrap()[0].0;
        for i in 0..64 {
            for v in [0u8, 1, 2, 21, 0x80, 0xff] {
                let mut bad = s.clone();
                bad[at + 1 + i] = v;
                agree(
                    c,
                    &bad,
                    |x| d.decode_rans(x),
                    &format!("{p:?} scaled byte {i}={v}"),
                );
            }
        }
    });
}

/// Context planes (version 4: plane 1 coded with the element's exponent as context, tables
/// stored once per stream) in dense and sparse chunks, BF16 and FP32, 4 KiB and 64 KiB chunks,
/// with a tail, on both scan paths; damaged ones (the section, the planes) agree with the CPU.
#[test]
fn context_planes_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let v4 = planepack_rans::internals::contexts::VERSION_CONTEXT;
    let mut cases: Vec<(Vec<u8>, ElemType, Rans, Vec<u8>)> = Vec::new();
    for (elem, width, zeros) in [
        (ElemType::BF16, 2, 0),
        (ElemType::BF16, 2, 3),
        (ElemType::F32, 4, 0),
    ] {
        let mut data = planepack_testkit::exponent_dependent_floats(
            (1 << 20) / width + 77,
            width,
            zeros,
            width as u64 + zeros as u64,
        );
        data.push(0x5a);
        for chunk_log2 in [12u8, 16] {
            let c = Rans {
                chunk_log2,
                ..Rans::default()
            };
            let s = c.encode_to_vec(&data, elem).unwrap();
            assert_eq!(s[4], v4, "{elem} zeros 1/{zeros}");
            cases.push((data.clone(), elem, c, s));
        }
    }
    let mut rng = Rng(77);
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (data, elem, c, s) in &cases {
            decodes_to(d, s, data, &format!("{p:?} context planes {elem} {c:?}"));
        }
        let (_, _, c, s) = &cases[1];
        damaged_rans_agree(d, c, s, &mut rng, "context planes");
        // Bytes of the section (E0, the table set, the tables) and of the first chunk's
        // planes set to other values: both decoders refuse, or decode the same bytes.
        for _ in 0..16 {
            let at = 16 + rng.below(4096) as usize;
            for v in [0u8, 3, 0xff] {
                let mut bad = s.clone();
                bad[at] = v;
                agree(
                    c,
                    &bad,
                    |x| d.decode_rans(x),
                    &format!("{p:?} context byte {at}={v}"),
                );
            }
        }
    });
}

/// A stream whose context, row or sign plane needs a table its section lacks (`absent`, the
/// valid `stream` of `data` with that table taken out, equal to the stand-in the GPU decodes
/// an absent table with) is an error in each rANS decode shape; the valid one decodes (once).
/// The device's default scan path only: the check is in the steps both paths share (and the
/// tests take minutes on CI's GL run).
fn absent_table_refused(g: &Gpu, stream: &[u8], data: &[u8], absent: &[u8], what: &str) {
    let default = Dec { g, cfg: g.config() };
    for (i, d) in default.rans_shapes().into_iter().enumerate() {
        let p = d.cfg.path;
        if i == 0 {
            decodes_to(d, stream, data, &format!("{p:?} {what}"));
        }
        assert!(
            d.decode_rans(absent).is_err(),
            "{p:?} planes {}: the GPU decoded {what} without a table",
            d.cfg.rans_planes
        );
    }
}

/// A context plane's element whose context has no table is an error on the GPU as on the
/// CPU, even where the lanes end right: the section of a stream of
/// [`planepack_testkit::twin_context_tables_bf16`] without context 4's table, which equals
/// the table the GPU decodes an absent context with (the first), so only the absent-table
/// check (`present_table`) can refuse it.
#[test]
fn a_context_without_its_table_is_refused_where_the_lanes_end_right() {
    use planepack_rans::internals::contexts::{ContextTables, CONTEXT_PLANES_ONLY};
    let Some(g) = gpu() else { return };
    let data = planepack_testkit::twin_context_tables_bf16(1400);
    let stream = CONTEXT_PLANES_ONLY
        .encode_to_vec(&data, ElemType::BF16)
        .unwrap();
    let absent = ContextTables::without_table(&stream, 4).unwrap();
    let mut out = vec![0u8; data.len()];
    assert!(CONTEXT_PLANES_ONLY.decode(&absent, &mut out).is_err());
    absent_table_refused(g, &stream, &data, &absent, "a context plane");
}

/// The same for a row plane: a stream of [`planepack_testkit::twin_row_tables_bf16`]
/// without the row table of exponent 129's context, which equals the GPU's stand-in (the
/// first table), so only `row_step`'s absent-table check can refuse it.
#[test]
fn a_row_context_without_its_table_is_refused_where_the_lanes_end_right() {
    use planepack_rans::internals::row_contexts::{row_context, RowTables, ROW_PLANES_ONLY};
    let Some(g) = gpu() else { return };
    let data = planepack_testkit::twin_row_tables_bf16(1024, 5);
    let mut stream = Vec::new();
    ROW_PLANES_ONLY
        .encode_shaped(&data, ElemType::BF16, &[1024, 64], &mut stream)
        .unwrap();
    let h = planepack_rans::parse_header(&stream).unwrap();
    let rows = h.row_contexts.as_deref().unwrap();
    let absent = RowTables::without_table(&stream, row_context(129, rows.e0, rows.shift)).unwrap();
    absent_table_refused(g, &stream, &data, &absent, "a row plane");
}

/// The same for a sign plane: a stream of [`planepack_testkit::twin_sign_tables_bf16`]
/// without the sign table of exponent 124 below a negative element, which equals the GPU's
/// stand-in (the first table), so only `sign_step`'s absent-table check can refuse it.
#[test]
fn a_sign_table_taken_out_is_refused_where_the_lanes_end_right() {
    use planepack_rans::internals::contexts::context;
    use planepack_rans::internals::sign_contexts::{sign_table, SignTables, SIGN_PLANES_ONLY};
    let Some(g) = gpu() else { return };
    let data = planepack_testkit::twin_sign_tables_bf16(1024, 9);
    let mut stream = Vec::new();
    SIGN_PLANES_ONLY
        .encode_shaped(&data, ElemType::BF16, &[1024, 64], &mut stream)
        .unwrap();
    let h = planepack_rans::parse_header(&stream).unwrap();
    let e0 = h.row_contexts.as_deref().unwrap().e0;
    let absent = SignTables::without_table(&stream, sign_table(context(124, e0), 2)).unwrap();
    absent_table_refused(g, &stream, &data, &absent, "a sign plane");
}

/// Compact frequency tables (flag bit 2): every byte of the first tables of a stream (the
/// first chunk's plane tables, a modelled chunk's context tables) set to values that break
/// the varints, the runs, the bitmap or the sums; the GPU's parallel parse and the CPU's
/// agree on each (the same bytes, or both refuse).
#[test]
fn compact_tables_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let modelled = planepack_rans::internals::modelled::CHUNK_MODELLED;
    let c = Rans {
        chunk_log2: 12,
        ..Rans::default()
    };
    let mut cases = Vec::new();
    // Planes' tables: 4 KiB chunks of BF16 and U8 data (bitmaps and runs, one- and two-byte
    // frequencies); a modelled chunk's tables: activations with runs.
    for (elem, data) in [
        (
            ElemType::BF16,
            generate(Pattern::ReluSparse, ElemType::BF16, 20_000, 5),
        ),
        (
            ElemType::U8,
            generate(Pattern::Smooth, ElemType::U8, 20_000, 6),
        ),
        (
            ElemType::BF16,
            planepack_testkit::activation_like(20_000, 2, 100, 7),
        ),
    ] {
        let s = c.encode_to_vec(&data, elem).unwrap();
        let h = planepack_rans::parse_header(&s).unwrap();
        assert_eq!(h.tables, planepack_rans::internals::TableForm::Compact);
        cases.push((data, s));
    }
    assert!(chunk_modes(&cases[2].1).contains(&modelled));
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (data, s) in &cases {
            decodes_to(d, s, data, &format!("{p:?} compact tables"));
            let h = planepack_rans::parse_header(s).unwrap();
            let first = planepack_rans::chunk_spans(s, &h).unwrap()[0].0;
            for at in first..(first + 96).min(s.len()) {
                for v in [0u8, 1, 0x7f, 0x80, 0xff, s[at] ^ 1] {
                    let mut bad = s.clone();
                    bad[at] = v;
                    agree(
                        &c,
                        &bad,
                        |x| d.decode_rans(x),
                        &format!("{p:?} table byte {at}={v}"),
                    );
                }
            }
        }
    });
}

/// Difference chunks (stream version 5): smooth values in both widths, odd element counts and
/// a tail byte, 4 KiB and 64 KiB chunks, decode as the CPU does on both scan paths, and
/// damaged ones fail (or decode) as on the CPU; a difference chunk in a stream that says
/// version 4 is refused by both.
#[test]
fn difference_chunks_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let v5 = planepack_rans::internals::difference::VERSION_DIFFERENCE;
    let mut cases: Vec<(Vec<u8>, ElemType, Rans, Vec<u8>)> = Vec::new();
    for (elem, width, n) in [
        (ElemType::BF16, 2, 20_001),
        (ElemType::F32, 4, 12_003),
        (ElemType::BF16, 2, 3),
    ] {
        let mut data = planepack_testkit::smooth_walk(n, width, 2, n as u64);
        data.push(0xa5);
        for chunk_log2 in [12u8, 16] {
            let c = Rans {
                chunk_log2,
                differences: true,
                ..Rans::default()
            };
            let s = c.encode_to_vec(&data, elem).unwrap();
            if n > 100 {
                assert_eq!(s[4], v5, "{elem} 2^{chunk_log2}");
            }
            cases.push((data.clone(), elem, c, s));
        }
    }
    let mut rng = Rng(55);
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (data, elem, c, s) in &cases {
            decodes_to(d, s, data, &format!("{p:?} difference chunks {elem} {c:?}"));
        }
        // (Damaged streams of two cases only: GL's one thread in CI decodes slowly.)
        for (i, (_, _, c, s)) in cases[..4].iter().enumerate() {
            if i == 0 || i == 3 {
                damaged_rans_agree(d, c, s, &mut rng, "difference chunks");
            }
            let mut old = s.clone();
            old[4] = 4;
            agree(c, &old, |x| d.decode_rans(x), &format!("{p:?} version 4"));
        }
    });
}

/// Tail-dictionary chunks (header flag T): FP32 values that are BF16 values times one scale
/// (NaN payloads, an infinity, -0.0, subnormals, zeros), rotated and not, odd element counts
/// and a tail byte, 4 KiB and 64 KiB chunks, chunks of other forms beside them, decode as the
/// CPU does on both scan paths; damaged ones fail (or decode) as on the CPU; the same stream
/// without its flag is refused by both.
#[test]
fn tail_dictionary_chunks_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let flag = planepack_rans::FLAG_TAILS;
    let mut cases: Vec<(Vec<u8>, Rans, Vec<u8>)> = Vec::new();
    for (n, rotate) in [(20_001, true), (9_003, false), (3, true)] {
        let mut data = planepack_testkit::scaled_bf16_f32(n, n as u64);
        if n > 10_000 {
            // Noise in the middle: chunks of other forms between the dictionaries.
            let noise = planepack_testkit::generate(
                planepack_testkit::Pattern::RandomBits,
                ElemType::F32,
                20_000,
                1,
            );
            data[30_000..50_000].copy_from_slice(&noise);
        }
        data.push(0xa5);
        for chunk_log2 in [12u8, 16] {
            let c = Rans {
                chunk_log2,
                rotate,
                ..Rans::default()
            };
            let s = c.encode_to_vec(&data, ElemType::F32).unwrap();
            let h = planepack_rans::parse_header(&s).unwrap();
            assert_eq!(h.tails, n > 100, "{n} 2^{chunk_log2}");
            cases.push((data.clone(), c, s));
        }
    }
    let mut rng = Rng(57);
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (data, c, s) in &cases {
            decodes_to(d, s, data, &format!("{p:?} tail dictionaries {c:?}"));
        }
        // (Damaged streams of two cases only: GL's one thread in CI decodes slowly.)
        for (i, (_, c, s)) in cases[..4].iter().enumerate() {
            if i == 0 || i == 3 {
                damaged_rans_agree(d, c, s, &mut rng, "tail dictionaries");
            }
            let mut old = s.clone();
            let h = planepack_rans::parse_header(s).unwrap();
            old[if h.short { 6 } else { 7 }] &= !flag;
            agree(
                c,
                &old,
                |x| d.decode_rans(x),
                &format!("{p:?} without flag T"),
            );
        }
    });
}

/// Row planes (stream version 6): channel-scaled matrices of BF16, FP16 and FP32 with rows of
/// 64, 112, 28 and 7 (lane counts of 32, 16, 28 and 7: the gather's 4-lane and general paths;
/// rows longer and shorter than a block of 128 rounds), in 4 KiB and 64 KiB chunks, and
/// (version 7) rows of 1433 and 37 with eight lanes across rows (blocks of 128 and of 4
/// rounds, 7 lanes in a last chunk), decode as on the CPU on both scan paths; damaged ones
/// (the row section, the first chunk's lane header, random damage) fail or decode as on the
/// CPU; a row plane in a version-5 stream, and lanes across rows in a version-6 stream or
/// over a quarter of the row distance, are refused by both.
#[test]
fn row_planes_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let v6 = planepack_rans::internals::row_contexts::VERSION_ROW_CONTEXT;
    let v7 = planepack_rans::internals::row_contexts::VERSION_ROW_LANES;
    let mut cases: Vec<(Vec<u8>, ElemType, Rans, Vec<u8>)> = Vec::new();
    for (elem, cols, chunk_log2) in [
        (ElemType::BF16, 64usize, 16u8),
        (ElemType::F16, 112, 16),
        (ElemType::F32, 28, 16),
        (ElemType::BF16, 7, 12),
        (ElemType::F32, 4096, 16),
        (ElemType::F32, 1433, 16),
        (ElemType::F16, 37, 16),
    ] {
        // Just over the 64 KiB the encoder needs for row tables (GL in CI decodes slowly).
        let rows = (66 << 10) / (cols * elem.size()) + 1;
        let data = planepack_testkit::channel_scaled(rows, cols, elem, cols as u64);
        let c = Rans {
            chunk_log2,
            ..Rans::default()
        };
        let mut s = Vec::new();
        c.encode_shaped(&data, elem, &[rows, cols], &mut s).unwrap();
        use planepack_rans::internals::row_contexts::{lanes_divide, row_lanes};
        let across = !lanes_divide(row_lanes((1 << chunk_log2) / elem.size(), cols), cols);
        assert_eq!(s[4], if across { v7 } else { v6 }, "{elem} rows of {cols}");
        cases.push((data, elem, c, s));
    }
    let mut rng = Rng(66);
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (data, elem, c, s) in &cases {
            decodes_to(d, s, data, &format!("{p:?} row planes {elem} {c:?}"));
        }
        let (_, _, c, s) = &cases[0];
        damaged_rans_agree(d, c, s, &mut rng, "row planes");
        // The row section (after the header and the context section's two bytes: U's low
        // and high bytes, S, the table set) and the first chunk's plane kind and lane count.
        let h = planepack_rans::parse_header(s).unwrap();
        assert!(h.contexts.is_none());
        let first = planepack_rans::chunk_spans(s, &h).unwrap()[0].0;
        for at in [18, 21, 22, 23, first + 1, first + 2] {
            for v in [0u8, 0xff] {
                let mut bad = s.clone();
                bad[at] = v;
                agree(
                    c,
                    &bad,
                    |x| d.decode_rans(x),
                    &format!("{p:?} row byte {at}={v}"),
                );
            }
        }
        let mut old = s.clone();
        old[4] = 5;
        agree(c, &old, |x| d.decode_rans(x), &format!("{p:?} version 5"));
        // Eight lanes across rows of 37: refused in version 6 and with U = 31 (over a quarter
        // of it), decoded alike with U = 36 (a quarter of it or less, not a divisor).
        let (_, _, c, s) = cases.last().unwrap();
        assert_eq!(s[4], v7);
        assert_eq!(s[18], 37);
        for (at, v, refused) in [(4, v6, true), (18, 31, true), (18, 36, false)] {
            let mut bad = s.clone();
            bad[at] = v;
            if refused {
                assert!(d.decode_rans(&bad).is_err(), "{p:?} byte {at}={v}");
            }
            agree(
                c,
                &bad,
                |x| d.decode_rans(x),
                &format!("{p:?} across, byte {at}={v}"),
            );
        }
    });
}

/// Sign planes (stream version 8): BF16 matrices whose columns keep their sign, with rows of
/// 64, 112, 28 and 37 (lane counts of 32, 16, 28, and 8 across rows: the row loop, the
/// gather's 4-lane and general paths, the across loop), decode as on the CPU on both scan
/// paths and both phase layouts; damaged ones (the sign section's set, the first chunk's
/// plane-1 kind, the row distance, random damage) fail or decode as on the CPU; a sign plane
/// in a version-7 stream is refused by both.
#[test]
fn sign_planes_decode_and_fail_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let v8 = planepack_rans::internals::sign_contexts::VERSION_SIGN;
    let mut cases: Vec<(Vec<u8>, Rans, Vec<u8>)> = Vec::new();
    for (cols, seed) in [(64usize, 3u64), (112, 4), (28, 5), (37, 7)] {
        // Enough for the 18 tables to pay (GL in CI decodes slowly); the modelled form off,
        // which takes these synthetic chunks first.
        let rows = (192 << 10) / (cols * 2) + 1;
        let data = planepack_testkit::channel_signed(rows, cols, ElemType::BF16, seed);
        let c = Rans {
            modelled: false,
            ..Rans::default()
        };
        let mut s = Vec::new();
        c.encode_shaped(&data, ElemType::BF16, &[rows, cols], &mut s)
            .unwrap();
        assert_eq!(s[4], v8, "rows of {cols}");
        cases.push((data, c, s));
    }
    let mut rng = Rng(88);
    on_each_rans_config(g, |d| {
        let p = d.cfg.path;
        for (data, c, s) in &cases {
            decodes_to(d, s, data, &format!("{p:?} sign planes {c:?}"));
        }
        let (_, c, s) = &cases[0];
        damaged_rans_agree(d, c, s, &mut rng, "sign planes");
        let h = planepack_rans::parse_header(s).unwrap();
        let sign_at = h.table_at - h.sign_contexts.as_ref().unwrap().written_len(h.tables);
        let rows_at = sign_at - h.row_contexts.as_ref().unwrap().written_len(h.tables);
        let first = planepack_rans::chunk_spans(s, &h).unwrap()[0].0;
        // The sign section's set and its first table, the row distance (31: eight lanes
        // over a quarter of it; 0), the first chunk's plane-0 kind and next byte.
        let mut edits = vec![
            (sign_at, 0u8),
            (sign_at + 2, 0xff),
            (rows_at, 31),
            (rows_at, 0),
            (first + 1, 0xff),
        ];
        for at in [sign_at + 1, sign_at + 3, first + 2] {
            edits.push((at, s[at] ^ 0x10));
        }
        for (at, v) in edits {
            let mut bad = s.clone();
            bad[at] = v;
            agree(
                c,
                &bad,
                |x| d.decode_rans(x),
                &format!("{p:?} sign byte {at}={v}"),
            );
        }
        let mut old = s.clone();
        old[4] = v8 - 1;
        assert!(d.decode_rans(&old).is_err(), "{p:?} version 7");
    });
}

/// A chunk that ends exactly where one of its planes would start is short, not complete: the
/// CPU refuses it, and so must the GPU (it once skipped the missing planes).
#[test]
fn a_chunk_ending_before_its_last_plane_is_refused() {
    let Some(g) = gpu() else { return };
    let n = 3000usize;
    // BF16, not rotated, top byte 0x3f: plane 0 is constant, so the chunk's first plane is
    // three bytes (mode, kind, value) and the second is cut off.
    let mut s = Vec::new();
    s.extend_from_slice(&planepack_rans::MAGIC);
    s.extend_from_slice(&[1, 2, 16, 0]);
    s.extend_from_slice(&(2 * n as u64).to_le_bytes());
    s.extend_from_slice(&3u32.to_le_bytes());
    s.extend_from_slice(&[
        planepack_rans::CHUNK_DENSE,
        planepack_rans::PLANE_CONST,
        0x3f,
    ]);
    on_each_rans_config(g, |d| {
        let mut out = vec![0u8; 2 * n];
        assert!(Rans::default().decode(&s, &mut out).is_err());
        assert!(d.decode_rans(&s).is_err(), "{:?}", d.cfg.path);
    });
}

/// Whole streams and gathers, with one mask and with clusters (three masks, one pass each:
/// the cases with clusters must include some).
#[test]
fn ibp_streams_and_gathers() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(3);
    let mut clustered = 0;
    on_each_path(g, |d| {
        let p = d.cfg.path;
        for ((data, elem, shape), clusters) in ibp_cases()
            .into_iter()
            .flat_map(|c| [(c.clone(), 1), (c, 3)])
        {
            let codec = Ibp {
                clusters,
                ..Ibp::default()
            };
            let mut enc = Vec::new();
            codec.encode_shaped(&data, elem, &shape, &mut enc).unwrap();
            if enc[4] == 2 {
                clustered += 1;
            }
            let row = shape[1] * elem.size();
            match d.decode_ibp(&enc) {
                Ok(got) => assert!(got == data, "{p:?} {elem} {shape:?}"),
                Err(GpuError::Unsupported(_)) => {
                    assert!(
                        row % 4 != 0,
                        "{p:?} {elem} {shape:?}: only odd 16-bit rows are unsupported"
                    );
                    continue;
                }
                Err(e) => panic!("{p:?} {elem} {shape:?}: {e}"),
            }
            let layout = planepack_ibp::stream_layout(&enc).unwrap();
            if layout.rows == 0 {
                continue;
            }
            let rows: Vec<usize> = (0..50)
                .map(|_| rng.below(layout.rows as u64) as usize)
                .collect();
            let got = d.gather_ibp(&enc, &rows).unwrap();
            let rb = layout.columns * (layout.width / 8) as usize;
            for (k, &r) in rows.iter().enumerate() {
                assert_eq!(
                    &got[k * rb..(k + 1) * rb],
                    &data[r * rb..(r + 1) * rb],
                    "{p:?} row {r} clusters {clusters}"
                );
            }
        }
    });
    assert!(clustered > 0, "no case was coded with clusters");
}

/// Every chunk width that divides a row (the stream codec takes only the widest, so 16-bit
/// chunks and their rows starting 2 bytes into a word are met only here), rows wider than
/// the kernel's popcount table (4096 columns), and both layouts.
#[test]
fn ibp_groups_in_both_layouts() {
    let Some(g) = gpu() else { return };
    let mut cases = ibp_cases();
    let mut rng = Rng(12);
    let (rows, cols) = (7, 4500);
    let mut wide = generate(
        Pattern::ReluSparse,
        ElemType::F32,
        rows * cols * 4,
        rng.next_u64(),
    );
    for r in (1..rows).step_by(2) {
        let (a, b) = wide.split_at_mut(r * cols * 4);
        b[..cols * 4].copy_from_slice(&a[..cols * 4]);
    }
    cases.push((wide, ElemType::F32, vec![rows, cols]));
    on_each_path(g, |d| {
        let p = d.cfg.path;
        // One invocation per row, a few, and more than a row has 32-chunk groups.
        for lanes in [1, 4, 64] {
            let d = Dec {
                cfg: d.cfg.with_ibp_lanes(lanes),
                ..d
            };
            for (data, elem, shape) in &cases {
                let row = shape[1] * elem.size();
                if row % 4 != 0 {
                    continue;
                }
                for width in [64u32, 32, 16] {
                    if row % (width as usize / 8) != 0 {
                        continue;
                    }
                    let body = &data[..shape[0] * row];
                    let rows = planepack_ibp::Rows::new(body, row, width).unwrap();
                    let pre = planepack_ibp::preprocess(
                        &rows,
                        planepack_ibp::Threshold::Sweep,
                        planepack_ibp::Sample::All,
                    );
                    let cols = planepack_ibp::Columns::new(&pre.mask);
                    for layout in [
                        planepack_ibp::Layout::InPlace,
                        planepack_ibp::Layout::Condensed,
                    ] {
                        let what =
                            format!("{p:?} {layout:?} lanes {lanes} W={width} {elem} {shape:?}");
                        let group = planepack_ibp::compress(&rows, &cols, layout);
                        let got = g
                            .gather_rows(&group, &pre.mask, None)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert!(got == body, "{what}");
                        let pick = [shape[0] - 1, 0, shape[0] / 2, 0];
                        let got = d.gather_rows(&group, &pre.mask, Some(&pick)).unwrap();
                        for (k, &r) in pick.iter().enumerate() {
                            assert_eq!(
                                &got[k * row..(k + 1) * row],
                                &body[r * row..(r + 1) * row],
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
    });
}

#[test]
fn every_dataset_decodes_bit_identically() {
    let Some(g) = gpu() else { return };
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir).unwrap();
    let tensors: Vec<planepack_datasets::Tensor> = manifest
        .datasets
        .iter()
        .flat_map(|d| planepack_datasets::load(&dir.join(&d.file)).unwrap())
        .filter(|t| t.elem().is_some())
        .collect();
    let bp = BitPlane::new();
    let ibp = Ibp::default();
    let rans = Rans::default();
    // (tensor, bit-plane stream, IBP stream, rANS stream)
    type Encoded = (usize, Vec<u8>, Vec<u8>, Vec<u8>);
    let encoded: Vec<Encoded> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let e = t.elem().unwrap();
            let mut b = Vec::new();
            ibp.encode_shaped(&t.data, e, &t.shape, &mut b).unwrap();
            let mut r = Vec::new();
            rans.encode_shaped(&t.data, e, &t.shape, &mut r).unwrap();
            (i, bp.encode_to_vec(&t.data, e).unwrap(), b, r)
        })
        .collect();
    on_each_path(g, |d| {
        let p = d.cfg.path;
        for (i, b, ib, r) in &encoded {
            let t = &tensors[*i];
            assert!(
                d.decode_bitplane(b).unwrap() == t.data,
                "{p:?} bit-plane {}",
                t.name
            );
            for d in d.rans_shapes() {
                assert!(d.decode_rans(r).unwrap() == t.data, "{p:?} rANS {}", t.name);
            }
            match d.decode_ibp(ib) {
                Ok(got) => assert!(got == t.data, "{p:?} IBP {}", t.name),
                Err(GpuError::Unsupported(m)) => eprintln!("{}: IBP on the GPU: {m}", t.name),
                Err(e) => panic!("{p:?} IBP {}: {e}", t.name),
            }
        }
    });
}

/// Three damaged copies of rANS stream `s` per kind of damage: GPU (on `d`'s path) and CPU
/// agree on each.
fn damaged_rans_agree(d: Dec, c: &Rans, s: &[u8], rng: &mut Rng, what: &str) {
    for m in Mutation::ALL {
        for _ in 0..3 {
            let bad = mutate(s, m, rng);
            agree(
                c,
                &bad,
                |x| d.decode_rans(x),
                &format!("{:?} {what} {m:?}", d.cfg.path),
            );
        }
    }
}

/// The GPU decodes rANS stream `s` to `data`.
fn decodes_to(d: Dec, s: &[u8], data: &[u8], what: &str) {
    let got = d.decode_rans(s).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(got == data, "{what}: decoded otherwise");
}

/// GPU and CPU agree on every mutated stream: the same bytes, or both an error.
fn agree(
    codec: &dyn Codec,
    stream: &[u8],
    gpu_decode: impl Fn(&[u8]) -> Result<Vec<u8>, GpuError>,
    what: &str,
) {
    let cpu = codec
        .decoded_len(stream)
        .ok()
        .filter(|&n| n <= 1 << 24)
        .map(|n| {
            let mut out = vec![0u8; n];
            codec.decode(stream, &mut out).map(|_| out)
        });
    let gpu = gpu_decode(stream);
    match (cpu, gpu) {
        (Some(Ok(a)), Ok(b)) => assert!(a == b, "{what}: GPU and CPU decode differently"),
        (Some(Ok(_)), Err(e)) => panic!("{what}: the CPU accepts, the GPU says {e}"),
        (_, Ok(_)) => panic!("{what}: the GPU returned data for a stream the CPU rejects"),
        (_, Err(_)) => {}
    }
}

#[test]
fn mutated_streams_are_errors_not_hangs() {
    let Some(g) = gpu() else { return };
    // A hung GPU would block the poll forever: the watchdog turns that into a failure.
    planepack_testkit::finishes_within(900, move || mutations(g));
}

fn mutations(g: &'static Gpu) {
    let mut rng = Rng(99);
    let bp = BitPlane::new();
    let ibp = Ibp::default();
    let sources: Vec<(Vec<u8>, ElemType, Vec<usize>)> =
        ibp_cases().into_iter().step_by(5).collect();
    // Large enough for 8 to 32 lanes per plane and several chunks: rANS only.
    let big: Vec<(Vec<u8>, ElemType)> = [(ElemType::BF16, 3), (ElemType::F32, 6)]
        .into_iter()
        .map(|(e, pat)| (generate(Pattern::ALL[pat], e, 150_000, 4), e))
        .collect();
    on_each_path(g, |d| {
        let p = d.cfg.path;
        for (data, elem) in &big {
            let r = Rans::default().encode_to_vec(data, *elem).unwrap();
            for m in Mutation::ALL {
                for _ in 0..4 {
                    let bad = mutate(&r, m, &mut rng);
                    for d in d.rans_shapes() {
                        agree(
                            &Rans::default(),
                            &bad,
                            |s| d.decode_rans(s),
                            &format!("{p:?} big rANS {m:?}"),
                        );
                    }
                }
            }
        }
        for (data, elem, shape) in &sources {
            let b = bp.encode_to_vec(data, *elem).unwrap();
            let mut i = Vec::new();
            ibp.encode_shaped(data, *elem, shape, &mut i).unwrap();
            let rans_streams: Vec<Vec<u8>> = rans_codecs()
                .iter()
                .map(|c| {
                    let mut r = Vec::new();
                    c.encode_shaped(data, *elem, shape, &mut r).unwrap();
                    r
                })
                .collect();
            for m in Mutation::ALL {
                for _ in 0..6 {
                    let bad = mutate(&b, m, &mut rng);
                    agree(
                        &bp,
                        &bad,
                        |s| d.decode_bitplane(s),
                        &format!("{p:?} bit-plane {m:?}"),
                    );
                    for (k, r) in rans_streams.iter().enumerate() {
                        let bad = mutate(r, m, &mut rng);
                        for d in d.rans_shapes() {
                            agree(
                                &rans_codecs()[k],
                                &bad,
                                |s| d.decode_rans(s),
                                &format!("{p:?} rANS {m:?}"),
                            );
                        }
                    }
                    if shape[1] * elem.size() % 4 == 0 {
                        let bad = mutate(&i, m, &mut rng);
                        agree(&ibp, &bad, |s| d.decode_ibp(s), &format!("{p:?} IBP {m:?}"));
                    }
                }
            }
        }
    });
}

#[test]
fn random_streams_with_valid_headers_are_rejected() {
    let Some(g) = gpu() else { return };
    planepack_testkit::finishes_within(300, move || {
        let mut rng = Rng(5);
        for i in 0..300 {
            let len = 16 + rng.below(3000) as usize;
            let mut s: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            s[..8].copy_from_slice(&[b'P', b'P', b'B', b'P', 1, [8, 16, 32][i % 3], 0, 0]);
            s[8..16].copy_from_slice(&(rng.below(20_000)).to_le_bytes());
            agree(
                &BitPlane::new(),
                &s,
                |x| g.decode_bitplane(x),
                "random bit-plane",
            );
            let mut t: Vec<u8> = (0..len + 32).map(|_| rng.next_u64() as u8).collect();
            t[..8].copy_from_slice(&[b'P', b'P', b'I', b'B', 1, [16, 32, 64][i % 3], 0, 0]);
            t[8..16].copy_from_slice(&(1 + rng.below(8)).to_le_bytes());
            t[16..24].copy_from_slice(&(rng.below(40)).to_le_bytes());
            t[24..32].copy_from_slice(&(rng.below(4000)).to_le_bytes());
            agree(&Ibp::default(), &t, |x| g.decode_ibp(x), "random IBP");
            // A rANS header over random chunks: width, chunk size 4 KiB, a few chunks.
            let mut r: Vec<u8> = (0..len + 64).map(|_| rng.next_u64() as u8).collect();
            let n = 1 + rng.below(3 * 4096);
            r[..8].copy_from_slice(&[b'P', b'P', b'R', b'A', 1, [1, 2, 4][i % 3], 12, 1]);
            r[8..16].copy_from_slice(&n.to_le_bytes());
            let chunks = (n as usize / [1, 2, 4][i % 3]).div_ceil(4096 / [1, 2, 4][i % 3]);
            // Chunk lengths that tile the rest of the stream, so the chunks themselves are
            // what the decoders judge.
            let body = r.len() - 16 - 4 * chunks - (n as usize % [1, 2, 4][i % 3]);
            if chunks > 0 && body >= chunks {
                for c in 0..chunks {
                    let l = if c + 1 == chunks {
                        body - (chunks - 1) * (body / chunks)
                    } else {
                        body / chunks
                    };
                    r[16 + 4 * c..20 + 4 * c].copy_from_slice(&(l as u32).to_le_bytes());
                }
                for c in 0..chunks {
                    // Valid chunk modes and plane kinds more often than not.
                    let at = 16 + 4 * chunks + c * (body / chunks);
                    r[at] %= 3;
                    r[at + 1] %= 3;
                }
            }
            for planes in rans_shapes(g) {
                let cfg = g.config().with_rans_planes(planes);
                agree(
                    &Rans::default(),
                    &r,
                    |x| g.run(&g.prepare_rans(x, &cfg)?),
                    "random rANS",
                );
            }
        }
    });
}

#[test]
fn copy_kernel_copies() {
    let Some(g) = gpu() else { return };
    for len in [0usize, 1, 5, 1024, 100_003] {
        let data = generate(Pattern::ALL[0], ElemType::U8, len, 5);
        assert_eq!(g.copy(&data).unwrap(), data);
    }
}

/// The transfer timing re-uploads the stream before each decode: the decode it times must
/// still give the tensor, and bytes other than the prepared stream are refused.
#[test]
fn transfer_timing_uploads_the_stream_it_decodes() {
    let Some(g) = gpu() else { return };
    let data = generate(Pattern::ReluSparse, ElemType::BF16, 300_000, 3);
    let bitplane = BitPlane::new()
        .encode_to_vec(&data, ElemType::BF16)
        .unwrap();
    let mut ibp = Vec::new();
    Ibp::default()
        .encode_shaped(&data, ElemType::BF16, &[300, 500], &mut ibp)
        .unwrap();
    let mut rans = Vec::new();
    Rans::default()
        .encode_shaped(&data, ElemType::BF16, &[300, 500], &mut rans)
        .unwrap();
    let cases = [
        (
            g.prepare_bitplane(&bitplane, &g.config()).unwrap(),
            &bitplane,
        ),
        (g.prepare_ibp(&ibp, None, &g.config()).unwrap(), &ibp),
        (g.prepare_rans(&rans, &g.config()).unwrap(), &rans),
    ];
    for (p, enc) in &cases {
        let (dec, up) = g.time_transfer(p, enc, &data, 3).unwrap();
        assert_eq!((dec.len(), up.len()), (3, 3));
        assert!(dec.iter().chain(&up).all(|s| *s > 0.0));
        assert_eq!(g.run(p).unwrap(), data);
        let longer = [enc.as_slice(), &[0u8; 8]].concat();
        assert!(g.time_transfer(p, &longer, &data, 1).is_err());
    }
}

/// Several tensors of the three codecs decoded in one submission into regions of one buffer
/// the caller owns: only their status words come back until the caller reads a region; each
/// region equals the data, and the bytes around the regions are untouched.
#[test]
fn decode_into_a_caller_arena_in_one_submission() {
    use wgpu::util::DeviceExt;
    let Some(g) = gpu() else { return };
    let mut rng = Rng(21);
    let cfg = g.config();
    let mut cases: Vec<(Vec<u8>, planepack_gpu::Prepared)> = Vec::new();
    for (k, len) in [10_001usize, 4096, 3 * 4096 + 12, 0]
        .into_iter()
        .enumerate()
    {
        let data = generate(
            Pattern::ALL[k % Pattern::ALL.len()],
            ElemType::BF16,
            len,
            rng.next_u64(),
        );
        let mut ibp = Vec::new();
        Ibp::default()
            .encode_shaped(&data, ElemType::BF16, &[len / 2], &mut ibp)
            .unwrap();
        let mut rans = Vec::new();
        Rans::default()
            .encode_shaped(&data, ElemType::BF16, &[len / 2], &mut rans)
            .unwrap();
        let bp = BitPlane::new()
            .encode_to_vec(&data, ElemType::BF16)
            .unwrap();
        cases.push((data.clone(), g.prepare_bitplane(&bp, &cfg).unwrap()));
        if len % 4 == 0 {
            cases.push((data.clone(), g.prepare_ibp(&ibp, None, &cfg).unwrap()));
        }
        cases.push((data, g.prepare_rans(&rans, &cfg).unwrap()));
    }
    let align = g.offset_alignment().max(4);
    let mut offsets = Vec::new();
    let mut end = align; // a guard region before the first
    for (_, p) in &cases {
        offsets.push(end);
        end = (end + p.output_capacity() + align).next_multiple_of(align);
    }
    const GUARD: u8 = 0xA5;
    let arena = g
        .device()
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("arena"),
            contents: &vec![GUARD; end as usize],
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
    for ((_, p), &off) in cases.iter_mut().zip(&offsets) {
        p.write_into(g, &arena, off).unwrap();
    }
    let launches: Vec<&planepack_gpu::Prepared> = cases.iter().map(|(_, p)| p).collect();
    let outs = g.decode_all_on_device(&launches).unwrap();
    for ((data, p), (t, &off)) in cases.iter().zip(outs.iter().zip(&offsets)) {
        assert_eq!((t.offset, t.len), (off, data.len()));
        assert!(g.read_back(t).unwrap() == *data);
        assert_eq!(p.output().offset, off);
    }
    let whole = g
        .read_back(&planepack_gpu::DeviceTensor {
            buffer: arena.clone(),
            offset: 0,
            len: end as usize,
        })
        .unwrap();
    let mut written = vec![false; end as usize];
    for ((_, p), &off) in cases.iter().zip(&offsets) {
        written[off as usize..(off + p.output_capacity()) as usize].fill(true);
    }
    assert!(whole.iter().zip(&written).all(|(&b, &w)| w || b == GUARD));

    // Regions that cannot be written are refused, and the launch keeps its output.
    let (data, p) = &mut cases[0];
    let before = p.output().offset;
    if align > 4 {
        assert!(p.write_into(g, &arena, 4).is_err());
    }
    assert!(p.write_into(g, &arena, end).is_err());
    let small = g.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    assert!(p.write_into(g, &small, 0).is_err());
    let not_storage = g.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: p.output_capacity(),
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    assert!(p.write_into(g, &not_storage, 0).is_err());
    assert_eq!(p.output().offset, before);
    assert!(g.run(p).unwrap() == *data);
}

/// A corrupt stream in a batch fails the batch with the kernel's error; the same launches
/// without it succeed.
#[test]
fn a_corrupt_stream_in_a_batch_is_an_error() {
    let Some(g) = gpu() else { return };
    let data = generate(Pattern::ReluSparse, ElemType::F32, 20_000, 5);
    let good = BitPlane::new().encode_to_vec(&data, ElemType::F32).unwrap();
    let mut bad = good.clone();
    let h = planepack_bitplane::parse_header(&bad).unwrap();
    let (at, _) = planepack_bitplane::chunk_spans(&bad, &h).unwrap()[1];
    // The first block-table entry of the second chunk gets the reserved tag 6.
    bad[at + 2] = (bad[at + 2] & !7) | 6;
    let cfg = g.config();
    let a = g.prepare_bitplane(&good, &cfg).unwrap();
    let b = g.prepare_bitplane(&bad, &cfg).unwrap();
    match g.decode_all_on_device(&[&a, &b, &a]) {
        Err(GpuError::Corrupt { flags, at, .. }) => {
            assert_ne!(flags & 4, 0, "{flags:#x}");
            assert_eq!(at, 32);
        }
        other => panic!("{:?}", other.map(|v| v.len())),
    }
    let outs = g.decode_all_on_device(&[&a, &a]).unwrap();
    assert!(g.read_back(&outs[1]).unwrap() == data);
}

/// A gather of 1 % of the rows of every real 2-D tensor with at least 1000 rows uploads at
/// most 2 % of the tensor's raw bytes (only those rows, compressed, plus mask, bitval, row
/// bits and offsets), and decodes them exactly.
#[test]
fn a_gather_uploads_only_the_rows_asked_for() {
    let Some(g) = gpu() else { return };
    let dir = planepack_datasets::datasets_dir();
    let manifest = planepack_datasets::Manifest::read(&dir).unwrap();
    let mut rng = Rng(31);
    let mut checked = 0;
    for d in &manifest.datasets {
        for t in planepack_datasets::load(&dir.join(&d.file)).unwrap() {
            let Some(elem) = t.elem() else { continue };
            if t.shape.len() != 2 || t.shape[0] < 1000 {
                continue;
            }
            let row = t.shape[1] * elem.size();
            let mut enc = Vec::new();
            Ibp::default()
                .encode_shaped(&t.data, elem, &t.shape, &mut enc)
                .unwrap();
            let n = t.shape[0];
            let rows: Vec<usize> = (0..n / 100).map(|_| rng.below(n as u64) as usize).collect();
            let p = match g.prepare_ibp(&enc, Some(&rows), &g.config()) {
                Ok(p) => p,
                Err(GpuError::Unsupported(m)) => {
                    eprintln!("{}: {m}", t.name);
                    continue;
                }
                Err(e) => panic!("{}: {e}", t.name),
            };
            assert!(
                p.upload_bytes as f64 <= 0.02 * t.data.len() as f64,
                "{}: {} of {} bytes uploaded",
                t.name,
                p.upload_bytes,
                t.data.len()
            );
            let got = g.run(&p).unwrap();
            for (k, &r) in rows.iter().enumerate() {
                assert!(got[k * row..(k + 1) * row] == t.data[r * row..(r + 1) * row]);
            }
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} tensors with rows");
}

/// The GPU decoders' host side against header fields at their type's full range (as the CPU
/// decoders are in the container's `hostile_headers` test): every field of 1, 2, 4 or 8 bytes in
/// the first 32 bytes of a bit-plane, IBP and rANS stream set to each extreme, decoded into the
/// buffer a container entry gives (`decode_*_into`): an error or the CPU's bytes, never a panic
/// or a hang; and a stream declaring another length than the buffer is refused before anything
/// runs on the device (`OutputLength`).
#[test]
fn hostile_header_fields_are_refused_on_the_gpu() {
    let Some(g) = gpu() else { return };
    planepack_testkit::finishes_within(900, move || {
        let data = generate(Pattern::ReluSparse, ElemType::F32, 48 * 256, 21);
        let shape = vec![48, 64];
        let streams: Vec<(&str, Vec<u8>, Box<dyn Codec>)> = vec![
            (
                "bit-plane",
                BitPlane::new().encode_to_vec(&data, ElemType::F32).unwrap(),
                Box::new(BitPlane::new()),
            ),
            (
                "IBP",
                {
                    let mut s = Vec::new();
                    Ibp::default()
                        .encode_shaped(&data, ElemType::F32, &shape, &mut s)
                        .unwrap();
                    s
                },
                Box::new(Ibp::default()),
            ),
            (
                "rANS",
                Rans::default().encode_to_vec(&data, ElemType::F32).unwrap(),
                Box::new(Rans::default()),
            ),
        ];
        let mut refused_by_length = 0;
        for (what, stream, cpu) in &streams {
            for (at, width, value, s) in planepack_testkit::header_field_variants(stream, 32) {
                let mut out = vec![0u8; data.len()];
                let r = match *what {
                    "bit-plane" => g.decode_bitplane_into(&s, &mut out),
                    "IBP" => g.decode_ibp_into(&s, &mut out),
                    _ => g.decode_rans_into(&s, &mut out),
                };
                let mut cpu_out = vec![0u8; data.len()];
                let cpu_ok = cpu.decode(&s, &mut cpu_out).is_ok();
                match r {
                    Ok(()) => assert!(
                        cpu_ok && out == cpu_out,
                        "{what}: field {at}+{width} = {value:#x}: the GPU returned data the CPU does not"
                    ),
                    Err(GpuError::Stream(planepack_core::Error::OutputLength { .. })) => {
                        refused_by_length += 1
                    }
                    Err(_) => {}
                }
            }
        }
        assert!(
            refused_by_length > 0,
            "no variant changed a declared length"
        );
    });
}

/// Rows too long for one invocation's loops. llvmpipe stops an invocation's loops once 65535
/// iterations are spent in all; at one lane per row (lavapipe's default) a row of 100 000
/// columns needs several times that. The host gives such rows more lanes and they decode
/// bit-identically, in 64-bit chunks (deposit loops) and 32-bit ones, packed rows and a raw
/// one. With the host's budget lifted, llvmpipe cuts the loops short and the kernel's
/// canary makes the launch fail as unsupported: never rows returned incomplete.
#[test]
fn ibp_rows_longer_than_one_invocations_loops() {
    let Some(g) = gpu() else { return };
    let mut rng = Rng(21);
    // IBP codes rows only from 16 of them (MIN_ROWS).
    let rows = 16;
    let limited = g.adapter_name().contains("llvmpipe");
    let mut canary_fired = 0;
    for (elem, cols) in [
        (ElemType::F32, 100_000),
        (ElemType::F32, 100_001),
        (ElemType::BF16, 200_002),
    ] {
        // Values in [1, 2): sign and exponent the same in every column, so IBP packs the
        // rows (the last one is random bits, stored raw: the raw row's copy loop).
        let mut data = Vec::with_capacity(rows * cols * elem.size());
        for r in 0..rows {
            for _ in 0..cols {
                let x = rng.next_u64();
                match (elem, r + 1 == rows) {
                    (_, true) if elem == ElemType::F32 => {
                        data.extend_from_slice(&(x as u32).to_le_bytes())
                    }
                    (_, true) => data.extend_from_slice(&(x as u16).to_le_bytes()),
                    (ElemType::F32, false) => data
                        .extend_from_slice(&(0x3f80_0000 | (x as u32 & 0x7f_ffff)).to_le_bytes()),
                    _ => data.extend_from_slice(&(0x3f80 | (x as u16 & 0x7f)).to_le_bytes()),
                }
            }
        }
        let shape = vec![rows, cols];
        let mut enc = Vec::new();
        Ibp::default()
            .encode_shaped(&data, elem, &shape, &mut enc)
            .unwrap();
        let what = format!("{elem} {shape:?}");
        assert!(
            enc.len() < data.len() * 9 / 10,
            "{what}: rows not packed ({} of {})",
            enc.len(),
            data.len()
        );
        on_each_path(g, |d| {
            let got = d
                .decode_ibp(&enc)
                .unwrap_or_else(|e| panic!("{what} {:?}: {e}", d.cfg.path));
            assert!(got == data, "{what} {:?}", d.cfg.path);
        });
        let unlimited = Dec {
            g,
            cfg: g.config().with_ibp_lanes(1).with_loop_budget(u32::MAX),
        };
        match unlimited.decode_ibp(&enc) {
            Ok(got) => {
                assert!(got == data, "{what}: rows cut short came back as data");
                assert!(!limited, "{what}: llvmpipe did not cut the loops");
            }
            Err(GpuError::Unsupported(m)) => {
                assert!(m.contains("cut"), "{what}: {m}");
                canary_fired += 1;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
    assert!(!limited || canary_fired == 3);
}
