//! Compressing one input file into a container.
//!
//! Memory stays bounded by a part, not a tensor or the file: the input is read one part of at
//! most `part_len` (<= [`MAX_PART_LEN`]) bytes at a time (or `threads` parts, coded in parallel) with positioned reads (no mapping, so
//! nothing of the input stays resident), payloads are streamed to the output, and the header
//! and entry table, written as placeholders first, are filled in at the end with one seek.
//! Per-tensor reports go to the caller as they are made rather than being collected, so a file
//! of millions of tiny tensors costs the entry table (64 bytes a part) and its parsed header,
//! nothing more.

use crate::codecs::{elem_id, CodecSpec};
use crate::format::{Entry, Header, ENTRY_LEN, HEADER_LEN, MAX_PART_LEN, MAX_PAYLOAD_LEN};
use crate::read_at::ReadAt;
use crate::select::{choose, Candidate, Policy};
use crate::source::{Source, TensorSpan, PROBE_LEN};
use crate::{checksum, CodecId, Error, Result};
use std::io::{Seek, SeekFrom, Write};

/// What the writer needs to know.
#[derive(Debug, Clone)]
pub struct CompressOptions {
    /// Where the codecs that it has run (None: all on the CPU). Payloads are verified by the
    /// CPU decoders either way.
    pub engine: Option<std::sync::Arc<dyn crate::Engine>>,
    pub policy: Policy,
    /// Name given to the array of a `.npy` input (usually the file stem).
    pub npy_name: String,
    /// Raw bytes per part, 1 to [`MAX_PART_LEN`] (rounded down to whole rows, or whole
    /// elements when a row is longer). [`MAX_PART_LEN`] unless a test wants many parts.
    pub part_len: u64,
    /// Parts coded at once, on rayon's threads (1: one at a time): a large tensor's parts, one
    /// a thread, or many small tensors' parts together (up to 4 MiB of them a thread). Memory
    /// grows with it (see `window_bytes`): each part in flight holds its raw bytes, a payload
    /// and a verifying decode.
    /// With `--link` and no engine speed, parallel parts make the measured decode speeds noisier.
    pub threads: usize,
    /// Most raw bytes of parts coded at once (one part always fits): `planepack compress`
    /// keeps this to one part's size, so that several parts are in flight only where they are
    /// small; unlimited by default.
    pub window_bytes: u64,
}

impl CompressOptions {
    /// `policy` with the default part length.
    pub fn new(policy: Policy, npy_name: impl Into<String>) -> Self {
        CompressOptions {
            engine: None,
            policy,
            npy_name: npy_name.into(),
            part_len: MAX_PART_LEN,
            threads: 1,
            window_bytes: u64::MAX,
        }
    }
}

/// What happened to one tensor.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TensorReport {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    /// The codec of the tensor's first part (`auto` chooses per part; see `parts_by_codec`).
    pub codec: CodecSpec,
    /// How many parts the tensor was stored as.
    pub parts: usize,
    pub raw_bytes: u64,
    pub compressed_bytes: u64,
    /// Every codec tried, over all parts: payload bytes and modelled seconds add up, the
    /// decode speed is the tensor's bytes over the summed decode time.
    pub candidates: Vec<Candidate>,
}

/// What the writer tells its caller as it goes.
#[derive(Debug)]
pub enum Event {
    /// A part of `raw_bytes` bytes is written.
    Part { raw_bytes: u64 },
    /// A tensor is finished.
    Tensor(TensorReport),
}

/// What the whole file came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub tensors: u64,
    pub parts: u64,
    pub original_len: u64,
    pub container_len: u64,
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

/// The parts a tensor is stored as: whole rows (the last dimension) of at most `part_len`
/// bytes, or whole elements where one row is longer; one empty part for an empty tensor. Each
/// part is described as a tensor of its own (a 2-D shape of its rows, or 1-D), which is what
/// its codec is given.
pub fn parts_of(span: &TensorSpan, part_len: u64) -> impl Iterator<Item = TensorSpan> + '_ {
    let elem = (span.dtype_bits as u64 / 8).max(1);
    let last = span.shape.last().copied().unwrap_or(1) as u64;
    let row = last.saturating_mul(elem);
    let by_rows = span.shape.len() >= 2 && row > 0 && row <= part_len;
    let step = if by_rows {
        part_len / row * row
    } else {
        (part_len / elem * elem).max(elem)
    };
    let count = span.len.div_ceil(step).max(1);
    (0..count).map(move |k| {
        let start = k * step;
        let len = step.min(span.len - start);
        let shape = if by_rows {
            vec![(len / row) as usize, last as usize]
        } else if count == 1 {
            span.shape.clone()
        } else {
            vec![(len / elem) as usize]
        };
        TensorSpan {
            name: span.name.clone(),
            dtype: span.dtype.clone(),
            shape,
            dtype_bits: span.dtype_bits,
            offset: span.offset + start,
            len,
        }
    })
}

/// Compress `input` into `output`. `on` hears of every part and tensor as it is done, in file
/// order.
pub fn compress<R: ReadAt + ?Sized, W: Write + Seek>(
    input: &R,
    output: &mut W,
    options: &CompressOptions,
    mut on: impl FnMut(Event),
) -> Result<Written> {
    if options.part_len == 0 || options.part_len > MAX_PART_LEN {
        return Err(Error::InvalidInput(format!(
            "part length {} is outside 1..={MAX_PART_LEN}",
            options.part_len
        )));
    }
    let (source, preamble) = read_source(input, &options.npy_name)?;
    // Every part of every tensor, in file order, with its tensor and whether it is the
    // tensor's last (every tensor has at least one part).
    let mut pieces: Vec<(usize, TensorSpan, bool)> = Vec::new();
    for (t, span) in source.tensors.iter().enumerate() {
        pieces.extend(parts_of(span, options.part_len).map(|part| (t, part, false)));
        if let Some(last) = pieces.last_mut() {
            last.2 = true;
        }
    }
    let parts = pieces.len() as u64;
    let start = output.stream_position().map_err(Error::Output)?;
    // Placeholders for the header, preamble, entry table and checksum.
    let meta_len = HEADER_LEN + preamble.len() + parts as usize * ENTRY_LEN + 8;
    let mut meta = Vec::with_capacity(meta_len);
    meta.resize(HEADER_LEN, 0);
    meta.extend_from_slice(&preamble);
    drop(preamble);
    meta.resize(meta_len, 0);
    output.write_all(&meta).map_err(Error::Output)?;
    meta.truncate(HEADER_LEN + source.preamble_len as usize);

    let threads = options.threads.max(1);
    // Reused from window to window: the parts' raw bytes, and the single-part path's decode
    // scratch (parallel parts each allocate their own).
    let (mut datas, mut scratch): (Vec<Vec<u8>>, Vec<u8>) = (Vec::new(), Vec::new());
    let mut payload_offset = 0u64;
    // The tensor whose parts are being written: its report and tally so far.
    let mut open: Option<(TensorReport, Vec<(Candidate, f64)>)> = None;
    let mut next = 0;
    while next < pieces.len() {
        let window =
            &pieces[next..next + window_len(&pieces[next..], threads, options.window_bytes)];
        next += window.len();
        datas.resize_with(window.len(), Vec::new);
        for ((_, part, _), data) in window.iter().zip(&mut datas) {
            data.clear();
            data.resize(part.len as usize, 0);
            input.read_exact_at(part.offset, data)?;
        }
        let coded: Vec<Result<Coded>> = if window.len() == 1 {
            vec![code_part(
                options.engine.as_deref(),
                options.policy,
                &window[0].1,
                &datas[0],
                &mut scratch,
            )]
        } else {
            use rayon::prelude::*;
            // One scratch a thread, not a part: a window may hold thousands of small parts.
            window
                .par_iter()
                .zip(&datas)
                .map_init(Vec::new, |scratch, ((_, part, _), data)| {
                    let engine = options.engine.as_deref();
                    code_part(engine, options.policy, part, data, scratch)
                })
                .collect()
        };
        for (((t, part, last), data), coded) in window.iter().zip(&datas).zip(coded) {
            let span = &source.tensors[*t];
            let (report, tally) = open.get_or_insert_with(|| {
                let report = TensorReport {
                    name: span.name.clone(),
                    dtype: span.dtype.clone(),
                    shape: span.shape.clone(),
                    codec: CodecId::Raw.into(),
                    parts: 0,
                    raw_bytes: span.len,
                    compressed_bytes: 0,
                    candidates: Vec::new(),
                };
                (report, Vec::new())
            });
            let Coded {
                codec,
                elem,
                payload,
                tried,
            } = coded?;
            if payload.len() as u64 > MAX_PAYLOAD_LEN {
                return Err(Error::Codec {
                    tensor: span.name.clone(),
                    codec: codec.name(),
                    source: planepack_core::Error::Unsupported(
                        "payload over the format's limit for one part".into(),
                    ),
                });
            }
            output.write_all(&payload).map_err(Error::Output)?;
            let payload_len = payload.len() as u64;
            let entry = Entry {
                raw_offset: part.offset,
                raw_len: part.len,
                payload_offset,
                payload_len,
                raw_checksum: checksum(data),
                payload_checksum: checksum(&payload),
                codec: codec.id,
                elem: elem_id(elem),
                level: codec.level,
            };
            meta.extend_from_slice(&entry.to_bytes());
            payload_offset += payload_len;
            if report.parts == 0 {
                report.codec = codec;
            }
            tally_candidates(tally, report.parts == 0, &tried, part.len);
            report.parts += 1;
            report.compressed_bytes += payload_len;
            on(Event::Part {
                raw_bytes: part.len,
            });
            if *last {
                let (mut report, tally) = open.take().expect("the tensor just written");
                report.candidates = tally
                    .into_iter()
                    .map(|(mut c, seconds)| {
                        c.decode_gbps = span.len as f64 / seconds / 1e9;
                        c
                    })
                    .collect();
                on(Event::Tensor(report));
            }
        }
    }

    let header = Header {
        source: source.kind,
        original_len: source.file_len,
        preamble_len: source.preamble_len,
        entries: parts,
        payload_len: payload_offset,
    };
    meta[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    let sum = checksum(&meta);
    meta.extend_from_slice(&sum.to_le_bytes());
    output.seek(SeekFrom::Start(start)).map_err(Error::Output)?;
    output.write_all(&meta).map_err(Error::Output)?;
    output.seek(SeekFrom::End(0)).map_err(Error::Output)?;
    output.flush().map_err(Error::Output)?;
    Ok(Written {
        tensors: source.tensors.len() as u64,
        parts,
        original_len: source.file_len,
        container_len: meta_len as u64 + payload_offset,
    })
}

/// Raw bytes of small parts gathered into one parallel window per thread: a part of a
/// tensor of a few KiB is far too little work to be worth a task of its own, and one at a
/// time such tensors kept one core busy however many there were.
const SMALL_PARTS_BYTES: u64 = 4 << 20;

/// Most parts in one window (bounds the window's bookkeeping on files of tiny tensors).
const WINDOW_PARTS_MAX: usize = 4096;

/// How many of `pieces` (from the next one to write) the writer codes at once with `threads`
/// threads and at most `max_bytes` raw bytes in flight (one part always): one where `threads`
/// is 1 (with the shared scratch); else at least `threads` parts (a large tensor's parts, one
/// a thread) where `max_bytes` allows, and more while the window's raw bytes stay within
/// `threads` times [`SMALL_PARTS_BYTES`] (small tensors, several a task). Memory stays
/// within what `threads` full parts take, and within `max_bytes`.
fn window_len(pieces: &[(usize, TensorSpan, bool)], threads: usize, max_bytes: u64) -> usize {
    if threads <= 1 {
        return 1.min(pieces.len());
    }
    let budget = threads as u64 * SMALL_PARTS_BYTES;
    let mut bytes = 0u64;
    let mut n = 0;
    for (_, part, _) in pieces {
        let total = bytes.saturating_add(part.len);
        if n > 0 && total > max_bytes {
            break;
        }
        let fits = total <= budget && n < WINDOW_PARTS_MAX;
        if n >= threads && !fits {
            break;
        }
        bytes = total;
        n += 1;
    }
    n
}

/// One part, coded.
struct Coded {
    codec: CodecSpec,
    elem: planepack_core::ElemType,
    payload: Vec<u8>,
    tried: Vec<Candidate>,
}

/// Choose a codec for one part and code it (an empty part is stored as an empty raw payload);
/// `scratch` takes the verifying decodes.
fn code_part(
    engine: Option<&dyn crate::Engine>,
    policy: Policy,
    part: &TensorSpan,
    data: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<Coded> {
    if data.is_empty() {
        return Ok(Coded {
            codec: CodecId::Raw.into(),
            elem: planepack_core::ElemType::U8,
            payload: Vec::new(),
            tried: Vec::new(),
        });
    }
    let c = choose(engine, policy, part, data, scratch)?;
    Ok(Coded {
        codec: c.codec,
        elem: c.elem,
        payload: c.payload,
        tried: c.candidates,
    })
}

/// Add one part's candidates to a tensor's tally of (candidate, decode seconds): payloads and
/// modelled seconds add; a codec that could not take some part is no candidate for the tensor.
fn tally_candidates(
    tally: &mut Vec<(Candidate, f64)>,
    first_part: bool,
    part: &[Candidate],
    part_len: u64,
) {
    let seconds = |c: &Candidate| part_len as f64 / (c.decode_gbps * 1e9);
    if first_part {
        tally.extend(part.iter().map(|c| (*c, seconds(c))));
        return;
    }
    tally.retain_mut(|(t, s)| match part.iter().find(|c| c.codec == t.codec) {
        Some(c) => {
            t.payload_len += c.payload_len;
            t.transfer_seconds += c.transfer_seconds;
            *s += seconds(c);
            true
        }
        None => false,
    });
}

/// A `Write + Seek` that keeps nothing: compressing into it measures what a container of a
/// file would be (`planepack inspect` on a plain file) without writing one.
#[derive(Debug, Default)]
pub struct Discard {
    pos: u64,
    len: u64,
}

impl Write for Discard {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pos += buf.len() as u64;
        self.len = self.len.max(self.pos);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Discard {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let base = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = base.ok_or_else(|| std::io::Error::other("seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(lens: &[u64]) -> Vec<(usize, TensorSpan, bool)> {
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let span = TensorSpan {
                    name: format!("t{i}"),
                    dtype: "U8".into(),
                    shape: vec![len as usize],
                    dtype_bits: 8,
                    offset: 0,
                    len,
                };
                (i, span, true)
            })
            .collect()
    }

    /// Windows: one part with one thread; a large part a thread, or one at a time within one
    /// part's bytes; small parts many together, within the budget and the byte bound.
    #[test]
    fn windows_take_small_parts_together_and_large_ones_within_the_bound() {
        let big = parts(&[MAX_PART_LEN; 4]);
        assert_eq!(window_len(&big, 1, u64::MAX), 1);
        assert_eq!(window_len(&big, 2, u64::MAX), 2);
        assert_eq!(window_len(&big, 2, MAX_PART_LEN), 1);
        let small = parts(&[4096; 10_000]);
        assert_eq!(window_len(&small, 1, u64::MAX), 1);
        assert_eq!(window_len(&small, 2, u64::MAX), 2048);
        assert_eq!(window_len(&small, 8, MAX_PART_LEN), WINDOW_PARTS_MAX);
        assert_eq!(window_len(&small, 2, 3 * 4096), 3);
        assert_eq!(window_len(&small[..5], 2, u64::MAX), 5);
        assert_eq!(window_len(&[], 2, u64::MAX), 0);
        // A large part after small ones ends the window where it would pass the bound.
        let mixed = parts(&[4096, 4096, MAX_PART_LEN, 4096]);
        assert_eq!(window_len(&mixed, 2, MAX_PART_LEN), 2);
        assert_eq!(window_len(&mixed, 4, u64::MAX), 4);
    }
}
