//! Opening, verifying and decompressing a container.
//!
//! [`Container::parse`] checks everything that does not need decoding: header fields, the
//! file length, the metadata checksum, that entries tile the original file's data region
//! exactly as its own header says (each tensor in parts of at most [`MAX_PART_LEN`] bytes) and
//! tile the payload region with no gap. Each part's payload checksum is checked before it is
//! decoded and its raw checksum after, so a damaged file yields an error that names the
//! tensor, never wrong bytes.
//!
//! Memory is bounded by what the file holds, never by what it claims: the metadata is read
//! only after the length equation says the file has those bytes, payloads are read one part at
//! a time with positioned reads (no memory map, so a file truncated while it is read gives an
//! error, not SIGBUS), and a part decodes into a buffer of at most [`MAX_PART_LEN`] bytes.
//! Only [`Container::read`] and [`Container::read_into`] hold a whole tensor, because the
//! caller asked for one; `read` grows its buffer part by part as parts decode, so a file that
//! claims a huge tensor fails at its first bad part, not at the allocation.

use crate::codecs::CodecId;
use crate::format::{Entry, Header, ENTRY_LEN, HEADER_LEN, MAX_PART_LEN, MAX_PAYLOAD_LEN};
use crate::read_at::ReadAt;
use crate::select::decode;
use crate::source::Source;
use crate::{checksum, Error, Result};
use std::io::Write;
use std::ops::Range;
use std::path::Path;

/// A parsed container over its bytes (a file or a buffer).
#[derive(Debug)]
pub struct Container<R: ReadAt> {
    input: R,
    file_len: u64,
    pub header: Header,
    /// One per part, in file order.
    pub entries: Vec<Entry>,
    /// `first_part[i]..first_part[i + 1]` are tensor `i`'s entries (one more item than
    /// tensors).
    first_part: Vec<usize>,
    /// The original file's tensors, from the stored preamble.
    pub source: Source,
    preamble: Vec<u8>,
    /// Where the parts whose codec it has are decoded (None: the CPU).
    engine: Option<std::sync::Arc<dyn crate::Engine>>,
}

impl Container<std::fs::File> {
    /// Open and parse a container file: only the metadata is read now; each part's payload is
    /// read when it is decoded.
    pub fn open(path: &Path, npy_name: &str) -> Result<Self> {
        Container::parse(std::fs::File::open(path)?, npy_name)
    }
}

/// Buffers reused from part to part.
#[derive(Default)]
struct Scratch {
    payload: Vec<u8>,
    raw: Vec<u8>,
}

impl<R: ReadAt> Container<R> {
    /// Parse and check a container's metadata.
    pub fn parse(input: R, npy_name: &str) -> Result<Self> {
        let file_len = input.size()?;
        let mut head = [0u8; HEADER_LEN];
        let head = &mut head[..(file_len.min(HEADER_LEN as u64) as usize)];
        input.read_exact_at(0, head)?;
        let header = Header::parse(head, file_len)?;
        // Header::parse checked that the layout adds up to the file length: the file holds
        // these bytes, so reading them allocates no more than it justifies.
        let sum_at = header.checksum_offset().unwrap();
        let meta_len = usize::try_from(header.payload_start().unwrap())
            .map_err(|_| Error::Corrupt("metadata larger than this machine's memory".into()))?;
        let mut meta = Vec::new();
        meta.try_reserve_exact(meta_len).map_err(|_| {
            Error::Corrupt(format!("{meta_len} bytes of metadata do not fit in memory"))
        })?;
        meta.resize(meta_len, 0);
        input.read_exact_at(0, &mut meta)?;
        let (body, stored) = meta.split_at(sum_at as usize);
        if checksum(body) != u64::from_le_bytes(stored.try_into().unwrap()) {
            return Err(Error::Corrupt(
                "metadata checksum mismatch: the container header, the stored original header \
                 or the entry table is damaged"
                    .into(),
            ));
        }
        let p_end = HEADER_LEN + header.preamble_len as usize;
        let preamble = meta[HEADER_LEN..p_end].to_vec();
        let mut entries = Vec::with_capacity((sum_at as usize - p_end) / ENTRY_LEN);
        for (j, b) in meta[p_end..sum_at as usize]
            .chunks_exact(ENTRY_LEN)
            .enumerate()
        {
            entries.push(Entry::parse(b.try_into().unwrap(), j)?);
        }
        // The raw table is parsed: free it before the preamble's tensors are.
        drop(meta);
        let source = Source::parse(header.source, &preamble, header.original_len, npy_name)
            .map_err(|e| Error::Corrupt(format!("stored original header: {e}")))?;
        let first_part = tile(&source, &entries, header.payload_len)?;
        Ok(Container {
            input,
            file_len,
            header,
            entries,
            first_part,
            source,
            preamble,
            engine: None,
        })
    }

    /// Decode the parts whose codec `engine` has there (a GPU), the others on the CPU; every
    /// part still meets its checksums.
    pub fn set_engine(&mut self, engine: Option<std::sync::Arc<dyn crate::Engine>>) {
        self.engine = engine;
    }

    /// Index of the tensor called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.source.tensors.iter().position(|t| t.name == name)
    }

    /// The original file's header, verbatim.
    pub fn preamble(&self) -> &[u8] {
        &self.preamble
    }

    /// The entries (parts) of tensor `i`, as indices into [`Container::entries`].
    pub fn parts(&self, i: usize) -> Range<usize> {
        self.first_part[i]..self.first_part[i + 1]
    }

    /// Total compressed size of the file.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Read part `j`'s payload into `s.payload`, check it, decode it into `s.raw`, check that.
    fn decode_part(&self, j: usize, s: &mut Scratch) -> Result<()> {
        s.raw.clear();
        s.raw.resize(self.entries[j].raw_len as usize, 0);
        self.decode_part_into(j, &mut s.payload, &mut s.raw)
    }

    /// Read part `j`'s payload into `payload`, check it, decode it into `out` (exactly the
    /// part's raw length), check that.
    fn decode_part_into(&self, j: usize, payload: &mut Vec<u8>, out: &mut [u8]) -> Result<()> {
        let e = &self.entries[j];
        let name = &self.source.tensors[self.tensor_of(j)].name;
        // Both lengths were bounded by `tile`: MAX_PAYLOAD_LEN and MAX_PART_LEN.
        payload.clear();
        payload.resize(e.payload_len as usize, 0);
        let start = self.header.payload_start().unwrap() + e.payload_offset;
        self.input.read_exact_at(start, payload)?;
        if checksum(payload) != e.payload_checksum {
            return Err(Error::Corrupt(format!(
                "tensor {name:?}: compressed bytes fail their checksum"
            )));
        }
        decode(self.engine.as_deref(), e.spec(), payload, out).map_err(|err| match err {
            Error::Internal(m) => Error::Internal(format!("tensor {name:?}: {m}")),
            err => Error::Corrupt(format!("tensor {name:?}: {err}")),
        })?;
        if checksum(out) != e.raw_checksum {
            return Err(Error::Corrupt(format!(
                "tensor {name:?}: decoded bytes fail their checksum"
            )));
        }
        Ok(())
    }

    /// Decode entries `parts` (consecutive) into `out`, which holds exactly their raw bytes,
    /// parts in parallel on all cores (each thread holds one payload buffer).
    fn decode_parts_parallel(&self, parts: Range<usize>, out: &mut [u8]) -> Result<()>
    where
        R: Sync,
    {
        use rayon::prelude::*;
        let mut jobs = Vec::with_capacity(parts.len());
        let mut rest = out;
        for j in parts {
            let (here, tail) = rest.split_at_mut(self.entries[j].raw_len as usize);
            jobs.push((j, here));
            rest = tail;
        }
        jobs.into_par_iter()
            .try_for_each_init(Vec::new, |payload, (j, out)| {
                self.decode_part_into(j, payload, out)
            })
    }

    /// The original file into `out` (exactly [`Header::original_len`] bytes): the preamble,
    /// then every part decoded in parallel, every checksum checked. For a file that fits in
    /// memory; [`Container::decompress_to`] streams one part at a time.
    pub fn decompress_into(&self, out: &mut [u8]) -> Result<()>
    where
        R: Sync,
    {
        if out.len() as u64 != self.header.original_len {
            return Err(Error::InvalidInput(format!(
                "output buffer of {} bytes for a {}-byte file",
                out.len(),
                self.header.original_len
            )));
        }
        let (pre, data) = out.split_at_mut(self.preamble.len());
        pre.copy_from_slice(&self.preamble);
        self.decode_parts_parallel(0..self.entries.len(), data)
    }

    /// `out` must be exactly tensor `i`'s raw length.
    fn check_output(&self, i: usize, out: &[u8]) -> Result<()> {
        let span = &self.source.tensors[i];
        if out.len() as u64 != span.len {
            return Err(Error::InvalidInput(format!(
                "tensor {:?}: output buffer of {} bytes for {} raw bytes",
                span.name,
                out.len(),
                span.len
            )));
        }
        Ok(())
    }

    /// The tensor that owns entry `j`.
    fn tensor_of(&self, j: usize) -> usize {
        self.first_part.partition_point(|&f| f <= j) - 1
    }

    /// Decode tensor `i` into `out` (its raw length), checking every checksum.
    pub fn read_into(&self, i: usize, out: &mut [u8]) -> Result<()> {
        self.check_output(i, out)?;
        let mut payload = Vec::new();
        let mut at = 0;
        for j in self.parts(i) {
            let len = self.entries[j].raw_len as usize;
            self.decode_part_into(j, &mut payload, &mut out[at..at + len])?;
            at += len;
        }
        Ok(())
    }

    /// [`Container::read_into`] with the tensor's parts decoded in parallel on all cores.
    pub fn read_into_parallel(&self, i: usize, out: &mut [u8]) -> Result<()>
    where
        R: Sync,
    {
        self.check_output(i, out)?;
        self.decode_parts_parallel(self.parts(i), out)
    }

    /// Decode tensor `i` into a new buffer, which grows as its parts decode.
    pub fn read(&self, i: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut s = Scratch::default();
        for j in self.parts(i) {
            self.decode_part(j, &mut s)?;
            out.extend_from_slice(&s.raw);
        }
        Ok(out)
    }

    /// Check every part's checksums and decode each once, without writing anything.
    pub fn verify(&self) -> Result<()> {
        self.decompress_to(&mut std::io::sink(), |_| {})
    }

    /// Write the original file to `out`, part by part. `progress` gets the raw bytes done.
    /// Errors writing to `out` are [`Error::Output`].
    pub fn decompress_to<W: Write>(
        &self,
        out: &mut W,
        mut progress: impl FnMut(u64),
    ) -> Result<()> {
        out.write_all(&self.preamble).map_err(Error::Output)?;
        let mut s = Scratch::default();
        for j in 0..self.entries.len() {
            self.decode_part(j, &mut s)?;
            out.write_all(&s.raw).map_err(Error::Output)?;
            progress(s.raw.len() as u64);
        }
        out.flush().map_err(Error::Output)?;
        Ok(())
    }
}

/// Check that the entries tile every tensor of `source` in order, in parts of 1 to
/// [`MAX_PART_LEN`] bytes (one empty part for an empty tensor), and that the payloads tile
/// `payload_len` bytes. Returns each tensor's first entry, and one past the last.
fn tile(source: &Source, entries: &[Entry], payload_len: u64) -> Result<Vec<usize>> {
    let count = entries.len();
    let mut first_part = Vec::with_capacity(source.tensors.len() + 1);
    let mut next_payload = 0u64;
    let mut j = 0;
    for span in &source.tensors {
        first_part.push(j);
        let bad = |m: &str| Error::Corrupt(format!("entry for tensor {:?}: {m}", span.name));
        let mut covered = 0u64;
        loop {
            let Some(e) = entries.get(j) else {
                return Err(bad("the entry table ends before this tensor is covered"));
            };
            if e.raw_offset != span.offset + covered {
                return Err(bad("raw range disagrees with the original header"));
            }
            if e.raw_len > span.len - covered {
                return Err(bad("part runs past the end of the tensor"));
            }
            if e.raw_len > MAX_PART_LEN {
                return Err(bad("part longer than the format's 64 MiB limit"));
            }
            if e.payload_len > MAX_PAYLOAD_LEN {
                return Err(bad("payload longer than the format's 128 MiB limit"));
            }
            if e.raw_len == 0 && span.len != 0 {
                return Err(bad("empty part of a non-empty tensor"));
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
            covered += e.raw_len;
            j += 1;
            if covered == span.len {
                break;
            }
        }
    }
    first_part.push(j);
    if j != count {
        return Err(Error::Corrupt(format!(
            "{} entries for parts of {} tensors that need {j}",
            count,
            source.tensors.len()
        )));
    }
    if next_payload != payload_len {
        return Err(Error::Corrupt(
            "payloads do not add up to the payload region".into(),
        ));
    }
    Ok(first_part)
}
