//! Helpers the rANS integration tests share: a stream hash for pinned bytes, a shaped
//! encode, both decoders' round trip, and random damage that must never panic.

use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;
use planepack_testkit::{mutate, Mutation, Rng};

/// FNV-1a over `bytes`, into `h`.
pub fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= b as u64;
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

/// `data` encoded as a matrix of rows of `cols` elements.
pub fn shaped(codec: &Rans, data: &[u8], elem: ElemType, cols: usize) -> Vec<u8> {
    let rows = data.len() / elem.size() / cols;
    let mut enc = Vec::new();
    codec
        .encode_shaped(data, elem, &[rows, cols], &mut enc)
        .unwrap();
    enc
}

/// `enc` decodes to `data` sequentially and in parallel.
pub fn round_trips(codec: &Rans, enc: &[u8], data: &[u8]) {
    let mut out = vec![0xa5u8; data.len()];
    codec.decode(enc, &mut out).unwrap();
    assert!(out == data, "sequential decode");
    out.fill(0x5a);
    codec.decode_parallel(enc, &mut out).unwrap();
    assert!(out == data, "parallel decode");
}

/// 3000 random damages of `enc` (of `len` raw bytes) never panic, and damage that leaves a
/// valid stream decodes alike sequentially and in parallel.
pub fn damage_decodes_alike(codec: &Rans, enc: &[u8], len: usize, seed: u64) {
    let mut rng = Rng(seed);
    for i in 0..3000 {
        let m = Mutation::ALL[i % Mutation::ALL.len()];
        let bad = mutate(enc, m, &mut rng);
        let mut out = vec![0u8; len];
        if codec.decode(&bad, &mut out).is_ok() {
            let mut again = vec![0u8; len];
            codec.decode_parallel(&bad, &mut again).unwrap();
            assert!(out == again);
        }
    }
}
