//! Several masks per group: rows clustered by Hamming distance, one mask per cluster.
//!
//! The reference library has an experimental variant (`preprocess_kmeans`, reference §1.7):
//! binary centroids initialised from rows, 10 iterations of assigning every row to the nearest
//! centroid by Hamming distance and replacing each centroid by the per-bit majority of its
//! rows, then one mask/bitval pair per cluster. No codec of theirs consumes the clusters, and
//! their masks come from the last threshold of the sweep; here each cluster's mask is built by
//! the usual [`preprocess`](crate::preprocess) (sweep, strict comparisons, best score), so
//! `C = 1` is exactly the one-mask codec. Whether more clusters pay is measured
//! (`cargo xtask ibp-clusters`), counting every mask, bitval and cluster id.

use crate::Rows;

/// The cluster of every row (`0..c`), from `iterations` rounds of Hamming k-means started at
/// `c` distinct rows picked by `seed`. Deterministic. `c` is clamped to `1..=min(256, rows)`.
pub fn kmeans(rows: &Rows, c: usize, iterations: usize, seed: u64) -> Vec<u8> {
    let n = rows.count;
    let c = c.clamp(1, 256).min(n.max(1));
    if n == 0 || c == 1 {
        return vec![0; n];
    }
    let rb = rows.data.len() / n;
    let row = |i: usize| &rows.data[i * rb..(i + 1) * rb];
    // Initial centroids: c distinct rows, by a seeded partial shuffle of the row indices.
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed;
    for i in 0..c {
        state = splitmix64(state);
        let j = i + (state % (n - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut centroids: Vec<Vec<u8>> = order[..c].iter().map(|&i| row(i).to_vec()).collect();
    let mut assign = vec![0u8; n];
    let mut ones = vec![0u32; c * rb * 8];
    let mut sizes = vec![0usize; c];
    for _ in 0..iterations {
        // Assign: nearest centroid, the lowest index on a tie.
        for (i, a) in assign.iter_mut().enumerate() {
            let r = row(i);
            let mut best = (u32::MAX, 0usize);
            for (k, cen) in centroids.iter().enumerate() {
                let d = hamming(r, cen);
                if d < best.0 {
                    best = (d, k);
                }
            }
            *a = best.1 as u8;
        }
        // Update: per-bit majority of each cluster; an empty cluster keeps its centroid.
        ones.iter_mut().for_each(|x| *x = 0);
        sizes.iter_mut().for_each(|x| *x = 0);
        for (i, &a) in assign.iter().enumerate() {
            let k = a as usize;
            sizes[k] += 1;
            let counts = &mut ones[k * rb * 8..(k + 1) * rb * 8];
            for (byte_index, &byte) in row(i).iter().enumerate() {
                let mut b = byte;
                while b != 0 {
                    let bit = b.trailing_zeros() as usize;
                    counts[byte_index * 8 + bit] += 1;
                    b &= b - 1;
                }
            }
        }
        let mut changed = false;
        for k in 0..c {
            if sizes[k] == 0 {
                continue;
            }
            let counts = &ones[k * rb * 8..(k + 1) * rb * 8];
            for (byte_index, cb) in centroids[k].iter_mut().enumerate() {
                let mut v = 0u8;
                for bit in 0..8 {
                    if 2 * counts[byte_index * 8 + bit] as usize > sizes[k] {
                        v |= 1 << bit;
                    }
                }
                changed |= *cb != v;
                *cb = v;
            }
        }
        if !changed {
            break;
        }
    }
    assign
}

fn hamming(a: &[u8], b: &[u8]) -> u32 {
    let mut d = 0;
    let (a8, a_tail) = a.split_at(a.len() / 8 * 8);
    let (b8, b_tail) = b.split_at(b.len() / 8 * 8);
    for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        let x = u64::from_le_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_le_bytes(y.try_into().expect("8 bytes"));
        d += (x ^ y).count_ones();
    }
    for (x, y) in a_tail.iter().zip(b_tail) {
        d += (x ^ y).count_ones();
    }
    d
}

fn splitmix64(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two obvious families of rows (different high bytes) end in two clusters, each whole;
    /// one cluster gives all zeros; the result does not depend on anything but the seed.
    #[test]
    fn separates_obvious_families() {
        let mut data = Vec::new();
        for i in 0..64u32 {
            let base: u32 = if i % 2 == 0 { 0x3F80_0000 } else { 0xC200_0000 };
            for j in 0..8u32 {
                data.extend_from_slice(&(base | (i * 31 + j) & 0xFF).to_le_bytes());
            }
        }
        let rows = Rows::new(&data, 32, 32).unwrap();
        let a = kmeans(&rows, 2, 10, 1);
        assert!((0..64).all(|i| a[i] == a[i % 2]), "{a:?}");
        assert_ne!(a[0], a[1]);
        assert_eq!(kmeans(&rows, 1, 10, 1), vec![0; 64]);
        assert_eq!(a, kmeans(&rows, 2, 10, 1));
        // More clusters than rows is clamped.
        let few = Rows::new(&data[..64], 32, 32).unwrap();
        assert!(kmeans(&few, 8, 10, 3).iter().all(|&k| k < 2));
    }
}
