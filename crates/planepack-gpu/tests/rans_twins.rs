//! The GPU rANS encoder's pipeline with every kernel replaced by its CPU twin
//! (`planepack_gpu::twins::rans`, written step for step as the WGSL) and the host's own
//! planning and layout between them: its streams equal the CPU encoder's, on adversarial
//! patterns and tails at several settings and on every dataset tensor. No adapter needed, so
//! the host's half of the GPU encoder is checked wherever the tests run; `tests/encode.rs`
//! checks the kernels themselves against the same CPU bytes on a device.

use planepack_core::{Codec, ElemType};
use planepack_gpu::{encode_rans_twin, GPU_RANS};
use planepack_rans::Rans;
use planepack_testkit::{generate, Pattern, Rng};

#[test]
fn the_twin_pipeline_writes_the_cpu_bytes_on_patterns_and_tails() {
    let mut rng = Rng(54);
    let settings = [
        GPU_RANS,
        Rans {
            chunk_log2: 12,
            ..GPU_RANS
        },
        Rans {
            zero_mask: false,
            rotate: false,
            ..GPU_RANS
        },
    ];
    for rans in &settings {
        for pat in Pattern::ALL {
            for elem in ElemType::ALL {
                for len in [0usize, 1, 3, 33, 4095, 4097, 70_003] {
                    let data = generate(pat, elem, len, rng.next_u64());
                    let cpu = rans.encode_to_vec(&data, elem).unwrap();
                    let twin = encode_rans_twin(&data, elem, rans).unwrap();
                    assert!(twin == cpu, "{} {pat:?} {elem} {len}", rans.name());
                }
            }
        }
    }
}

#[test]
fn the_twin_pipeline_writes_the_cpu_bytes_on_every_dataset() {
    let mut n = 0;
    for t in planepack_datasets::load_all(&planepack_datasets::datasets_dir()).unwrap() {
        let Some(elem) = t.elem() else { continue };
        let cpu = GPU_RANS.encode_to_vec(&t.data, elem).unwrap();
        let twin = encode_rans_twin(&t.data, elem, &GPU_RANS).unwrap();
        assert!(twin == cpu, "{}: twin pipeline differs", t.name);
        n += 1;
    }
    assert!(n > 1000, "{n}");
}

/// Counts of 65536 and more: a constant chunk of single bytes (a u16 count capped and rebuilt)
/// and chunks of 2^18 and 2^20 elements (u32 counts).
#[test]
fn the_twin_pipeline_writes_the_cpu_bytes_on_large_counts() {
    let mut rng = Rng(55);
    let mut mixed = vec![7u8; 1 << 20];
    for (i, b) in mixed.iter_mut().enumerate() {
        if i % 3 == 0 {
            *b = 0;
        } else if i % 7 == 0 {
            *b = rng.next_u64() as u8;
        }
    }
    for (data, elem, log2) in [
        (&[9u8; 65536 + 5][..], ElemType::U8, 16),
        (&mixed[..(1 << 18) + 3], ElemType::U8, 18),
        (&mixed[..], ElemType::BF16, 20),
    ] {
        let rans = Rans {
            chunk_log2: log2,
            ..GPU_RANS
        };
        let cpu = rans.encode_to_vec(data, elem).unwrap();
        assert!(
            encode_rans_twin(data, elem, &rans).unwrap() == cpu,
            "{elem} 2^{log2}"
        );
    }
}

/// The lane coder's division (`div_mod` in rans_lanes.wgsl, an f32 estimate corrected in
/// integers) is exact over its whole domain, f in 1..=4096 and x < f * 2^20, even where the
/// device's f32 division is off by the 2.5 ulp WGSL allows (here: 3 ulp either way): at every
/// quotient's edges (q f - 1, q f, q f + 1) for quotients spread over [0, 2^20], for every f.
#[test]
fn the_lane_coders_division_is_exact_for_every_frequency() {
    use planepack_gpu::twins::rans::{div_mod, div_mod_from};
    let ulps = |y: f32, d: i32| f32::from_bits((y.to_bits() as i32 + d) as u32);
    for f in 1u32..=4096 {
        let top = (((f as u64) << 20) - 1) as u32;
        let mut xs = vec![0, 1, top, top - 1];
        for q in (0u32..=1 << 20)
            .step_by(4093)
            .chain([(1 << 20) - 1, 1 << 19])
        {
            let base = q as u64 * f as u64;
            for x in [base.wrapping_sub(1), base, base + 1] {
                if x <= top as u64 {
                    xs.push(x as u32);
                }
            }
        }
        for x in xs {
            let want = [x / f, x % f];
            assert_eq!(div_mod(x, f), want, "x {x} f {f}");
            let y = x as f32 / f as f32;
            for d in [-3, 3] {
                let y = ulps(y, d).max(0.0);
                assert_eq!(div_mod_from(x, f, y), want, "x {x} f {f} {d} ulp");
            }
        }
    }
}
