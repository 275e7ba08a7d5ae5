use super::*;
use bitvec::prelude::*;

#[test]
fn codes_are_prefix_free_and_match_the_table() {
    assert_eq!((RAW.bits, RAW.len), (0b1, 1));
    assert_eq!((RUN.bits, RUN.len), (0b10, 2));
    assert_eq!((ZERO1.bits, ZERO1.len), (0b100, 3));
    assert_eq!((ZERO_DBP.bits, ZERO_DBP.len), (0b10000, 5));
    assert_eq!((TWO_ONES.bits, TWO_ONES.len), (0b01000, 5));
    assert_eq!((ONE_ONE.bits, ONE_ONE.len), (0b11000, 5));
    let all = [RAW, RUN, ZERO1, ALL_ONES, ZERO_DBP, TWO_ONES, ONE_ONE];
    for (i, a) in all.iter().enumerate() {
        for (j, b) in all.iter().enumerate() {
            if i != j {
                let n = a.len.min(b.len);
                let m = (1u64 << n) - 1;
                assert_ne!(a.bits & m, b.bits & m, "code {i} is a prefix of {j}");
            }
        }
    }
}

fn roundtrip<P: RawTail + std::fmt::Debug>(planes: &[P], p_bits: u32) -> u32 {
    let mut count = Count::default();
    encode_planes(planes, p_bits, &mut count);
    let mut buf = vec![0u8; 4 * 1024];
    let mut w = SliceBitWriter::new(&mut buf);
    encode_planes(planes, p_bits, &mut w);
    assert_eq!(w.bit_len(), count.0 as usize);
    let mut r = BitReader::new(&buf);
    let mut back = vec![P::ZERO; planes.len()];
    decode_planes::<P, { planepack_core::cpu::PORTABLE }>(
        &mut r,
        &mut back,
        p_bits,
        count.0 as usize,
    )
    .unwrap();
    assert_eq!(back, planes);
    assert_eq!(r.pos(), count.0 as usize);
    count.0
}

#[test]
fn symbol_lengths_follow_bpc() {
    // 32 planes of 32 bits, all zero: one run of 32 -> `01` + 5 bits.
    assert_eq!(roundtrip(&[0u32; 32], 32), 7);
    // Top plane all ones, rest equal to it: all-ones then run of 31.
    assert_eq!(roundtrip(&[u32::MAX; 32], 32), 5 + 7);
    // One plane with a single one at the bottom: run of 31, one-one(5+5), nothing after.
    let mut p = [0u32; 32];
    p[0] = 1 << 7;
    assert_eq!(roundtrip(&p, 32), 7 + 10);
    // Two adjacent ones in plane 5: planes 31..6 zero (run 26), plane 5 two-ones,
    // plane 4 zero with DBX != 0 -> zero-DBP, planes 3..0 run of 4.
    let mut p = [0u32; 32];
    p[5] = 0b11 << 30;
    assert_eq!(roundtrip(&p, 32), 7 + 10 + 5 + 7);
    // A raw plane of 31 bits (DBX geometry) and a single all-zero symbol.
    let mut p = [0u32; 32];
    p[31] = 0x1234_5678 & 0x7FFF_FFFF;
    p[30] = p[31];
    p[29] = 0x0F0F_0F0F;
    p[28] = 0x0F0F_0F0F;
    roundtrip(&p, 31);
}

/// The symbol table read literally, one decision per plane, into a bitvec: the reference
/// the branch-free writer and sizer are checked against.
fn reference_encode(planes: &[u64], p_bits: u32) -> BitVec<u8, Lsb0> {
    let mut out: BitVec<u8, Lsb0> = BitVec::new();
    let mut put = |v: u64, n: u32| (0..n).for_each(|i| out.push(v >> i & 1 == 1));
    let q = planes.len() as u32;
    let all = (1u128 << p_bits) as u64;
    let all = all.wrapping_sub(1) | if p_bits == 64 { u64::MAX } else { 0 };
    let mut prev = 0;
    let mut run = 0;
    let flush = |run: u32, put: &mut dyn FnMut(u64, u32)| match run {
        0 => {}
        1 => put(0b100, 3),
        r => {
            put(0b10, 2);
            put((r - 2) as u64, bits_for(q - 1));
        }
    };
    for &dbp in planes.iter().rev() {
        let dbx = dbp ^ prev;
        prev = dbp;
        if dbx == 0 {
            run += 1;
            continue;
        }
        flush(run, &mut put);
        run = 0;
        let tz = dbx.trailing_zeros() as u64;
        if dbx == all {
            put(0b00000, 5);
        } else if dbp == 0 {
            put(0b10000, 5);
        } else if dbx.count_ones() == 2 && dbx >> tz == 3 {
            put(0b01000, 5);
            put(tz, bits_for(p_bits - 1));
        } else if dbx.count_ones() == 1 {
            put(0b11000, 5);
            put(tz, bits_for(p_bits));
        } else {
            put(1, 1);
            put(dbx, p_bits);
        }
    }
    flush(run, &mut put);
    out
}

#[test]
fn writer_and_sizer_match_the_reference_coder() {
    let mut rng = planepack_testkit::Rng(3);
    for round in 0..20_000 {
        // Planes from a small alphabet so that every symbol kind and run shape occurs.
        let q = [8usize, 16, 32][round % 3];
        let p_bits = 2 + rng.below(63) as u32;
        let all = if p_bits == 64 {
            u64::MAX
        } else {
            (1u64 << p_bits) - 1
        };
        let pick = |r: &mut planepack_testkit::Rng, prev: u64| -> u64 {
            match r.below(7) {
                0 | 1 => prev,
                2 => 0,
                3 => all,
                4 => prev ^ (1 << r.below(p_bits as u64)),
                5 => prev ^ (3 << r.below(p_bits as u64 - 1)),
                _ => r.next_u64() & all,
            }
        };
        let mut planes = vec![0u64; q];
        let mut prev = 0;
        for p in planes.iter_mut().rev() {
            *p = pick(&mut rng, prev);
            prev = *p;
        }
        let expect = reference_encode(&planes, p_bits);
        let mut buf = vec![0u8; 1024];
        let mut w = SliceBitWriter::new(&mut buf);
        encode_planes(&planes, p_bits, &mut w);
        assert_eq!(w.bit_len(), expect.len(), "{planes:x?} p_bits {p_bits}");
        assert_eq!(&buf[..expect.as_raw_slice().len()], expect.as_raw_slice());
        assert_eq!(planes_size(&planes, p_bits) as usize, expect.len());
        if p_bits <= 32 {
            let narrow: Vec<u32> = planes.iter().map(|&p| p as u32).collect();
            assert_eq!(planes_size(&narrow, p_bits) as usize, expect.len());
            // Every tier this CPU runs (AVX-512: 32 planes in registers), same sizes.
            for (t, n) in planepack_testkit::at_every_tier!(planes_size32, (&narrow, p_bits)) {
                assert_eq!(n as usize, expect.len(), "tier {t}");
            }
            roundtrip(&narrow, p_bits);
        }
        // The same for 64-bit planes (16 of them).
        for (t, n) in planepack_testkit::at_every_tier!(planes_size64, (&planes, p_bits)) {
            assert_eq!(n as usize, expect.len(), "tier {t}");
        }
        roundtrip(&planes, p_bits);
    }
}

#[test]
fn base_code_lengths() {
    for (v, w, len) in [
        (0u64, 32, 3),
        (7, 32, 7),
        (0xFFFF_FFF8, 32, 7),
        (200, 32, 19),
        (0x8000_0000, 32, 33),
        (0x7F, 16, 11),
        (0xFFFF, 16, 7),
        (0x8000, 16, 17),
        (0x80, 8, 9),
        (0xF8, 8, 7),
    ] {
        let mut c = Count::default();
        encode_base(v, w, &mut c);
        assert_eq!(c.0, len, "value {v:#x} width {w}");
        let mut buf = vec![0u8; 16];
        let mut wr = SliceBitWriter::new(&mut buf);
        encode_base(v, w, &mut wr);
        assert_eq!(decode_base(&mut BitReader::new(&buf), w).unwrap(), v);
    }
}
