//! The modelled lanes' AVX2 decoder: eight lanes in lockstep, one per 32-bit element, the
//! scalar `step`'s arithmetic and rules with every branch a mask.
//!
//! Why it is shaped so: a chunk's eight lanes are one dependency chain a step (state, table
//! read, state), and the step's other work (the literal's bytes, the element "up", the
//! checks, the stores to eight places) is as long again, so both count. The lanes start
//! together and advance together, so what depends only on the step's index (whether "up"
//! may be taken, where each lane writes) is a scalar, not a vector; the words and literals a
//! lane may take are checked once, after its last step (a lane that takes more ends past its
//! count, which the caller refuses, and every read is clamped inside the buffers meanwhile);
//! and the elements go to a tile of eight steps that is written out transposed, a 16- or
//! 32-byte store a lane, instead of eight scattered stores a step (where "up" reaches at
//! least eight elements back, so it reads only elements already written). Two chunks' lanes
//! may run with their steps interleaved ([`steps_two`]): two chains in flight instead of one.

use super::SYM_LITERAL;
use super::{LaneState, Params, MODEL_PROB_BITS, MODEL_SCALE, SYMBOLS, SYM_DICT};
use std::arch::x86_64::*;

/// Steps a tile holds before it is written out.
const TILE: usize = 8;

/// Eight lanes' decoder state, one lane per 32-bit element.
struct Group {
    x: __m256i,
    word: __m256i,
    lit: __m256i,
    /// The byte offset in the output of the element "up" of each lane's current one
    /// (`(i - U) W`; negative, and never read, before the lane's `U`-th element).
    up_at: __m256i,
    left: __m256i,
    /// The left neighbour's symbol (0 at a lane's start, as a zero).
    prev: __m256i,
    err: __m256i,
    /// Each lane's next two words, gathered every other step (a lane takes at most one word
    /// a step; the gather is one of a step's costliest instructions).
    next: __m256i,
}

/// What every step reads, as vectors.
struct Consts {
    e0: __m256i,
    last_word: __m256i,
    last_lit: __m256i,
    dict: __m256i,
}

/// Decode `steps` elements of each of eight lanes that are all at their first element, in
/// lockstep, one lane per AVX2 element: the scalar `step`'s arithmetic and rules, with every
/// branch a mask. Returns false if a lane broke a rule or took more words or literals than
/// its count (the caller reports the stream corrupt; the states are then meaningless).
///
/// # Safety
/// The CPU must have AVX2. `lanes` must be 8 lanes at their first element (`i == start`,
/// no left neighbour), each with at least `steps` elements; `p.words` must hold
/// `p.total_words + 2` words and each literal plane `p.literals + 4` bytes; `W` is 2 or 4.
#[target_feature(enable = "avx2")]
pub unsafe fn steps<const W: usize, const R: bool>(
    p: &Params,
    lanes: &mut [LaneState],
    steps: usize,
    out: &mut [u8],
) -> bool {
    // SAFETY: the caller's contract, passed on.
    unsafe {
        let mut run = Run::<W, R>::new(p, lanes);
        for k in 0..steps {
            run.step(k, out);
        }
        run.finish(lanes, steps, out)
    }
}

/// [`steps`] for two chunks' groups of eight lanes (`(params, lanes, steps, output)` each),
/// their steps interleaved so that their dependency chains overlap.
///
/// # Safety
/// As for [`steps`], for each.
#[target_feature(enable = "avx2")]
pub unsafe fn steps_two<const W: usize, const R: bool>(
    a: (&Params, &mut [LaneState], usize, &mut [u8]),
    b: (&Params, &mut [LaneState], usize, &mut [u8]),
) -> bool {
    let ((pa, la, na, oa), (pb, lb, nb, ob)) = (a, b);
    // SAFETY: the caller's contract, passed on.
    unsafe {
        let mut ra = Run::<W, R>::new(pa, la);
        let mut rb = Run::<W, R>::new(pb, lb);
        let both = na.min(nb);
        for k in 0..both {
            ra.step(k, oa);
            rb.step(k, ob);
        }
        for k in both..na {
            ra.step(k, oa);
        }
        for k in both..nb {
            rb.step(k, ob);
        }
        let ok = ra.finish(la, na, oa);
        rb.finish(lb, nb, ob) && ok
    }
}

/// Eight lanes of one chunk on their way: the state, what every step reads, and the tile.
struct Run<'a, const W: usize, const R: bool> {
    p: &'a Params<'a>,
    c: Consts,
    g: Group,
    /// Each lane's first element's byte offset in the output.
    base: [usize; 8],
    /// "Up" is allowed from this step on (0: never).
    up: usize,
    /// "Up" reaches back at least a tile (or never): elements may wait in the tile.
    tiled: bool,
    tile: [__m256i; TILE],
}

impl<'a, const W: usize, const R: bool> Run<'a, W, R> {
    /// # Safety
    /// As for [`steps`].
    #[target_feature(enable = "avx2")]
    unsafe fn new(p: &'a Params<'a>, lanes: &[LaneState]) -> Self {
        debug_assert!(lanes.len() == 8 && (W == 2 || W == 4));
        debug_assert!(lanes
            .iter()
            .all(|l| l.i == l.start && l.left_sym == super::NONE));
        let get = |f: &dyn Fn(&LaneState) -> i64| {
            let mut a = [0i32; 8];
            for (v, l) in a.iter_mut().zip(lanes.iter()) {
                *v = f(l) as i32;
            }
            // SAFETY: an 8 x i32 array read as one vector.
            unsafe { _mm256_loadu_si256(a.as_ptr() as *const __m256i) }
        };
        // (A U past i32's range, which a damaged header can give, is never reached: no lane
        // is that long.)
        let up = p.u;
        let mut base = [0usize; 8];
        for (b, l) in base.iter_mut().zip(lanes.iter()) {
            *b = l.start * W;
        }
        Run {
            p,
            c: Consts {
                e0: _mm256_set1_epi32(p.e0 as i32 + SYM_LITERAL as i32),
                last_word: _mm256_set1_epi32(p.total_words as i32),
                last_lit: _mm256_set1_epi32(p.literals as i32),
                dict: _mm256_set1_epi32(p.dict as i32),
            },
            g: Group {
                x: get(&|l| l.x as i64),
                word: get(&|l| l.word as i64),
                lit: get(&|l| l.lit as i64),
                up_at: get(&|l| (l.start as i64 - (up as i64).min(i32::MAX as i64)) * W as i64),
                left: _mm256_setzero_si256(),
                prev: _mm256_setzero_si256(),
                err: _mm256_setzero_si256(),
                next: _mm256_setzero_si256(),
            },
            base,
            up,
            tiled: up == 0 || up >= TILE,
            tile: [_mm256_setzero_si256(); TILE],
        }
    }

    /// Step `k` (counted from the lanes' first element) of every lane.
    ///
    /// # Safety
    /// As for [`steps`]; steps are taken in order, each below every lane's length.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn step(&mut self, k: usize, out: &mut [u8]) {
        let up_ok = self.up > 0 && k >= self.up;
        // SAFETY: the caller's contract, passed on.
        let v = unsafe {
            step::<W, R>(
                self.p,
                &self.c,
                &mut self.g,
                out,
                k == 0,
                up_ok,
                k.is_multiple_of(2),
            )
        };
        if self.tiled {
            self.tile[k % TILE] = v;
            if k % TILE == TILE - 1 {
                // SAFETY: steps k + 1 - TILE ..= k of every lane are below its end.
                unsafe { write_tile::<W>(&self.tile, &self.base, (k + 1 - TILE) * W, out) };
            }
        } else {
            // SAFETY: step k of every lane is below its end.
            unsafe { write_step::<W>(v, &self.base, k * W, out) };
        }
    }

    /// After `steps` steps: the elements still in the tile written, the states back in
    /// `lanes`. False if a lane broke a rule or is past its words or literals (an error
    /// here, before the scalar steps, which index the words, can see it).
    ///
    /// # Safety
    /// As for [`steps`]; `steps` steps were taken.
    #[target_feature(enable = "avx2")]
    unsafe fn finish(&self, lanes: &mut [LaneState], steps: usize, out: &mut [u8]) -> bool {
        if steps == 0 {
            return true;
        }
        if self.tiled {
            for k in steps / TILE * TILE..steps {
                // SAFETY: as in `step`, for the steps the last whole tile left.
                unsafe { write_step::<W>(self.tile[k % TILE], &self.base, k * W, out) };
            }
        }
        let g = &self.g;
        let mut a = [[0u32; 8]; 5];
        for (dst, v) in a.iter_mut().zip([g.x, g.word, g.lit, g.left, g.prev]) {
            // SAFETY: an 8 x u32 array written as one vector.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, v) };
        }
        let mut ok = _mm256_testz_si256(g.err, g.err) == 1;
        for (j, l) in lanes.iter_mut().enumerate() {
            l.x = a[0][j];
            l.word = a[1][j] as usize;
            l.lit = a[2][j] as usize;
            l.i = l.start + steps;
            l.left = a[3][j];
            l.left_sym = a[4][j] as u16;
            ok &= l.word <= l.word_end && l.lit <= l.lit_end;
        }
        ok
    }
}

/// One element of each of a group's eight lanes, returned: `first` at the lanes' first
/// element, `up_ok` where "up" may be taken, `refill` (every other step, the first
/// included) where each lane's next two words are gathered first.
///
/// # Safety
/// As for [`steps`], with `up_ok` only from step `U` on.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn step<const W: usize, const R: bool>(
    p: &Params,
    c: &Consts,
    g: &mut Group,
    out: &[u8],
    first: bool,
    up_ok: bool,
    refill: bool,
) -> __m256i {
    let one = _mm256_set1_epi32(1);
    let low8 = _mm256_set1_epi32(0xff);
    let elem_mask = _mm256_set1_epi32(if W == 2 { 0xffff } else { -1 });
    let table = p.slots.as_ptr() as *const i32;
    let wbase = p.words.as_ptr() as *const i32;
    let obase = out.as_ptr() as *const i32;
    // Context from the left symbol: 0 (none or zero), 1 (a repeat), or
    // 4 + clamp(e - E0, -2, 3) for a literal of top byte e = symbol - 4.
    let d = _mm256_max_epi32(
        _mm256_min_epi32(
            _mm256_sub_epi32(g.prev, c.e0),
            _mm256_set1_epi32(super::CTX_HIGH),
        ),
        _mm256_set1_epi32(super::CTX_LOW),
    );
    let lit_ctx = _mm256_add_epi32(d, _mm256_set1_epi32(super::CTX_LITERAL));
    let literal_left = _mm256_cmpgt_epi32(g.prev, _mm256_set1_epi32(SYM_DICT as i32));
    let ctx = _mm256_blendv_epi8(_mm256_min_epu32(g.prev, one), lit_ctx, literal_left);
    let slot = _mm256_and_si256(g.x, _mm256_set1_epi32((MODEL_SCALE - 1) as i32));
    let idx = _mm256_or_si256(_mm256_slli_epi32::<{ MODEL_PROB_BITS as i32 }>(ctx), slot);
    // SAFETY: ctx < 8 and slot < 2048: idx < 16384 = slots.len().
    let e = unsafe { _mm256_i32gather_epi32::<4>(table, idx) };
    // The slot: symbol | cum << 9 | freq << 20.
    let sym = _mm256_and_si256(e, _mm256_set1_epi32(511));
    let cum = _mm256_and_si256(
        _mm256_srli_epi32::<9>(e),
        _mm256_set1_epi32((MODEL_SCALE - 1) as i32),
    );
    let y = _mm256_add_epi32(
        _mm256_mullo_epi32(
            _mm256_srli_epi32::<20>(e),
            _mm256_srli_epi32::<{ MODEL_PROB_BITS as i32 }>(g.x),
        ),
        _mm256_sub_epi32(slot, cum),
    );
    if refill {
        let widx = _mm256_min_epu32(g.word, c.last_word);
        // SAFETY: widx <= total_words, and 32 bits at word widx are words widx and widx + 1,
        // both below total_words + 2 = words.len() (past total_words both are zero words,
        // what the scalar step reads there). A lane past its own words reads its
        // neighbour's; `steps` refuses it afterwards.
        g.next = unsafe { _mm256_i32gather_epi32::<2>(wbase, widx) };
    }
    let need;
    (g.x, g.next, need) = crate::lanes::avx2::renormalise(y, g.next);
    g.word = _mm256_sub_epi32(g.word, need);
    // The element.
    let is_left = _mm256_cmpeq_epi32(sym, one);
    let is_up = _mm256_cmpeq_epi32(sym, _mm256_set1_epi32(2));
    let is_dict = _mm256_cmpeq_epi32(sym, _mm256_set1_epi32(SYM_DICT as i32));
    let is_lit = _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(SYM_DICT as i32));
    g.err = _mm256_or_si256(
        g.err,
        _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(SYMBOLS as i32 - 1)),
    );
    if first {
        // No left neighbour at a lane's first element.
        g.err = _mm256_or_si256(g.err, is_left);
    }
    let up_val = if up_ok {
        // SAFETY: masked lanes only: up_at = (i - U) W >= start W >= 0 from step U on, and
        // 32 bits there lie in elements i - U .. i (W = 2) or are that element (W = 4),
        // before i < n.
        unsafe {
            _mm256_and_si256(
                _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), obase, g.up_at, is_up),
                elem_mask,
            )
        }
    } else {
        g.err = _mm256_or_si256(g.err, is_up);
        _mm256_setzero_si256()
    };
    g.up_at = _mm256_add_epi32(g.up_at, _mm256_set1_epi32(W as i32));
    // Literals: the top byte from the symbol, the rest from the planes.
    let lidx = _mm256_min_epu32(g.lit, c.last_lit);
    let mut t = _mm256_sll_epi32(
        _mm256_sub_epi32(sym, _mm256_set1_epi32(SYM_LITERAL as i32)),
        _mm_cvtsi32_si128(8 * (W as i32 - 1)),
    );
    for q in 1..W {
        let base = p.planes[q].as_ptr() as *const i32;
        // SAFETY: lidx <= literals, and 32 bits at byte lidx lie within the plane's
        // literals + 4 bytes (a lane past its own literals reads its neighbour's; `steps`
        // refuses it afterwards).
        let b = _mm256_and_si256(unsafe { _mm256_i32gather_epi32::<1>(base, lidx) }, low8);
        t = _mm256_or_si256(
            t,
            _mm256_sll_epi32(b, _mm_cvtsi32_si128(8 * (W - 1 - q) as i32)),
        );
    }
    let lit_val = if R {
        let hi = _mm_cvtsi32_si128(8 * W as i32 - 1);
        _mm256_and_si256(
            _mm256_or_si256(_mm256_srli_epi32::<1>(t), _mm256_sll_epi32(t, hi)),
            elem_mask,
        )
    } else {
        t
    };
    let mut v = _mm256_and_si256(g.left, is_left);
    v = _mm256_or_si256(v, _mm256_and_si256(up_val, is_up));
    v = _mm256_or_si256(v, _mm256_and_si256(c.dict, is_dict));
    v = _mm256_or_si256(v, _mm256_and_si256(lit_val, is_lit));
    g.lit = _mm256_sub_epi32(g.lit, is_lit);
    g.left = v;
    g.prev = sym;
    v
}

/// One step's elements, `v` (one a lane), each at its lane's `base + at`.
///
/// # Safety
/// The CPU must have AVX2; `base[j] + at + W <= out.len()` for every lane `j`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn write_step<const W: usize>(v: __m256i, base: &[usize; 8], at: usize, out: &mut [u8]) {
    let mut vals = [0u32; 8];
    // SAFETY: an 8 x u32 array written as one vector.
    unsafe { _mm256_storeu_si256(vals.as_mut_ptr() as *mut __m256i, v) };
    let o = out.as_mut_ptr();
    for (&b, &val) in base.iter().zip(&vals) {
        // SAFETY: the caller's contract.
        unsafe {
            let dst = o.add(b + at);
            if W == 2 {
                (dst as *mut u16).write_unaligned(val as u16);
            } else {
                (dst as *mut u32).write_unaligned(val);
            }
        }
    }
}

/// Eight steps' elements (`tile[k]`: step `k`, one a lane) written out transposed: each
/// lane's eight elements as one store at its `base + at`.
///
/// # Safety
/// The CPU must have AVX2; `base[j] + at + 8 W <= out.len()` for every lane `j`; for
/// `W = 2` every element below 2^16.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn write_tile<const W: usize>(
    tile: &[__m256i; TILE],
    base: &[usize; 8],
    at: usize,
    out: &mut [u8],
) {
    let o = out.as_mut_ptr();
    // Per 128-bit half (lanes 0-3, lanes 4-7) the same shuffles; `rows[r]` ends holding lane
    // `r`'s elements in its low half and lane `r + 4`'s in its high half.
    let rows: [__m256i; 4];
    let wide: [__m256i; 8];
    if W == 2 {
        // a_k = steps 2k, 2k+1 as u16: [s2k l0..l3, s2k+1 l0..l3] per half.
        let a: [__m256i; 4] =
            std::array::from_fn(|k| _mm256_packus_epi32(tile[2 * k], tile[2 * k + 1]));
        // [s0 l, s2 l, ...] and [s1 l, s3 l, ...] for the four lanes of a half.
        let lo01 = _mm256_unpacklo_epi16(a[0], a[1]);
        let hi01 = _mm256_unpackhi_epi16(a[0], a[1]);
        let lo23 = _mm256_unpacklo_epi16(a[2], a[3]);
        let hi23 = _mm256_unpackhi_epi16(a[2], a[3]);
        // Steps 0-3 (then 4-7) of lanes 0, 1 (then 2, 3) of a half.
        let c01 = _mm256_unpacklo_epi16(lo01, hi01);
        let c23 = _mm256_unpackhi_epi16(lo01, hi01);
        let d01 = _mm256_unpacklo_epi16(lo23, hi23);
        let d23 = _mm256_unpackhi_epi16(lo23, hi23);
        rows = [
            _mm256_unpacklo_epi64(c01, d01),
            _mm256_unpackhi_epi64(c01, d01),
            _mm256_unpacklo_epi64(c23, d23),
            _mm256_unpackhi_epi64(c23, d23),
        ];
        for (r, row) in rows.iter().enumerate() {
            // SAFETY: the caller's contract: 16 bytes at each lane's base + at.
            unsafe {
                _mm_storeu_si128(
                    o.add(base[r] + at) as *mut __m128i,
                    _mm256_castsi256_si128(*row),
                );
                _mm_storeu_si128(
                    o.add(base[r + 4] + at) as *mut __m128i,
                    _mm256_extracti128_si256::<1>(*row),
                );
            }
        }
    } else {
        // An 8 x 8 transpose of 32-bit elements.
        let t: [__m256i; 8] = std::array::from_fn(|k| {
            let (x, y) = (tile[k & !1], tile[k | 1]);
            match k % 2 {
                0 => _mm256_unpacklo_epi32(x, y),
                _ => _mm256_unpackhi_epi32(x, y),
            }
        });
        // t[0] = [s0 l0, s1 l0, s0 l1, s1 l1 | l4, l5], t[1] = lanes 2, 3 | 6, 7, ...
        let u: [__m256i; 8] = std::array::from_fn(|k| {
            // Pair steps 0-1 with 2-3 (k < 4), 4-5 with 6-7.
            let half = k / 4 * 4;
            let (x, y) = (t[half + k % 2], t[half + 2 + k % 2]);
            match (k / 2) % 2 {
                0 => _mm256_unpacklo_epi64(x, y),
                _ => _mm256_unpackhi_epi64(x, y),
            }
        });
        // u[0] = steps 0-3 of lane 0 | lane 4, u[2] = lane 1 | 5, u[1] = lane 2 | 6,
        // u[3] = lane 3 | 7; u[4..8] the same for steps 4-7.
        wide = std::array::from_fn(|j| {
            let r = [0, 2, 1, 3][j % 4];
            match j / 4 {
                0 => _mm256_permute2x128_si256::<0x20>(u[r], u[4 + r]),
                _ => _mm256_permute2x128_si256::<0x31>(u[r], u[4 + r]),
            }
        });
        for (j, row) in wide.iter().enumerate() {
            // SAFETY: the caller's contract: 32 bytes at each lane's base + at.
            unsafe { _mm256_storeu_si256(o.add(base[j] + at) as *mut __m256i, *row) };
        }
    }
}
