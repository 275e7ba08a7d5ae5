//! Compressing one input file into a container.
//!
//! Memory stays bounded by the largest tensor, not the file: the input is read one tensor at a
//! time (positioned reads, no mapping, so nothing of the input stays resident), payloads are
//! streamed to the output, and the header and entry table, written as placeholders first, are
//! filled in at the end with one seek.

use crate::codecs::{elem_id, CodecSpec};
use crate::format::{Entry, Header, ENTRY_LEN, HEADER_LEN};
use crate::select::{choose, Candidate, Policy};
use crate::source::{Source, PROBE_LEN};
use crate::{checksum, Error, Result};
use std::io::{Seek, SeekFrom, Write};

/// Random-access input: a file (positioned reads) or bytes in memory.
pub trait ReadAt {
    fn size(&self) -> Result<u64>;
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
}

impl ReadAt for std::fs::File {
    fn size(&self) -> Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset).map_err(Error::from)
    }
}

impl ReadAt for [u8] {
    fn size(&self) -> Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let s = usize::try_from(offset).map_err(|_| Error::InvalidInput("offset".into()))?;
        let src = self
            .get(s..s + buf.len())
            .ok_or_else(|| Error::InvalidInput("read past the end of the input".into()))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// What the writer needs to know.
#[derive(Debug, Clone)]
pub struct CompressOptions {
    pub policy: Policy,
    /// Name given to the array of a `.npy` input (usually the file stem).
    pub npy_name: String,
}

/// What happened to one tensor.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TensorReport {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub codec: CodecSpec,
    pub raw_bytes: u64,
    pub compressed_bytes: u64,
    pub candidates: Vec<Candidate>,
}

/// Parse an input's header: its kind, preamble bytes and tensor spans.
pub fn read_source<R: ReadAt + ?Sized>(input: &R, npy_name: &str) -> Result<(Source, Vec<u8>)> {
    let len = input.size()?;
    let mut head = vec![0u8; (len as usize).min(PROBE_LEN)];
    input.read_exact_at(0, &mut head)?;
    let (kind, plen) = Source::preamble_len_of(&head, len)?;
    let mut preamble = vec![0u8; plen as usize];
    input.read_exact_at(0, &mut preamble)?;
    let source = Source::parse(kind, &preamble, len, npy_name)?;
    Ok((source, preamble))
}

/// Compress `input` into `output`. `progress` is called with the raw bytes done after each
/// tensor. Returns one report per tensor, in file order.
pub fn compress<R: ReadAt + ?Sized, W: Write + Seek>(
    input: &R,
    output: &mut W,
    options: &CompressOptions,
    mut progress: impl FnMut(u64),
) -> Result<Vec<TensorReport>> {
    let (source, preamble) = read_source(input, &options.npy_name)?;
    let n = source.tensors.len();
    let start = output.stream_position()?;
    // Placeholders for the header, preamble, entry table and checksum.
    let meta_len = HEADER_LEN + preamble.len() + n * ENTRY_LEN + 8;
    output.write_all(&vec![0u8; meta_len])?;

    let mut entries = Vec::with_capacity(n);
    let mut reports = Vec::with_capacity(n);
    let (mut data, mut scratch) = (Vec::new(), Vec::new());
    let mut payload_offset = 0u64;
    for span in &source.tensors {
        data.clear();
        data.resize(span.len as usize, 0);
        input.read_exact_at(span.offset, &mut data)?;
        let choice = choose(options.policy, span, &data, &mut scratch)?;
        output.write_all(&choice.payload)?;
        let payload_len = choice.payload.len() as u64;
        entries.push(Entry {
            raw_offset: span.offset,
            raw_len: span.len,
            payload_offset,
            payload_len,
            raw_checksum: checksum(&data),
            payload_checksum: checksum(&choice.payload),
            codec: choice.codec.id,
            elem: elem_id(choice.elem),
            level: choice.codec.level,
        });
        payload_offset += payload_len;
        reports.push(TensorReport {
            name: span.name.clone(),
            dtype: span.dtype.clone(),
            shape: span.shape.clone(),
            codec: choice.codec,
            raw_bytes: span.len,
            compressed_bytes: payload_len,
            candidates: choice.candidates,
        });
        progress(span.len);
    }

    let header = Header {
        source: source.kind,
        original_len: source.file_len,
        preamble_len: source.preamble_len,
        entries: n as u64,
        payload_len: payload_offset,
    };
    let mut meta = Vec::with_capacity(meta_len);
    meta.extend_from_slice(&header.to_bytes());
    meta.extend_from_slice(&preamble);
    for e in &entries {
        meta.extend_from_slice(&e.to_bytes());
    }
    let sum = checksum(&meta);
    meta.extend_from_slice(&sum.to_le_bytes());
    output.seek(SeekFrom::Start(start))?;
    output.write_all(&meta)?;
    output.seek(SeekFrom::End(0))?;
    output.flush()?;
    Ok(reports)
}
