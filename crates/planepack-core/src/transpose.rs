//! Bit-matrix transposes between elements and bit planes.
//!
//! A block of `N` elements of `W` bits is a `N x W` bit matrix; its transpose is `W` planes of
//! `N` bits, plane `b` holding bit `b` of every element (element `i` at bit `i`). Bit-plane
//! coding works on planes, so the encoder transposes each block once per candidate mode and
//! the decoder once per block: these functions are on the hot path of both.
//!
//! The square transposes use the recursive block-swap method (swap the off-diagonal halves,
//! then quarters, ...): `log2(n)` passes of `n/2` masked swaps, branch-free and independent of
//! the data. Non-square blocks (64 x 16, 128 x 8) are done as several square tiles.
//! The reference definition is [`planes_naive`], against which everything here is tested.

macro_rules! square_transpose {
    ($name:ident, $t:ty, $n:expr, [$(($j:expr, $m:expr)),*]) => {
        /// Transpose a square bit matrix in place: afterwards bit `c` of row `r` is what was bit
        /// `r` of row `c`.
        #[inline]
        pub fn $name(a: &mut [$t; $n]) {
            $(
                let j: usize = $j;
                let m: $t = $m;
                let mut k = 0;
                while k < $n {
                    if k & j == 0 {
                        let t = ((a[k] >> j) ^ a[k + j]) & m;
                        a[k] ^= t << j;
                        a[k + j] ^= t;
                    }
                    k += 1;
                }
            )*
        }
    };
}

square_transpose!(
    transpose32,
    u32,
    32,
    [
        (16, 0x0000_FFFF),
        (8, 0x00FF_00FF),
        (4, 0x0F0F_0F0F),
        (2, 0x3333_3333),
        (1, 0x5555_5555)
    ]
);
square_transpose!(
    transpose16,
    u16,
    16,
    [(8, 0x00FF), (4, 0x0F0F), (2, 0x3333), (1, 0x5555)]
);

/// Transpose an 8x8 bit matrix held in a `u64` (row `r` is byte `r`, column `c` is bit `c`).
#[inline]
pub fn transpose8(x: u64) -> u64 {
    let mut x = x;
    let t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
    x ^= t ^ (t << 7);
    let t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
    x ^= t ^ (t << 14);
    let t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
    x ^= t ^ (t << 28);
    x
}

/// 32 elements of 32 bits to 32 planes of 32 bits.
#[inline]
pub fn planes32(elems: &[u32; 32]) -> [u32; 32] {
    let mut a = *elems;
    transpose32(&mut a);
    a
}

/// Inverse of [`planes32`].
#[inline]
pub fn elems32(planes: &[u32; 32]) -> [u32; 32] {
    planes32(planes)
}

/// 64 elements of 16 bits to 16 planes of 64 bits.
#[inline]
pub fn planes16(elems: &[u16; 64]) -> [u64; 16] {
    let mut planes = [0u64; 16];
    for g in 0..4 {
        let mut tile: [u16; 16] = elems[g * 16..g * 16 + 16].try_into().unwrap();
        transpose16(&mut tile);
        for b in 0..16 {
            planes[b] |= (tile[b] as u64) << (16 * g);
        }
    }
    planes
}

/// Inverse of [`planes16`].
#[inline]
pub fn elems16(planes: &[u64; 16]) -> [u16; 64] {
    let mut elems = [0u16; 64];
    for g in 0..4 {
        let mut tile = [0u16; 16];
        for b in 0..16 {
            tile[b] = (planes[b] >> (16 * g)) as u16;
        }
        transpose16(&mut tile);
        elems[g * 16..g * 16 + 16].copy_from_slice(&tile);
    }
    elems
}

/// 128 elements of 8 bits to 8 planes of 128 bits.
#[inline]
pub fn planes8(elems: &[u8; 128]) -> [u128; 8] {
    let mut planes = [0u128; 8];
    for g in 0..16 {
        let tile = u64::from_le_bytes(elems[g * 8..g * 8 + 8].try_into().unwrap());
        let t = transpose8(tile).to_le_bytes();
        for b in 0..8 {
            planes[b] |= (t[b] as u128) << (8 * g);
        }
    }
    planes
}

/// Inverse of [`planes8`].
#[inline]
pub fn elems8(planes: &[u128; 8]) -> [u8; 128] {
    let mut elems = [0u8; 128];
    for g in 0..16 {
        let mut t = [0u8; 8];
        for b in 0..8 {
            t[b] = (planes[b] >> (8 * g)) as u8;
        }
        let tile = transpose8(u64::from_le_bytes(t));
        elems[g * 8..g * 8 + 8].copy_from_slice(&tile.to_le_bytes());
    }
    elems
}

/// Reference definition: plane `b` bit `i` = bit `b` of `elems[i]`. Slow; for tests.
pub fn planes_naive(elems: &[u64], width: u32) -> Vec<u128> {
    (0..width)
        .map(|b| {
            elems
                .iter()
                .enumerate()
                .fold(0u128, |p, (i, &e)| p | ((((e >> b) & 1) as u128) << i))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn t32(e in proptest::array::uniform32(any::<u32>())) {
            let p = planes32(&e);
            let naive = planes_naive(&e.map(|x| x as u64), 32);
            prop_assert_eq!(p.iter().map(|&x| x as u128).collect::<Vec<_>>(), naive);
            prop_assert_eq!(elems32(&p), e);
        }

        #[test]
        fn t16(e in proptest::collection::vec(any::<u16>(), 64)) {
            let e: [u16; 64] = e.try_into().unwrap();
            let p = planes16(&e);
            let naive = planes_naive(&e.map(|x| x as u64), 16);
            prop_assert_eq!(p.iter().map(|&x| x as u128).collect::<Vec<_>>(), naive);
            prop_assert_eq!(elems16(&p), e);
        }

        #[test]
        fn t8(e in proptest::collection::vec(any::<u8>(), 128)) {
            let e: [u8; 128] = e.try_into().unwrap();
            let p = planes8(&e);
            let naive = planes_naive(&e.map(|x| x as u64), 8);
            prop_assert_eq!(p.to_vec(), naive);
            prop_assert_eq!(elems8(&p), e);
        }
    }
}
