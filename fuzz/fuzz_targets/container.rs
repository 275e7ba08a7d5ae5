//! A `.ppk` container's metadata on untrusted bytes: `Container::parse` checks the header,
//! the stored original header, the entry table and the metadata checksum. Random bytes rarely
//! pass a 64-bit checksum, so the target recomputes it when the input asks (its last byte, not
//! part of the file, odd) and so reaches every rule behind it (entries tiling each tensor in
//! parts); then each tensor whose declared length the harness can afford is read, which checks
//! both checksums of each part and decodes it, and small files are decoded whole by the
//! streaming and the parallel decoders, which must agree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_container::{checksum, Container};

const MAX_OUT: u64 = 16 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((flag, file)) = data.split_last() else {
        return;
    };
    let mut bytes = file.to_vec();
    if flag & 1 == 1 {
        reseal(&mut bytes);
    }
    let Ok(c) = Container::parse(bytes, "x") else {
        return;
    };
    for (i, t) in c.source.tensors.iter().enumerate() {
        if t.len <= MAX_OUT {
            let _ = c.read(i);
        }
    }
    if c.header.original_len <= MAX_OUT {
        // The streaming and the parallel whole-file decoders agree: same bytes or both an error.
        let verified = c.verify();
        let mut file = vec![0u8; c.header.original_len as usize];
        let parallel = c.decompress_into(&mut file);
        assert_eq!(verified.is_ok(), parallel.is_ok(), "decompress_into and verify disagree");
        if parallel.is_ok() {
            let mut streamed = Vec::new();
            c.decompress_to(&mut streamed, |_| {}).expect("verified just now");
            assert!(streamed == file, "decompress_into differs from decompress_to");
        }
    }
});

/// Recompute the metadata checksum where the header says it is, if the header parses.
fn reseal(bytes: &mut [u8]) {
    let Ok(h) = planepack_container::format::Header::parse(bytes, bytes.len() as u64) else {
        return;
    };
    let Some(at) = h.checksum_offset().and_then(|a| usize::try_from(a).ok()) else {
        return;
    };
    if at + 8 <= bytes.len() {
        let sum = checksum(&bytes[..at]);
        bytes[at..at + 8].copy_from_slice(&sum.to_le_bytes());
    }
}
