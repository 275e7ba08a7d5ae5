//! Building containers with chosen payloads, for tests and fuzzing only (hidden from the
//! documentation): a hostile file whose checksums all hold is what reaches a codec's decoder
//! through the container, the command and the Python package, and it takes a few lines here.

use crate::format::{Header, ENTRY_LEN, HEADER_LEN};
use crate::{checksum, Container, Result};

/// `file` (a valid container) with part `j`'s payload replaced by `payload`: the entry's
/// payload length and checksum, the later parts' offsets, the header's payload length and the
/// metadata checksum are recomputed; the part's raw checksum is kept (so a decoder that
/// returns something must return the original bytes to pass).
pub fn with_payload(file: &[u8], j: usize, payload: &[u8]) -> Result<Vec<u8>> {
    let c = Container::parse(file, "array")?;
    let start = c.header.payload_start().expect("checked by parse") as usize;
    let mut entries = c.entries.clone();
    let mut payloads: Vec<&[u8]> = entries
        .iter()
        .map(|e| {
            let at = start + e.payload_offset as usize;
            &file[at..at + e.payload_len as usize]
        })
        .collect();
    payloads[j] = payload;
    let mut offset = 0u64;
    for (e, p) in entries.iter_mut().zip(&payloads) {
        e.payload_offset = offset;
        e.payload_len = p.len() as u64;
        e.payload_checksum = checksum(p);
        offset += e.payload_len;
    }
    let header = Header {
        payload_len: offset,
        ..c.header
    };
    let mut out = header.to_bytes().to_vec();
    out.extend_from_slice(c.preamble());
    for e in &entries {
        out.extend_from_slice(&e.to_bytes());
    }
    debug_assert_eq!(
        out.len(),
        HEADER_LEN + c.preamble().len() + entries.len() * ENTRY_LEN
    );
    out.extend_from_slice(&checksum(&out).to_le_bytes());
    for p in payloads {
        out.extend_from_slice(p);
    }
    Ok(out)
}
