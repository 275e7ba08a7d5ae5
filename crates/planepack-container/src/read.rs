//! Opening, verifying and decompressing a container.
//!
//! [`Container::parse`] checks everything that does not need decoding: header fields, the
//! file length, the metadata checksum, that entries tile the original file's data region
//! exactly as its own header says and tile the payload region with no gap. Each tensor's
//! payload checksum is checked before it is decoded and its raw checksum after, so a damaged
//! file yields an error that names the tensor, never wrong bytes.

use crate::codecs::CodecId;
use crate::format::{Entry, Header, ENTRY_LEN, HEADER_LEN};
use crate::select::decode;
use crate::source::Source;
use crate::{checksum, Error, Result};
use std::io::Write;
use std::path::Path;

/// What a container's bytes live in. A memory map can hand pages back to the OS once a tensor
/// has been decoded, so decompressing a large file does not leave all of it resident.
pub trait Backing: AsRef<[u8]> {
    /// Drop the resident pages of `range` (a hint; the bytes stay readable).
    fn release(&self, range: std::ops::Range<usize>) {
        let _ = range;
    }
}

impl Backing for Vec<u8> {}
impl Backing for &[u8] {}

impl Backing for memmap2::Mmap {
    fn release(&self, range: std::ops::Range<usize>) {
        const PAGE: usize = 4096;
        let start = range.start / PAGE * PAGE;
        // SAFETY: a read-only, file-backed private map: MADV_DONTNEED drops the pages and a
        // later access reads the same bytes from the file again, so no reference observes a
        // change. Failure (another page size) only means the hint was not taken.
        let _ = unsafe {
            self.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start,
                range.end.saturating_sub(start),
            )
        };
    }
}

/// A parsed container over its bytes (a memory map or a buffer).
#[derive(Debug)]
pub struct Container<B: Backing> {
    bytes: B,
    pub header: Header,
    pub entries: Vec<Entry>,
    /// The original file's tensors, from the stored preamble.
    pub source: Source,
}

impl Container<memmap2::Mmap> {
    /// Memory-map and parse a container file: only the metadata is read now; each tensor's
    /// pages are touched when it is read.
    pub fn open(path: &Path, npy_name: &str) -> Result<Self> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the map is read-only and private to this process. If another process
        // truncates the file while we read it, the OS raises SIGBUS; that is the documented
        // limit of mapping files, as for every memory-mapped reader.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Container::parse(map, npy_name)
    }
}

impl<B: Backing> Container<B> {
    /// Parse and check a container's metadata.
    pub fn parse(bytes: B, npy_name: &str) -> Result<Self> {
        let b = bytes.as_ref();
        let header = Header::parse(b, b.len() as u64)?;
        // Header::parse checked that the layout adds up to the file length, so these slices
        // are in bounds.
        let p_end = HEADER_LEN + header.preamble_len as usize;
        let sum_at = header.checksum_offset().unwrap() as usize;
        let stored = u64::from_le_bytes(b[sum_at..sum_at + 8].try_into().unwrap());
        if checksum(&b[..sum_at]) != stored {
            return Err(Error::Corrupt(
                "metadata checksum mismatch: the container header, the stored original header \
                 or the entry table is damaged"
                    .into(),
            ));
        }
        let preamble = &b[HEADER_LEN..p_end];
        let source = Source::parse(header.source, preamble, header.original_len, npy_name)
            .map_err(|e| Error::Corrupt(format!("stored original header: {e}")))?;
        if source.tensors.len() as u64 != header.entries {
            return Err(Error::Corrupt(format!(
                "{} entries for {} tensors",
                header.entries,
                source.tensors.len()
            )));
        }
        let mut entries = Vec::with_capacity(source.tensors.len());
        let mut next_payload = 0u64;
        for (i, span) in source.tensors.iter().enumerate() {
            let at = p_end + i * ENTRY_LEN;
            let e = Entry::parse(b[at..at + ENTRY_LEN].try_into().unwrap(), i)?;
            let bad = |m: &str| Error::Corrupt(format!("entry for tensor {:?}: {m}", span.name));
            if e.raw_offset != span.offset || e.raw_len != span.len {
                return Err(bad("raw range disagrees with the original header"));
            }
            if e.payload_offset != next_payload {
                return Err(bad("payload does not follow the previous one"));
            }
            if e.codec == CodecId::Raw && e.payload_len != e.raw_len {
                return Err(bad("stored payload length differs from the raw length"));
            }
            next_payload = next_payload
                .checked_add(e.payload_len)
                .ok_or_else(|| bad("payload length overflows"))?;
            entries.push(e);
        }
        if next_payload != header.payload_len {
            return Err(Error::Corrupt(
                "payloads do not add up to the payload region".into(),
            ));
        }
        Ok(Container {
            bytes,
            header,
            entries,
            source,
        })
    }

    /// Index of the tensor called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.source.tensors.iter().position(|t| t.name == name)
    }

    /// The original file's header, verbatim.
    pub fn preamble(&self) -> &[u8] {
        &self.bytes.as_ref()[HEADER_LEN..HEADER_LEN + self.header.preamble_len as usize]
    }

    /// The compressed bytes of tensor `i`.
    pub fn payload(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        let start = self.header.payload_start().unwrap() + e.payload_offset;
        &self.bytes.as_ref()[start as usize..(start + e.payload_len) as usize]
    }

    /// Decode tensor `i` into `out` (its raw length), checking both checksums.
    pub fn read_into(&self, i: usize, out: &mut [u8]) -> Result<()> {
        let e = &self.entries[i];
        let name = &self.source.tensors[i].name;
        let payload = self.payload(i);
        if checksum(payload) != e.payload_checksum {
            return Err(Error::Corrupt(format!(
                "tensor {name:?}: compressed bytes fail their checksum"
            )));
        }
        if out.len() as u64 != e.raw_len {
            return Err(Error::InvalidInput(format!(
                "tensor {name:?}: output buffer of {} bytes for {} raw bytes",
                out.len(),
                e.raw_len
            )));
        }
        decode(e.spec(), payload, out)
            .map_err(|err| Error::Corrupt(format!("tensor {name:?}: {err}")))?;
        if checksum(out) != e.raw_checksum {
            return Err(Error::Corrupt(format!(
                "tensor {name:?}: decoded bytes fail their checksum"
            )));
        }
        Ok(())
    }

    /// Decode tensor `i` into a new buffer.
    pub fn read(&self, i: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.entries[i].raw_len as usize];
        self.read_into(i, &mut out)?;
        Ok(out)
    }

    /// Check every tensor's checksums and decode each once, without writing anything.
    pub fn verify(&self) -> Result<()> {
        let mut buf = Vec::new();
        for i in 0..self.entries.len() {
            buf.clear();
            buf.resize(self.entries[i].raw_len as usize, 0);
            self.read_into(i, &mut buf)?;
        }
        Ok(())
    }

    /// Write the original file to `out`, tensor by tensor. `progress` gets the raw bytes done.
    pub fn decompress_to<W: Write>(
        &self,
        out: &mut W,
        mut progress: impl FnMut(u64),
    ) -> Result<()> {
        out.write_all(self.preamble())?;
        let mut buf = Vec::new();
        for i in 0..self.entries.len() {
            buf.clear();
            buf.resize(self.entries[i].raw_len as usize, 0);
            self.read_into(i, &mut buf)?;
            out.write_all(&buf)?;
            let start =
                (self.header.payload_start().unwrap() + self.entries[i].payload_offset) as usize;
            self.bytes
                .release(start..start + self.entries[i].payload_len as usize);
            progress(buf.len() as u64);
        }
        out.flush()?;
        Ok(())
    }
}

impl<B: Backing> Container<B> {
    /// Total compressed size of the file.
    pub fn file_len(&self) -> u64 {
        self.bytes.as_ref().len() as u64
    }
}
