//! Compact frequency tables (header flag bit 2, docs/format-rans.md "Compact tables"): the
//! same tables as the wide form, written smaller. A frequency is a one- or two-byte varint
//! instead of a u16 (most are below 128), the last present symbol's frequency is implied by
//! the sum, and the present symbols are runs (gap, length) instead of a list or a 32-byte map
//! (an exponent plane's symbols are one or two ranges, a mantissa plane's nearly all 256).
//!
//! Why: a chunk stores a table per coded plane, and on the corpus's activations the wide
//! tables were 0.4-2.6 % of the stream, half of it symbol maps and half u16 frequencies; the
//! compact form takes about a third of that. The ratio gap to OpenZL on several records was
//! smaller than that share.
//!
//! One writer and one reader serve both table kinds: the planes' (256 symbols, frequencies
//! summing to 4096) and the modelled chunk's contexts' (260 symbols, 2048, and a table may be
//! empty).

use planepack_core::error::take;
use planepack_core::{Error, Result};

/// At most this many runs; a set of more is written as a bitmap.
pub const RUNS_MAX: usize = 16;

/// Bytes of `v` (below 2^14) as a varint.
pub fn varint_len(v: u32) -> usize {
    if v < 0x80 {
        1
    } else {
        2
    }
}

/// Append `v` (below 2^14): one byte below 128, else the low 7 bits with bit 7 set, then
/// `v >> 7`.
pub fn put_varint(out: &mut Vec<u8>, v: u32) {
    debug_assert!(v < 1 << 14);
    if v < 0x80 {
        out.push(v as u8);
    } else {
        out.push((v & 0x7f) as u8 | 0x80);
        out.push((v >> 7) as u8);
    }
}

/// Read a varint at `at`: one byte below 128, or two whose second is 1..=127 (so every value
/// has one form and none is longer than two bytes). Returns it and the offset after it.
pub fn get_varint(input: &[u8], at: usize, what: &'static str) -> Result<(u32, usize)> {
    let b = take(input, at, 1, what)?[0] as u32;
    if b < 0x80 {
        return Ok((b, at + 1));
    }
    let hi = take(input, at + 1, 1, what)?[0] as u32;
    if hi == 0 || hi >= 0x80 {
        return Err(Error::corrupt_at(
            format!("{what}: varint not in its shortest form"),
            at,
        ));
    }
    Ok((b & 0x7f | hi << 7, at + 2))
}

/// The present symbols of `freq` as runs: calls `run(first, length)` for each, in order.
fn for_runs(freq: &[u16], mut run: impl FnMut(usize, usize)) {
    let mut s = 0;
    while s < freq.len() {
        if freq[s] == 0 {
            s += 1;
            continue;
        }
        let first = s;
        while s < freq.len() && freq[s] > 0 {
            s += 1;
        }
        run(first, s - first);
    }
}

/// What the symbol set of `freq` takes: the present count `P`, the last present symbol, and
/// the runs' bytes (gap and length - 1 of each) or `None` where a bitmap is no larger (or
/// there are more than [`RUNS_MAX`] runs). Counted without allocating: the encoder sizes
/// every plane's table this way.
fn symbol_set(freq: &[u16]) -> (usize, usize, Option<usize>) {
    let (mut p, mut runs, mut bytes, mut end) = (0, 0, 0, 0);
    for_runs(freq, |first, len| {
        p += len;
        runs += 1;
        bytes += varint_len((first - end) as u32) + varint_len(len as u32 - 1);
        end = first + len;
    });
    let runs = (runs <= RUNS_MAX && bytes < freq.len().div_ceil(8)).then_some(bytes);
    (p, end.saturating_sub(1), runs)
}

/// Bytes [`write`] takes for the table `freq` (one entry per symbol of the alphabet).
///
/// The encoder sizes every table it weighs (each plane of each form it tries), so this is
/// counted from a presence bitmap built in one branch-free pass, its runs found a word at a
/// time: the symbol-by-symbol walk of [`symbol_set`] was the largest single cost of
/// encoding tensors of a few KiB.
pub fn written_len(freq: &[u16]) -> usize {
    const WORDS: usize = 8;
    let n = freq.len();
    if n > 64 * WORDS {
        return written_len_by_walk(freq);
    }
    let mut bits = [0u64; WORDS];
    // Present frequencies of two varint bytes.
    let mut wide = 0usize;
    for (word, part) in bits.iter_mut().zip(freq.chunks(64)) {
        // (A word at a time in a register: or-ing each bit into the array in memory made
        // every symbol wait for the last one's store.)
        let mut m = 0u64;
        for (i, &f) in part.iter().enumerate() {
            m |= u64::from(f > 0) << i;
            wide += usize::from(f >= 0x80);
        }
        *word = m;
    }
    let p: usize = bits.iter().map(|w| w.count_ones() as usize).sum();
    if p == 0 {
        return 1;
    }
    // The first symbol at or after `from` whose presence is `present`, or `n`.
    let next = |from: usize, present: bool| -> usize {
        let mut word = from / 64;
        let flip = if present { 0 } else { !0u64 };
        let mut w = (bits[word] ^ flip) & (!0u64 << (from % 64));
        loop {
            if w != 0 {
                return (word * 64 + w.trailing_zeros() as usize).min(n);
            }
            word += 1;
            if word * 64 >= n {
                return n;
            }
            w = bits[word] ^ flip;
        }
    };
    let (mut runs, mut run_bytes, mut end) = (0usize, 0usize, 0usize);
    let mut first = next(0, true);
    while first < n {
        let stop = next(first, false);
        runs += 1;
        run_bytes += varint_len((first - end) as u32) + varint_len((stop - first - 1) as u32);
        end = stop;
        first = if stop < n { next(stop, true) } else { n };
    }
    let map = n.div_ceil(8);
    let set = if runs <= RUNS_MAX && run_bytes < map {
        run_bytes
    } else {
        map
    };
    // Every present frequency but the last's.
    let freqs = p - 1 + wide - usize::from(freq[end - 1] >= 0x80);
    varint_len(p as u32) + 1 + set + freqs
}

/// [`written_len`] by [`symbol_set`]'s walk (alphabets over 512 symbols; and the reference
/// the tests hold the bitmap count to).
fn written_len_by_walk(freq: &[u16]) -> usize {
    let (p, last, runs) = symbol_set(freq);
    if p == 0 {
        return 1;
    }
    let set = runs.unwrap_or(freq.len().div_ceil(8));
    let freqs: usize = freq[..last]
        .iter()
        .filter(|&&f| f > 0)
        .map(|&f| varint_len(f as u32))
        .sum();
    varint_len(p as u32) + 1 + set + freqs
}

/// Append the table `freq` in compact form: `P` (varint), the symbol set (a byte `R`, then
/// `R` runs as varint gap and varint length - 1, or `R = 0` and a bitmap), then the
/// frequencies of every present symbol but the last, in increasing symbol order (varints).
/// An empty table (a modelled chunk's unused context) is `P = 0` alone.
pub fn write(freq: &[u16], out: &mut Vec<u8>) {
    let (p, last, runs) = symbol_set(freq);
    put_varint(out, p as u32);
    if p == 0 {
        return;
    }
    if runs.is_some() {
        let count_at = out.len();
        out.push(0);
        let mut end = 0;
        for_runs(freq, |first, len| {
            out[count_at] += 1;
            put_varint(out, (first - end) as u32);
            put_varint(out, len as u32 - 1);
            end = first + len;
        });
    } else {
        out.push(0);
        let mut bits = vec![0u8; freq.len().div_ceil(8)];
        for s in (0..freq.len()).filter(|&s| freq[s] > 0) {
            bits[s / 8] |= 1 << (s % 8);
        }
        out.extend_from_slice(&bits);
    }
    for &f in freq[..last].iter().filter(|&&f| f > 0) {
        put_varint(out, f as u32);
    }
}

/// Read a compact table at `at` into `freq` (zeroed first; its length is the alphabet):
/// every rule checked (count within the alphabet, runs inside it and apart, bitmap population
/// and padding, each frequency at least 1, the implied last one too). `Ok(None)` for an empty
/// table where `empty_allowed`; else the number of present symbols. Returns the offset after.
pub fn read(
    input: &[u8],
    at: usize,
    freq: &mut [u16],
    scale: u32,
    empty_allowed: bool,
) -> Result<(usize, usize)> {
    let alphabet = freq.len();
    freq.fill(0);
    let (p, mut pos) = get_varint(input, at, "table size")?;
    let p = p as usize;
    if p == 0 && empty_allowed {
        return Ok((0, pos));
    }
    if p == 0 || p > alphabet {
        return Err(Error::corrupt_at(format!("table of {p} symbols"), at));
    }
    let form = take(input, pos, 1, "table symbol set")?[0] as usize;
    pos += 1;
    // Mark the present symbols with frequency 1 (overwritten below).
    if form == 0 {
        let bits = take(input, pos, alphabet.div_ceil(8), "table bitmap")?;
        if !alphabet.is_multiple_of(8) && bits[alphabet / 8] >> (alphabet % 8) != 0 {
            return Err(Error::corrupt_at("table bitmap padding", pos));
        }
        let mut n = 0;
        for (s, f) in freq.iter_mut().enumerate() {
            if bits[s / 8] >> (s % 8) & 1 == 1 {
                *f = 1;
                n += 1;
            }
        }
        if n != p {
            return Err(Error::corrupt_at(
                "table bitmap disagrees with its count",
                pos,
            ));
        }
        pos += alphabet.div_ceil(8);
    } else if form <= RUNS_MAX {
        let (mut end, mut n) = (0usize, 0usize);
        for k in 0..form {
            let (gap, next) = get_varint(input, pos, "table run")?;
            let (len, next) = get_varint(input, next, "table run")?;
            let (first, len) = (end + gap as usize, len as usize + 1);
            if (k > 0 && gap == 0) || first + len > alphabet || n + len > p {
                return Err(Error::corrupt_at(
                    "table run overlaps, touches the last or leaves the alphabet",
                    pos,
                ));
            }
            freq[first..first + len].fill(1);
            (end, n, pos) = (first + len, n + len, next);
        }
        if n != p {
            return Err(Error::corrupt_at("table runs disagree with its count", pos));
        }
    } else {
        return Err(Error::corrupt_at(format!("table of {form} runs"), pos - 1));
    }
    let mut sum = 0u32;
    let mut left = p;
    for slot in freq.iter_mut().filter(|f| **f > 0) {
        left -= 1;
        let f = if left == 0 {
            // The last present symbol: what the others leave.
            if sum >= scale {
                return Err(Error::corrupt_at(
                    format!("table frequencies reach {sum} before the last"),
                    pos,
                ));
            }
            scale - sum
        } else {
            let (f, next) = get_varint(input, pos, "table frequency")?;
            if f == 0 || f >= scale {
                return Err(Error::corrupt_at(format!("table frequency {f}"), pos));
            }
            pos = next;
            f
        };
        *slot = f as u16;
        sum += f;
    }
    Ok((p, pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables of every shape the forms distinguish: one symbol, a range, runs near the limit
    /// and past it (a bitmap), the full alphabet, scattered symbols, frequencies of one and
    /// two varint bytes; each written, read back equal, and its length as predicted.
    fn tables(alphabet: usize, scale: u32) -> Vec<Vec<u16>> {
        let mut v = Vec::new();
        let mut spread = |present: &[usize]| {
            let mut f = vec![0u16; alphabet];
            let mut left = scale;
            for (i, &s) in present.iter().enumerate() {
                let share = if i + 1 == present.len() {
                    left
                } else {
                    // Uneven: some above 127 (two bytes), most small.
                    (left / (present.len() - i) as u32 / (1 + (i as u32 % 3))).max(1)
                };
                f[s] = share as u16;
                left -= share;
            }
            v.push(f);
        };
        spread(&[0]);
        spread(&[alphabet - 1]);
        spread(&(100..140).collect::<Vec<_>>());
        spread(&(0..alphabet).collect::<Vec<_>>());
        spread(&(0..alphabet).step_by(3).collect::<Vec<_>>());
        for runs in [1usize, 15, 16, 17, 40] {
            let present: Vec<usize> = (0..runs)
                .flat_map(|r| (r * 6..r * 6 + 2).filter(|&s| s < alphabet))
                .collect();
            spread(&present);
        }
        spread(&[3, 200, alphabet - 2]);
        v
    }

    #[test]
    fn every_shape_reads_back_at_its_predicted_length() {
        for (alphabet, scale) in [(256usize, 4096u32), (260, 2048)] {
            for f in tables(alphabet, scale) {
                let mut out = vec![0xee];
                write(&f, &mut out);
                assert_eq!(out.len() - 1, written_len(&f));
                let mut back = vec![7u16; alphabet];
                let (p, end) = read(&out, 1, &mut back, scale, false).unwrap();
                assert_eq!((back, end), (f.clone(), out.len()));
                assert_eq!(p, f.iter().filter(|&&x| x > 0).count());
                // Every truncation is an error.
                for cut in 1..out.len() {
                    let mut b = vec![0u16; alphabet];
                    assert!(read(&out[..cut], 1, &mut b, scale, false).is_err());
                }
            }
        }
    }

    /// The bitmap count of [`written_len`] equals the walk's on every shape above and on
    /// random tables of every density, runs at the alphabet's edges included.
    #[test]
    fn written_len_equals_the_walk() {
        let mut rng = planepack_testkit::Rng(0x1234_5678);
        for (alphabet, scale) in [(256usize, 4096u32), (260, 2048), (64, 4096), (1, 4096)] {
            if alphabet >= 256 {
                for f in tables(alphabet, scale) {
                    assert_eq!(written_len(&f), written_len_by_walk(&f));
                }
            }
            for density in [0u64, 1, 2, 8, 50, 90, 99, 100] {
                for _ in 0..200 {
                    let f: Vec<u16> = (0..alphabet)
                        .map(|_| match rng.below(100) < density {
                            true => (1 + rng.below(300)) as u16,
                            false => 0,
                        })
                        .collect();
                    assert_eq!(written_len(&f), written_len_by_walk(&f), "{f:?}");
                }
            }
        }
    }

    #[test]
    fn an_empty_table_is_one_byte_and_only_where_allowed() {
        let f = vec![0u16; 260];
        let mut out = Vec::new();
        write(&f, &mut out);
        assert_eq!(out, [0]);
        let mut b = vec![1u16; 260];
        assert_eq!(read(&out, 0, &mut b, 2048, true).unwrap(), (0, 1));
        assert!(b.iter().all(|&x| x == 0));
        assert!(read(&out, 0, &mut b, 2048, false).is_err());
    }

    #[test]
    fn varints_have_one_form() {
        for v in [0u32, 1, 127, 128, 129, 4095, 4096, 16383] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(get_varint(&out, 0, "v").unwrap(), (v, out.len()));
        }
        // A zero high byte, and a third byte.
        assert!(get_varint(&[0x85, 0x00], 0, "v").is_err());
        assert!(get_varint(&[0x85, 0x85, 0x01], 0, "v").is_err());
    }

    /// Broken rules, each refused: runs that touch or overlap, leave the alphabet or hold more
    /// symbols than the count; too many runs; bitmap padding or population; a frequency 0;
    /// the listed ones leaving nothing for the last.
    #[test]
    fn broken_tables_are_refused() {
        let bad: [&[u8]; 9] = [
            &[3, 2, 0, 0, 0, 0, 1, 1],    // second run's gap 0 (touching)
            &[2, 1, 255, 1, 1],           // run 255..257 leaves 256 symbols
            &[2, 1, 0, 2, 1],             // a run of 3 for a count of 2
            &[2, 17, 0, 0],               // 17 runs
            &[1, 1, 0, 1],                // a run of 2 for a count of 1
            &[2, 1, 0, 1, 0],             // frequency 0
            &[2, 1, 0, 1, 0x80, 0x20],    // 4096 listed, none left
            &[3, 1, 0, 2, 0xff, 0x1f, 1], // listed sum 4095 + 1 = 4096, none left
            &[2, 1, 0, 1, 0x80, 0x00],    // a two-byte 0
        ];
        for b in bad {
            let mut f = vec![0u16; 256];
            assert!(read(b, 0, &mut f, 4096, false).is_err(), "{b:?}");
        }
        // A 260-symbol bitmap with a padding bit, and one whose population is not the count.
        let mut map = vec![1u8, 0];
        map.extend([0u8; 33]);
        map[2 + 32] = 0x10;
        let mut f = vec![0u16; 260];
        assert!(read(&map, 0, &mut f, 2048, false).is_err());
        map[2 + 32] = 0;
        map[2] = 3;
        assert!(read(&map, 0, &mut f, 2048, false).is_err());
    }
}
