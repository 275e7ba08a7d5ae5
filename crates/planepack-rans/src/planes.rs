//! Elements to byte planes and back (with the sign rotation), and zero elements taken out
//! and put back (the sparse chunk's mask), with their AVX2 and AVX-512 paths.

/// Split `elems` (whole elements of `width` bytes) into planes, most significant byte first,
/// after rotating each element left by one bit when `rotate`. (The plan's zero count is
/// [`count_zeros`], a pass of its own: a count in this loop kept it from vectorising.)
pub(crate) fn split(elems: &[u8], width: usize, rotate: bool, planes: &mut [Vec<u8>]) {
    let n = elems.len() / width;
    for p in planes.iter_mut() {
        fit(p, n);
    }
    split_elems(&elems[..width * n], width, rotate, planes);
}

/// `v` made `n` bytes long for a caller that writes every one of them: a buffer already of
/// that length is reused as it is (zeroing it first was a tenth of decoding FP32 tensors).
pub(crate) fn fit(v: &mut Vec<u8>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, 0);
    }
}

planepack_core::with_avx2! {
    /// [`split`]'s loops on whole elements.
    fn split_elems(elems: &[u8], width: usize, rotate: bool, planes: &mut [Vec<u8>]) = split_any;
}

/// [`split_elems`]' loops: indexed stores into planes sized up front (not pushes), the
/// rotation decided outside the loop and the elements read as arrays, so the loops vectorise.
#[inline(always)]
fn split_any(elems: &[u8], width: usize, rotate: bool, planes: &mut [Vec<u8>]) {
    match (width, rotate) {
        (1, _) => planes[0].copy_from_slice(elems),
        (2, true) => split2::<true>(elems, planes),
        (2, false) => split2::<false>(elems, planes),
        (_, true) => split4::<true>(elems, planes),
        (_, false) => split4::<false>(elems, planes),
    }
}

#[inline(always)]
fn split2<const ROTATE: bool>(elems: &[u8], planes: &mut [Vec<u8>]) {
    let [p0, p1] = planes else {
        unreachable!("two planes for 16-bit elements")
    };
    let e = elems.as_chunks::<2>().0;
    let n = e.len();
    let (p0, p1) = (&mut p0[..n], &mut p1[..n]);
    for i in 0..n {
        let v = u16::from_le_bytes(e[i]);
        let t = if ROTATE { v.rotate_left(1) } else { v };
        p0[i] = (t >> 8) as u8;
        p1[i] = t as u8;
    }
}

#[inline(always)]
fn split4<const ROTATE: bool>(elems: &[u8], planes: &mut [Vec<u8>]) {
    let [p0, p1, p2, p3] = planes else {
        unreachable!("four planes for 32-bit elements")
    };
    let e = elems.as_chunks::<4>().0;
    let n = e.len();
    let (p0, p1, p2, p3) = (&mut p0[..n], &mut p1[..n], &mut p2[..n], &mut p3[..n]);
    for i in 0..n {
        let v = u32::from_le_bytes(e[i]);
        let t = if ROTATE { v.rotate_left(1) } else { v };
        p0[i] = (t >> 24) as u8;
        p1[i] = (t >> 16) as u8;
        p2[i] = (t >> 8) as u8;
        p3[i] = t as u8;
    }
}

/// All elements from their planes (the inverse of [`split`]), one loop per width so that it
/// vectorises.
pub(crate) fn join_all(planes: &[&[u8]], width: usize, rotate: bool, out: &mut [u8]) {
    let n = out.len() / width;
    match width {
        1 => out.copy_from_slice(&planes[0][..n]),
        2 => {
            let (p0, p1) = (&planes[0][..n], &planes[1][..n]);
            for ((o, &a), &b) in out.chunks_exact_mut(2).zip(p0).zip(p1) {
                let t = (a as u16) << 8 | b as u16;
                let v = if rotate { t.rotate_right(1) } else { t };
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => {
            let (p0, p1, p2, p3) = (
                &planes[0][..n],
                &planes[1][..n],
                &planes[2][..n],
                &planes[3][..n],
            );
            for (i, o) in out.chunks_exact_mut(4).enumerate() {
                let t = (p0[i] as u32) << 24
                    | (p1[i] as u32) << 16
                    | (p2[i] as u32) << 8
                    | p3[i] as u32;
                let v = if rotate { t.rotate_right(1) } else { t };
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// A sparse chunk's elements: `nz` holds the nonzero elements (joined from their planes) in
/// order; each goes where the mask has its next set bit, zeros elsewhere. The mask's
/// population equals the number of elements in `nz` (checked by the caller).
pub(crate) fn expand(nz: &[u8], mask: &[u8], width: usize, out: &mut [u8]) {
    let mut done = 0; // elements of `out` written
    let mut k = 0; // elements of `nz` used
    #[cfg(target_arch = "x86_64")]
    if width > 1 && planepack_core::cpu::avx512() {
        // SAFETY: AVX-512 (F, BW, VBMI2) is present; the kernel reads the mask's first bytes,
        // the `nz` elements its set bits ask for (never more than `nz` holds, since the mask's
        // population equals its length) and writes whole groups of `out`.
        (done, k) = unsafe { avx512::expand(nz, mask, width, out) };
    } else if width > 1 && planepack_core::cpu::x86_64_v3() {
        // SAFETY: x86-64-v3 includes SSSE3; the kernel reads whole 16-byte loads of `nz` only
        // where they lie inside it, reads the mask bytes of the groups it expands and writes
        // those groups of `out`.
        (done, k) = unsafe { v3::expand(nz, mask, width, out) };
    }
    // Branch-free: zeros and nonzeros are interleaved at random in ReLU outputs, so a branch
    // per element would mispredict half the time. Each element reads the next nonzero one
    // (clamped at the last) and keeps it only if its mask bit is set.
    if nz.is_empty() {
        out[done * width..].fill(0);
        return;
    }
    let last = nz.len() / width - 1;
    for (i, e) in out.chunks_exact_mut(width).enumerate().skip(done) {
        let bit = mask[i / 8] >> (i % 8) & 1;
        let src = &nz[k.min(last) * width..][..width];
        for (o, &b) in e.iter_mut().zip(src) {
            *o = b & bit.wrapping_neg();
        }
        k += bit as usize;
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod v3 {
    use std::arch::x86_64::*;

    /// Shuffle controls for 8 16-bit elements: entry `m` moves the next `popcount(m)`
    /// elements of a 16-byte load to the positions of `m`'s set bits, zeros elsewhere
    /// (0x80 makes PSHUFB write a zero).
    const CTL16: [[u8; 16]; 256] = {
        let mut t = [[0x80u8; 16]; 256];
        let mut m = 0;
        while m < 256 {
            let (mut i, mut k) = (0, 0u8);
            while i < 8 {
                if m >> i & 1 == 1 {
                    t[m][2 * i] = 2 * k;
                    t[m][2 * i + 1] = 2 * k + 1;
                    k += 1;
                }
                i += 1;
            }
            m += 1;
        }
        t
    };

    /// The same for 4 32-bit elements, entry `m` for a 4-bit mask.
    const CTL32: [[u8; 16]; 16] = {
        let mut t = [[0x80u8; 16]; 16];
        let mut m = 0;
        while m < 16 {
            let (mut i, mut k) = (0, 0u8);
            while i < 4 {
                if m >> i & 1 == 1 {
                    let mut b = 0;
                    while b < 4 {
                        t[m][4 * i + b] = 4 * k + b as u8;
                        b += 1;
                    }
                    k += 1;
                }
                i += 1;
            }
            m += 1;
        }
        t
    };

    /// Expand groups of 8 (16-bit) or 4 (32-bit) elements while a 16-byte load at the next
    /// nonzero element stays inside `nz`; returns (elements of `out` written, elements of
    /// `nz` used), where the scalar loop goes on.
    ///
    /// # Safety
    /// The CPU must have SSSE3.
    #[target_feature(enable = "ssse3,popcnt")]
    pub unsafe fn expand(nz: &[u8], mask: &[u8], width: usize, out: &mut [u8]) -> (usize, usize) {
        let n = out.len() / width;
        let per = 16 / width;
        let mut k = 0usize;
        let mut g = 0;
        while (g + 1) * per <= n && k * width + 16 <= nz.len() {
            let m = if width == 2 {
                mask[g] as usize
            } else {
                (mask[g / 2] >> (4 * (g % 2)) & 15) as usize
            };
            let ctl = if width == 2 { &CTL16[m] } else { &CTL32[m] };
            let src = &nz[k * width..k * width + 16];
            let dst = &mut out[g * 16..g * 16 + 16];
            // SAFETY: 16-byte unaligned loads and store of slices checked to be 16 bytes.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr() as *const __m128i);
                let c = _mm_loadu_si128(ctl.as_ptr() as *const __m128i);
                _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, _mm_shuffle_epi8(v, c));
            }
            k += m.count_ones() as usize;
            g += 1;
        }
        (g * per, k)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    /// Expand whole groups of 32 (16-bit) or 16 (32-bit) elements; returns (elements of `out`
    /// written, elements of `nz` used).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F, BW and VBMI2; the mask's population over the groups
    /// expanded must not exceed the elements in `nz`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi2")]
    pub unsafe fn expand(nz: &[u8], mask: &[u8], width: usize, out: &mut [u8]) -> (usize, usize) {
        let n = out.len() / width;
        let per = 64 / width; // elements per 64-byte vector
        let groups = n / per;
        let mut k = 0usize;
        for g in 0..groups {
            let bytes = &mask[g * per / 8..][..per / 8];
            let dst = out.as_mut_ptr().wrapping_add(g * 64);
            let src = nz.as_ptr().wrapping_add(k * width);
            if width == 2 {
                let m = u32::from_le_bytes(bytes.try_into().unwrap());
                // SAFETY: reads popcount(m) u16 from `src`, inside `nz`; writes 64 bytes of
                // `out` at group g < groups.
                unsafe {
                    let v = _mm512_maskz_expandloadu_epi16(m, src as *const i16);
                    _mm512_storeu_si512(dst as *mut __m512i, v);
                }
                k += m.count_ones() as usize;
            } else {
                let m = u16::from_le_bytes(bytes.try_into().unwrap());
                // SAFETY: as above, with u32 elements.
                unsafe {
                    let v = _mm512_maskz_expandloadu_epi32(m, src as *const i32);
                    _mm512_storeu_si512(dst as *mut __m512i, v);
                }
                k += m.count_ones() as usize;
            }
        }
        (groups * per, k)
    }
}

/// Zero elements among `elems` (whole elements of `width` bytes), compared as integers so the
/// loop vectorises.
pub(crate) fn count_zeros(elems: &[u8], width: usize) -> usize {
    // In blocks whose count fits a u16 lane's sum, so the compares stay 16 bits wide.
    fn count<const W: usize>(elems: &[u8], zero: impl Fn([u8; W]) -> bool) -> usize {
        elems
            .as_chunks::<W>()
            .0
            .chunks(1 << 15)
            .map(|block| block.iter().map(|&e| zero(e) as u16).sum::<u16>() as usize)
            .sum()
    }
    match width {
        2 => count::<2>(elems, |e| u16::from_le_bytes(e) == 0),
        4 => count::<4>(elems, |e| u32::from_le_bytes(e) == 0),
        _ => count::<1>(elems, |e| e[0] == 0),
    }
}

/// The zero mask (bit `i` set where element `i` is nonzero) and the nonzero elements in
/// order. Branch-free: every element is stored at the next nonzero slot and the slot kept
/// only if the element is nonzero, since zeros and nonzeros alternate at random in ReLU
/// outputs.
pub(crate) fn take_zeros_out(
    elems: &[u8],
    width: usize,
    mask: &mut Vec<u8>,
    nonzero: &mut Vec<u8>,
) {
    let n = elems.len() / width;
    mask.clear();
    mask.resize(n.div_ceil(8), 0);
    nonzero.clear();
    nonzero.resize(elems.len(), 0);
    #[cfg(target_arch = "x86_64")]
    if width > 1 && planepack_core::cpu::x86_64_v3() {
        // SAFETY: the CPU has AVX2 (x86-64-v3); `mask` holds a byte per eight elements and
        // `nonzero` as many bytes as `elems`, as just sized.
        let k = unsafe {
            match width {
                2 => zeros_avx2::take::<2>(elems, mask, nonzero),
                _ => zeros_avx2::take::<4>(elems, mask, nonzero),
            }
        };
        nonzero.truncate(k);
        return;
    }
    let k = match width {
        2 => take_zeros_out_w::<2>(elems, mask, nonzero),
        4 => take_zeros_out_w::<4>(elems, mask, nonzero),
        _ => take_zeros_out_w::<1>(elems, mask, nonzero),
    };
    nonzero.truncate(k);
}

/// For each byte `m`, the positions of its set bits in increasing order (the rest 0): which
/// of eight elements a packing shuffle keeps, and where each goes.
#[cfg(target_arch = "x86_64")]
const KEPT: [[u8; 8]; 256] = {
    let mut t = [[0u8; 8]; 256];
    let mut m = 0;
    while m < 256 {
        let (mut i, mut k) = (0, 0);
        while i < 8 {
            if m >> i & 1 == 1 {
                t[m][k] = i as u8;
                k += 1;
            }
            i += 1;
        }
        m += 1;
    }
    t
};

/// Per byte `m` (bit `i`: 2-byte element `i` of eight is kept): the byte shuffle that packs the
/// kept elements of a 16-byte vector to its front, in order, zero bytes after them (the zero
/// mask's nonzero elements here, the lane coder's emitted words in `lanes`).
#[cfg(target_arch = "x86_64")]
pub(crate) static PACK_2: [[u8; 16]; 256] = {
    let mut t = [[0x80u8; 16]; 256];
    let mut m = 0;
    while m < 256 {
        let mut k = 0;
        while k < (m as u32).count_ones() as usize {
            t[m][2 * k] = 2 * KEPT[m][k];
            t[m][2 * k + 1] = 2 * KEPT[m][k] + 1;
            k += 1;
        }
        m += 1;
    }
    t
};

/// [`take_zeros_out`] eight elements at a time with AVX2: a compare gives the eight elements'
/// nonzero bits (the mask byte), a shuffle looked up by that byte moves the nonzero elements
/// to the front, and the whole vector is stored at the cursor (the elements after them are
/// overwritten by the next store). A ReLU output's zeros fall at random, so the scalar loop's
/// per-element work, not a branch, was its cost: 7 % of encoding flat BF16 activations.
#[cfg(target_arch = "x86_64")]
mod zeros_avx2 {
    use std::arch::x86_64::*;

    use super::PACK_2;

    /// Per nonzero byte: the 32-bit permutation that packs the nonzero 4-byte elements of a
    /// 32-byte vector to its front.
    static PACK_4: [[u32; 8]; 256] = {
        let mut t = [[0u32; 8]; 256];
        let mut m = 0;
        while m < 256 {
            let mut k = 0;
            while k < 8 {
                t[m][k] = super::KEPT[m][k] as u32;
                k += 1;
            }
            m += 1;
        }
        t
    };

    /// [`super::take_zeros_out_w`] for `W` = 2 or 4: each group of eight's nonzero bits by a
    /// compare, then [`pack`]; the elements past the last whole eight by that scalar loop.
    ///
    /// # Safety
    /// The CPU must have AVX2; `mask` holds `ceil(n / 8)` zero bytes and `nonzero` at least
    /// `elems.len()` bytes.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn take<const W: usize>(
        elems: &[u8],
        mask: &mut [u8],
        nonzero: &mut [u8],
    ) -> usize {
        let group = 8 * W;
        let whole = elems.len() / group;
        assert!(mask.len() >= whole && nonzero.len() >= elems.len());
        let src = elems.as_ptr();
        for (b, bits) in mask[..whole].iter_mut().enumerate() {
            // SAFETY: group b lies in `elems`.
            *bits = unsafe {
                if W == 2 {
                    let v = _mm_loadu_si128(src.add(group * b) as *const __m128i);
                    let z = _mm_cmpeq_epi16(v, _mm_setzero_si128());
                    !_mm_movemask_epi8(_mm_packs_epi16(z, z)) as u8
                } else {
                    let v = _mm256_loadu_si256(src.add(group * b) as *const __m256i);
                    let z = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
                    !_mm256_movemask_ps(_mm256_castsi256_ps(z)) as u8
                }
            };
        }
        // SAFETY: as this function's.
        let k = unsafe { pack::<W>(&elems[..group * whole], &mask[..whole], nonzero) };
        k + super::take_zeros_out_w::<W>(
            &elems[group * whole..],
            &mut mask[whole..],
            &mut nonzero[k..],
        )
    }

    /// [`super::take_kept`] for `W` = 2 or 4, eight elements at a time: a shuffle looked up
    /// by the group's byte of `keep` moves its kept elements to the front, and the whole
    /// vector is stored at the cursor (the elements after them are overwritten by the next
    /// store); the elements past the last whole eight by the scalar loop.
    ///
    /// # Safety
    /// The CPU must have AVX2; `keep` holds at least `ceil(n / 8)` bytes and `out` at least
    /// `elems.len()` bytes.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) unsafe fn pack<const W: usize>(elems: &[u8], keep: &[u8], out: &mut [u8]) -> usize {
        let group = 8 * W;
        let whole = elems.len() / group;
        assert!(keep.len() >= whole && out.len() >= elems.len());
        let (src, dst) = (elems.as_ptr(), out.as_mut_ptr());
        let mut k = 0usize;
        for (b, &bits) in keep[..whole].iter().enumerate() {
            // SAFETY: group b lies in `elems`; the store at k writes `group` bytes, and k is
            // at most the bytes of the groups before (group * b), so it ends within
            // group * (b + 1) <= elems.len() <= out.len().
            unsafe {
                if W == 2 {
                    let v = _mm_loadu_si128(src.add(group * b) as *const __m128i);
                    let ctl = _mm_loadu_si128(PACK_2[bits as usize].as_ptr() as *const __m128i);
                    _mm_storeu_si128(dst.add(k) as *mut __m128i, _mm_shuffle_epi8(v, ctl));
                } else {
                    let v = _mm256_loadu_si256(src.add(group * b) as *const __m256i);
                    let perm = _mm256_loadu_si256(PACK_4[bits as usize].as_ptr() as *const __m256i);
                    _mm256_storeu_si256(
                        dst.add(k) as *mut __m256i,
                        _mm256_permutevar8x32_epi32(v, perm),
                    );
                }
            }
            k += W * bits.count_ones() as usize;
        }
        k + super::take_kept_w::<W>(&elems[group * whole..], &keep[whole..], &mut out[k..])
    }
}

/// The elements of `elems` (whole elements of `width` bytes) whose bit is set in `keep` (bit
/// `i % 8` of byte `i / 8` for element `i`), in order, into `out` (at least `elems.len()`
/// bytes); returns the bytes of `out` used. Branch-free as [`take_zeros_out`], with its AVX2
/// packing where the CPU has it (the modelled chunk's literals).
pub(crate) fn take_kept(elems: &[u8], width: usize, keep: &[u8], out: &mut [u8]) -> usize {
    let n = elems.len() / width;
    assert!(keep.len() >= n.div_ceil(8) && out.len() >= elems.len());
    #[cfg(target_arch = "x86_64")]
    if width > 1 && planepack_core::cpu::x86_64_v3() {
        // SAFETY: the CPU has AVX2 (x86-64-v3); `keep` and `out` are as long as asserted.
        return unsafe {
            match width {
                2 => zeros_avx2::pack::<2>(elems, keep, out),
                _ => zeros_avx2::pack::<4>(elems, keep, out),
            }
        };
    }
    match width {
        2 => take_kept_w::<2>(elems, keep, out),
        4 => take_kept_w::<4>(elems, keep, out),
        _ => take_kept_w::<1>(elems, keep, out),
    }
}

/// [`take_kept`] for `W`-byte elements, without SIMD.
fn take_kept_w<const W: usize>(elems: &[u8], keep: &[u8], out: &mut [u8]) -> usize {
    let mut k = 0;
    for (bits, group) in keep.iter().zip(elems.chunks(8 * W)) {
        for (i, e) in group.chunks_exact(W).enumerate() {
            out[k..k + W].copy_from_slice(e);
            k += W * usize::from(bits >> i & 1 == 1);
        }
    }
    k
}

/// [`take_zeros_out`] for `W`-byte elements, without SIMD: each group of eight's nonzero bits
/// into `mask`, then [`take_kept_w`]; returns the bytes of `nonzero` used.
pub(crate) fn take_zeros_out_w<const W: usize>(
    elems: &[u8],
    mask: &mut [u8],
    nonzero: &mut [u8],
) -> usize {
    for (bits, group) in mask.iter_mut().zip(elems.chunks(8 * W)) {
        *bits = group
            .chunks_exact(W)
            .enumerate()
            .fold(0, |m, (i, e)| m | u8::from(e.iter().any(|&b| b != 0)) << i);
    }
    take_kept_w::<W>(elems, mask, nonzero)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `take_zeros_out` (the AVX2 loop where the CPU has it) gives the scalar loop's mask and
    /// nonzero elements, for every width, lengths around the eight-element groups, zeros
    /// alone, in runs and everywhere, and nonzero elements with zero bytes.
    #[test]
    fn zeros_taken_out_as_the_scalar_loop() {
        let mut x = 0x2545_f491_u32;
        for width in [1usize, 2, 4] {
            for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4099] {
                for zeros in [0u32, 3, 6, 8] {
                    let bytes: Vec<u8> = (0..n * width)
                        .map(|i| {
                            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                            let zero_elem = (x >> 28) < zeros || (i / width / 16) % 5 == 0;
                            if zero_elem || (x >> 20) & 3 == 0 {
                                0
                            } else {
                                (x >> 24) as u8 | 1
                            }
                        })
                        .collect();
                    // Zero elements are whole: clear every byte of an element whose first is 0.
                    let elems: Vec<u8> = bytes
                        .chunks(width)
                        .flat_map(|e| {
                            if e[0] == 0 {
                                vec![0; width]
                            } else {
                                e.to_vec()
                            }
                        })
                        .collect();
                    let (mut mask, mut nonzero) = (Vec::new(), Vec::new());
                    take_zeros_out(&elems, width, &mut mask, &mut nonzero);
                    let mut want_mask = vec![0u8; n.div_ceil(8)];
                    let mut want = vec![0u8; elems.len()];
                    let k = match width {
                        1 => take_zeros_out_w::<1>(&elems, &mut want_mask, &mut want),
                        2 => take_zeros_out_w::<2>(&elems, &mut want_mask, &mut want),
                        _ => take_zeros_out_w::<4>(&elems, &mut want_mask, &mut want),
                    };
                    want.truncate(k);
                    assert_eq!(mask, want_mask, "W{width} n{n}");
                    assert_eq!(nonzero, want, "W{width} n{n}");
                }
            }
        }
    }

    /// `take_kept` (the AVX2 packing where the CPU has it) keeps exactly the elements whose
    /// bit is set, in order: against a plain filter, for every width, lengths around the
    /// eight-element groups, and masks of every density (none, all, runs, at random).
    #[test]
    fn kept_elements_taken_in_order() {
        let mut x = 0x9e37_79b9_u32;
        let mut next = || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            x
        };
        for width in [1usize, 2, 4] {
            for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4099] {
                for density in [0u32, 1, 8, 15, 16] {
                    let elems: Vec<u8> = (0..n * width).map(|_| (next() >> 24) as u8).collect();
                    let kept: Vec<bool> = (0..n)
                        .map(|i| match density {
                            16 => (i / 24) % 2 == 0,
                            d => (next() >> 28) < d,
                        })
                        .collect();
                    let mut keep = vec![0u8; n.div_ceil(8)];
                    for (i, _) in kept.iter().enumerate().filter(|k| *k.1) {
                        keep[i / 8] |= 1 << (i % 8);
                    }
                    let want: Vec<u8> = elems
                        .chunks(width)
                        .zip(&kept)
                        .filter(|(_, &k)| k)
                        .flat_map(|(e, _)| e.to_vec())
                        .collect();
                    let mut out = vec![0u8; elems.len()];
                    let used = take_kept(&elems, width, &keep, &mut out);
                    assert_eq!(out[..used], want[..], "W{width} n{n} density {density}");
                }
            }
        }
    }

    /// `count_zeros` counts the zero elements the plan splits, in every width, rotated or
    /// not, with the zeros in runs and alone and nonzero elements that have zero bytes.
    #[test]
    fn split_counts_the_zero_elements() {
        let mut x = 0x9e37_79b9_u32;
        let bytes: Vec<u8> = (0..4099)
            .map(|i| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if (i / 64) % 3 == 0 || x >> 29 == 0 {
                    0
                } else {
                    (x >> 24) as u8 & 0x81
                }
            })
            .collect();
        for width in [1, 2, 4] {
            let elems = &bytes[..bytes.len() / width * width];
            for rotate in [false, true] {
                let mut planes = vec![Vec::new(); width];
                split(elems, width, rotate, &mut planes);
                let zeros = count_zeros(elems, width);
                let expected = elems
                    .chunks_exact(width)
                    .filter(|e| e.iter().all(|&b| b == 0))
                    .count();
                assert_eq!(zeros, expected, "width {width}, rotate {rotate}");
                assert_eq!(zeros, count_zeros(elems, width));
            }
        }
    }
}
