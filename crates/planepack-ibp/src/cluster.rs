//! Several masks per group: rows clustered by Hamming distance, one mask per cluster.
//!
//! The reference library has an experimental variant (`preprocess_kmeans`, reference §1.7):
//! binary centroids initialised from rows, 10 iterations of assigning every row to the nearest
//! centroid by Hamming distance and replacing each centroid by the per-bit majority of its
//! rows, then one mask/bitval pair per cluster. No codec of theirs consumes the clusters, and
//! their masks come from the last threshold of the sweep; here each cluster's mask is built by
//! the usual [`preprocess`] (sweep, strict comparisons, best score) from that cluster's rows,
//! so `C = 1` is exactly the one-mask codec. The stream with clusters (format version 2,
//! `docs/format-ibp.md`) stores every cluster's mask and bitval and a `ceil(log2 C)`-bit
//! cluster id per row; `Ibp { clusters, .. }` writes it. Whether more clusters pay is measured
//! (`cargo xtask ibp-clusters`), and `auto` in the container chooses per tensor.

use crate::{preprocess, Mask, Preprocessed, Rows, Sample, Threshold};

/// k-means rounds of the clustered encoder (the reference's `preprocess_kmeans` runs 10).
pub const ITERATIONS: usize = 10;
/// Seed of the clustered encoder's initial centroids: fixed, so that an encoding is
/// reproducible.
pub const SEED: u64 = 0x1b9;
/// The most clusters a stream can have (the header's one-byte count).
pub const MAX_CLUSTERS: usize = 255;

/// Rows the clustered encoder fits its centroids on, at most: an even stride through the
/// group, so that fitting costs `ITERATIONS x C` passes over at most this many rows whatever
/// the tensor's size; every row is then assigned once. No tensor of our datasets has more
/// rows, so none of our figures depends on it; `cargo xtask ibp-clusters` shows what fitting on
/// a quarter of that costs on the tensors that have more than that.
pub const FIT_ROWS: usize = 4096;

/// Rows assigned to at most `c` clusters (clamped to `1..=MAX_CLUSTERS`): Hamming k-means
/// ([`ITERATIONS`] rounds, [`SEED`]) fitted on at most [`FIT_ROWS`] rows at an even stride,
/// then every row given its nearest centroid; renumbered so that the clusters that got rows
/// are `0..used` in the order of their k-means index. Returns (the cluster of every row,
/// used).
pub fn assign(rows: &Rows, c: usize) -> (Vec<u8>, usize) {
    assign_fitted_on(rows, c, FIT_ROWS)
}

/// `assign` with centroids fitted on at most `fit_rows` rows (`i * N / fit_rows`).
pub fn assign_fitted_on(rows: &Rows, c: usize, fit_rows: usize) -> (Vec<u8>, usize) {
    let fit_rows = fit_rows.max(1);
    let fit: Vec<usize> = if rows.count <= fit_rows {
        (0..rows.count).collect()
    } else {
        (0..fit_rows).map(|i| i * rows.count / fit_rows).collect()
    };
    let (centroids, _) = lloyd(rows, &fit, c.clamp(1, MAX_CLUSTERS), ITERATIONS, SEED);
    let mut cluster: Vec<u8> = (0..rows.count)
        .map(|i| nearest(rows.row(i), &centroids))
        .collect();
    let mut has_rows = [false; 256];
    for &k in &cluster {
        has_rows[k as usize] = true;
    }
    let mut renumber = [0u8; 256];
    let mut used = 0usize;
    for (k, _) in has_rows.iter().enumerate().filter(|(_, h)| **h) {
        renumber[k] = used as u8;
        used += 1;
    }
    cluster.iter_mut().for_each(|k| *k = renumber[*k as usize]);
    (cluster, used)
}

/// Each cluster's mask (`0..c`), built by [`preprocess`] from that cluster's rows alone.
pub fn masks(
    rows: &Rows,
    cluster: &[u8],
    c: usize,
    threshold: Threshold,
    sample: Sample,
) -> Vec<Preprocessed> {
    let rb = rows.row_bytes();
    let mut members = Vec::new();
    (0..c)
        .map(|k| {
            members.clear();
            for (i, _) in cluster.iter().enumerate().filter(|(_, &a)| a as usize == k) {
                members.extend_from_slice(rows.row(i));
            }
            let group = Rows {
                data: &members,
                count: members.len() / rb.max(1),
                columns: rows.columns,
                width: rows.width,
            };
            preprocess(&group, threshold, sample)
        })
        .collect()
}

/// Row `i`'s cluster in `row_cluster` (every row's cluster; empty: one mask, cluster 0).
#[inline]
pub fn cluster_of(row_cluster: &[u8], i: usize) -> usize {
    row_cluster.get(i).map_or(0, |&k| k as usize)
}

/// Append every mask's words and then its bitval's, `W / 8` bytes each, cluster after cluster:
/// the layout of a stream's masks, which the GPU decoder uploads as it is.
pub fn write_masks(masks: &[Mask], out: &mut Vec<u8>) {
    for m in masks {
        let b = (m.width / 8) as usize;
        for v in m.mask.iter().chain(&m.bitval) {
            out.extend_from_slice(&v.to_le_bytes()[..b]);
        }
    }
}

/// Bits of one cluster id in a stream of `c >= 2` clusters: `ceil(log2 c)`.
pub fn id_bits(c: usize) -> usize {
    (usize::BITS - (c.max(2) - 1).leading_zeros()) as usize
}

/// Bytes of the cluster-id field of `rows` rows and `c` clusters: whole `u32` words (None on
/// overflow).
pub fn ids_bytes(rows: usize, c: usize) -> Option<usize> {
    rows.checked_mul(id_bits(c))?.div_ceil(32).checked_mul(4)
}

/// Append the cluster-id field: row `i`'s id at bits `i b .. i b + b` of the little-endian
/// `u32` words, least significant bit first (an id may straddle two words); zero padding.
pub fn pack_ids(cluster: &[u8], c: usize, out: &mut Vec<u8>) {
    let b = id_bits(c);
    let mut words = vec![0u32; (cluster.len() * b).div_ceil(32)];
    for (i, &k) in cluster.iter().enumerate() {
        let (w, s) = (i * b / 32, i * b % 32);
        words[w] |= (k as u32) << s;
        if s + b > 32 {
            words[w + 1] |= (k as u32) >> (32 - s);
        }
    }
    out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
}

/// Read the cluster-id field of `rows` rows from `bytes` ([`ids_bytes`] long): every id must
/// be below `c` and the padding zero.
pub fn unpack_ids(bytes: &[u8], rows: usize, c: usize) -> Result<Vec<u8>, &'static str> {
    let b = id_bits(c);
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
        .collect();
    if words.len() * 32 < rows * b {
        return Err("cluster ids run past their field");
    }
    let mut cluster = Vec::with_capacity(rows);
    for i in 0..rows {
        let (w, s) = (i * b / 32, i * b % 32);
        let mut k = (words[w] >> s) as u64;
        if s + b > 32 {
            k |= (words[w + 1] as u64) << (32 - s);
        }
        let k = (k & ((1u64 << b) - 1)) as usize;
        if k >= c {
            return Err("cluster id out of range");
        }
        cluster.push(k as u8);
    }
    let used = rows * b;
    let padding_clear = words.iter().enumerate().all(|(w, &x)| {
        let lo = used.saturating_sub(32 * w).min(32);
        lo == 32 || x >> lo == 0
    });
    if !padding_clear {
        return Err("cluster-id padding is not zero");
    }
    Ok(cluster)
}

/// The cluster of every row (`0..c`), from `iterations` rounds of Hamming k-means started at
/// `c` distinct rows picked by `seed`. Deterministic. `c` is clamped to `1..=min(256, rows)`.
pub fn kmeans(rows: &Rows, c: usize, iterations: usize, seed: u64) -> Vec<u8> {
    let all: Vec<usize> = (0..rows.count).collect();
    lloyd(rows, &all, c, iterations, seed).1
}

/// Hamming k-means over the rows `ids` of `rows`: (the centroids, the cluster of each of
/// `ids`). Initial centroids: `c` distinct rows of `ids` by a seeded partial shuffle; each
/// round assigns every row to its nearest centroid (the lowest index on a tie) and replaces
/// each centroid by the per-bit majority of its rows (an empty cluster keeps its centroid);
/// it stops early when no centroid changes.
fn lloyd(
    rows: &Rows,
    ids: &[usize],
    c: usize,
    iterations: usize,
    seed: u64,
) -> (Vec<Vec<u8>>, Vec<u8>) {
    let n = ids.len();
    let c = c.clamp(1, 256).min(n.max(1));
    let rb = rows.row_bytes();
    if n == 0 || c == 1 {
        let centroid = ids.first().map_or(vec![], |&i| rows.row(i).to_vec());
        return (vec![centroid], vec![0; n]);
    }
    let mut order: Vec<usize> = ids.to_vec();
    let mut state = seed;
    for i in 0..c {
        state = splitmix64(state);
        let j = i + (state % (n - i) as u64) as usize;
        order.swap(i, j);
    }
    let mut centroids: Vec<Vec<u8>> = order[..c].iter().map(|&i| rows.row(i).to_vec()).collect();
    let mut assign = vec![0u8; n];
    let mut ones = vec![0u32; c * rb * 8];
    let mut sizes = vec![0usize; c];
    for _ in 0..iterations {
        for (a, &i) in assign.iter_mut().zip(ids) {
            *a = nearest(rows.row(i), &centroids);
        }
        ones.iter_mut().for_each(|x| *x = 0);
        sizes.iter_mut().for_each(|x| *x = 0);
        for (&a, &i) in assign.iter().zip(ids) {
            let k = a as usize;
            sizes[k] += 1;
            let counts = &mut ones[k * rb * 8..(k + 1) * rb * 8];
            for (byte_index, &byte) in rows.row(i).iter().enumerate() {
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
    (centroids, assign)
}

/// The index of the centroid nearest to `row` by Hamming distance, the lowest on a tie.
fn nearest(row: &[u8], centroids: &[Vec<u8>]) -> u8 {
    let mut best = (u32::MAX, 0usize);
    for (k, cen) in centroids.iter().enumerate() {
        let d = hamming(row, cen);
        if d < best.0 {
            best = (d, k);
        }
    }
    best.1 as u8
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

    /// Ids of every width round-trip, straddling words included; an id of C or more, or a set
    /// padding bit, is refused.
    #[test]
    fn cluster_ids_round_trip_and_are_checked() {
        for c in [2usize, 3, 4, 5, 8, 9, 17, 100, 255] {
            assert!(1usize << id_bits(c) >= c);
            assert!(1usize << (id_bits(c) - 1) < c);
            for rows in [0usize, 1, 31, 32, 33, 100] {
                let ids: Vec<u8> = (0..rows).map(|i| ((i * 7 + 3) % c) as u8).collect();
                let mut bytes = Vec::new();
                pack_ids(&ids, c, &mut bytes);
                assert_eq!(bytes.len(), ids_bytes(rows, c).unwrap());
                assert_eq!(unpack_ids(&bytes, rows, c).unwrap(), ids);
                if !(rows * id_bits(c)).is_multiple_of(32) {
                    let mut bad = bytes.clone();
                    *bad.last_mut().unwrap() |= 0x80;
                    assert!(unpack_ids(&bad, rows, c).is_err());
                }
            }
        }
        // The worked examples of docs/format-ibp.md.
        let mut bytes = Vec::new();
        pack_ids(&[2, 0, 1], 3, &mut bytes);
        assert_eq!(bytes, [0x12, 0, 0, 0]);
        let mut ids = vec![0u8; 11];
        ids[10] = 0b111;
        bytes.clear();
        pack_ids(&ids, 8, &mut bytes);
        assert_eq!(bytes, [0, 0, 0, 0b1100_0000, 1, 0, 0, 0]);
        // 3 clusters take 2 bits; the value 3 is not a cluster.
        assert_eq!(
            unpack_ids(&[0b11, 0, 0, 0], 1, 3),
            Err("cluster id out of range")
        );
        assert!(unpack_ids(&[0; 4], 40, 3).is_err());
    }

    /// Clusters without rows are dropped and the rest renumbered in order.
    #[test]
    fn assign_numbers_only_clusters_with_rows() {
        let mut data = Vec::new();
        for i in 0..40u32 {
            let base: u32 = if i < 20 { 0x3F80_0000 } else { 0xC200_0000 };
            data.extend_from_slice(&(base | i).to_le_bytes());
        }
        let rows = Rows::new(&data, 4, 32).unwrap();
        let (cluster, used) = assign(&rows, 200);
        assert!((2..=40).contains(&used));
        assert!((0..used).all(|k| cluster.contains(&(k as u8))));
        assert!(cluster.iter().all(|&k| (k as usize) < used));
        assert_eq!(assign(&rows, 1), (vec![0; 40], 1));
    }
}
