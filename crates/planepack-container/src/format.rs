//! The on-disk layout: a 48-byte header, the original preamble, the entry table, a checksum
//! over all of that, then the payloads. `docs/format-container.md` is the normative spec.

use crate::codecs::{elem_from_id, CodecId, CodecSpec};
use crate::{Error, Result};

pub const MAGIC: [u8; 4] = *b"PPKC";
/// Version 2 stores a tensor as parts of at most [`MAX_PART_LEN`] raw bytes (version 1 had
/// one entry per tensor, so a reader had to hold a whole tensor, whatever its size).
pub const VERSION: u16 = 2;
pub const HEADER_LEN: usize = 48;
pub const ENTRY_LEN: usize = 64;
pub const CHECKSUM_LEN: usize = 8;
/// The most raw bytes one entry (one part of a tensor) may hold: what a reader or a writer
/// holds in memory at a time, whatever the tensor's size.
pub const MAX_PART_LEN: u64 = 64 << 20;
/// The longest payload one part may have: twice [`MAX_PART_LEN`], far above any codec's
/// worst-case expansion, so a reader's payload buffer is bounded too.
pub const MAX_PAYLOAD_LEN: u64 = 2 * MAX_PART_LEN;

pub use planepack_tensorfile::SourceKind;

/// The fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub source: SourceKind,
    /// Length of the original file.
    pub original_len: u64,
    /// Length of the original file's header, stored verbatim after this header.
    pub preamble_len: u64,
    pub entries: u64,
    /// Total length of the payload region (the sum of the entries' payload lengths).
    pub payload_len: u64,
}

/// One part of a tensor: where its bytes were, where its payload is, how it was coded, its
/// checksums. A tensor's parts are consecutive entries whose raw ranges tile it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Offset of the part's bytes in the original file.
    pub raw_offset: u64,
    pub raw_len: u64,
    /// Offset of the payload from the start of the payload region.
    pub payload_offset: u64,
    pub payload_len: u64,
    pub raw_checksum: u64,
    pub payload_checksum: u64,
    pub codec: CodecId,
    /// Element type the codec was given (see [`crate::codecs::elem_id`]).
    pub elem: u8,
    /// Codec level (zstd, Blosc2), else 0.
    pub level: u8,
}

impl Header {
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6] = self.source as u8;
        b[8..16].copy_from_slice(&self.original_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.preamble_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.entries.to_le_bytes());
        b[32..40].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    /// Parse and check the header of a container file of `file_len` bytes.
    pub fn parse(b: &[u8], file_len: u64) -> Result<Header> {
        let corrupt = |m: String| Error::Corrupt(m);
        let b = b.get(..HEADER_LEN).ok_or_else(|| {
            corrupt(format!(
                "shorter than the {HEADER_LEN}-byte container header"
            ))
        })?;
        if b[0..4] != MAGIC {
            return Err(corrupt("not a planepack container (bad magic)".into()));
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        if version != VERSION {
            return Err(corrupt(format!(
                "container version {version} is not supported (this build reads {VERSION})"
            )));
        }
        let source = match b[6] {
            1 => SourceKind::Safetensors,
            2 => SourceKind::Npy,
            k => return Err(corrupt(format!("unknown source kind {k}"))),
        };
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if b[7] != 0 || u(40) != 0 {
            return Err(corrupt("reserved header bytes are not zero".into()));
        }
        let h = Header {
            source,
            original_len: u(8),
            preamble_len: u(16),
            entries: u(24),
            payload_len: u(32),
        };
        let expected = h.payload_start().and_then(|s| s.checked_add(h.payload_len));
        if expected != Some(file_len) {
            return Err(corrupt(format!(
                "file is {file_len} bytes but its header describes {}",
                expected.map_or("more than 2^64".to_string(), |e| e.to_string())
            )));
        }
        if h.preamble_len > h.original_len {
            return Err(corrupt("preamble longer than the original file".into()));
        }
        Ok(h)
    }

    /// Offset of the entry table (`None` past 2^64: the fields come from the file).
    pub fn entries_offset(&self) -> Option<u64> {
        (HEADER_LEN as u64).checked_add(self.preamble_len)
    }

    /// Offset of the metadata checksum (the end of the entry table).
    pub fn checksum_offset(&self) -> Option<u64> {
        self.entries
            .checked_mul(ENTRY_LEN as u64)?
            .checked_add(self.entries_offset()?)
    }

    /// Offset of the payload region.
    pub fn payload_start(&self) -> Option<u64> {
        self.checksum_offset()?.checked_add(CHECKSUM_LEN as u64)
    }
}

impl Entry {
    /// The codec and level this entry names.
    pub fn spec(&self) -> CodecSpec {
        CodecSpec {
            id: self.codec,
            level: self.level,
        }
    }

    pub fn to_bytes(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        for (i, v) in [
            self.raw_offset,
            self.raw_len,
            self.payload_offset,
            self.payload_len,
            self.raw_checksum,
            self.payload_checksum,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[48] = self.codec as u8;
        b[49] = self.elem;
        b[50] = self.level;
        b
    }

    /// Parse entry `index` (for messages) from its 64 bytes.
    pub fn parse(b: &[u8; ENTRY_LEN], index: usize) -> Result<Entry> {
        let u = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        let codec = CodecId::from_u8(b[48])
            .ok_or_else(|| Error::Corrupt(format!("entry {index}: unknown codec id {}", b[48])))?;
        if elem_from_id(b[49]).is_none() {
            return Err(Error::Corrupt(format!(
                "entry {index}: unknown element type id {}",
                b[49]
            )));
        }
        if b[51..].iter().any(|&x| x != 0) {
            return Err(Error::Corrupt(format!(
                "entry {index}: reserved bytes are not zero"
            )));
        }
        Ok(Entry {
            raw_offset: u(0),
            raw_len: u(1),
            payload_offset: u(2),
            payload_len: u(3),
            raw_checksum: u(4),
            payload_checksum: u(5),
            codec,
            elem: b[49],
            level: b[50],
        })
    }
}
