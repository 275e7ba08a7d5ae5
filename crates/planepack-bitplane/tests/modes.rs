//! The encoder picks each mode on data built for it, and the statistics say so.

use planepack_bitplane::{BitPlane, Mode, Stats};
use planepack_core::{Codec, ElemType};
use planepack_testkit::Rng;

fn encode(data: &[u8], elem: ElemType) -> Stats {
    let mut out = Vec::new();
    let stats = BitPlane::new()
        .encode_with_stats(data, elem, &mut out)
        .unwrap();
    assert_eq!(BitPlane::new().decode_to_vec(&out).unwrap(), data);
    assert_eq!(stats.compressed_bytes as usize, out.len());
    stats
}

/// One block (128 bytes) of 32-bit elements made by `f`, repeated `n` times with fresh randomness.
fn blocks32(n: usize, seed: u64, mut f: impl FnMut(usize, &mut Rng) -> u32) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..n * 32)
        .flat_map(|i| f(i % 32, &mut rng).to_le_bytes())
        .collect()
}

fn blocks16(n: usize, seed: u64, mut f: impl FnMut(usize, &mut Rng) -> u16) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..n * 64)
        .flat_map(|i| f(i % 64, &mut rng).to_le_bytes())
        .collect()
}

fn blocks8(n: usize, seed: u64, mut f: impl FnMut(usize, &mut Rng) -> u8) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..n * 128).map(|i| f(i % 128, &mut rng)).collect()
}

fn assert_all(stats: &Stats, mode: Mode) {
    assert_eq!(
        stats.blocks[mode as usize],
        stats.total_blocks(),
        "expected every block in {}, got {stats}",
        mode.name()
    );
}

#[test]
fn zero_blocks_choose_zero() {
    for elem in ElemType::ALL {
        assert_all(&encode(&vec![0u8; 4096 * 3], elem), Mode::Zero);
    }
}

#[test]
fn random_blocks_choose_raw() {
    assert_all(
        &encode(&blocks32(64, 1, |_, r| r.next_u64() as u32), ElemType::F32),
        Mode::Raw,
    );
    assert_all(
        &encode(&blocks16(64, 1, |_, r| r.next_u64() as u16), ElemType::BF16),
        Mode::Raw,
    );
    assert_all(
        &encode(&blocks8(64, 1, |_, r| r.next_u64() as u8), ElemType::U8),
        Mode::Raw,
    );
}

#[test]
fn sparse_random_values_choose_zvc() {
    // A few nonzeros with random bits: nothing to gain in their planes, everything in the zeros.
    let s = encode(
        &blocks32(64, 2, |i, r| {
            if i % 8 == 3 {
                r.next_u64() as u32 | 1
            } else {
                0
            }
        }),
        ElemType::F32,
    );
    assert_all(&s, Mode::Zvc);
    let s = encode(
        &blocks16(64, 2, |i, r| {
            if i % 8 == 3 {
                r.next_u64() as u16 | 1
            } else {
                0
            }
        }),
        ElemType::BF16,
    );
    assert_all(&s, Mode::Zvc);
    let s = encode(
        &blocks8(64, 2, |i, r| {
            if i % 8 == 3 {
                r.next_u64() as u8 | 1
            } else {
                0
            }
        }),
        ElemType::U8,
    );
    assert_all(&s, Mode::Zvc);
}

#[test]
fn shared_high_bits_choose_bx() {
    // Floats in [1, 2): sign and exponent identical, mantissa random. The raw planes are
    // cheap at the top; deltas of random mantissas would spill into every plane.
    let s = encode(
        &blocks32(64, 3, |_, r| {
            0x3F80_0000 | (r.next_u64() as u32 & 0x007F_FFFF)
        }),
        ElemType::F32,
    );
    assert_all(&s, Mode::Bx);
    let s = encode(
        &blocks16(64, 3, |_, r| 0x3F80 | (r.next_u64() as u16 & 0x007F)),
        ElemType::BF16,
    );
    assert_all(&s, Mode::Bx);
    let s = encode(
        &blocks8(64, 3, |_, r| 0x40 | (r.next_u64() as u8 & 0x07)),
        ElemType::U8,
    );
    assert_all(&s, Mode::Bx);
}

#[test]
fn ramps_choose_dbx() {
    // Evenly spaced integers: every delta is the same, so DBX codes the block in a few symbols.
    let s = encode(
        &blocks32(64, 4, |i, _| 0x4123_4567u32.wrapping_add(i as u32 * 40_000)),
        ElemType::F32,
    );
    assert_all(&s, Mode::Dbx);
    let s = encode(
        &blocks16(64, 4, |i, _| {
            0x4123u16.wrapping_add((i as u16).wrapping_mul(300))
        }),
        ElemType::BF16,
    );
    assert_all(&s, Mode::Dbx);
    let s = encode(
        &blocks8(64, 4, |i, _| 0x41u8.wrapping_add((i as u8).wrapping_mul(3))),
        ElemType::U8,
    );
    assert_all(&s, Mode::Dbx);
}

#[test]
fn sparse_structured_values_choose_zbx() {
    // Half zeros, the rest sharing sign and exponent: drop the zeros, then BX the rest.
    let s = encode(
        &blocks32(64, 5, |i, r| {
            if i % 2 == 0 {
                0
            } else {
                0x3F80_0000 | (r.next_u64() as u32 & 0x0000_00FF)
            }
        }),
        ElemType::F32,
    );
    assert_all(&s, Mode::Zbx);
    let s = encode(
        &blocks16(64, 5, |i, r| {
            if i % 2 == 0 {
                0
            } else {
                0x3F80 | (r.next_u64() as u16 & 0x000F)
            }
        }),
        ElemType::BF16,
    );
    assert_all(&s, Mode::Zbx);
    let s = encode(
        &blocks8(64, 5, |i, r| {
            if i % 2 == 0 {
                0
            } else {
                0x40 | (r.next_u64() as u8 & 0x03)
            }
        }),
        ElemType::U8,
    );
    assert_all(&s, Mode::Zbx);
}

#[test]
fn stats_account_for_every_byte() {
    let data = blocks32(200, 6, |i, r| {
        if i % 3 == 0 {
            0
        } else {
            r.next_u64() as u32 & 0x3F80_FFFF
        }
    });
    let s = encode(&data, ElemType::F32);
    let payload: u64 = s.payload_bits.iter().sum();
    assert_eq!(
        s.compressed_bytes * 8,
        s.header_bytes * 8 + s.table_bits + payload + s.pad_bits,
        "{s:?}"
    );
    assert!(s.paper_layout_bytes < s.compressed_bytes);
    assert_eq!(s.raw_bytes as usize, data.len());
}
