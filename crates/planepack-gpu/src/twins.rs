//! CPU twins of the GPU stages that have no CPU counterpart in the codec crates: the
//! bit-plane kernel's transpose in registers (`shaders/bitplane.wgsl`: `plane_row`,
//! `swap_bits`, `planes_to_elements`) and the IBP kernel's width pass
//! (`shaders/ibp.wgsl`: the packed popcount table, `spread4`, `byte_sum`) and its closed-form
//! deposit of a field into free bits of at most two runs (`deposit32`), and the subgroup
//! scan's numbering of subgroups and slots (`shaders/scan_subgroup.wgsl`, for subgroup sizes
//! the CI driver never forms: 32 and 64 as NVIDIA, AMD and Apple do), and the rANS encoder's
//! kernels ([`rans`]: counts and their records, a lane's coding, the assembly). Each is written
//! step for step as the WGSL, so a test without an adapter checks the kernel's arithmetic
//! against the codec crates (`planepack_core::transpose`, `planepack_ibp::internals`); the GPU
//! tests then check the kernels against the same references on a device.

/// Exchange row-index bit `a` with column-index bit `c` over 32 words (`swap_bits`).
pub fn swap_bits(blk: &mut [u32; 32], a: u32, c: u32) {
    let s = 1u32 << c;
    let m = match c {
        0 => 0x5555_5555u32,
        1 => 0x3333_3333,
        2 => 0x0f0f_0f0f,
        3 => 0x00ff_00ff,
        _ => 0x0000_ffff,
    };
    for i in 0..16u32 {
        let lo_r = (((i >> a) << (a + 1)) | (i & ((1 << a) - 1))) as usize;
        let hi_r = lo_r + (1 << a);
        let (lo, hi) = (blk[lo_r], blk[hi_r]);
        let t = ((lo >> s) ^ hi) & m;
        blk[hi_r] = hi ^ t;
        blk[lo_r] = lo ^ (t << s);
    }
}

/// The tile row where word `q` of plane `b` goes, for elements of `w` bits (`plane_row`).
pub fn plane_row(w: u32, b: u32, q: u32) -> u32 {
    match w {
        32 => b,
        16 => {
            (q << 4)
                | ((b & 1) << 3)
                | (((b >> 3) & 1) << 2)
                | (((b >> 2) & 1) << 1)
                | ((b >> 1) & 1)
        }
        _ => {
            ((q >> 1) << 4)
                | ((q & 1) << 3)
                | (((b >> 1) & 1) << 2)
                | ((b & 1) << 1)
                | ((b >> 2) & 1)
        }
    }
}

/// A block's `w` planes (plane `b`'s word `q` at `planes[b * 32 / w + q]`, 1024 / w bits
/// each) to its elements: element `i` at word `i / (32 / w)`, bits `(i % (32 / w)) w`
/// (`put_plane` then `planes_to_elements`).
pub fn planes_to_elements(w: u32, planes: &[u32]) -> [u32; 32] {
    let per = 32 / w;
    let mut blk = [0u32; 32];
    for b in 0..w {
        for q in 0..per {
            blk[plane_row(w, b, q) as usize] = planes[(b * per + q) as usize];
        }
    }
    let swaps: &[(u32, u32)] = match w {
        32 => &[(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)],
        16 => &[(3, 0), (3, 4), (2, 3), (1, 2), (0, 1)],
        _ => &[(0, 2), (2, 1), (2, 4), (1, 0), (1, 3)],
    };
    for &(a, c) in swaps {
        swap_bits(&mut blk, a, c);
    }
    blk
}

/// A block's elements (as [`planes_to_elements`] gives them) to its planes, in the same
/// layout (`elements_to_planes` in bitplane_planes.wgsl, the encoder's transpose): the
/// exchanges in reverse order, each its own inverse.
pub fn elements_to_planes(w: u32, elems: &[u32; 32]) -> Vec<u32> {
    let per = 32 / w;
    let mut blk = *elems;
    let swaps: &[(u32, u32)] = match w {
        32 => &[(4, 4), (3, 3), (2, 2), (1, 1), (0, 0)],
        16 => &[(0, 1), (1, 2), (2, 3), (3, 4), (3, 0)],
        _ => &[(1, 3), (1, 0), (2, 4), (2, 1), (0, 2)],
    };
    for &(a, c) in swaps {
        swap_bits(&mut blk, a, c);
    }
    let mut planes = vec![0u32; 32];
    for b in 0..w {
        for q in 0..per {
            planes[(b * per + q) as usize] = blk[plane_row(w, b, q) as usize];
        }
    }
    planes
}

/// Bytes 0..3 of `x` added (`byte_sum`).
pub fn byte_sum(x: u32) -> u32 {
    let y = (x & 0x00ff_00ff) + ((x >> 8) & 0x00ff_00ff);
    (y & 0xffff) + (y >> 16)
}

/// The low 4 bits of `b` spread to bytes: 0xff in byte `i` where bit `i` is set (`spread4`).
pub fn spread4(b: u32) -> u32 {
    (((b & 0xf).wrapping_mul(0x0020_4081)) & 0x0101_0101).wrapping_mul(0xff)
}

/// The width pass's popcount table: byte `i` of word `q` is the popcount of column
/// `4 q + i`'s mask (zero past the last column; rounded up to whole 32-column groups).
pub fn popcount_table(mask: &[u64]) -> Vec<u32> {
    let words = mask.len().div_ceil(32) * 8;
    (0..words)
        .map(|q| {
            (0..4).fold(0u32, |acc, i| {
                let pc = mask.get(4 * q + i).map_or(0, |m| m.count_ones());
                acc | (pc << (8 * i))
            })
        })
        .collect()
}

/// Field bits of 32-chunk group `q` of a packed row (`bm`: its participation bitmap word,
/// `v` columns, `w`-bit chunks): participating chunks take `w - popcount(mask)` bits, the
/// others `w` (the kernel's pass 1).
pub fn group_field_bits(table: &[u32], bm: u32, q: usize, v: usize, w: u32) -> u32 {
    let n_valid = (v - 32 * q).min(32) as u32;
    let bm = bm
        & if n_valid >= 32 {
            u32::MAX
        } else {
            (1 << n_valid) - 1
        };
    let p0 = 8 * q;
    let pops: u32 = (0..8)
        .map(|i| byte_sum(table[p0 + i] & spread4(bm >> (4 * i))))
        .sum();
    n_valid * w - pops
}

/// The low bits of `f` placed at the set bits of `m`, in closed form when `m` has at most two
/// runs of set bits (`deposit32` in `shaders/ibp.wgsl`); `None` where the kernel falls back to
/// its loop over runs. A multiply by a run's lowest set bit is the shift to that run.
pub fn deposit32(f: u32, m: u32) -> Option<u32> {
    let low1 = m & m.wrapping_neg();
    let run1 = m & !m.wrapping_add(low1);
    let m2 = m ^ run1;
    let low2 = m2 & m2.wrapping_neg();
    let run2 = m2 & !m2.wrapping_add(low2);
    if m2 ^ run2 != 0 {
        return None;
    }
    let len1 = run1.count_ones();
    let rest = if len1 >= 32 { 0 } else { f >> len1 };
    Some((f.wrapping_mul(low1) & run1) | (rest.wrapping_mul(low2) & run2))
}

/// `shaders/scan_subgroup.wgsl` step for step, for a workgroup of `wg` invocations that the
/// device formed into `subgroups`: each the workgroup-local indices of its invocations in lane
/// order, listed in the order the subgroups reach the workgroup counter; `sg_size` is the
/// subgroup size the device reports. Returns each local index's slot, or None where the kernel
/// finds a layout it cannot number (it then sets `ERR_LAYOUT`).
pub fn subgroup_slots(wg: u32, sg_size: u32, subgroups: &[Vec<u32>]) -> Option<Vec<u32>> {
    let mut slot = vec![u32::MAX; wg as usize];
    let n_sg = subgroups.len() as u32;
    let mut bad = false;
    for (my_sg, members) in subgroups.iter().enumerate() {
        // `my_sg` is the counter value the subgroup's elected invocation took.
        let live = members.len() as u32;
        for (lane, &li) in members.iter().enumerate() {
            let s = my_sg as u32 * sg_size + lane as u32;
            slot[li as usize] = s;
            if s >= wg || (n_sg > 1 && live != sg_size) {
                bad = true;
            }
        }
    }
    (!bad).then_some(slot)
}

/// `scan(x)` of `shaders/scan_subgroup.wgsl` for every invocation, `x` given per local index:
/// (exclusive prefix, workgroup total) per local index, from the subgroups' inclusive adds in
/// lane order and their totals combined through `sg_totals` in counter order.
pub fn subgroup_scan(subgroups: &[Vec<u32>], x: &[u32]) -> Vec<(u32, u32)> {
    let totals: Vec<u32> = subgroups
        .iter()
        .map(|m| m.iter().map(|&li| x[li as usize]).sum())
        .collect();
    let all: u32 = totals.iter().sum();
    let mut out = vec![(0, 0); x.len()];
    for (my_sg, members) in subgroups.iter().enumerate() {
        let base: u32 = totals[..my_sg].iter().sum();
        let mut inclusive = 0u32;
        for &li in members {
            inclusive += x[li as usize];
            out[li as usize] = (base + inclusive - x[li as usize], all);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use planepack_core::transpose;

    /// The workgroup sizes of the kernels (`const WG` in `shaders/*.wgsl`).
    const KERNEL_WGS: [u32; 2] = [32, 64];

    /// Every subgroup size a device may report (4 to 128), subgroups formed from consecutive
    /// or scattered invocations and reaching the counter in any order: the slots are 0..WG,
    /// each once, and the scan in slot order is the exclusive prefix sum.
    #[test]
    fn the_subgroup_scan_numbers_slots_for_every_subgroup_size() {
        let mut r = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            (r % n as u64) as usize
        };
        for wg in KERNEL_WGS {
            for sg_size in [4u32, 8, 16, 32, 64, 128] {
                for trial in 0..20 {
                    // Which invocations share a subgroup: consecutive ones, or a permutation.
                    let mut ids: Vec<u32> = (0..wg).collect();
                    if trial % 2 == 1 {
                        for i in (1..ids.len()).rev() {
                            ids.swap(i, next(i + 1));
                        }
                    }
                    let mut subgroups: Vec<Vec<u32>> =
                        ids.chunks(sg_size as usize).map(|c| c.to_vec()).collect();
                    for i in (1..subgroups.len()).rev() {
                        subgroups.swap(i, next(i + 1));
                    }
                    let slots = subgroup_slots(wg, sg_size, &subgroups)
                        .unwrap_or_else(|| panic!("WG {wg}, subgroups of {sg_size}"));
                    let mut seen = slots.clone();
                    seen.sort_unstable();
                    assert_eq!(seen, (0..wg).collect::<Vec<_>>(), "WG {wg}, {sg_size}");
                    // The kernels scan values that belong to slots.
                    let by_slot: Vec<u32> = (0..wg).map(|_| next(1000) as u32).collect();
                    let x: Vec<u32> = (0..wg as usize)
                        .map(|li| by_slot[slots[li] as usize])
                        .collect();
                    let got = subgroup_scan(&subgroups, &x);
                    let total: u32 = by_slot.iter().sum();
                    for li in 0..wg as usize {
                        let s = slots[li] as usize;
                        let want: u32 = by_slot[..s].iter().sum();
                        assert_eq!(got[li], (want, total), "WG {wg}, {sg_size}, slot {s}");
                    }
                }
            }
        }
    }

    /// Layouts the scheme cannot number are refused, never scanned wrongly: a partial
    /// subgroup beside others, or more lanes than the workgroup has slots for.
    #[test]
    fn the_subgroup_scan_refuses_layouts_it_cannot_number() {
        // 64 invocations as 32 + 16 + 16 with a reported size of 32.
        let split = vec![(0..32).collect(), (32..48).collect(), (48..64).collect()];
        assert!(subgroup_slots(64, 32, &split).is_none());
        // Two subgroups of 32 reported as size 64: the second's slots start at 64.
        let wide = vec![(0..32).collect(), (32..64).collect()];
        assert!(subgroup_slots(64, 64, &wide).is_none());
        // One partial subgroup (32 invocations in a subgroup of 64) is numbered.
        assert!(subgroup_slots(32, 64, &[(0..32).collect()]).is_some());
    }

    /// Bit by bit: the low bits of `f` at the set bits of `m`, in order.
    fn pdep_reference(f: u32, m: u32) -> u32 {
        let (mut r, mut k) = (0u32, 0);
        for b in 0..32 {
            if m >> b & 1 == 1 {
                r |= (f >> k & 1) << b;
                k += 1;
            }
        }
        r
    }

    #[test]
    fn the_closed_form_deposit_equals_pdep_on_every_mask_of_at_most_two_runs() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let run = |at: u32, len: u32| -> u32 {
            if len == 0 {
                0
            } else {
                (((1u64 << len) - 1) << at) as u32
            }
        };
        let mut masks = vec![0u32];
        for a1 in 0..32 {
            for l1 in 1..=32 - a1 {
                masks.push(run(a1, l1));
                // A second run at least one bit above the first.
                for a2 in a1 + l1 + 1..32 {
                    for l2 in 1..=32 - a2 {
                        masks.push(run(a1, l1) | run(a2, l2));
                    }
                }
            }
        }
        for &m in &masks {
            // Fields of exactly popcount(m) bits, as the kernel reads them, and all ones.
            let n = m.count_ones();
            let ones = if n >= 32 { u32::MAX } else { (1 << n) - 1 };
            for f in [ones, rng(&mut s) as u32 & ones, 0] {
                assert_eq!(deposit32(f, m), Some(pdep_reference(f, m)), "m={m:#x}");
            }
        }
        // Three runs or more: the kernel takes its loop.
        for m in [0b10101u32, 0x8000_0101, 0x0f0f_0f0f] {
            assert_eq!(deposit32(1, m), None);
        }
    }

    fn rng(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn the_register_transpose_equals_the_codec_transpose() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            let words: Vec<u32> = (0..32).map(|_| rng(&mut s) as u32).collect();
            // 32-bit elements: plane b is one word.
            let p32: [u32; 32] = words.clone().try_into().unwrap();
            assert_eq!(planes_to_elements(32, &words), transpose::elems32(&p32));
            // 16-bit: plane b is a u64, low word first.
            let p16: [u64; 16] =
                std::array::from_fn(|b| words[2 * b] as u64 | (words[2 * b + 1] as u64) << 32);
            let e16 = transpose::elems16(&p16);
            let want: Vec<u32> = e16
                .chunks_exact(2)
                .map(|e| e[0] as u32 | (e[1] as u32) << 16)
                .collect();
            assert_eq!(planes_to_elements(16, &words).to_vec(), want);
            // 8-bit: plane b is a u128, low word first.
            let p8: [u128; 8] = std::array::from_fn(|b| {
                (0..4).fold(0u128, |acc, q| acc | (words[4 * b + q] as u128) << (32 * q))
            });
            let e8 = transpose::elems8(&p8);
            let want: Vec<u32> = e8
                .chunks_exact(4)
                .map(|e| u32::from_le_bytes(e.try_into().unwrap()))
                .collect();
            assert_eq!(planes_to_elements(8, &words).to_vec(), want);
        }
    }

    #[test]
    fn the_encoder_transpose_inverts_the_decoder_transpose_and_equals_the_codec() {
        let mut s = 0x1234_5678_9abc_def1u64;
        for _ in 0..200 {
            let e: [u32; 32] = std::array::from_fn(|_| rng(&mut s) as u32);
            for w in [32u32, 16, 8] {
                let planes = elements_to_planes(w, &e);
                assert_eq!(planes_to_elements(w, &planes), e, "W={w}");
            }
            assert_eq!(elements_to_planes(32, &e), transpose::planes32(&e).to_vec());
        }
    }

    #[test]
    fn the_width_pass_equals_the_field_sizes() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for &(w, v) in &[
            (16u32, 7usize),
            (32, 33),
            (64, 64),
            (16, 100),
            (32, 5),
            (64, 97),
        ] {
            for _ in 0..50 {
                let ones = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
                let mask: Vec<u64> = (0..v).map(|_| rng(&mut s) & rng(&mut s) & ones).collect();
                let part: Vec<bool> = (0..v).map(|_| rng(&mut s) & 1 == 1).collect();
                let table = popcount_table(&mask);
                let mut got = 0;
                for q in 0..v.div_ceil(32) {
                    let bm = (0..32)
                        .filter(|&i| part.get(32 * q + i).copied().unwrap_or(false))
                        .fold(0u32, |acc, i| acc | 1 << i);
                    // Bits past the row are noise the kernel must mask off.
                    let noise = if v - 32 * q < 32 {
                        u32::MAX << (v - 32 * q)
                    } else {
                        0
                    };
                    got += group_field_bits(&table, bm | noise, q, v, w);
                }
                let want: u32 = (0..v)
                    .map(|j| if part[j] { w - mask[j].count_ones() } else { w })
                    .sum();
                assert_eq!(got, want, "W={w} V={v}");
            }
        }
    }

    /// The same total through the IBP crate's own sizing of a real packed row.
    #[test]
    fn the_width_pass_sizes_rows_as_the_ibp_crate_does() {
        let mut s = 7u64;
        for &(w, v) in &[(32u32, 40usize), (16, 66), (64, 33)] {
            let b = (w / 8) as usize;
            let mut data = vec![0u8; 20 * v * b];
            for x in data.iter_mut() {
                *x = (rng(&mut s) & rng(&mut s)) as u8;
            }
            let rows = planepack_ibp::Rows::new(&data, v * b, w).unwrap();
            let pre = planepack_ibp::preprocess(
                &rows,
                planepack_ibp::Threshold::Fixed(0.6),
                planepack_ibp::Sample::All,
            );
            let cols = planepack_ibp::Columns::new(&pre.mask);
            let table = popcount_table(&pre.mask.mask);
            for r in 0..rows.count {
                let row = &data[r * v * b..(r + 1) * v * b];
                let mut bits = 0;
                for q in 0..v.div_ceil(32) {
                    let bm = (0..32usize.min(v - 32 * q)).fold(0u32, |acc, i| {
                        let j = 32 * q + i;
                        let x = planepack_ibp::internals::chunk(row, j, b);
                        acc | u32::from(x & pre.mask.mask[j] == pre.mask.bitval[j]) << i
                    });
                    bits += group_field_bits(&table, bm, q, v, w) as usize;
                }
                let h = v.div_ceil(8).div_ceil(b) * b;
                assert_eq!(
                    h + bits.div_ceil(w as usize) * b,
                    planepack_ibp::internals::packed_size(row, &cols),
                    "W={w} row {r}"
                );
            }
        }
    }
}

/// The rANS encoder's kernels (`shaders/rans_encode_common.wgsl`, `rans_count.wgsl`,
/// `rans_lanes.wgsl`, `rans_assemble.wgsl`), written step for step as the WGSL. With the
/// host's own planning between them they make the whole GPU pipeline on the CPU
/// ([`crate::rans_encode::encode_rans_twin`]), which a test holds to the CPU encoder's bytes
/// without an adapter.
pub mod rans {
    /// Element `e` of `data` (`width` bytes each, little-endian), as `element` reads it.
    pub fn element(data: &[u8], e: usize, width: usize) -> u32 {
        let mut b = [0u8; 4];
        b[..width].copy_from_slice(&data[e * width..(e + 1) * width]);
        u32::from_le_bytes(b)
    }

    /// `rotated`: left by one bit when `rotate` (never for single bytes).
    pub fn rotated(v: u32, rotate: bool, width: usize) -> u32 {
        match (rotate, width) {
            (false, _) | (_, 1) => v,
            (_, 2) => ((v << 1) | (v >> 15)) & 0xffff,
            _ => v.rotate_left(1),
        }
    }

    /// `plane_byte`: byte `j` in plane order (0: most significant).
    pub fn plane_byte(v: u32, j: u32, width: usize) -> u32 {
        (v >> (8 * (width as u32 - 1 - j))) & 0xff
    }

    /// The histograms of the byte planes of `elems` (not rotated), rotated or not, as
    /// `rans_count.wgsl` counts them.
    pub fn plane_counts(elems: &[u32], width: usize, rotate: bool) -> Vec<[u32; 256]> {
        let mut h = vec![[0u32; 256]; width];
        for &raw in elems {
            let v = rotated(raw, rotate, width);
            for (j, hj) in h.iter_mut().enumerate() {
                hj[plane_byte(v, j as u32, width) as usize] += 1;
            }
        }
        h
    }

    /// `rans_count.wgsl` for one job of `elems` (its elements, not rotated): the record it
    /// writes (per histogram, the W planes' then the mask bytes', a 256-bit bitmap of the
    /// symbols present and their counts, u32 where `wide`, else u16 capped at 65535; then the
    /// nonzero count), the nonzero elements (rotated) in order and the zero mask's words.
    pub fn count_job(
        elems: &[u32],
        width: usize,
        rotate: bool,
        wide: bool,
    ) -> (Vec<u8>, Vec<u32>, Vec<u32>) {
        let n = elems.len();
        let mut h = plane_counts(elems, width, rotate);
        let mut nz = Vec::new();
        let mut mask = vec![0u32; n.div_ceil(32)];
        for (e, &raw) in elems.iter().enumerate() {
            let v = rotated(raw, rotate, width);
            if v != 0 {
                nz.push(v);
                mask[e / 32] |= 1 << (e % 32);
            }
        }
        let mut hm = [0u32; 256];
        for b in mask
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take(n.div_ceil(8))
        {
            hm[b as usize] += 1;
        }
        h.push(hm);
        let mut rec: Vec<u32> = Vec::new();
        for hp in &h {
            let mut bits = [0u32; 8];
            let mut counts = Vec::new();
            for (s, &c) in hp.iter().enumerate() {
                if c > 0 {
                    bits[s / 32] |= 1 << (s % 32);
                    counts.push(c);
                }
            }
            rec.extend_from_slice(&bits);
            if wide {
                rec.extend_from_slice(&counts);
            } else {
                rec.extend(
                    counts
                        .chunks(2)
                        .map(|p| p[0].min(0xffff) | p.get(1).map_or(0, |&c| c.min(0xffff)) << 16),
                );
            }
        }
        rec.push(nz.len() as u32);
        (bytemuck::cast_slice(&rec).to_vec(), nz, mask)
    }

    /// `rans_lanes.wgsl` for one lane: `lane` of `k` over `m` symbols (`symbol(i)` is symbol
    /// `i` of the plane), coded backwards with `table` (256 entries `freq | cum << 16`), its
    /// words written down from `region_end` in `words`; returns (final state, word count).
    pub fn lane(
        symbol: impl Fn(u32) -> u32,
        m: u32,
        k: u32,
        lane: u32,
        table: &[u32],
        region_end: u32,
        words: &mut [u16],
    ) -> [u32; 2] {
        use planepack_rans::internals::{L, PROB_BITS};
        let count = if lane < m { (m - lane).div_ceil(k) } else { 0 };
        let mut x = L;
        let mut p = region_end;
        for r in (1..=count).rev() {
            let e = table[symbol(lane + (r - 1) * k) as usize];
            let (f, c) = (e & 0xffff, e >> 16);
            let bound = f.wrapping_shl(32 - PROB_BITS);
            if bound != 0 && x >= bound {
                p -= 1;
                words[p as usize] = x as u16;
                x >>= 16;
            }
            let [q, r] = div_mod(x, f);
            x = (q << PROB_BITS) + r + c;
        }
        [x, region_end - p]
    }

    /// `div_mod` of `rans_lanes.wgsl`: `(x / f, x % f)` from an f32 estimate corrected by one
    /// either way, exact for f in 1..=4096 and x < f * 2^20.
    pub fn div_mod(x: u32, f: u32) -> [u32; 2] {
        div_mod_from(x, f, x as f32 / f as f32)
    }

    /// [`div_mod`] from a quotient estimate `y` (what a device's f32 division returned).
    pub fn div_mod_from(x: u32, f: u32, y: f32) -> [u32; 2] {
        let mut q = y as u32;
        let mut r = x.wrapping_sub(q.wrapping_mul(f)) as i32;
        if r < 0 {
            q -= 1;
            r += f as i32;
        } else if r >= f as i32 {
            q += 1;
            r -= f as i32;
        }
        [q, r as u32]
    }

    /// The tensor, its nonzero elements (rotated) and zero masks, as the kernels read them.
    pub struct Sources<'a> {
        pub data: &'a [u8],
        pub nz: &'a [u32],
        pub mask: &'a [u32],
        pub width: usize,
        pub rotate: bool,
    }

    /// `source_byte`: unit `i` of a source with planes (an element's plane byte of the tensor
    /// or of the nonzero elements, or a zero-mask byte).
    pub fn source_byte(src: &Sources, source: u32, plane: u32, i: usize) -> u32 {
        use crate::contract::*;
        match source {
            SRC_DENSE => plane_byte(
                rotated(element(src.data, i, src.width), src.rotate, src.width),
                plane,
                src.width,
            ),
            SRC_NONZERO => plane_byte(src.nz[i], plane, src.width),
            _ => (src.mask[i / 4] >> (8 * (i % 4))) & 0xff,
        }
    }

    /// `seg_byte`: byte `off` of segment `s`.
    fn seg_byte(s: [u32; 4], off: u32, lit: &[u8], words: &[u16], src: &Sources) -> u32 {
        use crate::contract::*;
        let (source, plane, i) = (s[1] & 15, s[1] >> 4, (s[2] + off) as usize);
        match source {
            SRC_LITERAL => lit[i] as u32,
            SRC_WORDS => (words[i / 2] >> (8 * (i % 2))) as u32 & 0xff,
            SRC_RAW => src.data[i] as u32,
            _ => source_byte(src, source, plane, i),
        }
    }

    /// `rans_assemble.wgsl`: `total` bytes from `segs` (sorted, none empty), `lit` the
    /// literal bytes. A byte at a time (the kernel's `seg_byte`); the kernel's whole-word path
    /// inside a segment (`seg_word`) must give the same bytes, which the GPU tests check.
    pub fn assemble(
        segs: &[[u32; 4]],
        lit: &[u8],
        words: &[u16],
        total: usize,
        src: &Sources,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(total);
        let mut r = 0;
        for o in 0..total as u32 {
            while r + 1 < segs.len() && segs[r + 1][0] <= o {
                r += 1;
            }
            out.push(seg_byte(segs[r], o - segs[r][0], lit, words, src) as u8);
        }
        out
    }
}
