//! The modelled lanes' AVX2 decoder: eight lanes in lockstep, one per 32-bit element, the
//! scalar `step`'s arithmetic and rules with every branch a mask.

use super::SYM_LITERAL;
use super::{LaneState, Params, L, MODEL_PROB_BITS, MODEL_SCALE, SYMBOLS, SYM_DICT};
use std::arch::x86_64::*;

/// Eight lanes' decoder state, one lane per 32-bit element.
struct Group {
    x: __m256i,
    word: __m256i,
    word_end: __m256i,
    lit: __m256i,
    lit_end: __m256i,
    i: __m256i,
    start: __m256i,
    left: __m256i,
    /// The left neighbour's symbol (0 at a lane's start, as a zero).
    prev: __m256i,
    has_left: __m256i,
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
    u: __m256i,
    has_u: __m256i,
    dict: __m256i,
}

#[target_feature(enable = "avx2")]
fn load(lanes: &[LaneState]) -> Group {
    let get = |f: &dyn Fn(&LaneState) -> i32| {
        let mut a = [0i32; 8];
        for (v, l) in a.iter_mut().zip(lanes.iter()) {
            *v = f(l);
        }
        // SAFETY: an 8 x i32 array read as one vector.
        unsafe { _mm256_loadu_si256(a.as_ptr() as *const __m256i) }
    };
    Group {
        x: get(&|l| l.x as i32),
        word: get(&|l| l.word as i32),
        word_end: get(&|l| l.word_end as i32),
        lit: get(&|l| l.lit as i32),
        lit_end: get(&|l| l.lit_end as i32),
        i: get(&|l| l.i as i32),
        start: get(&|l| l.start as i32),
        left: get(&|l| l.left as i32),
        prev: get(&|l| match l.left_sym {
            super::NONE => 0,
            s => s as i32,
        }),
        has_left: get(&|l| if l.left_sym == super::NONE { 0 } else { -1 }),
        err: _mm256_setzero_si256(),
        next: _mm256_setzero_si256(),
    }
}

#[target_feature(enable = "avx2")]
fn store(g: &Group, lanes: &mut [LaneState]) -> bool {
    let mut a = [[0u32; 8]; 8];
    for (dst, v) in a
        .iter_mut()
        .zip([g.x, g.word, g.lit, g.i, g.left, g.prev, g.has_left, g.err])
    {
        // SAFETY: an 8 x u32 array written as one vector.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, v) };
    }
    for (j, l) in lanes.iter_mut().enumerate() {
        l.x = a[0][j];
        l.word = a[1][j] as usize;
        l.lit = a[2][j] as usize;
        l.i = a[3][j] as usize;
        l.left = a[4][j];
        l.left_sym = if a[6][j] == 0 {
            super::NONE
        } else {
            a[5][j] as u16
        };
    }
    a[7].iter().all(|&e| e == 0)
}

/// Decode `steps` elements of each lane of `groups` (one or more groups of eight lanes)
/// in lockstep, one lane per AVX2 element, the groups' steps interleaved so that their
/// dependency chains (two gathers a step) overlap: the scalar `step`'s arithmetic and
/// rules, with every branch a mask. Returns false if a lane broke a rule (the caller
/// reports the stream corrupt; the states are then meaningless).
///
/// # Safety
/// The CPU must have AVX2. `lanes` must be `8 * G` lanes, each with at least `steps`
/// elements left; `p.words` must hold `p.total_words + 2` words and each literal plane
/// `p.literals + 4` bytes; `W` is 2 or 4.
#[target_feature(enable = "avx2")]
pub unsafe fn steps<const W: usize, const R: bool, const G: usize>(
    p: &Params,
    lanes: &mut [LaneState],
    steps: usize,
    out: &mut [u8],
) -> bool {
    debug_assert!(lanes.len() == 8 * G && (W == 2 || W == 4));
    let c = Consts {
        e0: _mm256_set1_epi32(p.e0 as i32 + SYM_LITERAL as i32),
        last_word: _mm256_set1_epi32(p.total_words as i32),
        last_lit: _mm256_set1_epi32(p.literals as i32),
        u: _mm256_set1_epi32(p.u as i32),
        // (A U past i32's range, which a damaged header can give, would compare as negative
        // below and let "up" read before the output: no element can copy one that far back.)
        has_u: if (1..=i32::MAX as usize).contains(&p.u) {
            _mm256_set1_epi32(-1)
        } else {
            _mm256_setzero_si256()
        },
        dict: _mm256_set1_epi32(p.dict as i32),
    };
    let mut gs: [Group; G] = std::array::from_fn(|g| load(&lanes[8 * g..8 * g + 8]));
    for k in 0..steps {
        for g in gs.iter_mut() {
            // SAFETY: the caller's contract, passed on.
            unsafe { step::<W, R>(p, &c, g, out, k % 2 == 0) };
        }
    }
    let mut ok = true;
    for (g, chunk) in gs.iter().zip(lanes.chunks_exact_mut(8)) {
        ok &= store(g, chunk);
    }
    ok
}

/// One element of each of a group's eight lanes; with `refill` (every other step, the first
/// included), each lane's next two words are gathered first.
///
/// # Safety
/// As for [`steps`].
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn step<const W: usize, const R: bool>(
    p: &Params,
    c: &Consts,
    g: &mut Group,
    out: &mut [u8],
    refill: bool,
) {
    let ones = _mm256_set1_epi32(-1);
    let one = _mm256_set1_epi32(1);
    let two = _mm256_set1_epi32(2);
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
    let sym = _mm256_and_si256(e, _mm256_set1_epi32(511));
    let f = _mm256_add_epi32(
        _mm256_and_si256(_mm256_srli_epi32::<9>(e), _mm256_set1_epi32(2047)),
        one,
    );
    let y = _mm256_sub_epi32(
        _mm256_add_epi32(
            _mm256_mullo_epi32(f, _mm256_srli_epi32::<{ MODEL_PROB_BITS as i32 }>(g.x)),
            slot,
        ),
        _mm256_srli_epi32::<20>(e),
    );
    let need = _mm256_cmpeq_epi32(_mm256_min_epu32(y, _mm256_set1_epi32((L - 1) as i32)), y);
    // A lane that needs a word it does not have.
    g.err = _mm256_or_si256(
        g.err,
        _mm256_andnot_si256(_mm256_cmpgt_epi32(g.word_end, g.word), need),
    );
    if refill {
        let widx = _mm256_min_epu32(g.word, c.last_word);
        // SAFETY: widx <= total_words, and 32 bits at word widx are words widx and widx + 1,
        // both below total_words + 2 = words.len() (past total_words both are zero words,
        // what the scalar step reads there).
        g.next = unsafe { _mm256_i32gather_epi32::<2>(wbase, widx) };
    }
    let w = _mm256_and_si256(g.next, _mm256_set1_epi32(0xffff));
    g.x = _mm256_blendv_epi8(y, _mm256_or_si256(_mm256_slli_epi32::<16>(y), w), need);
    g.word = _mm256_sub_epi32(g.word, need);
    g.next = _mm256_blendv_epi8(g.next, _mm256_srli_epi32::<16>(g.next), need);
    // The element.
    let is_left = _mm256_cmpeq_epi32(sym, one);
    let is_up = _mm256_cmpeq_epi32(sym, two);
    let is_dict = _mm256_cmpeq_epi32(sym, _mm256_set1_epi32(SYM_DICT as i32));
    let is_lit = _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(SYM_DICT as i32));
    g.err = _mm256_or_si256(
        g.err,
        _mm256_cmpgt_epi32(sym, _mm256_set1_epi32(SYMBOLS as i32 - 1)),
    );
    g.err = _mm256_or_si256(g.err, _mm256_andnot_si256(g.has_left, is_left));
    // Up: U > 0 and i - start >= U.
    let up_ok = _mm256_and_si256(
        c.has_u,
        _mm256_cmpgt_epi32(_mm256_sub_epi32(g.i, g.start), _mm256_sub_epi32(c.u, one)),
    );
    g.err = _mm256_or_si256(g.err, _mm256_andnot_si256(up_ok, is_up));
    let up_take = _mm256_and_si256(is_up, up_ok);
    let up_val = if _mm256_testz_si256(up_take, up_take) == 1 {
        _mm256_setzero_si256()
    } else {
        // SAFETY: masked lanes only: i - U >= start >= 0, and 32 bits at element i - U
        // lie in elements i - U .. i (W = 2) or are that element (W = 4), before i < n.
        unsafe {
            let at = _mm256_mullo_epi32(_mm256_sub_epi32(g.i, c.u), _mm256_set1_epi32(W as i32));
            _mm256_and_si256(
                _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), obase, at, up_take),
                elem_mask,
            )
        }
    };
    // Literals: the top byte from the symbol, the rest from the planes.
    g.err = _mm256_or_si256(
        g.err,
        _mm256_andnot_si256(_mm256_cmpgt_epi32(g.lit_end, g.lit), is_lit),
    );
    let lidx = _mm256_min_epu32(g.lit, c.last_lit);
    let mut t = _mm256_sll_epi32(
        _mm256_sub_epi32(sym, _mm256_set1_epi32(SYM_LITERAL as i32)),
        _mm_cvtsi32_si128(8 * (W as i32 - 1)),
    );
    for q in 1..W {
        let base = p.planes[q].as_ptr() as *const i32;
        // SAFETY: lidx <= literals, and 32 bits at byte lidx lie within the plane's
        // literals + 4 bytes.
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
    let mut vals = [0u32; 8];
    let mut idxs = [0u32; 8];
    // SAFETY: 8 x u32 arrays written as vectors.
    unsafe {
        _mm256_storeu_si256(vals.as_mut_ptr() as *mut __m256i, v);
        _mm256_storeu_si256(idxs.as_mut_ptr() as *mut __m256i, g.i);
    }
    let o = out.as_mut_ptr();
    for (&at, &val) in idxs.iter().zip(&vals) {
        // SAFETY: every lane's element index is below its end <= n = out.len() / W (the
        // caller's contract: each lane has `steps` elements left), so the W bytes at
        // at * W are inside `out`.
        unsafe {
            let dst = o.add(at as usize * W);
            if W == 2 {
                (dst as *mut u16).write_unaligned(val as u16);
            } else {
                (dst as *mut u32).write_unaligned(val);
            }
        }
    }
    g.i = _mm256_add_epi32(g.i, one);
    g.left = v;
    g.prev = sym;
    g.has_left = ones;
}
