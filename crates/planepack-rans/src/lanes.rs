//! One byte plane coded by up to [`MAX_LANES`] independent rANS lanes.
//!
//! A plane of `m` symbols gets `clamp(m / 1024, 1, 32)` lanes (at least 1024 symbols a lane,
//! so the 6 bytes each lane costs stay under 0.05 bit per symbol; small planes such as a
//! sparse chunk's zero mask would otherwise pay more for lanes than for their symbols).
//! Symbol `i` of a plane belongs to lane `i % lanes`. Each lane is an ordinary rANS coder
//! (32-bit state, lower bound `L = 2^16`, 16-bit renormalisation words, 12-bit
//! probabilities) with its own word stream, its final encoder state and its word count stored
//! in front. Why independent streams rather than one interleaved stream (DietGPU's layout):
//! a lane never waits for another, so a GPU invocation, a CPU SIMD lane or a scalar loop
//! decodes it alone, on any subgroup size and without a cross-lane prefix per symbol; the
//! price is one u16 word count per lane (64 bytes per plane), and a 32-entry prefix sum over
//! those counts where a decoder wants every lane's start at once.
//!
//! The decoder checks every rule: a lane that needs a word it does not have, or that ends
//! with words left or a state other than the encoder's initial `L`, is a corrupt stream. The
//! last check catches nearly every damaged lane, though not all (the container's checksums
//! do that).

use crate::contexts::{ContextDecoder, ABSENT};
use crate::model::{Table, PROB_BITS, PROB_SCALE, SLOT_CUM_SHIFT, SLOT_FREQ_SHIFT};
use planepack_core::error::take;
use planepack_core::{Error, Result};

/// Most lanes a plane has (a format constant, independent of any hardware width).
pub const MAX_LANES: usize = 32;
/// The encoder gives each lane at least this many symbols.
pub const MIN_LANE_SYMBOLS: usize = 1024;
/// rANS lower bound: states live in `[L, 2^32)`.
pub const L: u32 = 1 << 16;

/// Lanes the encoder gives a plane of `m` symbols: one per 1024 symbols, at most 32, and a
/// multiple of 8 from 8 on (so SIMD decoders take them in groups of eight).
pub fn lanes_for(m: usize) -> usize {
    let k = (m / MIN_LANE_SYMBOLS).clamp(1, MAX_LANES);
    if k >= 8 {
        k / 8 * 8
    } else {
        k
    }
}

/// Bytes of the lane header: the lane count, then a u32 state and a u16 word count per lane.
pub fn lane_header(lanes: usize) -> usize {
    1 + lanes * 6
}

/// `ceil(2^52 / f)`, for [`div_by`].
fn reciprocal(f: u32) -> u64 {
    (1u64 << 52).div_ceil(f as u64)
}

/// `floor(x / f)` for any `x` (u32) and `f` in 1..=4096, given `reciprocal(f)`.
#[inline(always)]
fn div_by(x: u32, rcp: u64) -> u32 {
    ((x as u128 * rcp as u128) >> 52) as u32
}

/// A symbol's coding constants, together in one 16-byte entry.
#[derive(Clone, Copy, Default)]
struct EncSymbol {
    /// `reciprocal(freq)`.
    rcp: u64,
    freq: u32,
    cum: u32,
}

/// Several tables' coding constants (256 entries a table), made once: a stream's context
/// tables serve every chunk's context plane, and each reciprocal is a 64-bit division.
pub(crate) struct Prepared(Vec<EncSymbol>);

impl Prepared {
    pub(crate) fn new(tables: &[Option<&Table>]) -> Prepared {
        let mut syms = Vec::new();
        coding_constants(tables, &mut syms);
        Prepared(syms)
    }
}

/// Each table's coding constants into `syms` (256 entries a table; absent tables and symbols
/// have frequency 0).
///
/// floor(x / f) by a multiply: with r = ceil(2^52 / f), x r / 2^52 exceeds x / f by less than
/// x / 2^52 < 2^-20 for x < 2^32, while x / f's fraction is at most 1 - 1/f <= 1 - 2^-12, so
/// the floor is exact (tested against division for every f).
fn coding_constants(tables: &[Option<&Table>], syms: &mut Vec<EncSymbol>) {
    syms.clear();
    syms.resize(256 * tables.len(), EncSymbol::default());
    for (t, table) in tables.iter().enumerate() {
        let Some(table) = table else { continue };
        for (e, (&f, &c)) in syms[256 * t..256 * (t + 1)]
            .iter_mut()
            .zip(table.freq.iter().zip(&table.cum))
        {
            if f > 0 {
                *e = EncSymbol {
                    rcp: reciprocal(f as u32),
                    freq: f as u32,
                    cum: c as u32,
                };
            }
        }
    }
}

/// Reusable encoder buffers.
#[derive(Default)]
pub struct Encoder {
    /// Each lane's words, written backwards from the end of the lane's region.
    words: Vec<u16>,
    /// The AVX2 coder's stage: per round, every lane's candidate word (`k` of them) and
    /// which lanes emitted it (bit `l`); then each lane's words compacted.
    stage: Vec<u16>,
    emitted: Vec<u32>,
    compact: Vec<u16>,
    /// Each table's coding constants, 256 entries a table (several for a context plane).
    syms: Vec<EncSymbol>,
    info: Vec<u32>,
}

impl Encoder {
    /// Append the lanes of `symbols` coded with `table` (every symbol must have a nonzero
    /// frequency): the lane count `k` (u8), `k` u32 final states, `k` u16 word counts, then
    /// each lane's words in decoding order, lane 0 first. Fails if a lane would need more
    /// than 65535 words (planes of at most `32 * 65535` symbols always fit).
    pub fn encode(&mut self, table: &Table, symbols: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.encode_with(table, symbols, planepack_core::cpu::AVX512, out)
    }

    /// [`Encoder::encode`], with the vector kernels of instruction-set tiers up to `tier`
    /// ([`planepack_core::cpu`]) where the CPU has them (the same bytes at every tier; the
    /// tests compare them).
    pub(crate) fn encode_with(
        &mut self,
        table: &Table,
        symbols: &[u8],
        tier: u8,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let mut syms = std::mem::take(&mut self.syms);
        coding_constants(&[Some(table)], &mut syms);
        let r = self.encode_syms(&syms, None, symbols, lanes_for(symbols.len()), tier, out);
        self.syms = syms;
        r
    }

    /// A context plane's lanes: symbol `i` coded with table `sel[i]` of `tables` (each symbol
    /// must have a nonzero frequency in its table). The same layout as [`Encoder::encode`].
    pub(crate) fn encode_selected(
        &mut self,
        tables: &Prepared,
        sel: &[u8],
        symbols: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.encode_syms(
            &tables.0,
            Some(sel),
            symbols,
            lanes_for(symbols.len()),
            planepack_core::cpu::AVX512,
            out,
        )
    }

    /// [`Encoder::encode_selected`] in `k` lanes (1 to 32; a row plane's lanes divide its
    /// row distance).
    pub(crate) fn encode_selected_lanes(
        &mut self,
        tables: &Prepared,
        sel: &[u8],
        symbols: &[u8],
        k: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        assert!((1..=MAX_LANES).contains(&k));
        self.encode_syms(
            &tables.0,
            Some(sel),
            symbols,
            k,
            planepack_core::cpu::AVX512,
            out,
        )
    }

    fn encode_syms(
        &mut self,
        syms: &[EncSymbol],
        sel: Option<&[u8]>,
        symbols: &[u8],
        k: usize,
        tier: u8,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        use planepack_core::cpu;
        let n = symbols.len();
        let tables = syms.len() / 256;
        // Every selector names a table (the kernels index by it unchecked).
        assert!(
            sel.is_none_or(|s| s.len() == n && (s.is_empty() || (max_byte(s) as usize) < tables))
        );
        // A lane emits at most one word per symbol, so a region of `rounds + 1` words (one
        // spare for the branch-free store) holds any lane.
        let rounds = n.div_ceil(k);
        let region = rounds + 1;
        grow(&mut self.words, k * region);
        let mut states = [L; MAX_LANES];
        let mut pos = [region; MAX_LANES];
        // Lane l's words in decoding order: `head[l]` words from its area of `self.compact`
        // (the AVX2 coder's, `stride` words a lane), then its region of `self.words` from
        // `pos[l]`.
        let mut head = [0usize; MAX_LANES];
        let mut stride = 0;
        #[cfg(not(target_arch = "x86_64"))]
        let _ = tier;
        match () {
            #[cfg(target_arch = "x86_64")]
            () if tier >= cpu::X86_64_V3 && k.is_multiple_of(8) && cpu::x86_64_v3() => {
                let wide = tier >= cpu::AVX512 && k.is_multiple_of(16) && cpu::avx512();
                stride = self.encode_avx2(
                    syms,
                    sel,
                    symbols,
                    k,
                    region,
                    wide,
                    &mut states,
                    &mut pos,
                    &mut head,
                )
            }
            () => self.encode_scalar(syms, sel, symbols, k, region, &mut states, &mut pos),
        }
        let count = |l: usize| head[l] + region - pos[l];
        if (0..k).any(|l| count(l) > u16::MAX as usize) {
            return Err(Error::Unsupported("rANS lane over 65535 words".into()));
        }
        out.push(k as u8);
        for s in &states[..k] {
            out.extend_from_slice(&s.to_le_bytes());
        }
        for l in 0..k {
            out.extend_from_slice(&(count(l) as u16).to_le_bytes());
        }
        // The words as little-endian bytes: on a little-endian machine their own bytes, one
        // copy (the stream's bytes were zero-filled and then overwritten: a memset of the
        // whole stream, 2-3 % of encoding).
        let to_le = |words: &[u16], out: &mut Vec<u8>| {
            #[cfg(target_endian = "little")]
            out.extend_from_slice(bytemuck::cast_slice(words));
            #[cfg(not(target_endian = "little"))]
            out.extend(words.iter().flat_map(|w| w.to_le_bytes()));
        };
        for l in 0..k {
            to_le(&self.compact[l * stride..l * stride + head[l]], out);
            to_le(&self.words[l * region + pos[l]..(l + 1) * region], out);
        }
        Ok(())
    }

    /// The AVX2 coder (the CPU has x86-64-v3, `k` is a multiple of 8): lanes below `n % k`
    /// have one symbol more than the rest, coded first (each lane runs backwards) by the
    /// scalar step into `self.words`; then every lane's common rounds, eight lanes to a
    /// vector (sixteen with the AVX-512 kernel where `wide`: the CPU has that tier and `k` is
    /// 16 or 32), their words compacted into `self.compact` (`head[l]` words for lane `l`, at
    /// `l` times the returned stride): they come before the extra symbol's in decoding order.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn encode_avx2(
        &mut self,
        syms: &[EncSymbol],
        sel: Option<&[u8]>,
        symbols: &[u8],
        k: usize,
        region: usize,
        wide: bool,
        states: &mut [u32; MAX_LANES],
        pos: &mut [usize; MAX_LANES],
        head: &mut [usize; MAX_LANES],
    ) -> usize {
        assert!(k.is_multiple_of(8) && planepack_core::cpu::x86_64_v3());
        assert!(!wide || (k.is_multiple_of(16) && planepack_core::cpu::avx512()));
        let common = symbols.len() / k;
        for (l, (x, p)) in states
            .iter_mut()
            .zip(pos.iter_mut())
            .enumerate()
            .take(symbols.len() % k)
        {
            let lane = &mut self.words[l * region..(l + 1) * region];
            put(&syms[entry(symbols, sel, l + common * k)], x, lane, p);
        }
        self.info.clear();
        self.info.extend(syms.iter().map(|e| e.freq | e.cum << 13));
        let info = &self.info[..];
        let body = &symbols[..common * k];
        let body_sel = sel.map(|s| &s[..common * k]);
        // Every round's candidate words and emit bits are staged, then each lane's words are
        // compacted eight rounds at a time (a scalar store per lane and round, through the
        // lane's cursor, was most of the coder's time).
        grow(&mut self.stage, common * k);
        grow(&mut self.emitted, common);
        // SAFETY: the CPU has AVX2 and FMA (x86-64-v3, asserted above); k is a multiple of 8
        // up to 32, so G = k / 8 is 1 to 4; `body` is `common` whole rounds of k and the stage
        // holds k words and one mask per round.
        unsafe {
            let (st, em) = (&mut self.stage[..common * k], &mut self.emitted[..common]);
            // SAFETY (the wide kernel): the CPU runs the AVX-512 tier and k is 16 or 32
            // (asserted above), G = k / 16.
            match (k / 8, wide) {
                (2, true) => avx512::encode::<1>(info, body, body_sel, st, em, states),
                (4, true) => avx512::encode::<2>(info, body, body_sel, st, em, states),
                (1, _) => avx2::encode::<1>(info, body, body_sel, st, em, states),
                (2, _) => avx2::encode::<2>(info, body, body_sel, st, em, states),
                (3, _) => avx2::encode::<3>(info, body, body_sel, st, em, states),
                _ => avx2::encode::<4>(info, body, body_sel, st, em, states),
            }
        };
        // Lane l's words in decoding order are its emitted words by increasing round, then
        // the words of its extra symbol (already at the top of its region).
        let stride = common + 8;
        grow(&mut self.compact, k * stride);
        // SAFETY: as above; each lane's compact area has `common + 8` words, room for every
        // round's word and a whole 16-byte store past the last.
        unsafe {
            avx2::compact(
                &self.stage[..common * k],
                &self.emitted[..common],
                k,
                &mut self.compact,
                stride,
                head,
            )
        };
        stride
    }

    /// The scalar coder: every lane's symbols, lanes four at a time.
    #[allow(clippy::too_many_arguments)]
    fn encode_scalar(
        &mut self,
        syms: &[EncSymbol],
        sel: Option<&[u8]>,
        symbols: &[u8],
        k: usize,
        region: usize,
        states: &mut [u32; MAX_LANES],
        pos: &mut [usize; MAX_LANES],
    ) {
        // Lanes four at a time: their dependency chains are independent, so the CPU overlaps
        // them (each symbol's multiply waits on the previous state); the rest one at a time.
        let mut j = 0;
        while j + 4 <= k {
            encode_group::<4>(
                syms,
                sel,
                symbols,
                k,
                j,
                &mut self.words,
                region,
                states,
                pos,
            );
            j += 4;
        }
        while j < k {
            encode_group::<1>(
                syms,
                sel,
                symbols,
                k,
                j,
                &mut self.words,
                region,
                states,
                pos,
            );
            j += 1;
        }
    }
}

/// `v` at least `n` long, grown with zeros but never cleared: the coder's scratch is written
/// before it is read (each lane's words from the top of its region down, the stage round by
/// round), so clearing it for every plane (three times a plane's symbols in words) only cost
/// time.
pub(crate) fn grow<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

/// `bytes` (pairs, little-endian) as words into `words`, then two zero words. Sized first and
/// filled by index, so the copy vectorises (an `extend` from the byte pairs was 10 % of a
/// plane's decode); a buffer already of the length is not cleared first.
pub(crate) fn words_from_bytes(bytes: &[u8], words: &mut Vec<u16>) {
    let pairs = bytes.as_chunks::<2>().0;
    let n = pairs.len();
    if words.len() != n + 2 {
        words.clear();
        words.resize(n + 2, 0);
    }
    for (d, &w) in words.iter_mut().zip(pairs) {
        *d = u16::from_le_bytes(w);
    }
    words[n] = 0;
    words[n + 1] = 0;
}

/// The largest byte of `bytes` (0 if empty), in a loop that vectorises: the coders check the
/// selector of every symbol of a context plane (byte at a time, half of the encoder's lane
/// setup and 8 % of a context plane's decode).
fn max_byte(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |m, &b| m.max(b))
}

/// Symbol `i`'s entry in the coding constants: its byte in its table (`sel[i]`, else the
/// only one).
#[inline(always)]
fn entry(symbols: &[u8], sel: Option<&[u8]>, i: usize) -> usize {
    sel.map_or(0, |s| 256 * s[i] as usize) + symbols[i] as usize
}

/// Encode lanes `j..j + N` of a plane with `k` lanes, backwards over their symbols; lane `l`'s
/// words go to the end of its region `l` of `words`, growing down to `pos[l]`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn encode_group<const N: usize>(
    syms: &[EncSymbol],
    sel: Option<&[u8]>,
    symbols: &[u8],
    k: usize,
    j: usize,
    words: &mut [u16],
    region: usize,
    states: &mut [u32; MAX_LANES],
    pos: &mut [usize; MAX_LANES],
) {
    let n = symbols.len();
    // Lane l codes symbols l, l + k, ...: `counts[i]` of them.
    let counts: [usize; N] = std::array::from_fn(|i| n.saturating_sub(j + i).div_ceil(k));
    let common = counts.iter().copied().min().unwrap_or(0);
    let mut regions = words[j * region..(j + N) * region].chunks_exact_mut(region);
    let lanes: [&mut [u16]; N] = std::array::from_fn(|_| regions.next().expect("N regions"));
    let mut x: [u32; N] = std::array::from_fn(|i| states[j + i]);
    let mut p: [usize; N] = std::array::from_fn(|i| pos[j + i]);
    // A lane's last symbols beyond what all N lanes have (at most one round) first, alone.
    for i in 0..N {
        for r in (common..counts[i]).rev() {
            let e = &syms[entry(symbols, sel, j + i + r * k)];
            put(e, &mut x[i], lanes[i], &mut p[i]);
        }
    }
    for r in (0..common).rev() {
        for i in 0..N {
            let e = &syms[entry(symbols, sel, j + i + r * k)];
            put(e, &mut x[i], lanes[i], &mut p[i]);
        }
    }
    states[j..j + N].copy_from_slice(&x);
    pos[j..j + N].copy_from_slice(&p);
}

/// One rANS encoding step, branch-free: the renormalisation word is always stored below the
/// lane's words and kept (the cursor moved) only when the state is too large to take the
/// symbol, since that test goes either way at random.
#[inline(always)]
fn put(e: &EncSymbol, x: &mut u32, lane: &mut [u16], p: &mut usize) {
    debug_assert!(e.freq > 0, "symbol not in the table");
    // x >= freq * 2^20, in 32 bits: a frequency of 4096 (a context table's only symbol) makes
    // the bound 2^32, which no state reaches, and the shift 0.
    let m = e.freq << (32 - PROB_BITS);
    let out = (*x >= m && m != 0) as u32;
    lane[*p - 1] = *x as u16;
    *p -= out as usize;
    *x >>= out * 16;
    let q = div_by(*x, e.rcp);
    *x = (q << PROB_BITS) + (*x - q * e.freq) + e.cum;
}

/// Which table each symbol of a plane is decoded with, and where its symbols go.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// Table 0 for every symbol; symbol `i` to `out[i]`.
    Plane,
    /// A context plane: symbol `i` with the table of its element's plane-0 byte `top[i]`
    /// ([`ContextDecoder::table_of`]); symbol `i` to `out[i]`.
    Context {
        top: &'a [u8],
        dec: &'a ContextDecoder,
    },
    /// A context plane of 2-byte elements, joined as it is decoded: element `i` is
    /// `top[i] << 8 | symbol`, rotated right by one bit if `rotate`, to `out[2i..2i + 2]`
    /// (little-endian). The planes' join without a pass of its own.
    Joined2 {
        top: &'a [u8],
        dec: &'a ContextDecoder,
        rotate: bool,
    },
    /// A plain plane 0 of 2-byte elements (table 0) joined as it is decoded with the raw
    /// plane 1 after it, `low`: element `i` is `symbol << 8 | low[i]`, rotated right by one
    /// bit if `rotate`, to `out[2i..2i + 2]`. The join of a plain plane and a raw one (an
    /// embedding's or a weight's mantissa bytes) without a pass of its own.
    Low { low: &'a [u8], rotate: bool },
}

impl<'a> Target<'a> {
    /// Output bytes per symbol.
    fn unit(self) -> usize {
        match self {
            Target::Joined2 { .. } | Target::Low { .. } => 2,
            _ => 1,
        }
    }

    /// The plane-0 bytes and tables, for a context plane.
    fn context(self) -> Option<(&'a [u8], &'a ContextDecoder)> {
        match self {
            Target::Plane | Target::Low { .. } => None,
            Target::Context { top, dec } | Target::Joined2 { top, dec, .. } => Some((top, dec)),
        }
    }

    /// The same target from symbol `i` on.
    fn skip(self, i: usize) -> Target<'a> {
        match self {
            Target::Plane => Target::Plane,
            Target::Context { top, dec } => Target::Context {
                top: &top[i..],
                dec,
            },
            Target::Joined2 { top, dec, rotate } => Target::Joined2 {
                top: &top[i..],
                dec,
                rotate,
            },
            Target::Low { low, rotate } => Target::Low {
                low: &low[i..],
                rotate,
            },
        }
    }
}

/// Decode the symbols coded by [`Encoder::encode`] at `at` of `input` into `out` as `target`
/// says (`out.len() / unit` symbols), with the decode slots `slots` (from
/// [`Table::decode_slots`]: 4096 per table, tables back to back); `words` is scratch. Returns
/// the offset after the lanes.
///
/// The loop is branch-free: every step reads the lane's next word (clamped to a zero word past
/// the end of all words) and keeps it only if the state fell below `L`. A lane that reads past
/// its own words is therefore not stopped at once; it is caught at the end, where every lane
/// must have read exactly its words and returned to state `L`. Likewise an element of a
/// context plane whose context has no table is decoded with a table that exists and reported
/// at the end.
pub fn decode(
    input: &[u8],
    at: usize,
    slots: &[u32],
    target: Target,
    words: &mut Vec<u16>,
    out: &mut [u8],
) -> Result<usize> {
    let tables = slots.len() / PROB_SCALE as usize;
    let n = out.len() / target.unit();
    // What the SIMD gathers rely on: every table a context may name exists.
    if !slots.len().is_multiple_of(PROB_SCALE as usize)
        || tables == 0
        || target.context().is_some_and(|(top, dec)| {
            top.len() < n
                || dec
                    .tables()
                    .iter()
                    .any(|&t| t != ABSENT && t as usize >= tables)
        })
    {
        return Err(Error::corrupt("context plane without its tables"));
    }
    let LaneStart {
        k,
        mut x,
        mut pos,
        end,
        words_at,
        next,
    } = LaneStart::read(input, at, words)?;
    let last = next;
    let words = &words[..];
    let unit = target.unit();
    let out = &mut out[..n * unit];
    let absent = || Error::corrupt("a context plane's element whose context has no table");

    #[cfg(target_arch = "x86_64")]
    if k.is_multiple_of(8) && planepack_core::cpu::x86_64_v3() {
        let full = n / k * k;
        // SAFETY: the CPU has AVX2 (checked above); the kernel's loads stay inside `slots`
        // (slots below 4096 of tables below `tables`, checked above, an absent context's
        // clamped to the last), `top` (`full` bytes) and `words` (indices <= last, with two
        // words after it), and it writes only `out[..full * unit]`.
        let ok = with_u32_positions(&mut pos, |p32| unsafe {
            avx2::decode_target(
                k / 8,
                &mut x,
                p32,
                slots,
                target,
                words,
                last as u32,
                &mut out[..full * unit],
                &input[words_at + 2 * next..],
            )
        });
        if !ok {
            return Err(absent());
        }
        return finish(
            &mut x,
            &mut pos,
            &end,
            k,
            slots,
            target.skip(full),
            words,
            last,
            &mut out[full * unit..],
            words_at,
            next,
        );
    }

    finish(
        &mut x, &mut pos, &end, k, slots, target, words, last, out, words_at, next,
    )
}

/// A plain plane at `at` (its lanes; its table's decode slots in `slots`) of 2-byte elements'
/// high bytes, joined as it decodes with the raw plane 1 right after it into `out` (the chunk's
/// `out.len() / 2` elements, rotated right by one bit if `rotate`; [`Target::Low`]). Returns
/// the offset after plane 1, or `None`, having read nothing, where plane 1 is not a raw plane
/// of the elements' count there: the caller decodes plane 0 by itself. Errors as plane 0's
/// decoder gives them.
pub fn decode_low_joined(
    input: &[u8],
    at: usize,
    slots: &[u32],
    words: &mut Vec<u16>,
    out: &mut [u8],
    rotate: bool,
) -> Result<Option<usize>> {
    let n = out.len() / 2;
    // (A header that does not read is left to the plane's own decoder to report.)
    let Ok(start) = LaneStart::header(input, at) else {
        return Ok(None);
    };
    let end = start.words_at + 2 * start.next;
    let Some(low) = raw_plane_at(input, end, n) else {
        return Ok(None);
    };
    let at = decode(input, at, slots, Target::Low { low, rotate }, words, out)?;
    debug_assert_eq!(at, end);
    Ok(Some(end + 1 + n))
}

/// The bytes of a raw plane of `n` symbols whose kind byte is at `at`, if that is what is
/// there (the plane a plain or row plane 0 is joined with as it decodes).
fn raw_plane_at(input: &[u8], at: usize, n: usize) -> Option<&[u8]> {
    (*input.get(at)? == crate::PLANE_RAW)
        .then(|| input.get(at + 1..at + 1 + n))
        .flatten()
}

/// A plane's lanes as their header gives them: the count `k`, each lane's initial state, its
/// first word and the word after its last (indices into the words, which `read` has put in
/// `words` with two zero words after them), where the words start in the stream and how many
/// there are.
struct LaneStart {
    k: usize,
    x: [u32; MAX_LANES],
    pos: [usize; MAX_LANES],
    end: [usize; MAX_LANES],
    words_at: usize,
    next: usize,
}

impl LaneStart {
    /// Read the lane header at `at` (a count of 1 to 32 lanes, states at least `L`) and the
    /// lanes' words into `words`.
    fn read(input: &[u8], at: usize, words: &mut Vec<u16>) -> Result<LaneStart> {
        let start = LaneStart::header(input, at)?;
        let raw = take(input, start.words_at, 2 * start.next, "rANS lane words")?;
        // Two zero words past the end: what a lane reads once it has overrun every word (one
        // for the scalar loop, two for the AVX2 gathers, which load 32 bits at a word).
        words_from_bytes(raw, words);
        Ok(start)
    }

    /// [`LaneStart::read`] without the words: the header alone, which says where the lanes
    /// end (`words_at + 2 next`).
    fn header(input: &[u8], at: usize) -> Result<LaneStart> {
        let k = take(input, at, 1, "rANS lane count")?[0] as usize;
        if !(1..=MAX_LANES).contains(&k) {
            return Err(Error::corrupt_at(format!("{k} rANS lanes"), at));
        }
        let head = take(input, at + 1, 6 * k, "rANS lane header")?;
        let mut x = [0u32; MAX_LANES];
        let mut pos = [0usize; MAX_LANES];
        let mut end = [0usize; MAX_LANES];
        let mut next = 0usize;
        for j in 0..k {
            x[j] = u32::from_le_bytes(head[4 * j..4 * j + 4].try_into().unwrap());
            if x[j] < L {
                return Err(Error::corrupt_at("rANS lane state below L", at + 1 + 4 * j));
            }
            let n = u16::from_le_bytes(head[4 * k + 2 * j..][..2].try_into().unwrap());
            pos[j] = next;
            next += n as usize;
            end[j] = next;
        }
        let words_at = at + lane_header(k);
        Ok(LaneStart {
            k,
            x,
            pos,
            end,
            words_at,
            next,
        })
    }
}

impl LaneStart {
    /// [`LaneStart::read`] for a plane that takes the row planes' lane rule (a `what` plane:
    /// row or sign), with `rows`' row distance and version: a lane count that may not be
    /// there is an error.
    fn read_rows(
        input: &[u8],
        at: usize,
        words: &mut Vec<u16>,
        rows: &crate::row_contexts::RowDecoder,
        what: &str,
    ) -> Result<LaneStart> {
        let start = LaneStart::read(input, at, words)?;
        let (k, u, version) = (start.k, rows.distance, rows.version);
        if !crate::row_contexts::lanes_allowed(k, u, version) {
            return Err(Error::corrupt_at(
                format!("{k} lanes of a {what} plane with row distance {u} (version {version})"),
                at,
            ));
        }
        Ok(start)
    }
}

/// Run a SIMD kernel `f` on the lanes' word positions as u32 (its vectors' width; the words
/// of a plane fit in u32), and take back where it left them.
#[cfg(target_arch = "x86_64")]
fn with_u32_positions(
    pos: &mut [usize; MAX_LANES],
    f: impl FnOnce(&mut [u32; MAX_LANES]) -> bool,
) -> bool {
    let mut p32 = pos.map(|p| p as u32);
    let ok = f(&mut p32);
    *pos = p32.map(|p| p as usize);
    ok
}

/// Every lane must have read exactly its words and returned to state `L`.
fn check_ends(
    x: &[u32; MAX_LANES],
    pos: &[usize; MAX_LANES],
    end: &[usize; MAX_LANES],
    k: usize,
    words_at: usize,
) -> Result<()> {
    for j in 0..k {
        if x[j] != L || pos[j] != end[j] {
            return Err(Error::corrupt_at(
                format!("rANS lane {j} does not end where its encoder started"),
                words_at,
            ));
        }
    }
    Ok(())
}

/// One scalar decoding step of a lane with state `x` at word `p` (clamped to `last`, where
/// the words end in zero words), with decode slots `slots` from `base`: returns the symbol.
#[inline(always)]
fn scalar_step(
    x: &mut u32,
    p: &mut usize,
    slots: &[u32],
    base: usize,
    words: &[u16],
    last: usize,
) -> u8 {
    let slot = *x & (PROB_SCALE - 1);
    let e = slots[base + slot as usize];
    let f = (e >> SLOT_FREQ_SHIFT) + 1;
    let y = f * (*x >> PROB_BITS) + slot - (e >> SLOT_CUM_SHIFT & (PROB_SCALE - 1));
    let need = y < L;
    let w = words[(*p).min(last)] as u32;
    *x = if need { y << 16 | w } else { y };
    *p += need as usize;
    e as u8
}

/// Decode a row plane (kind 4, stream versions 6 and 7) at `at` into `out`: symbol `i` with
/// the table of context [`crate::row_contexts::ROW_FIRST`] if `i < U`, else of the row context
/// of `out[i - U]` (decoded in an earlier round: by the same lane where the lane count divides
/// `U`, else, version 7, `k <= U`, by any lane). `words` is scratch. Returns the offset after
/// the lanes.
///
/// With `join` (the output of 2-byte elements, and whether they are rotated) and a raw plane 1
/// right after this plane: element `i` is also written there, `out[i] << 8 | plane1[i]`
/// (rotated right by one bit if asked), as the symbols are decoded, and the offset returned
/// is after plane 1, with `true`. The planes' join was a pass of its own, a quarter of
/// decoding a KV cache, whose mantissa bytes are raw; in the kernel its loads and stores
/// overlap the lanes' arithmetic.
pub fn decode_rows(
    input: &[u8],
    at: usize,
    dec: &crate::row_contexts::RowDecoder,
    words: &mut Vec<u16>,
    out: &mut [u8],
    join: Option<(&mut [u8], bool)>,
) -> Result<(usize, bool)> {
    use crate::row_contexts::{ROW_ABSENT, ROW_FIRST};
    let tables = dec.slots.len() / PROB_SCALE as usize;
    if tables == 0 || !dec.slots.len().is_multiple_of(PROB_SCALE as usize) {
        return Err(Error::corrupt("row plane without its tables"));
    }
    let LaneStart {
        k,
        mut x,
        mut pos,
        end,
        words_at,
        next,
    } = LaneStart::read_rows(input, at, words, dec, "row")?;
    let u = dec.distance;
    let words = &words[..];
    let last = next;
    let slots = &dec.slots[..];
    let table_of = dec.table_of();
    let last_table = (tables - 1) as u8;
    let mut absent = false;
    let n = out.len();
    // Plane 1 raw, whole, right after this plane's words: joined as this plane decodes.
    let plane_end = words_at + 2 * next;
    let mut join = join.and_then(|(o, rotate)| {
        let low = raw_plane_at(input, plane_end, n)?;
        (o.len() == 2 * n).then_some((o, low, rotate))
    });
    // Whole rounds of 8, 16, 24 or 32 lanes by the AVX2 kernel, the rest here.
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if k.is_multiple_of(8) && planepack_core::cpu::x86_64_v3() {
        let full = n / k * k;
        let joined = join
            .as_mut()
            .map(|(o, low, rotate)| (&mut o[..2 * full], &low[..full], *rotate));
        // SAFETY: the CPU has AVX2 (checked above); k (a multiple of 8, at most 32) is at
        // most u (checked above) and divides `full`; the kernel's loads stay inside `slots` (tables below
        // `tables`, an absent context's clamped to the last), `out` (earlier rounds),
        // `words` (indices <= last, two words after it) and plane 1's `full` bytes, and it
        // writes only `out[..full]` and the joined elements' `2 full` bytes.
        let ok = with_u32_positions(&mut pos, |p32| unsafe {
            avx2::decode_rows(
                k / 8,
                &mut x,
                p32,
                slots,
                dec,
                words,
                last as u32,
                &mut out[..full],
                joined,
                &input[plane_end..],
            )
        });
        absent |= !ok;
        done = full;
    }
    // The rest, a round of k symbols at a time (`done` is whole rounds).
    let first_table = dec.by_context[ROW_FIRST];
    let first_base = first_table.min(last_table) as usize * PROB_SCALE as usize;
    let base_of: [usize; 256] =
        std::array::from_fn(|e| table_of[e].min(last_table) as usize * PROB_SCALE as usize);
    for start in (done..n).step_by(k) {
        let end = (start + k).min(n);
        let (before, rest) = out.split_at_mut(start);
        let lanes = x.iter_mut().zip(pos.iter_mut());
        for (i, (o, (x, p))) in rest[..end - start].iter_mut().zip(lanes).enumerate() {
            // The first row's table, else that of the element U back: in an earlier round
            // (k <= U), the same lane's where k divides U, another's where not.
            let base = match (start + i).checked_sub(u) {
                None => {
                    absent |= first_table == ROW_ABSENT;
                    first_base
                }
                Some(j) => {
                    let e = before[j] as usize;
                    absent |= table_of[e] == ROW_ABSENT;
                    base_of[e]
                }
            };
            *o = scalar_step(x, p, slots, base, words, last);
        }
    }
    if absent {
        return Err(Error::corrupt(
            "a row plane's element whose context has no table",
        ));
    }
    check_ends(&x, &pos, &end, k, words_at)?;
    match join {
        Some((o, low, rotate)) => {
            // The symbols the scalar loop decoded.
            crate::planes::join_all(&[&out[done..], &low[done..]], 2, rotate, &mut o[2 * done..]);
            Ok((plane_end + 1 + n, true))
        }
        None => Ok((plane_end, false)),
    }
}

/// Decode a sign plane (kind 5, stream version 8) at `at` and join it with plane 0, `top`:
/// `out` receives the chunk's `top.len()` elements of two bytes, `top[i] << 8 | symbol`
/// (rotated right by one bit if `rotate`), as the joined context plane does (no plane-1 bytes
/// in scratch, no join pass). Symbol `i` takes the sign table of (the exponent context of
/// `top[i]` for the stream's `E0`; the class of symbol `i - U`, read back from its element:
/// none for `i < U`), by the row planes' lane rules (`rows`: the row distance `U`, `E0`, the
/// version; its `signs`, the tables). `words` is scratch. Returns the offset after the lanes.
pub fn decode_signs(
    input: &[u8],
    at: usize,
    rows: &crate::row_contexts::RowDecoder,
    top: &[u8],
    rotate: bool,
    words: &mut Vec<u16>,
    out: &mut [u8],
) -> Result<usize> {
    use crate::sign_contexts::{sign_class, SIGN_CLASSES};
    let Some(dec) = rows.signs.as_ref() else {
        return Err(Error::corrupt("sign plane without its tables"));
    };
    let tables = dec.slots.len() / PROB_SCALE as usize;
    let n = top.len();
    if tables == 0 || !dec.slots.len().is_multiple_of(PROB_SCALE as usize) || out.len() != 2 * n {
        return Err(Error::corrupt("sign plane without its tables"));
    }
    let LaneStart {
        k,
        mut x,
        mut pos,
        end,
        words_at,
        next,
    } = LaneStart::read_rows(input, at, words, rows, "sign")?;
    let u = rows.distance;
    let words = &words[..];
    let last = next;
    let last_table = (tables - 1) as u8;
    let table_of = dec.table_of(rows.e0);
    let absent_any = table_of.map(|t| t.contains(&ABSENT));
    let base_of: [[u32; 256]; SIGN_CLASSES] = std::array::from_fn(|c| {
        std::array::from_fn(|e| table_of[c][e].min(last_table) as u32 * PROB_SCALE)
    });
    let mut absent = false;
    // Whole rounds of 8, 16, 24 or 32 lanes by the AVX2 kernel, the rest here.
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if k.is_multiple_of(8) && planepack_core::cpu::x86_64_v3() {
        let full = n / k * k;
        // SAFETY: the CPU has AVX2 (checked above); k (a multiple of 8, at most 32) is at
        // most u (lanes_allowed, checked above) and divides `full`; the kernel's loads stay
        // inside `dec.slots` (tables below `tables`, an absent one's clamped to the last),
        // `top` (`full` bytes), `out` (elements of earlier rounds) and `words` (indices <=
        // last, two words after it), and it writes only `out[..2 full]` (checked: `2 n`).
        let ok = with_u32_positions(&mut pos, |p32| unsafe {
            avx2::decode_signs(
                k / 8,
                &mut x,
                p32,
                &dec.slots,
                rows,
                &dec.by_table,
                &top[..full],
                words,
                last as u32,
                &mut out[..2 * full],
                rotate,
                &input[words_at + 2 * next..],
            )
        });
        absent |= !ok;
        done = full;
    }
    // The low bit of the plane-1 symbol of element `j`, from the element.
    let low_bit = |out: &[u8], j: usize| match rotate {
        true => out[2 * j + 1] >> 7,
        false => out[2 * j] & 1,
    };
    for start in (done..n).step_by(k) {
        let end = (start + k).min(n);
        let lanes = x.iter_mut().zip(pos.iter_mut());
        for (i, (x, p)) in (start..end).zip(lanes) {
            // The symbol one row up: in an earlier round (k <= U).
            let class = sign_class(i.checked_sub(u).map(|j| low_bit(out, j)));
            let e = top[i];
            absent |= absent_any[class] && table_of[class][e as usize] == ABSENT;
            let sym = scalar_step(
                x,
                p,
                &dec.slots,
                base_of[class][e as usize] as usize,
                words,
                last,
            );
            let v = (e as u16) << 8 | sym as u16;
            let v = if rotate { v.rotate_right(1) } else { v };
            out[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    if absent {
        return Err(Error::corrupt(
            "a sign plane's element whose table is absent",
        ));
    }
    check_ends(&x, &pos, &end, k, words_at)?;
    Ok(words_at + 2 * next)
}

/// Decode `out` (whole rounds of `k` symbols, then a partial one) with the scalar loop, then
/// check that every lane ended where its encoder started.
#[allow(clippy::too_many_arguments)]
fn finish(
    x: &mut [u32; MAX_LANES],
    pos: &mut [usize; MAX_LANES],
    end: &[usize; MAX_LANES],
    k: usize,
    slots: &[u32],
    target: Target,
    words: &[u16],
    last: usize,
    out: &mut [u8],
    words_at: usize,
    next: usize,
) -> Result<usize> {
    let last_table = (slots.len() / PROB_SCALE as usize - 1) as u8;
    let (top, table_of) = match target.context() {
        Some((top, dec)) => (top, dec.table_of()),
        None => (&[][..], [0u8; 256]),
    };
    let mut absent = false;
    // Symbol i's table (an absent context's clamped to one that exists, and noted).
    let mut table = |i: usize| -> usize {
        if top.is_empty() {
            return 0;
        }
        let t = table_of[top[i] as usize];
        absent |= t == ABSENT;
        t.min(last_table) as usize * PROB_SCALE as usize
    };
    let step = |x: &mut u32, p: &mut usize, base: usize| -> u8 {
        scalar_step(x, p, slots, base, words, last)
    };
    let n = out.len() / target.unit();
    // A plain plane of fewer than 8 lanes (a tensor's under 8 Ki symbols) is decoded here
    // whole: its lanes' states in registers, a round of every lane at a time, so that the
    // lanes' chains overlap.
    if let (Target::Plane, 1..=7) = (target, k) {
        match k {
            1 => plane_rounds::<1>(x, pos, slots, words, last, out),
            2 => plane_rounds::<2>(x, pos, slots, words, last, out),
            3 => plane_rounds::<3>(x, pos, slots, words, last, out),
            4 => plane_rounds::<4>(x, pos, slots, words, last, out),
            5 => plane_rounds::<5>(x, pos, slots, words, last, out),
            6 => plane_rounds::<6>(x, pos, slots, words, last, out),
            _ => plane_rounds::<7>(x, pos, slots, words, last, out),
        }
        check_ends(x, pos, end, k, words_at)?;
        return Ok(words_at + 2 * next);
    }
    for (i, j) in (0..n).zip((0..k).cycle()) {
        let base = table(i);
        let sym = step(&mut x[j], &mut pos[j], base);
        match target {
            Target::Joined2 { rotate, .. } => {
                let v = (top[i] as u16) << 8 | sym as u16;
                let v = if rotate { v.rotate_right(1) } else { v };
                out[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
            Target::Low { low, rotate } => {
                let v = (sym as u16) << 8 | low[i] as u16;
                let v = if rotate { v.rotate_right(1) } else { v };
                out[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
            _ => out[i] = sym,
        }
    }
    if absent {
        return Err(Error::corrupt(
            "a context plane's element whose context has no table",
        ));
    }
    check_ends(x, pos, end, k, words_at)?;
    Ok(words_at + 2 * next)
}

/// [`finish`]'s loop for a plain plane of `K` lanes (table 0, symbol `i` to `out[i]`): the
/// same steps, each lane's state and position held in a register.
#[inline(always)]
fn plane_rounds<const K: usize>(
    x: &mut [u32; MAX_LANES],
    pos: &mut [usize; MAX_LANES],
    slots: &[u32],
    words: &[u16],
    last: usize,
    out: &mut [u8],
) {
    let mut xs: [u32; K] = std::array::from_fn(|j| x[j]);
    let mut ps: [usize; K] = std::array::from_fn(|j| pos[j]);
    let mut rounds = out.chunks_exact_mut(K);
    for round in &mut rounds {
        for j in 0..K {
            round[j] = scalar_step(&mut xs[j], &mut ps[j], slots, 0, words, last);
        }
    }
    for (j, o) in rounds.into_remainder().iter_mut().enumerate() {
        *o = scalar_step(&mut xs[j], &mut ps[j], slots, 0, words, last);
    }
    x[..K].copy_from_slice(&xs);
    pos[..K].copy_from_slice(&ps);
}

/// What the vector lane coders' unchecked gathers and stores rely on, checked (panics
/// otherwise): whole rounds of `k` lanes, a stage word per symbol and an emit mask per round,
/// and every table a selector can name inside `info` (256 entries a table).
#[cfg(target_arch = "x86_64")]
fn check_kernel_args(
    k: usize,
    info: &[u32],
    symbols: &[u8],
    sel: Option<&[u8]>,
    stage: &[u16],
    emitted: &[u32],
) {
    assert!(symbols.len().is_multiple_of(k));
    assert!(stage.len() >= symbols.len() && emitted.len() >= symbols.len() / k);
    // Every entry a gather can reach: the selected table's 256 entries.
    assert!(info.len() >= 256);
    assert!(sel.is_none_or(|s| s.len() == symbols.len()
        && (s.is_empty() || 256 * (max_byte(s) as usize + 1) <= info.len())));
}

/// The encoder's lane coder for 16 or 32 lanes at the AVX-512 tier: [`avx2::encode`]'s steps
/// sixteen lanes to a register, the emit test a mask compare, each round's candidate words a
/// narrowing store. Why: on an AVX2 coder a round of eight lanes is some thirty operations
/// around one gather; here each operation does sixteen. The stage and emit masks are
/// [`avx2::encode`]'s, so the same compaction follows, and the bytes are the same (the tests
/// compare every tier with the scalar coder).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{MAX_LANES, PROB_BITS};
    use std::arch::x86_64::*;

    /// [`super::avx2::div_mod`] for sixteen lanes, the reciprocal's first estimate from
    /// `rcp14` (more exact than `rcp`, so the same bound holds; tested against integer
    /// division for every `f` at the edges of the quotients).
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn div_mod(x: __m512i, f: __m512i) -> (__m512i, __m512i) {
        let ff = _mm512_cvtepi32_ps(f);
        let r0 = _mm512_rcp14_ps(ff);
        let rf = _mm512_mul_ps(r0, _mm512_fnmadd_ps(ff, r0, _mm512_set1_ps(2.0)));
        let xf = _mm512_fmadd_ps(
            _mm512_cvtepi32_ps(_mm512_srli_epi32::<16>(x)),
            _mm512_set1_ps(65536.0),
            _mm512_cvtepi32_ps(_mm512_and_si512(x, _mm512_set1_epi32(0xffff))),
        );
        let mut q = _mm512_cvttps_epi32(_mm512_mul_ps(xf, rf));
        let mut r = _mm512_sub_epi32(x, _mm512_mullo_epi32(q, f));
        let one = _mm512_set1_epi32(1);
        let under = _mm512_cmplt_epi32_mask(r, _mm512_setzero_si512());
        q = _mm512_mask_sub_epi32(q, under, q, one);
        r = _mm512_mask_add_epi32(r, under, r, f);
        let over = _mm512_cmpge_epi32_mask(r, f);
        q = _mm512_mask_add_epi32(q, over, q, one);
        r = _mm512_mask_sub_epi32(r, over, r, f);
        (q, r)
    }

    /// [`super::avx2::encode`] with `G` groups of sixteen lanes (`16 G` lanes): the same
    /// arguments, stage and emit masks.
    ///
    /// # Safety
    /// The CPU must run the AVX-512 tier ([`planepack_core::cpu::avx512`]). `G` is 1 or 2,
    /// `symbols.len()` a multiple of `16 G`, every symbol has a nonzero frequency, `stage`
    /// holds a word per symbol and `emitted` a mask per round.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub unsafe fn encode<const G: usize>(
        info: &[u32],
        symbols: &[u8],
        sel: Option<&[u8]>,
        stage: &mut [u16],
        emitted: &mut [u32],
        x: &mut [u32; MAX_LANES],
    ) {
        let k = 16 * G;
        assert!((1..=2).contains(&G));
        super::check_kernel_args(k, info, symbols, sel, stage, emitted);
        // SAFETY: `x` holds 32 lanes and g < G <= 2.
        let mut xs: [__m512i; G] = std::array::from_fn(|g| unsafe {
            _mm512_loadu_si512(x.as_ptr().add(16 * g) as *const __m512i)
        });
        let fmask = _mm512_set1_epi32(0x1fff);
        let table = info.as_ptr() as *const i32;
        for (r, row) in symbols.chunks_exact(k).enumerate().rev() {
            let mut bits_all = 0u32;
            for (g, xg) in xs.iter_mut().enumerate() {
                // SAFETY: row holds k >= 16 (g + 1) bytes.
                let raw = unsafe { _mm_loadu_si128(row.as_ptr().add(16 * g) as *const __m128i) };
                let mut sv = _mm512_cvtepu8_epi32(raw);
                if let Some(s) = sel {
                    // SAFETY: `sel` is as long as `symbols`: round r's bytes 16g.. are inside.
                    let t = unsafe {
                        _mm_loadu_si128(s.as_ptr().add(r * k + 16 * g) as *const __m128i)
                    };
                    sv = _mm512_add_epi32(sv, _mm512_slli_epi32::<8>(_mm512_cvtepu8_epi32(t)));
                }
                // SAFETY: a symbol's entry is below 256 in its table, inside `info` (asserted).
                let e = unsafe { _mm512_i32gather_epi32::<4>(sv, table) };
                let f = _mm512_and_si512(e, fmask);
                let cum = _mm512_srli_epi32::<13>(e);
                let mut xv = *xg;
                // Renormalise where x >= freq << (32 - PROB_BITS), unsigned (a frequency of
                // 4096 shifts to 0 and never renormalises).
                let xmax = _mm512_slli_epi32::<{ 32 - PROB_BITS }>(f);
                let emit =
                    _mm512_mask_cmpge_epu32_mask(_mm512_test_epi32_mask(xmax, xmax), xv, xmax);
                bits_all |= (emit as u32) << (16 * g);
                // SAFETY: round r's words for lanes 16g..16g+16 lie inside `stage` (checked).
                unsafe {
                    _mm256_storeu_si256(
                        stage.as_mut_ptr().add(r * k + 16 * g) as *mut __m256i,
                        _mm512_cvtepi32_epi16(xv),
                    )
                };
                xv = _mm512_mask_srli_epi32::<16>(xv, emit, xv);
                let (q, rem) = div_mod(xv, f);
                *xg = _mm512_add_epi32(
                    _mm512_add_epi32(_mm512_slli_epi32::<PROB_BITS>(q), rem),
                    cum,
                );
            }
            emitted[r] = bits_all;
        }
        for (g, v) in xs.iter().enumerate() {
            // SAFETY: sixteen lanes from 16 * g are inside `x` (32 lanes).
            unsafe { _mm512_storeu_si512(x.as_mut_ptr().add(16 * g) as *mut __m512i, *v) };
        }
    }
}

/// The decoder for 8, 16, 24 or 32 lanes with AVX2: groups of eight lanes, each step a gather from the
/// decode table and a gather of every lane's next word, kept where the state fell below `L`
/// (the scalar step, eight lanes at a time; the tests compare both on valid and damaged
/// streams).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::Target;
    use super::{L, MAX_LANES, PROB_BITS, PROB_SCALE, SLOT_CUM_SHIFT, SLOT_FREQ_SHIFT};
    use crate::contexts::{ABSENT, CONTEXTS, CTX_ABOVE, CTX_BELOW};
    use std::arch::x86_64::*;

    /// `(floor(x / f), x mod f)` per lane, for states `x` below `f * 2^21` and below 2^32
    /// (as after renormalisation, at 12- or 11-bit probabilities) and frequencies `f` in
    /// 1..=4096, from f32 arithmetic and one correction each way. `x` is converted in two
    /// exact halves and summed (relative error at most 2^-24); `1 / f` is the hardware's
    /// estimate refined by one Newton step (at most about 5 * 2^-24); with the product's
    /// rounding the estimate of `x / f` (below 2^21) is within 2^21 * 8 * 2^-24 = 1 of it, so
    /// truncating it is off by at most one, and the remainder's sign and size say which way.
    /// (Tested against integer division for every `f` at the edges of the quotients.)
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn div_mod(x: __m256i, f: __m256i) -> (__m256i, __m256i) {
        let ff = _mm256_cvtepi32_ps(f);
        let r0 = _mm256_rcp_ps(ff);
        let rf = _mm256_mul_ps(r0, _mm256_fnmadd_ps(ff, r0, _mm256_set1_ps(2.0)));
        let xf = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_srli_epi32::<16>(x)),
            _mm256_set1_ps(65536.0),
            _mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(0xffff))),
        );
        let mut q = _mm256_cvttps_epi32(_mm256_mul_ps(xf, rf));
        let mut r = _mm256_sub_epi32(x, _mm256_mullo_epi32(q, f));
        let under = _mm256_cmpgt_epi32(_mm256_setzero_si256(), r);
        q = _mm256_add_epi32(q, under);
        r = _mm256_add_epi32(r, _mm256_and_si256(under, f));
        let over = _mm256_cmpgt_epi32(r, _mm256_sub_epi32(f, _mm256_set1_epi32(1)));
        q = _mm256_sub_epi32(q, over);
        r = _mm256_sub_epi32(r, _mm256_and_si256(over, f));
        (q, r)
    }

    /// Code `symbols` (whole rounds of `8 G` lanes) backwards, eight lanes to a vector, as
    /// the scalar `put` does symbol for symbol: `info[s]` is `freq | cum << 13`. Round `r`'s
    /// candidate words (each lane's state's low 16 bits before the step) go to
    /// `stage[r * 8G ..]`, and bit `l` of `emitted[r]` says whether lane `l` emitted its word.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. `G` is 1 to 4, `symbols.len()` a multiple of `8 G`,
    /// every symbol has a nonzero frequency, `stage` holds a word per symbol and `emitted` a
    /// mask per round.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn encode<const G: usize>(
        info: &[u32],
        symbols: &[u8],
        sel: Option<&[u8]>,
        stage: &mut [u16],
        emitted: &mut [u32],
        x: &mut [u32; MAX_LANES],
    ) {
        let k = 8 * G;
        assert!((1..=4).contains(&G));
        super::check_kernel_args(k, info, symbols, sel, stage, emitted);
        // SAFETY: `x` holds 32 lanes and g < G <= 4.
        let mut xs: [__m256i; G] = std::array::from_fn(|g| unsafe {
            _mm256_loadu_si256(x.as_ptr().add(8 * g) as *const __m256i)
        });
        let table = info.as_ptr() as *const i32;
        for (r, row) in symbols.chunks_exact(k).enumerate().rev() {
            let mut bits_all = 0u32;
            for (g, xg) in xs.iter_mut().enumerate() {
                // SAFETY: row holds k >= 8 (g + 1) bytes.
                let raw = unsafe { _mm_loadl_epi64(row.as_ptr().add(8 * g) as *const __m128i) };
                let mut sv = _mm256_cvtepu8_epi32(raw);
                if let Some(s) = sel {
                    // SAFETY: `sel` is as long as `symbols`: round r's bytes 8g.. are inside.
                    let t =
                        unsafe { _mm_loadl_epi64(s.as_ptr().add(r * k + 8 * g) as *const __m128i) };
                    sv = _mm256_add_epi32(sv, _mm256_slli_epi32::<8>(_mm256_cvtepu8_epi32(t)));
                }
                // SAFETY: a symbol's entry is below 256 in its table, inside `info` (asserted).
                let e = unsafe { _mm256_i32gather_epi32::<4>(table, sv) };
                // SAFETY: round r's words for lanes 8g..8g+8 lie inside `stage` (checked).
                let bits =
                    unsafe { step::<PROB_BITS>(xg, e, stage.as_mut_ptr().add(r * k + 8 * g)) };
                bits_all |= bits << (8 * g);
            }
            emitted[r] = bits_all;
        }
        for (g, v) in xs.iter().enumerate() {
            // SAFETY: eight lanes from 8 * g are inside `x` (32 lanes).
            unsafe { _mm256_storeu_si256(x.as_mut_ptr().add(8 * g) as *mut __m256i, *v) };
        }
    }

    /// One coding step of eight lanes at `P`-bit probabilities (12: the planes, 11: the
    /// modelled chunk's lanes): states `xv`, their symbols' entries `e` (`freq | cum << 13`).
    /// Stores the eight candidate words (each state's low 16 bits before the step) at `stage`,
    /// updates the states and returns the emit bits (bit `l`: lane `l` emitted its word).
    /// An entry of frequency `2^P` (cumulative 0) leaves its state as it is and emits nothing:
    /// a lane with no symbol in the round.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `stage` must be valid for 16 bytes of writes; each
    /// state below `2^32` and its frequency 1 to `2^P` (so that after renormalisation it is
    /// below `f * 2^(32 - P)`, as [`div_mod`] needs).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn step<const P: u32>(xv: &mut __m256i, e: __m256i, stage: *mut u16) -> u32 {
        const { assert!(P == 11 || P == PROB_BITS) };
        // Bytes 0, 1, 4, 5, 8, 9, 12, 13 of each 128-bit half: the low 16 bits of its four
        // states, to the half's low 8 bytes.
        let low16 = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1,
            -1, -1, -1, -1, -1, -1, -1,
        );
        let f = _mm256_and_si256(e, _mm256_set1_epi32(0x1fff));
        let cum = _mm256_srli_epi32::<13>(e);
        let x = *xv;
        // Renormalise where x >= freq << (32 - P) (as the scalar step; a frequency of 2^P
        // shifts to 0 and never renormalises): unsigned x >= m is max(x, m) == x.
        let xmax = match P {
            11 => _mm256_slli_epi32::<21>(f),
            _ => _mm256_slli_epi32::<{ 32 - PROB_BITS as i32 }>(f),
        };
        let emit = _mm256_andnot_si256(
            _mm256_cmpeq_epi32(xmax, _mm256_setzero_si256()),
            _mm256_cmpeq_epi32(_mm256_max_epu32(x, xmax), x),
        );
        let bits = _mm256_movemask_ps(_mm256_castsi256_ps(emit)) as u32;
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(x, low16));
        // SAFETY: the caller's contract.
        unsafe { _mm_storeu_si128(stage as *mut __m128i, _mm256_castsi256_si128(w)) };
        let x = _mm256_blendv_epi8(x, _mm256_srli_epi32::<16>(x), emit);
        let (q, rem) = div_mod(x, f);
        let q = match P {
            11 => _mm256_slli_epi32::<11>(q),
            _ => _mm256_slli_epi32::<{ PROB_BITS as i32 }>(q),
        };
        *xv = _mm256_add_epi32(_mm256_add_epi32(q, rem), cum);
        bits
    }

    /// [`encode`] for eight lanes whose symbols come as indices into `info` (`ids`, a round
    /// of eight after another, coded from the last round back) at `P`-bit probabilities: the
    /// modelled chunk's lanes (11-bit tables of 260 symbols in 8 contexts, an index per
    /// context and symbol). Stage and emit masks as [`encode`]'s, for [`compact`].
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA. `P` is 11 or 12; every id names an entry of `info`
    /// (asserted) of frequency 1 to `2^P`; `ids.len()` is a multiple of 8, `stage` holds
    /// a word per id and `emitted` a mask per round.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn encode_ids<const P: u32>(
        info: &[u32],
        ids: &[u16],
        stage: &mut [u16],
        emitted: &mut [u32],
        x: &mut [u32; 8],
    ) {
        assert!(ids.len().is_multiple_of(8) && stage.len() >= ids.len());
        assert!(emitted.len() >= ids.len() / 8);
        // Every entry a gather reads lies in `info` (one pass over the ids, a small part of
        // the coding).
        assert!(ids.iter().max().is_none_or(|&i| (i as usize) < info.len()));
        // SAFETY: `x` holds eight lanes.
        let mut xv = unsafe { _mm256_loadu_si256(x.as_ptr() as *const __m256i) };
        let table = info.as_ptr() as *const i32;
        for (r, round) in ids.chunks_exact(8).enumerate().rev() {
            // SAFETY: the round holds eight ids; each below `info.len()` (asserted);
            // round r's words lie inside `stage` (asserted).
            unsafe {
                let iv = _mm256_cvtepu16_epi32(_mm_loadu_si128(round.as_ptr() as *const __m128i));
                let e = _mm256_i32gather_epi32::<4>(table, iv);
                emitted[r] = step::<P>(&mut xv, e, stage.as_mut_ptr().add(8 * r));
            }
        }
        // SAFETY: `x` holds eight lanes.
        unsafe { _mm256_storeu_si256(x.as_mut_ptr() as *mut __m256i, xv) };
    }

    /// Eight 2-byte elements, the low halves of `el`'s lanes, rotated right by one bit if
    /// `rotate`, stored in lane order at `dst` (the joined modes' output).
    ///
    /// # Safety
    /// The CPU must have AVX2; `dst` must be valid for 16 bytes of writes.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store_elements(el: __m256i, rotate: bool, dst: *mut u8) {
        let el = match rotate {
            true => _mm256_and_si256(
                _mm256_or_si256(
                    _mm256_srli_epi32::<1>(el),
                    _mm256_slli_epi32::<15>(_mm256_and_si256(el, _mm256_set1_epi32(1))),
                ),
                _mm256_set1_epi32(0xffff),
            ),
            false => el,
        };
        let halves = _mm256_packus_epi32(el, _mm256_setzero_si256());
        let ordered = _mm256_permute4x64_epi64::<0b00_00_10_00>(halves);
        // SAFETY: the caller's contract.
        unsafe { _mm_storeu_si128(dst as *mut __m128i, _mm256_castsi256_si128(ordered)) };
    }

    // Shuffle controls for 8 16-bit words: entry `m` moves the words at `m`'s set bits to
    // the front, in order.
    use crate::planes::PACK_2 as COMPRESS16;

    /// Bit `i` of byte `l` of the result is bit `l` of byte `i` of `x` (an 8 x 8 bit
    /// transpose).
    fn transpose8(mut x: u64) -> u64 {
        let mut t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
        x ^= t ^ (t << 7);
        t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
        x ^= t ^ (t << 14);
        t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
        x ^ t ^ (t << 28)
    }

    /// Each lane's emitted words from the stage, by increasing round, to the front of its
    /// `stride`-word area of `out`; `counts[l]` their number. Eight rounds at a time: the
    /// 8 x 8 block of words transposed to a vector per lane, the emit bits transposed to a
    /// byte per lane, each lane's words compressed by a shuffle.
    ///
    /// # Safety
    /// The CPU must have AVX2 (SSSE3 and SSE2 suffice). `stage` holds `k` words per round of
    /// `emitted`, `k` is a multiple of 8 up to 32, and `out` holds `k * stride` words with
    /// `stride >= rounds + 8`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn compact(
        stage: &[u16],
        emitted: &[u32],
        k: usize,
        out: &mut [u16],
        stride: usize,
        counts: &mut [usize; MAX_LANES],
    ) {
        let rounds = emitted.len();
        assert!(k.is_multiple_of(8) && k <= MAX_LANES && stage.len() >= rounds * k);
        assert!(stride >= rounds + 8 && out.len() >= k * stride);
        counts[..k].fill(0);
        let blocks = rounds / 8;
        for g in 0..k / 8 {
            for b in 0..blocks {
                let r0 = 8 * b;
                // SAFETY: rounds r0..r0 + 8 exist; lanes 8g..8g + 8 of each are inside `stage`.
                let v: [__m128i; 8] = std::array::from_fn(|i| unsafe {
                    _mm_loadu_si128(stage.as_ptr().add((r0 + i) * k + 8 * g) as *const __m128i)
                });
                // 8 x 8 transpose of 16-bit words: row i (round) to column i (lane).
                let a: [__m128i; 8] = [
                    _mm_unpacklo_epi16(v[0], v[1]),
                    _mm_unpacklo_epi16(v[2], v[3]),
                    _mm_unpacklo_epi16(v[4], v[5]),
                    _mm_unpacklo_epi16(v[6], v[7]),
                    _mm_unpackhi_epi16(v[0], v[1]),
                    _mm_unpackhi_epi16(v[2], v[3]),
                    _mm_unpackhi_epi16(v[4], v[5]),
                    _mm_unpackhi_epi16(v[6], v[7]),
                ];
                let c: [__m128i; 8] = [
                    _mm_unpacklo_epi32(a[0], a[1]),
                    _mm_unpacklo_epi32(a[2], a[3]),
                    _mm_unpackhi_epi32(a[0], a[1]),
                    _mm_unpackhi_epi32(a[2], a[3]),
                    _mm_unpacklo_epi32(a[4], a[5]),
                    _mm_unpacklo_epi32(a[6], a[7]),
                    _mm_unpackhi_epi32(a[4], a[5]),
                    _mm_unpackhi_epi32(a[6], a[7]),
                ];
                let lanes: [__m128i; 8] = [
                    _mm_unpacklo_epi64(c[0], c[1]),
                    _mm_unpackhi_epi64(c[0], c[1]),
                    _mm_unpacklo_epi64(c[2], c[3]),
                    _mm_unpackhi_epi64(c[2], c[3]),
                    _mm_unpacklo_epi64(c[4], c[5]),
                    _mm_unpackhi_epi64(c[4], c[5]),
                    _mm_unpacklo_epi64(c[6], c[7]),
                    _mm_unpackhi_epi64(c[6], c[7]),
                ];
                let mut m = 0u64;
                for i in 0..8 {
                    m |= (((emitted[r0 + i] >> (8 * g)) & 0xff) as u64) << (8 * i);
                }
                let per_lane = transpose8(m);
                for (l, w) in lanes.iter().enumerate() {
                    let lane = 8 * g + l;
                    let bits = (per_lane >> (8 * l)) as u8;
                    let at = lane * stride + counts[lane];
                    // SAFETY: `at + 8 <= lane * stride + rounds + 8 <= (lane + 1) * stride`:
                    // the 16-byte store stays in the lane's area.
                    unsafe {
                        let ctl =
                            _mm_loadu_si128(COMPRESS16[bits as usize].as_ptr() as *const __m128i);
                        _mm_storeu_si128(
                            out.as_mut_ptr().add(at) as *mut __m128i,
                            _mm_shuffle_epi8(*w, ctl),
                        );
                    }
                    counts[lane] += bits.count_ones() as usize;
                }
            }
            // The last rounds, one at a time.
            for r in 8 * blocks..rounds {
                for l in 0..8 {
                    let lane = 8 * g + l;
                    out[lane * stride + counts[lane]] = stage[r * k + lane];
                    counts[lane] += (emitted[r] >> lane & 1) as usize;
                }
            }
        }
    }

    /// A decoding step's renormalisation, eight lanes: where the new state `y` fell below `L`
    /// (`need`: all ones), the lane takes its next word, `y << 16 | (next & 0xffff)`, and its
    /// two next words move on by one (`next >> 16`); the other lanes keep `y` and `next`.
    /// Returns the states, the next words and `need`. Variable shifts rather than blends:
    /// the state's dependency chain is what bounds the decoders' kernels (the planes' and the
    /// modelled chunk's), and the shifts are shorter on it.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn renormalise(y: __m256i, next: __m256i) -> (__m256i, __m256i, __m256i) {
        // y < L (unsigned): min(y, L - 1) == y.
        let need = _mm256_cmpeq_epi32(_mm256_min_epu32(y, _mm256_set1_epi32((L - 1) as i32)), y);
        let by16 = _mm256_and_si256(need, _mm256_set1_epi32(16));
        let word = _mm256_and_si256(next, _mm256_and_si256(need, _mm256_set1_epi32(0xffff)));
        let x = _mm256_or_si256(_mm256_sllv_epi32(y, by16), word);
        (x, _mm256_srlv_epi32(next, by16), need)
    }

    /// [`decode`] (the kernel) for `target`: its mode, and for a context plane the plane-0
    /// bytes of the symbols `out` takes, `E0` and each context's table.
    ///
    /// # Safety
    /// As for [`decode`]; a context target's `top` must cover the symbols `out` takes.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub unsafe fn decode_target(
        groups: usize,
        x: &mut [u32; MAX_LANES],
        pos: &mut [u32; MAX_LANES],
        slots: &[u32],
        target: Target,
        words: &[u16],
        last: u32,
        out: &mut [u8],
        ahead: &[u8],
    ) -> bool {
        let n = out.len() / target.unit();
        let (top, e0, by) = match (target, target.context()) {
            (_, Some((top, dec))) => (&top[..n], dec.e0(), dec.tables()),
            (Target::Low { low, .. }, None) => (&low[..n], 0, [ABSENT; CONTEXTS]),
            _ => (&[][..], 0, [ABSENT; CONTEXTS]),
        };
        let mut by_context = [ABSENT; 8];
        by_context[..CONTEXTS].copy_from_slice(&by);
        let ctx = Contexts {
            e0,
            shift: 0,
            above: CTX_ABOVE,
            by_context,
            distance: 0,
            by_class: [by_context; 3],
        };
        let run = match target {
            Target::Plane => decode::<PLANE>,
            Target::Context { .. } => decode::<CONTEXT>,
            Target::Joined2 { rotate: false, .. } => decode::<JOINED>,
            Target::Joined2 { rotate: true, .. } => decode::<JOINED_ROTATED>,
            Target::Low { rotate: false, .. } => decode::<LOW>,
            Target::Low { rotate: true, .. } => decode::<LOW_ROTATED>,
        };
        let none = &mut [][..];
        // SAFETY: the caller's contract, passed on.
        unsafe {
            run(
                groups, x, pos, slots, top, ctx, words, last, out, none, ahead,
            )
        }
    }

    /// How a symbol's table is chosen: its context `clamp((e >> shift) - (e0 >> shift), -3,
    /// above) + 3` (`e` the plane-0 byte of its element, or of the element `distance` symbols
    /// back in a row plane), mapped through `by_context`.
    #[derive(Clone, Copy)]
    pub struct Contexts {
        pub e0: u8,
        pub shift: u8,
        pub above: i32,
        pub by_context: [u8; 8],
        pub distance: usize,
        /// `SIGN`: per class of the symbol one row up, per context, its table (what
        /// `by_context` is for the other modes).
        pub by_class: [[u8; 8]; 3],
    }

    /// [`decode`] for a row plane's whole rounds (`out.len()` symbols, a multiple of the
    /// lane count `8 groups`, which is at most the row distance).
    ///
    /// # Safety
    /// As for [`decode`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub unsafe fn decode_rows(
        groups: usize,
        x: &mut [u32; MAX_LANES],
        pos: &mut [u32; MAX_LANES],
        slots: &[u32],
        dec: &crate::row_contexts::RowDecoder,
        words: &[u16],
        last: u32,
        out: &mut [u8],
        joined: Option<(&mut [u8], &[u8], bool)>,
        ahead: &[u8],
    ) -> bool {
        use crate::row_contexts::{ROW_CTX_ABOVE, ROW_CTX_BELOW};
        const _: () = assert!(ROW_CTX_BELOW == CTX_BELOW);
        let ctx = Contexts {
            e0: dec.e0,
            shift: dec.shift,
            above: ROW_CTX_ABOVE,
            by_context: dec.by_context,
            distance: dec.distance,
            by_class: [dec.by_context; 3],
        };
        // SAFETY: the caller's contract, passed on.
        unsafe {
            match joined {
                None => decode::<ROW>(
                    groups,
                    x,
                    pos,
                    slots,
                    &[],
                    ctx,
                    words,
                    last,
                    out,
                    &mut [],
                    ahead,
                ),
                Some((j, low, false)) => decode::<ROW_JOINED>(
                    groups, x, pos, slots, low, ctx, words, last, out, j, ahead,
                ),
                Some((j, low, true)) => decode::<ROW_JOINED_ROTATED>(
                    groups, x, pos, slots, low, ctx, words, last, out, j, ahead,
                ),
            }
        }
    }

    /// [`decode`]'s targets, as the kernel's `MODE`.
    pub const PLANE: u8 = 0;
    pub const CONTEXT: u8 = 1;
    pub const JOINED: u8 = 2;
    pub const JOINED_ROTATED: u8 = 3;
    pub const ROW: u8 = 4;
    /// `ROW`, and each element also joined with its byte of a raw plane 1 (`top`) into
    /// `joined`, as `JOINED` stores (`ROW_JOINED_ROTATED`: rotated right by one bit).
    pub const ROW_JOINED: u8 = 5;
    pub const ROW_JOINED_ROTATED: u8 = 6;
    /// A sign plane, joined: symbol `i`'s table is `by_class[class][ctx(top[i])]`, its class
    /// none in the first row (`distance` symbols), else 1 + the low bit of the symbol
    /// `distance` back, read from the element stored there (`out` holds elements of two
    /// bytes, `top[i] << 8 | symbol`, as `JOINED` stores them; `SIGN_ROTATED`: rotated right
    /// by one bit, the low bit then the element's top bit).
    pub const SIGN: u8 = 7;
    pub const SIGN_ROTATED: u8 = 8;
    /// `PLANE`, each symbol joined with its byte of a raw plane 1 (`top`) as `symbol << 8 |
    /// top[i]` into `out` (elements of two bytes; `LOW_ROTATED`: rotated right by one bit).
    pub const LOW: u8 = 9;
    pub const LOW_ROTATED: u8 = 10;

    /// [`decode`] for a sign plane's whole rounds (`out.len() / 2` symbols, a multiple of the
    /// lane count `8 groups`, which is at most the row distance), `top` the plane-0 bytes of
    /// the same elements, into the joined elements `out` (rotated back if `rotate`).
    ///
    /// # Safety
    /// As for [`decode`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub unsafe fn decode_signs(
        groups: usize,
        x: &mut [u32; MAX_LANES],
        pos: &mut [u32; MAX_LANES],
        slots: &[u32],
        rows: &crate::row_contexts::RowDecoder,
        by_table: &[u8; crate::sign_contexts::SIGN_TABLES],
        top: &[u8],
        words: &[u16],
        last: u32,
        out: &mut [u8],
        rotate: bool,
        ahead: &[u8],
    ) -> bool {
        use crate::contexts::CONTEXTS;
        let by_class = std::array::from_fn(|class| {
            std::array::from_fn(|c| match c < CONTEXTS {
                true => by_table[class * CONTEXTS + c],
                false => ABSENT,
            })
        });
        let ctx = Contexts {
            e0: rows.e0,
            shift: 0,
            above: CTX_ABOVE,
            by_context: by_class[0],
            distance: rows.distance,
            by_class,
        };
        let run = match rotate {
            false => decode::<SIGN>,
            true => decode::<SIGN_ROTATED>,
        };
        let none = &mut [][..];
        // SAFETY: the caller's contract, passed on.
        unsafe {
            run(
                groups, x, pos, slots, top, ctx, words, last, out, none, ahead,
            )
        }
    }

    /// Decode whole rounds of `8 groups` lanes: `out.len()` symbols (`PLANE`, `CONTEXT`) or
    /// elements of two bytes (`JOINED`, `JOINED_ROTATED`). Without a plane-0 `top`
    /// (`PLANE`), every symbol is decoded with table 0; with it, symbol `i`'s table is
    /// `by_context[ctx(top[i])]` (entries 6 and 7 unused), computed here rather than read
    /// from a per-symbol array (a pass of its own before), an absent one ([`ABSENT`]) clamped
    /// to the last table and reported by returning false. The joined modes store
    /// `top[i] << 8 | symbol` (rotated right by one) as the element, so the planes need no
    /// join afterwards. `ROW` (a row plane) takes `e` from the symbol `ctx.distance` back in
    /// `out` itself (decoded in an earlier round: `distance >= k`; the same lane's
    /// `distance / k` rounds earlier where `k` divides it), and the table of context 7 for the
    /// first `distance` symbols (a round across the first row's end takes both).
    ///
    /// `ahead` is what the stream holds after the plane (the rest of its chunk): each round
    /// asks for its next cache line, so that what is read next (the next plane's header and
    /// words, raw planes the join reads) comes from cache, not memory, and its wait overlaps
    /// the lanes' work. (Transformer FP32 and KV cache BF16 batches decode 6-11 % faster, BF16
    /// activations 5 %; the same bytes asked for all at once before a chunk gained nothing.)
    ///
    /// # Safety
    /// The CPU must have AVX2. `words` must hold at least `last + 2` words; `groups` must be
    /// 1 to 4; `slots` must hold 4096 slots per table, at least one table, and every entry of
    /// `by_context` other than [`ABSENT`] must name one of them; with `CONTEXT` or the joined
    /// modes, `top` holds a byte per symbol.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2")]
    pub unsafe fn decode<const MODE: u8>(
        groups: usize,
        x: &mut [u32; MAX_LANES],
        pos: &mut [u32; MAX_LANES],
        slots: &[u32],
        top: &[u8],
        ctx: Contexts,
        words: &[u16],
        last: u32,
        out: &mut [u8],
        joined: &mut [u8],
        ahead: &[u8],
    ) -> bool {
        debug_assert!(words.len() >= last as usize + 2);
        // (A sign plane reads the symbol one row up as a row plane does, from its element.)
        let sign_mode = MODE == SIGN || MODE == SIGN_ROTATED;
        let row_mode = MODE == ROW || MODE == ROW_JOINED || MODE == ROW_JOINED_ROTATED || sign_mode;
        let row_joined = MODE == ROW_JOINED || MODE == ROW_JOINED_ROTATED;
        let low_mode = MODE == LOW || MODE == LOW_ROTATED;
        let Contexts {
            e0,
            shift,
            above,
            by_context,
            distance,
            by_class,
        } = ctx;
        let tables = slots.len() / PROB_SCALE as usize;
        assert!((1..=4).contains(&groups) && tables >= 1);
        let unit = if MODE == JOINED || MODE == JOINED_ROTATED || sign_mode || low_mode {
            2
        } else {
            1
        };
        let n = out.len() / unit;
        assert!(MODE == PLANE || MODE == ROW || top.len() == n);
        assert!(!sign_mode || top.len() == n);
        assert!(!row_joined || joined.len() == 2 * n);
        let k = 8 * groups;
        // Rounds whose symbols have no element one row up (ROW): the first distance / k; then,
        // where k does not divide the distance, one round across the first row's end.
        assert!(!(MODE == ROW || sign_mode) || (distance >= k && n.is_multiple_of(k)));
        let first_rounds = if row_mode { distance / k } else { 0 };
        let across = row_mode && !distance.is_multiple_of(k);
        let first_ctx = _mm256_set1_epi32(crate::row_contexts::ROW_FIRST as i32);
        let lane_index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mask = _mm256_set1_epi32((PROB_SCALE - 1) as i32);
        let byte = _mm256_set1_epi32(0xff);
        let cum_mask = _mm256_set1_epi32((PROB_SCALE - 1) as i32);
        let one = _mm256_set1_epi32(1);
        let lastv = _mm256_set1_epi32(last as i32);
        // The context, clamp((e >> shift) - (e0 >> shift), CTX_BELOW, above) - CTX_BELOW, as
        // min(max((e >> shift) - e0lo, 0), span): one subtraction fewer a group.
        let e0lo = _mm256_set1_epi32((e0 >> shift) as i32 + CTX_BELOW);
        let span = _mm256_set1_epi32(above - CTX_BELOW);
        let shiftv = _mm_cvtsi32_si128(shift as i32);
        // Per context, its table's first slot (an absent one's clamped to the last table) and
        // whether it is absent: one permute each, where the table index was clamped, shifted
        // and compared a group at a time (transformer and KV batches decode 3-5 % faster).
        let lanes8 =
            |v: [i32; 8]| _mm256_setr_epi32(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
        let by = lanes8(by_context.map(|t| (t.min(tables as u8 - 1) as i32) << PROB_BITS));
        let by_absent = lanes8(by_context.map(|t| -((t == ABSENT) as i32)));
        // SIGN: the same per class of the symbol one row up.
        let class_by =
            by_class.map(|b| lanes8(b.map(|t| (t.min(tables as u8 - 1) as i32) << PROB_BITS)));
        let class_absent = by_class.map(|b| lanes8(b.map(|t| -((t == ABSENT) as i32))));
        let mut bad = _mm256_setzero_si256();
        // Loads and stores below: the arrays are 32 lanes, read and written in
        // four groups of eight; `out` chunks are 32 symbols.
        let mut xs = [_mm256_setzero_si256(); 4];
        let mut ps = [_mm256_setzero_si256(); 4];
        for g in 0..groups {
            // SAFETY: `x` holds 32 lanes and g < groups <= 4: eight lanes from 8 * g are inside.
            xs[g] = unsafe { _mm256_loadu_si256(x.as_ptr().add(8 * g) as *const __m256i) };
            // SAFETY: as for `x`: `pos` holds 32 lanes.
            ps[g] = unsafe { _mm256_loadu_si256(pos.as_ptr().add(8 * g) as *const __m256i) };
        }
        let table = slots.as_ptr() as *const i32;
        let wbase = words.as_ptr() as *const i32;
        let zero = _mm256_setzero_si256();
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        // Each lane's next two words (from one 32-bit gather every other round: a lane takes
        // at most one word a round, and a gather costs as much as the rest of a step).
        let mut next = [zero; 4];
        // Every access to `out` goes through this pointer: a row plane reads the symbols it
        // wrote rounds before.
        let base = out.as_mut_ptr();
        for r in 0..n / k {
            // SAFETY: r < n / k: the round's k * unit bytes are inside `out`.
            let row = unsafe { base.add(r * k * unit) };
            // A line a round of what follows the plane.
            if let Some(line) = ahead.get(64 * r) {
                _mm_prefetch::<_MM_HINT_T0>(line as *const u8 as *const i8);
            }
            if r % 2 == 0 {
                for g in 0..groups {
                    let idx = _mm256_min_epu32(ps[g], lastv);
                    // SAFETY: idx <= last, and 32 bits at word idx are words idx and idx + 1,
                    // both below last + 2 <= words.len(). Past `last` both are zero words,
                    // what the scalar step reads there.
                    next[g] = unsafe { _mm256_i32gather_epi32::<2>(wbase, idx) };
                }
            }
            for g in 0..groups {
                let xv = xs[g];
                let slot = _mm256_and_si256(xv, mask);
                // The group's plane-0 bytes (unused by PLANE), a row plane's one row up, a sign
                // plane's low bits one row up.
                let e = if MODE == PLANE || (row_mode && r < first_rounds) {
                    zero
                } else if sign_mode {
                    // The elements one row up (an earlier round, as for ROW), and their
                    // plane-1 symbols' low bits: the element's top bit where rotated back.
                    let up = if across && r == first_rounds {
                        let mut up = [0u16; 8];
                        for (l, u) in up.iter_mut().enumerate() {
                            if let Some(j) = (r * k + 8 * g + l).checked_sub(distance) {
                                // SAFETY: j < r * k (distance >= k > 8 g + l): an element
                                // decoded in an earlier round, its two bytes in `out`.
                                *u = unsafe { (base.add(2 * j) as *const u16).read_unaligned() };
                            }
                        }
                        // SAFETY: `up` is 16 bytes.
                        _mm256_cvtepu16_epi32(unsafe {
                            _mm_loadu_si128(up.as_ptr() as *const __m128i)
                        })
                    } else {
                        // SAFETY: as for ROW's load below, in elements of two bytes: the
                        // eight elements from r k + 8 g - distance >= 0 end at or before
                        // r k, decoded in an earlier round.
                        _mm256_cvtepu16_epi32(unsafe {
                            _mm_loadu_si128(
                                base.add(2 * (r * k + 8 * g - distance)) as *const __m128i
                            )
                        })
                    };
                    match MODE == SIGN_ROTATED {
                        true => _mm256_srli_epi32::<15>(up),
                        false => _mm256_and_si256(up, one),
                    }
                } else if row_mode && across && r == first_rounds {
                    // The round across the first row's end: its lanes from symbol `distance`
                    // on take the symbol `distance` back (an earlier round), the rest none.
                    let mut up = [0u8; 8];
                    for (l, u) in up.iter_mut().enumerate() {
                        if let Some(j) = (r * k + 8 * g + l).checked_sub(distance) {
                            // SAFETY: j < r * k (distance >= k > 8 g + l): decoded, in `out`.
                            *u = unsafe { *base.add(j) };
                        }
                    }
                    // SAFETY: `up` is 8 bytes.
                    _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(up.as_ptr() as *const __m128i) })
                } else if row_mode {
                    // SAFETY: r * k >= distance (r > distance / k where k does not divide it),
                    // so r * k + 8 g - distance is at least 0, and below r * k + 8 g - k + 8 <=
                    // r * k (distance >= k): eight bytes decoded in an earlier round, in `out`.
                    _mm256_cvtepu8_epi32(unsafe {
                        _mm_loadl_epi64(base.add(r * k + 8 * g - distance) as *const __m128i)
                    })
                } else {
                    // SAFETY: `top` has a byte per symbol: the round's 8 g-th are inside.
                    _mm256_cvtepu8_epi32(unsafe {
                        _mm_loadl_epi64(top.as_ptr().add(r * k + 8 * g) as *const __m128i)
                    })
                };
                // A sign plane's plane-0 bytes, its context and its element's top byte.
                let t = if sign_mode {
                    // SAFETY: `top` has a byte per symbol (asserted): the round's 8 g-th are
                    // inside.
                    _mm256_cvtepu8_epi32(unsafe {
                        _mm_loadl_epi64(top.as_ptr().add(r * k + 8 * g) as *const __m128i)
                    })
                } else {
                    zero
                };
                let index = if MODE == PLANE || low_mode {
                    slot
                } else if sign_mode {
                    // The context of the element's own plane-0 byte, its table under each
                    // class, and the class of the symbol one row up (`e`: its low bit).
                    let c = _mm256_min_epi32(
                        _mm256_max_epi32(_mm256_sub_epi32(t, e0lo), _mm256_setzero_si256()),
                        span,
                    );
                    let pick = |v: [__m256i; 3]| {
                        let first = _mm256_permutevar8x32_epi32(v[0], c);
                        if row_mode && r < first_rounds {
                            return first;
                        }
                        let up = _mm256_blendv_epi8(
                            _mm256_permutevar8x32_epi32(v[1], c),
                            _mm256_permutevar8x32_epi32(v[2], c),
                            _mm256_cmpeq_epi32(e, one),
                        );
                        if across && r == first_rounds {
                            // Lanes whose symbol is before `distance`: the first row's class.
                            let i = _mm256_add_epi32(
                                _mm256_set1_epi32((r * k + 8 * g) as i32),
                                lane_index,
                            );
                            let before = _mm256_cmpgt_epi32(_mm256_set1_epi32(distance as i32), i);
                            _mm256_blendv_epi8(up, first, before)
                        } else {
                            up
                        }
                    };
                    bad = _mm256_or_si256(bad, pick(class_absent));
                    _mm256_add_epi32(slot, pick(class_by))
                } else {
                    let c = if row_mode && r < first_rounds {
                        first_ctx
                    } else {
                        let es = _mm256_srl_epi32(e, shiftv);
                        let c = _mm256_min_epi32(
                            _mm256_max_epi32(_mm256_sub_epi32(es, e0lo), _mm256_setzero_si256()),
                            span,
                        );
                        if row_mode && across && r == first_rounds {
                            // Lanes whose symbol is before `distance`: the first row's context.
                            let i = _mm256_add_epi32(
                                _mm256_set1_epi32((r * k + 8 * g) as i32),
                                lane_index,
                            );
                            let first = _mm256_cmpgt_epi32(_mm256_set1_epi32(distance as i32), i);
                            _mm256_blendv_epi8(c, first_ctx, first)
                        } else {
                            c
                        }
                    };
                    bad = _mm256_or_si256(bad, _mm256_permutevar8x32_epi32(by_absent, c));
                    _mm256_add_epi32(slot, _mm256_permutevar8x32_epi32(by, c))
                };
                // SAFETY: slot < 4096 of a table below `tables`: inside `slots`.
                let v = unsafe { _mm256_i32gather_epi32::<4>(table, index) };
                // y = f (x >> 12) + slot - cum, as (f - 1) (x >> 12) + ((x >> 12) + slot - cum):
                // the step's dependency chain (state, gather, product, renormalisation) is what
                // bounds the kernel, and `f - 1` is the entry's top bits, one shift after the
                // gather, where `f` took three operations; the rest is computed beside it.
                let cum =
                    _mm256_and_si256(_mm256_srli_epi32::<{ SLOT_CUM_SHIFT as i32 }>(v), cum_mask);
                let q = _mm256_srli_epi32::<{ PROB_BITS as i32 }>(xv);
                let y = _mm256_add_epi32(
                    _mm256_mullo_epi32(_mm256_srli_epi32::<{ SLOT_FREQ_SHIFT as i32 }>(v), q),
                    _mm256_sub_epi32(_mm256_add_epi32(q, slot), cum),
                );
                let need;
                (xs[g], next[g], need) = renormalise(y, next[g]);
                ps[g] = _mm256_sub_epi32(ps[g], need);
                let sym = _mm256_and_si256(v, byte);
                if MODE == JOINED || MODE == JOINED_ROTATED || sign_mode || low_mode {
                    // The eight elements, top << 8 | symbol (`LOW`: symbol << 8 | top).
                    let el = match (sign_mode, low_mode) {
                        (true, _) => _mm256_or_si256(_mm256_slli_epi32::<8>(t), sym),
                        (_, true) => _mm256_or_si256(_mm256_slli_epi32::<8>(sym), e),
                        _ => _mm256_or_si256(_mm256_slli_epi32::<8>(e), sym),
                    };
                    let rotated =
                        MODE == JOINED_ROTATED || MODE == SIGN_ROTATED || MODE == LOW_ROTATED;
                    // SAFETY: row points at the round's 2 * 8 * groups bytes, g < groups.
                    unsafe { store_elements(el, rotated, row.add(16 * g)) };
                } else {
                    // The group's eight symbols (u32 lanes) as eight bytes, in lane order.
                    let bytes = _mm256_packus_epi16(_mm256_packus_epi32(sym, zero), zero);
                    let ordered = _mm256_permutevar8x32_epi32(bytes, order);
                    // SAFETY: row points at the round's 8 * groups bytes, g < groups.
                    unsafe {
                        _mm_storel_epi64(
                            row.add(8 * g) as *mut __m128i,
                            _mm256_castsi256_si128(ordered),
                        )
                    };
                    if row_joined {
                        // The eight elements, symbol << 8 | plane-1 byte, as eight u16.
                        // SAFETY: `top` holds a byte per symbol (asserted): the round's
                        // 8 g-th are inside.
                        let low = _mm256_cvtepu8_epi32(unsafe {
                            _mm_loadl_epi64(top.as_ptr().add(r * k + 8 * g) as *const __m128i)
                        });
                        let el = _mm256_or_si256(_mm256_slli_epi32::<8>(sym), low);
                        // SAFETY: `joined` holds 2 n bytes (asserted): the round's 16 bytes
                        // from 2 (r k + 8 g) are inside.
                        unsafe {
                            store_elements(
                                el,
                                MODE == ROW_JOINED_ROTATED,
                                joined.as_mut_ptr().add(2 * (r * k + 8 * g)),
                            )
                        };
                    }
                }
            }
        }
        for g in 0..groups {
            // SAFETY: eight lanes from 8 * g are inside `x` and `pos` (32 lanes each).
            unsafe {
                _mm256_storeu_si256(x.as_mut_ptr().add(8 * g) as *mut __m256i, xs[g]);
                _mm256_storeu_si256(pos.as_mut_ptr().add(8 * g) as *mut __m256i, ps[g]);
            }
        }
        _mm256_testz_si256(bad, bad) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contexts::ContextTables;
    use crate::model::histogram;
    use planepack_core::cpu;

    /// The multiply that replaces the encoder's division is exact for every frequency, at the
    /// edges of every quotient that matters (just below, at and just above multiples of f,
    /// up to u32::MAX).
    #[test]
    fn reciprocal_division_is_exact() {
        let mut seed = 1u64;
        for f in 1..=4096u32 {
            let r = reciprocal(f);
            let check = |x: u32| assert_eq!(div_by(x, r), x / f, "{x} / {f}");
            for x in [
                0,
                1,
                f - 1,
                f,
                u32::MAX,
                u32::MAX - 1,
                u32::MAX / f * f,
                u32::MAX / f * f - 1,
            ] {
                check(x);
            }
            for _ in 0..200 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let q = (seed >> 33) as u32 % (u32::MAX / f);
                for x in [q * f, q * f + f - 1, (q * f).wrapping_sub(1)] {
                    check(x);
                }
            }
        }
    }

    /// The AVX2 and AVX-512 encoders' divisions are exact for every frequency, at and around
    /// every kind of quotient edge, over the states they meet (below `f * 2^20`).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vector_divisions_are_exact() {
        use std::arch::x86_64::*;
        if !cpu::x86_64_v3() {
            eprintln!("no AVX2 and FMA on this CPU: the kernels cannot run here");
            return;
        }
        let wide = cpu::avx512();
        eprintln!(
            "division tested at x86-64-v3{}",
            if wide { " and AVX-512" } else { "" }
        );
        let mut seed = 5u64;
        for f in 1..=4096u32 {
            // The states after renormalisation, at 12-bit probabilities (the planes) and
            // 11-bit ones (the modelled lanes, f up to 2048): x < f * 2^21, x < 2^32.
            let top = ((f as u64) << 21).min(1 << 32); // exclusive
            let mut xs: Vec<u32> = vec![0, 1, (top - 1) as u32, (top - 2) as u32, 1 << 16];
            for _ in 0..64 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let q = (seed >> 33) % (1 << 21);
                for d in [0i64, -1, 1, f as i64 - 1] {
                    let x = (q * f as u64) as i64 + d;
                    if (0..top as i64).contains(&x) {
                        xs.push(x as u32);
                    }
                }
            }
            for chunk in xs.chunks(16) {
                let mut lanes = [0u32; 16];
                lanes[..chunk.len()].copy_from_slice(chunk);
                let (mut q, mut r) = ([0u32; 16], [0u32; 16]);
                // SAFETY: the CPU has AVX2 and FMA (checked above); the arrays hold 16 u32.
                unsafe {
                    for half in 0..2 {
                        let xv = _mm256_loadu_si256(lanes.as_ptr().add(8 * half) as *const __m256i);
                        let (qv, rv) = avx2::div_mod(xv, _mm256_set1_epi32(f as i32));
                        _mm256_storeu_si256(q.as_mut_ptr().add(8 * half) as *mut __m256i, qv);
                        _mm256_storeu_si256(r.as_mut_ptr().add(8 * half) as *mut __m256i, rv);
                    }
                }
                let expected: Vec<(u32, u32)> = lanes.iter().map(|&x| (x / f, x % f)).collect();
                let got: Vec<(u32, u32)> = q.into_iter().zip(r).collect();
                assert_eq!(got, expected, "AVX2, f {f}");
                if wide {
                    // SAFETY: the CPU runs the AVX-512 tier (checked); the arrays hold 16 u32.
                    unsafe {
                        let xv = _mm512_loadu_si512(lanes.as_ptr() as *const __m512i);
                        let (qv, rv) = avx512::div_mod(xv, _mm512_set1_epi32(f as i32));
                        _mm512_storeu_si512(q.as_mut_ptr() as *mut __m512i, qv);
                        _mm512_storeu_si512(r.as_mut_ptr() as *mut __m512i, rv);
                    }
                    let got: Vec<(u32, u32)> = q.into_iter().zip(r).collect();
                    assert_eq!(got, expected, "AVX-512, f {f}");
                }
            }
        }
    }

    /// Every instruction-set tier the encoder can be held to (each runs where the CPU has
    /// it; the lower tiers' kernels otherwise).
    const TIERS: [u8; 3] = [cpu::PORTABLE, cpu::X86_64_V3, cpu::AVX512];

    /// The AVX2 and AVX-512 encoders write the scalar coder's bytes: skewed, flat and extreme tables
    /// (one symbol at 4095 of 4096; 256 symbols at 16; many at the floor of 1), every lane
    /// count, lengths with and without a ragged last round, up to planes of 32 full lanes.
    #[test]
    fn avx2_encoder_matches_scalar() {
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let mut enc = Encoder::default();
        for shape in 0..6 {
            for n in [
                1usize, 7, 1024, 8191, 8192, 8200, 16_385, 32_768, 40_000, 100_003,
            ] {
                let symbols: Vec<u8> = (0..n)
                    .map(|i| match shape {
                        0 => (next() % 256) as u8,
                        1 => (next() % 7) as u8 * (next() % 2) as u8,
                        2 => (next() % 256).min(next() % 256).min(next() % 256) as u8,
                        3 => {
                            if i % 5000 == 0 {
                                (next() % 256) as u8
                            } else {
                                3
                            }
                        }
                        4 => (next().leading_zeros() * 7) as u8,
                        _ => (i % 2) as u8 | 0x80,
                    })
                    .collect();
                let counts = histogram(&symbols);
                if counts.iter().filter(|&&c| c > 0).count() < 2 {
                    continue;
                }
                let table = Table::from_counts(&counts);
                let mut scalar = Vec::new();
                enc.encode_with(&table, &symbols, cpu::PORTABLE, &mut scalar)
                    .unwrap();
                for tier in TIERS {
                    let mut b = Vec::new();
                    enc.encode_with(&table, &symbols, tier, &mut b).unwrap();
                    assert!(scalar == b, "shape {shape} n {n} tier {tier}");
                }
                // A context plane's way: each symbol with one of three tables (every symbol
                // present in each), chosen at random, in every lane count a plane can have.
                let mut flat = counts;
                flat.iter_mut().for_each(|c| *c += 1);
                let mut skewed = flat;
                skewed[symbols[0] as usize] += 5000;
                let tables = [
                    table.clone(),
                    Table::from_counts(&flat),
                    Table::from_counts(&skewed),
                ];
                let sel: Vec<u8> = (0..n).map(|_| (next() % 3) as u8).collect();
                let prepared =
                    Prepared::new(&[Some(&tables[0]), Some(&tables[1]), Some(&tables[2])]);
                let sel: Vec<u8> = sel
                    .iter()
                    .zip(&symbols)
                    .map(|(&t, &x)| {
                        if tables[t as usize].freq[x as usize] > 0 {
                            t
                        } else {
                            1
                        }
                    })
                    .collect();
                for k in [8usize, 16, 24, 32].into_iter().filter(|&k| k <= n) {
                    let mut scalar = Vec::new();
                    enc.encode_syms(
                        &prepared.0,
                        Some(&sel),
                        &symbols,
                        k,
                        cpu::PORTABLE,
                        &mut scalar,
                    )
                    .unwrap();
                    for tier in TIERS {
                        let mut b = Vec::new();
                        enc.encode_syms(&prepared.0, Some(&sel), &symbols, k, tier, &mut b)
                            .unwrap();
                        assert!(
                            scalar == b,
                            "selected: shape {shape} n {n} k {k} tier {tier}"
                        );
                    }
                }
            }
        }
    }

    /// A table whose only symbol has frequency 4096 (a context plane's table of a context
    /// with one symbol): no renormalisation at all, so the lanes are their states alone, and
    /// they decode. (`f << 20` is 0 in 32 bits: the coders once emitted a word per symbol
    /// and ended below L, which no decoder takes.) Scalar and AVX2 coders, several lanes,
    /// and as one table of a context plane.
    #[test]
    fn a_symbol_of_frequency_4096_round_trips() {
        let mut counts = [0u32; 256];
        counts[9] = 5;
        let single = Table::from_counts(&counts);
        assert_eq!(single.freq[9], 4096);
        let mut other = [1u32; 256];
        other[9] = 1000;
        let other = Table::from_counts(&other);
        // Context 0 (plane-0 bytes far below E0 = 100) has `single`, context 5 (far above)
        // `other`, the rest none.
        let dec = ContextTables {
            e0: 100,
            tables: std::array::from_fn(|c| match c {
                0 => Some(single.clone()),
                5 => Some(other.clone()),
                _ => None,
            }),
        }
        .decoder();
        for n in [1usize, 700, 8192, 40_003] {
            let symbols = vec![9u8; n];
            let top: Vec<u8> = (0..n).map(|i| if i % 3 == 0 { 200 } else { 0 }).collect();
            let sel: Vec<u8> = top.iter().map(|&e| dec.table_of()[e as usize]).collect();
            let mut one = Vec::new();
            single.decode_slots(&mut one);
            for simd in TIERS {
                let mut enc = Vec::new();
                Encoder::default()
                    .encode_with(&single, &symbols, simd, &mut enc)
                    .unwrap();
                assert_eq!(enc.len(), lane_header(lanes_for(n)), "n {n}: words written");
                let mut out = vec![0u8; n];
                let end = decode(&enc, 0, &one, Target::Plane, &mut Vec::new(), &mut out).unwrap();
                assert!(end == enc.len() && out == symbols, "n {n} simd {simd}");
                let mut ctx = Vec::new();
                let prepared = Prepared::new(&[Some(&single), Some(&other)]);
                Encoder::default()
                    .encode_syms(
                        &prepared.0,
                        Some(&sel),
                        &symbols,
                        lanes_for(n),
                        simd,
                        &mut ctx,
                    )
                    .unwrap();
                let mut out = vec![0u8; n];
                let target = Target::Context {
                    top: &top,
                    dec: &dec,
                };
                decode(&ctx, 0, &dec.slots, target, &mut Vec::new(), &mut out).unwrap();
                assert!(out == symbols, "context plane n {n} simd {simd}");
                // Joined as decoded, rotated or not: the planes' join of `top` and the symbols.
                for rotate in [false, true] {
                    let mut out = vec![0u8; 2 * n];
                    let target = Target::Joined2 {
                        top: &top,
                        dec: &dec,
                        rotate,
                    };
                    decode(&ctx, 0, &dec.slots, target, &mut Vec::new(), &mut out).unwrap();
                    let mut joined = vec![0u8; 2 * n];
                    crate::planes::join_all(&[&top, &symbols], 2, rotate, &mut joined);
                    assert!(out == joined, "joined n {n} simd {simd} rotate {rotate}");
                }
            }
        }
    }

    /// Lane states and cursors after decoding `out` scalar-only, from the lane header at 0.
    fn header(enc: &[u8]) -> ([u32; MAX_LANES], [usize; MAX_LANES], Vec<u16>, usize) {
        let k = enc[0] as usize;
        assert_eq!(k, MAX_LANES);
        let mut x = [0u32; MAX_LANES];
        let mut pos = [0usize; MAX_LANES];
        let mut next = 0;
        for j in 0..k {
            x[j] = u32::from_le_bytes(enc[1 + 4 * j..5 + 4 * j].try_into().unwrap());
            pos[j] = next;
            next += u16::from_le_bytes(enc[1 + 4 * k + 2 * j..][..2].try_into().unwrap()) as usize;
        }
        let mut words: Vec<u16> = enc[lane_header(k)..lane_header(k) + 2 * next]
            .chunks_exact(2)
            .map(|w| u16::from_le_bytes([w[0], w[1]]))
            .collect();
        words.extend([0, 0]);
        (x, pos, words, next)
    }

    /// A plain plane followed by a raw plane decodes joined, as decoding the plane and joining
    /// the two would; anything else after it (another kind of plane, a raw plane cut short) is
    /// left to the caller, nothing decoded.
    #[test]
    fn a_plain_plane_and_a_raw_one_decode_joined() {
        let mut rng = planepack_testkit::Rng(7);
        for n in [1usize, 7, 31, 32, 33, 1000, 32 * 1024 + 17] {
            let symbols: Vec<u8> = (0..n).map(|_| 120 + rng.below(9) as u8).collect();
            let low: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
            let table = Table::from_counts(&histogram(&symbols));
            let mut slots = Vec::new();
            table.decode_slots(&mut slots);
            let mut stream = Vec::new();
            Encoder::default()
                .encode(&table, &symbols, &mut stream)
                .unwrap();
            let end = stream.len();
            stream.push(crate::PLANE_RAW);
            stream.extend_from_slice(&low);
            let joined = |stream: &[u8], rotate: bool, out: &mut [u8]| {
                decode_low_joined(stream, 0, &slots, &mut Vec::new(), out, rotate).unwrap()
            };
            for rotate in [false, true] {
                let mut out = vec![0u8; 2 * n];
                assert_eq!(joined(&stream, rotate, &mut out), Some(stream.len()));
                let want: Vec<u8> = symbols
                    .iter()
                    .zip(&low)
                    .flat_map(|(&s, &l)| {
                        let v = (s as u16) << 8 | l as u16;
                        match rotate {
                            true => v.rotate_right(1),
                            false => v,
                        }
                        .to_le_bytes()
                    })
                    .collect();
                assert!(out == want, "n {n}, rotate {rotate}");
            }
            let mut out = vec![0u8; 2 * n];
            assert_eq!(joined(&stream[..stream.len() - 1], false, &mut out), None);
            let mut other = stream.clone();
            other[end] = crate::PLANE_CONST;
            assert_eq!(joined(&other, false, &mut out), None);
            assert!(out.iter().all(|&b| b == 0), "n {n}: nothing decoded");
        }
    }

    /// The AVX2 kernel and the scalar step agree symbol for symbol, state for state, on valid
    /// lanes and on lanes whose words or states were damaged.
    #[test]
    fn avx2_matches_scalar() {
        #[cfg(target_arch = "x86_64")]
        {
            if !planepack_core::cpu::x86_64_v3() {
                eprintln!("no AVX2 here (or PLANEPACK_NO_SIMD): nothing to compare");
                return;
            }
            let mut rng = planepack_testkit::Rng(3);
            for round in 0..200 {
                let n = 32 * 1024 + (rng.below(3000) as usize);
                let spread = 1 + rng.below(60) as u32;
                let symbols: Vec<u8> = (0..n)
                    .map(|_| (rng.below(spread as u64) as u32 * rng.below(3) as u32) as u8)
                    .collect();
                let table = Table::from_counts(&histogram(&symbols));
                let mut enc = Vec::new();
                Encoder::default()
                    .encode(&table, &symbols, &mut enc)
                    .unwrap();
                if round % 2 == 1 {
                    let at = rng.below(enc.len() as u64) as usize;
                    enc[at] ^= 1 << rng.below(8);
                    enc[0] = MAX_LANES as u8;
                }
                let (x0, p0, words, next) = header(&enc);
                if x0.iter().any(|&x| x < L) {
                    continue;
                }
                let full = n / MAX_LANES * MAX_LANES;
                // Three rounds in four a context plane: `table` and another plane's table as
                // two of the contexts (some contexts absent: both decoders clamp an absent one
                // to the last table and report it), plane-0 bytes at random around E0; every
                // fourth of those joined (rotated or not) as it is decoded.
                let other = Table::from_counts(&histogram(&enc[..enc.len().min(4096)]));
                let present = 1 + rng.below(63) as u8;
                let e0 = 100 + rng.below(4) as u8;
                let dec = ContextTables {
                    e0,
                    tables: std::array::from_fn(|c| {
                        (present >> c & 1 == 1).then(|| {
                            if c % 2 == 0 {
                                table.clone()
                            } else {
                                other.clone()
                            }
                        })
                    }),
                }
                .decoder();
                let top: Vec<u8> = (0..full).map(|_| 95 + rng.below(12) as u8).collect();
                let mut single = Vec::new();
                table.decode_slots(&mut single);
                let (slots, target) = match round % 8 {
                    // (Every other pair of those a plain plane joined with raw bytes.)
                    0 | 1 if round % 16 < 8 => (&single[..], Target::Plane),
                    r @ (0 | 1) => (
                        &single[..],
                        Target::Low {
                            low: &top,
                            rotate: r == 1,
                        },
                    ),
                    2..=5 => (
                        &dec.slots[..],
                        Target::Context {
                            top: &top,
                            dec: &dec,
                        },
                    ),
                    r => (
                        &dec.slots[..],
                        Target::Joined2 {
                            top: &top,
                            dec: &dec,
                            rotate: r == 7,
                        },
                    ),
                };
                let unit = target.unit();
                let (mut xs, mut ps) = (x0, p0);
                let mut scalar = vec![0u8; full * unit];
                let end = [usize::MAX; MAX_LANES];
                let verdict = finish(
                    &mut xs,
                    &mut ps,
                    &end,
                    MAX_LANES,
                    slots,
                    target,
                    &words,
                    next,
                    &mut scalar,
                    0,
                    0,
                );
                let scalar_absent = verdict.is_err_and(|e| e.to_string().contains("no table"));
                let (mut xv, mut pv) = (x0, [0u32; MAX_LANES]);
                for (d, s) in pv.iter_mut().zip(&p0) {
                    *d = *s as u32;
                }
                let mut simd = vec![0u8; full * unit];
                // SAFETY: AVX2 checked above; words has two zero words after `next`; every
                // present context names a table of `slots`; `top` has a byte per symbol.
                let simd_ok = unsafe {
                    avx2::decode_target(
                        4,
                        &mut xv,
                        &mut pv,
                        slots,
                        target,
                        &words,
                        next as u32,
                        &mut simd,
                        &[],
                    )
                };
                assert_eq!(simd_ok, !scalar_absent, "round {round}: absent contexts");
                assert_eq!(scalar, simd, "round {round}");
                assert_eq!(xs, xv, "round {round}");
                assert!(
                    ps.iter().zip(&pv).all(|(a, b)| *a == *b as usize),
                    "round {round}"
                );
            }
        }
    }
}
