//! The interface every codec implements.
//!
//! Encoding appends to a `Vec<u8>` so callers can reuse one allocation across tensors.
//! Decoding writes into a buffer the caller owns (pinned staging memory, a slice of a larger
//! tensor) and whose length the caller knows from its own metadata; the codec checks that
//! its stream agrees. Every stream is self-contained: the compressed bytes are all that is
//! needed, so the compressed length counts every header a codec needs.

use crate::{ElemType, Result};

/// The largest task a codec's parallel encoder hands to a thread: whole chunks adding up to at
/// most about this many bytes (256 KiB: a millisecond of work or more, so a task's scratch and
/// hand-over cost little; a 3 MiB KV layer still makes 12 tasks to share out). Smaller
/// inputs get smaller tasks ([`parallel_task_bytes`]).
pub const PARALLEL_TASK_BYTES: usize = 256 << 10;

/// Tasks a thread should have to choose from, at the least, where the input allows it.
pub const TASKS_PER_THREAD: usize = 4;

/// The bytes of one parallel task over `total` bytes cut in whole `unit`s (chunks, rows): as
/// many units as make [`PARALLEL_TASK_BYTES`], or fewer where that would leave a thread fewer
/// than [`TASKS_PER_THREAD`] tasks, but at least one unit. With tasks of 256 KiB a 1 MiB
/// tensor made four or five, shared three to two between two threads; a 64 KiB chunk a task
/// (a quarter of a millisecond of `rans` encoding or more) shares them nine to eight: the
/// two-thread `rans` encode of a 1.1 MiB BF16 array went from 0.33 to 0.36 GB/s.
pub fn parallel_task_bytes(total: usize, unit: usize) -> usize {
    let unit = unit.max(1);
    let units = total.div_ceil(unit);
    let full = PARALLEL_TASK_BYTES.div_ceil(unit);
    let shared = units.div_ceil(TASKS_PER_THREAD * rayon::current_num_threads());
    unit * full.min(shared).max(1)
}

/// Append `parts` to `out`, in order, copied on rayon's threads: how a parallel encoder joins
/// the tasks it coded into buffers of their own. On one thread the copy, and the first touch
/// of the pages `out` grows into, took 8 % of a two-thread rANS encode of CNN activations
/// (13 ms of 160; 8 ms on two threads), and would take that long on any number of threads.
pub fn append_parts(out: &mut Vec<u8>, parts: &[Vec<u8>]) {
    use rayon::prelude::*;
    let total: usize = parts.iter().map(Vec::len).sum();
    out.reserve(total);
    let start = out.len();
    let mut rest = &mut out.spare_capacity_mut()[..total];
    let mut pieces = Vec::with_capacity(parts.len());
    for p in parts {
        let (piece, after) = rest.split_at_mut(p.len());
        pieces.push(piece);
        rest = after;
    }
    pieces.into_par_iter().zip(parts).for_each(|(piece, part)| {
        // (`write_copy_of_slice` is newer than the workspace's MSRV; this loop is a memcpy.)
        for (d, &b) in piece.iter_mut().zip(part) {
            d.write(b);
        }
    });
    // SAFETY: the `total` bytes after `start` are within the capacity reserved above, and
    // each was written: the pieces tile them, each filled with its part (of its length).
    unsafe { out.set_len(start + total) };
}

/// A lossless tensor codec.
pub trait Codec: Send + Sync {
    /// Stable, short name used in tables and on the command line (e.g. `zstd-3`).
    fn name(&self) -> String;

    /// Which implementation this is, with its version where the library reports one (for
    /// records: a peer must be measured as itself, e.g. `C-Blosc2 2.15.2`).
    fn implementation(&self) -> String {
        "planepack".into()
    }

    /// Upper bound on the compressed size of `raw_len` bytes of `elem`.
    fn max_compressed_len(&self, raw_len: usize, elem: ElemType) -> usize;

    /// Compress `input`, whose elements are `elem`, appending the stream to `out`.
    fn encode(&self, input: &[u8], elem: ElemType, out: &mut Vec<u8>) -> Result<()>;

    /// Compress a tensor of the given shape. Codecs that work on rows (IBP) take the last
    /// dimension as the row; the others ignore the shape.
    fn encode_shaped(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let _ = shape;
        self.encode(input, elem, out)
    }

    /// [`Codec::encode_shaped`] using every core, where the format allows it; the same bytes
    /// (default: [`Codec::encode_shaped`]).
    fn encode_shaped_parallel(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.encode_shaped(input, elem, shape, out)
    }

    /// Number of bytes `compressed` decodes to, read from its header.
    fn decoded_len(&self, compressed: &[u8]) -> Result<usize>;

    /// Decompress `compressed` into `out`, which must be exactly [`Codec::decoded_len`] long.
    /// Untrusted input: returns an error, never panics, never writes outside `out`.
    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()>;

    /// Decompress using every core, where the format allows it (default: [`Codec::decode`]).
    fn decode_parallel(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        self.decode(compressed, out)
    }

    /// Convenience: compress into a new vector.
    fn encode_to_vec(&self, input: &[u8], elem: ElemType) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.max_compressed_len(input.len(), elem));
        self.encode(input, elem, &mut out)?;
        Ok(out)
    }

    /// Convenience: decompress into a new vector of the length the header states. With
    /// untrusted input, prefer [`Codec::decode`] into a buffer whose length you know: a lying
    /// header can ask for a large allocation here.
    fn decode_to_vec(&self, compressed: &[u8]) -> Result<Vec<u8>> {
        let n = self.decoded_len(compressed)?;
        let mut out = vec![0u8; n];
        self.decode(compressed, &mut out)?;
        Ok(out)
    }
}

/// Check the caller's buffer length against what the stream says.
pub fn check_output_len(expected: usize, out: &[u8]) -> Result<()> {
    if expected == out.len() {
        Ok(())
    } else {
        Err(crate::Error::OutputLength {
            expected,
            provided: out.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::append_parts;

    /// The parts follow what `out` held, in order, whatever their lengths (empty ones too).
    #[test]
    fn append_parts_concatenates_in_order() {
        let parts: Vec<Vec<u8>> = (0..40u8)
            .map(|i| (0..(i as usize * 37) % 301).map(|j| i ^ j as u8).collect())
            .collect();
        let mut out = b"head".to_vec();
        append_parts(&mut out, &parts);
        assert_eq!(out, [b"head".to_vec(), parts.concat()].concat());
        append_parts(&mut out, &[]);
        assert_eq!(out.len(), 4 + parts.iter().map(Vec::len).sum::<usize>());
    }
}
