//! The stream header, the row map and the chunk table: parsed and checked before any chunk
//! is decoded (docs/format-rans.md, "Stream", "Row map", "Short header").
//!
//! Two header forms: the long one (16 bytes and a u32 per chunk) and, for a stream whose body
//! is at most one chunk, the short one (flag bit 7): no chunk-size byte, the raw length as a
//! LEB128 varint and no chunk table, 9 bytes for a 4 KiB tensor instead of 20. Why: tensors
//! of a few KiB (a layer's activations for one token, a head's slice of a KV cache) come in
//! hundreds, and on the corpus's 4 KiB activations the 11 bytes were 0.4 % of the stream, more
//! than the ratio gap to the best peer there.

use super::*;
use crate::contexts::{ContextTables, VERSION_CONTEXT};
use crate::row_contexts::{RowTables, VERSION_ROW_CONTEXT};

/// Repeated rows (flag bit 1): the tensor's rows of `row_bytes`, of which `copies` lists
/// each row that repeats an earlier one, with the earlier row it repeats. Only the other rows
/// (the originals, in order) are coded in the chunks. Sparse GNN features, deduplicated
/// documents and padded batches repeat whole rows, which an order-0 model cannot see and an
/// LZ coder can; a row map costs a bit per row and 4 bytes per repeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMap {
    pub row_bytes: usize,
    /// (row, the earlier original row it equals), rows increasing.
    pub copies: Vec<(u32, u32)>,
}

/// The parsed stream header (and row map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Format version: 1; 2 (modelled chunks allowed); 3 (block-scaled chunks too); ...; 7
    /// (`crate::VERSION`'s list).
    pub version: u8,
    /// Element width in bytes: 1, 2 or 4.
    pub width: usize,
    pub chunk_log2: u8,
    /// Whether the encoder rotated elements (flag bit 0).
    pub rotate: bool,
    /// How the stream's frequency tables are written (flag bit 2).
    pub tables: TableForm,
    /// Chunks may be tail-dictionary chunks (flag bit 3, `T`).
    pub tails: bool,
    pub raw_len: usize,
    /// The short header (flag bit 7): one chunk, no chunk table.
    pub short: bool,
    pub rows: Option<RowMap>,
    /// Version 4: the context tables of plane-1 context planes (boxed, as the row tables:
    /// inline, their 6-9 KB were copied with every move of the header, a tenth of decoding a
    /// tensor of a few KiB).
    pub contexts: Option<Box<ContextTables>>,
    /// Version 6: the row tables of plane-0 row planes (from version 8 the set may be
    /// empty: the section then only gives the sign planes' row distance).
    pub row_contexts: Option<Box<RowTables>>,
    /// Version 8: the sign tables of plane-1 sign planes.
    pub sign_contexts: Option<Box<crate::sign_contexts::SignTables>>,
    /// Where the chunk table starts (after the header, the row map and the context tables).
    pub table_at: usize,
}

impl Header {
    /// Elements coded in the chunks: every whole element, less those of copied rows.
    pub fn elements(&self) -> usize {
        let copied = self
            .rows
            .as_ref()
            .map_or(0, |m| m.copies.len() * m.row_bytes);
        (self.raw_len - copied) / self.width
    }
    pub fn chunk_elements(&self) -> usize {
        (1usize << self.chunk_log2) / self.width
    }
    pub fn chunks(&self) -> usize {
        self.elements().div_ceil(self.chunk_elements())
    }
    pub fn tail_len(&self) -> usize {
        self.raw_len % self.width
    }
}

/// Parse and check the header: magic, version, width, chunk size, flags, and that the
/// stream is long enough for the chunk table it implies (so a lying `raw_len` is refused
/// before anything is allocated for it).
pub fn parse_header(input: &[u8]) -> Result<Header> {
    // Version 8 (sign planes), 7 (row planes' lanes across rows), 6 (row planes), 5 (difference chunks), 4 (context planes), 3 (scaled chunks),
    // 2 (modelled chunks) or 1; anything else
    // is refused as the newest would be.
    let version = match input.get(4) {
        Some(&v) if (1..VERSION).contains(&v) => v,
        _ => VERSION,
    };
    let h = stream_header(input, SHORT_HEADER_FIXED_BYTES, MAGIC, version, "rANS")?;
    let width = h[5] as usize;
    if !matches!(width, 1 | 2 | 4) {
        return Err(Error::corrupt_at(format!("element width {width}"), 5));
    }
    // The flags byte is at 6 in the short form (bit 7 set, which no chunk size has), 7 in
    // the long one (bit 7 clear).
    let short = h[6] & FLAG_SHORT_HEADER != 0;
    let (flags, chunk_log2, raw_len, after_header) = if short {
        let flags = h[6];
        let (raw_len, end) = get_length(input, SHORT_HEADER_FIXED_BYTES)?;
        let raw_len = usize::try_from(raw_len).map_err(|_| Error::corrupt_at("raw length", 7))?;
        (flags, 0, raw_len, end)
    } else {
        let h = take(input, 0, HEADER_BYTES, "rANS")?;
        let chunk_log2 = h[6];
        if !CHUNK_LOG2_RANGE.contains(&chunk_log2) {
            return Err(Error::corrupt_at(format!("chunk size 2^{chunk_log2}"), 6));
        }
        let raw_len = u64::from_le_bytes(h[8..16].try_into().unwrap());
        let raw_len = usize::try_from(raw_len).map_err(|_| Error::corrupt_at("raw length", 8))?;
        (h[7], chunk_log2, raw_len, HEADER_BYTES)
    };
    let long_flags = FLAG_ROTATED | FLAG_ROWS | FLAG_COMPACT_TABLES | FLAG_TAILS;
    let (flags_at, known) = match short {
        true => (6, long_flags | FLAG_SHORT_HEADER),
        false => (7, long_flags),
    };
    if flags & !known != 0 {
        return Err(Error::corrupt_at("unknown flags", flags_at));
    }
    let tables = if flags & FLAG_COMPACT_TABLES != 0 {
        TableForm::Compact
    } else {
        TableForm::Wide
    };
    let (rows, after_rows) = if flags & FLAG_ROWS != 0 {
        let (m, end) = parse_rows(input, after_header, width, raw_len)?;
        (Some(m), end)
    } else {
        (None, after_header)
    };
    let (contexts, table_at) = if version >= VERSION_CONTEXT {
        // From version 5 the section may hold no table (the stream is version 5 for its
        // difference chunks, not for context planes).
        let empty_allowed = version >= crate::difference::VERSION_DIFFERENCE;
        ContextTables::read(input, after_rows, empty_allowed, tables)?
    } else {
        (None, after_rows)
    };
    // Version 6: the row tables, with the context section's E0.
    let (row_contexts, table_at) = if version >= VERSION_ROW_CONTEXT {
        let e0 = take(input, after_rows, 1, "context tables")?[0];
        let empty_allowed = version >= crate::sign_contexts::VERSION_SIGN;
        let (r, end) = RowTables::read(input, table_at, e0, empty_allowed, tables)?;
        (Some(r), end)
    } else {
        (None, table_at)
    };
    // Version 8: the sign tables.
    let (sign_contexts, table_at) = if version >= crate::sign_contexts::VERSION_SIGN {
        let (t, end) = crate::sign_contexts::SignTables::read(input, table_at, tables)?;
        (Some(t), end)
    } else {
        (None, table_at)
    };
    let mut header = Header {
        version,
        width,
        chunk_log2,
        rotate: flags & FLAG_ROTATED != 0,
        tables,
        tails: flags & FLAG_TAILS != 0,
        raw_len,
        short,
        rows,
        contexts: contexts.map(Box::new),
        row_contexts: row_contexts.map(Box::new),
        sign_contexts: sign_contexts.map(Box::new),
        table_at,
    };
    if short {
        // The one chunk holds the whole body, at most the largest chunk: the chunk size is
        // the least power of two (2^12 at least) that holds it.
        let body = header.elements() * width;
        if body > SHORT_HEADER_MAX_BODY {
            return Err(Error::corrupt_at(
                format!("short header with a body of {body} bytes"),
                SHORT_HEADER_FIXED_BYTES,
            ));
        }
        header.chunk_log2 =
            (body.next_power_of_two().trailing_zeros() as u8).max(*CHUNK_LOG2_RANGE.start());
        if header.elements() > 0 && input.len() < table_at + 1 + header.tail_len() {
            return Err(Error::corrupt_at(
                "short header: no room for its chunk",
                table_at,
            ));
        }
        return Ok(header);
    }
    // Every chunk takes at least a 4-byte length and a 1-byte mode.
    let min = header
        .chunks()
        .checked_mul(5)
        .and_then(|c| c.checked_add(table_at + header.tail_len()));
    if min.is_none_or(|m| m > input.len()) {
        return Err(Error::corrupt_at(
            "raw length needs more chunks than the stream holds",
            8,
        ));
    }
    Ok(header)
}

/// The row map after the header: u64 row length `R` (a multiple of the width, dividing the
/// data), a bitmap of copied rows (bit `r % 8` of byte `r / 8`), and for each copied row in
/// order a u32 index of the earlier, not copied, row it equals.
pub(crate) fn parse_rows(
    input: &[u8],
    at: usize,
    width: usize,
    raw_len: usize,
) -> Result<(RowMap, usize)> {
    let r = u64::from_le_bytes(take(input, at, 8, "row length")?.try_into().unwrap());
    let row_bytes = usize::try_from(r).unwrap_or(0);
    if row_bytes == 0 || row_bytes % width != 0 || !raw_len.is_multiple_of(row_bytes) {
        return Err(Error::corrupt_at(format!("row length {r}"), at));
    }
    let n = raw_len / row_bytes;
    let bits = take(input, at + 8, n.div_ceil(8), "row bitmap")?;
    if !n.is_multiple_of(8) && bits.last().is_some_and(|&b| b >> (n % 8) != 0) {
        return Err(Error::corrupt_at("row bitmap padding", at + 8));
    }
    let copied = |i: usize| bits[i / 8] >> (i % 8) & 1 == 1;
    let count: usize = bits.iter().map(|b| b.count_ones() as usize).sum();
    let src_at = at + 8 + n.div_ceil(8);
    let srcs = take(input, src_at, 4 * count, "row sources")?;
    let mut copies = Vec::with_capacity(count);
    for (k, row) in (0..n).filter(|&i| copied(i)).enumerate() {
        let src = u32::from_le_bytes(srcs[4 * k..4 * k + 4].try_into().unwrap());
        if src as usize >= row || copied(src as usize) {
            return Err(Error::corrupt_at(
                format!("row {row} copies row {src}, which is not an earlier original"),
                src_at + 4 * k,
            ));
        }
        copies.push((row as u32, src));
    }
    Ok((RowMap { row_bytes, copies }, src_at + 4 * count))
}

/// Byte offset and length of each chunk's payload, checked to tile the stream exactly.
pub fn chunk_spans(input: &[u8], h: &Header) -> Result<Vec<(usize, usize)>> {
    let n = h.chunks();
    if h.short {
        // One chunk (or none): it runs to the tail.
        let end = (input.len().checked_sub(h.tail_len())).filter(|&e| e >= h.table_at);
        return match (n, end) {
            (0, Some(e)) if e == h.table_at => Ok(Vec::new()),
            (0, Some(e)) => Err(Error::TrailingBytes {
                extra: e - h.table_at,
            }),
            (1, Some(e)) if e > h.table_at => Ok(vec![(h.table_at, e - h.table_at)]),
            _ => Err(Error::corrupt("stream ends inside its tail")),
        };
    }
    let table = take(input, h.table_at, 4 * n, "chunk table")?;
    let mut at = h.table_at + 4 * n;
    let mut spans = Vec::with_capacity(n);
    for (i, l) in table.chunks_exact(4).enumerate() {
        let len = u32::from_le_bytes(l.try_into().unwrap()) as usize;
        if len == 0 || at.checked_add(len).is_none_or(|e| e > input.len()) {
            return Err(Error::corrupt_at(
                format!("chunk {i} length {len}"),
                h.table_at + 4 * i,
            ));
        }
        spans.push((at, len));
        at += len;
    }
    let expected = at + h.tail_len();
    if expected != input.len() {
        return Err(if expected < input.len() {
            Error::TrailingBytes {
                extra: input.len() - expected,
            }
        } else {
            Error::corrupt("stream ends inside its tail")
        });
    }
    Ok(spans)
}

/// Append everything before a stream's chunks: the header, the short form (flag bit 7) when
/// the body has at most one chunk (`chunk_lens.len() <= 1`), else the long one; then
/// `sections` (the row map, the context and row tables), then, in the long form, the chunk
/// table.
#[allow(clippy::too_many_arguments)]
pub fn write_header(
    out: &mut Vec<u8>,
    version: u8,
    width: usize,
    chunk_log2: u8,
    flags: u8,
    raw_len: usize,
    sections: &[&[u8]],
    chunk_lens: &[u32],
) {
    let short = chunk_lens.len() <= 1;
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[version, width as u8]);
    if short {
        out.push(flags | FLAG_SHORT_HEADER);
        put_length(out, raw_len as u64);
    } else {
        out.extend_from_slice(&[chunk_log2, flags]);
        out.extend_from_slice(&(raw_len as u64).to_le_bytes());
    }
    for s in sections {
        out.extend_from_slice(s);
    }
    if !short {
        for len in chunk_lens {
            out.extend_from_slice(&len.to_le_bytes());
        }
    }
}

/// Append `v` as a LEB128 varint: 7 bits a byte, least significant first, bit 7 set on every
/// byte but the last (1 to 10 bytes).
pub fn put_length(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Read a LEB128 varint at `at` (see [`put_length`]): in its shortest form (a last byte of 0
/// only for the value 0) and below 2^64. Returns it and the offset after it.
pub fn get_length(input: &[u8], at: usize) -> Result<(u64, usize)> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = take(input, at + i, 1, "raw length")?[0];
        let bits = u64::from(b & 0x7f);
        if i == 9 && b > 1 {
            return Err(Error::corrupt_at("raw length past 2^64", at));
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(Error::corrupt_at(
                    "raw length: varint not in its shortest form",
                    at,
                ));
            }
            return Ok((v, at + i + 1));
        }
    }
    Err(Error::corrupt_at("raw length: varint past 10 bytes", at))
}

/// `stream` with `section` (ending at `end`, written by `write` as this encoder writes it)
/// changed by `edit`; `None` where the stream does not hold the section so written there.
/// What the tests of the decoders' absent-table rules build their streams with
/// ([`crate::contexts::ContextTables::without_table`],
/// [`crate::row_contexts::RowTables::without_table`],
/// [`crate::sign_contexts::SignTables::without_table`]).
pub(crate) fn section_edited<S: Clone>(
    stream: &[u8],
    end: usize,
    section: &S,
    edit: impl FnOnce(&mut S),
    write: impl Fn(&S, &mut Vec<u8>),
) -> Option<Vec<u8>> {
    let mut edited = section.clone();
    edit(&mut edited);
    let (mut old, mut new) = (Vec::new(), Vec::new());
    write(section, &mut old);
    write(&edited, &mut new);
    let at = end.checked_sub(old.len())?;
    if stream.get(at..end)? != old.as_slice() {
        return None;
    }
    let mut out = stream[..at].to_vec();
    out.extend_from_slice(&new);
    out.extend_from_slice(&stream[end..]);
    Some(out)
}
