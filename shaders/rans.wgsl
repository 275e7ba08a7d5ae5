// Byte-plane rANS stream decoder (docs/format-rans.md), one workgroup per chunk, or on GPUs
// one per chunk and plane (the phases, above `run`).
//
// The host prepends `const W: u32` (element width in bytes: 1, 2 or 4), so each width is its
// own pipeline. It has checked the stream header (and row map) and located every chunk
// (`chunk_off`, byte offsets of the chunks' payloads, one more entry for the end of the
// last). Here, for each plane of the chunk in order (the mask plane first in a sparse chunk):
//
// 1. every invocation parses the plane's kind and frequency table from the stream (the reads
//    are the same for all, so the control flow stays uniform and no broadcast is needed);
//    the table becomes `fc` (frequency | cumulative << 16 per symbol) with one prefix sum, and
//    the 4096-slot decode table `slots` (a symbol per byte) with each invocation filling 128
//    slots;
// 2. a prefix sum over the lanes' word counts gives each lane its first word;
// 3. each lane is decoded by its own invocation, 128 symbols at a time into workgroup memory
//    (`stage`, four of a lane's symbols to a word, so no two invocations write one word), from
//    where all invocations gather whole words of the plane into this chunk's region of
//    `scratch`; a lane loads the three stream words its next four symbols can need at once
//    (`Window`) and refills from them without a read, and `stage` keeps the block before as
//    well, where a row or sign plane's lane finds four symbols one row up in one or two reads
//    (`ring_up`)
//
// (a version-4 context plane, plane 1 of a dense or sparse chunk, has no table of its own:
// each symbol's table is the stream's context table of its element's plane-0 byte, in
// `chunk_off` after the chunk offsets, its index by byte copied into `fc` when the plane
// starts; plane 0 is already in scratch);
//
// (a version-6 row plane, plane 0 of a dense chunk, neither: each symbol's table is the
// stream's row table of the plane-0 byte U symbols back, which its own lane decoded U / k
// rounds earlier: from the lane's own `stage` ring while that round is in the current block
// of 128 or the one before, else from scratch, where an earlier block was gathered);
//
// (a version-5 difference chunk's planes are the elements' folded steps: after them, each
// invocation sums its block, a workgroup scan gives each block its start, and each block is
// summed again into the output);
//
// then the chunk's elements are rebuilt from the planes (in a sparse chunk, a prefix sum over
// the mask's popcounts gives each run of 32 elements its first nonzero element), rotated back
// and written to `out` as whole words.
//
// Why this shape: the lanes are the format's unit of parallelism (independent streams, no
// cross-lane step per symbol); a chunk's planes need all their lanes before elements can be
// joined, so the planes go through device memory (a 64 KiB chunk does not fit in workgroup
// memory), and the decode table, read once per symbol, lives in workgroup memory (4 KiB of
// symbols, 1 KiB of frequencies; with the ranks and the stage ring, nearly all of the 16 KiB
// every WebGPU device has: the shaders test checks the bound).
//
// Untrusted input: every stream read is bounds-checked (`word`), every loop is bounded by the
// chunk's element count, writes go only to this chunk's scratch region and output words, and
// every rule of the format the CPU decoder checks is checked here; a broken one sets a bit in
// `status[0]` and the chunk's index in `status[1]`, and the host returns an error.

struct Params {
    n_chunks: u32,
    chunks_x: u32,
    // Elements per chunk (K) and coded elements in all chunks (E).
    chunk_elems: u32,
    elems: u32,
    // Words of scratch per chunk, and where the mask plane starts in them (bytes).
    scratch_words: u32,
    mask_at: u32,
    // Where a modelled chunk's context tables start in its scratch region (words).
    model_at: u32,
    // 1 if elements were rotated.
    rotate: u32,
    // The tail (bytes after the last whole element, at most 3) as a little-endian word, and
    // its length; 0 when a row map follows (the output is then the body only).
    tail: u32,
    tail_len: u32,
    // Version 4: the context tables' first word in `chunk_off` (0: none; planepack-gpu's
    // rans.rs lays them out).
    ctx_at: u32,
    // 1 if the stream's tables are compact (flag bit 2).
    compact_tables: u32,
    // Version 6: the row tables' first word in `chunk_off` (0: none), laid out as the context
    // tables but indexed by the plane-0 byte one row up; the row distance U; the first row's
    // table (CTX_ABSENT: none).
    row_at: u32,
    row_distance: u32,
    row_first: u32,
    // Version 7: 1 if a row plane's lane count may be any up to U (else it divides U).
    row_across: u32,
    // 1 if a modelled chunk's scratch has room for its decode slots (`model_slots`), else
    // its lanes search the context tables' ranks.
    model_slots: u32,
    // Version 8: the sign tables' first word in `chunk_off` (0: none): SIGN_CLASSES indices
    // by plane-0 byte (one per class of the symbol one row up: none, low bit 0, low bit 1),
    // then the tables.
    sign_at: u32,
    // PHASE_OTHER: the chunks it decodes, `n_other` chunk indices from word `other_at` of
    // `chunk_off` (the host's list of every chunk whose mode is `other_mode`).
    other_at: u32,
    n_other: u32,
}

@group(0) @binding(0) var<storage, read> stream: array<u32>;
@group(0) @binding(1) var<storage, read> chunk_off: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> scratch: array<u32>;

// The format's constants (CHUNK_*, PLANE_*, L, MAX_LANES, LIST_MAX, MODEL_*, SYM_*, CTX_*) are
// generated from planepack-rans by planepack-gpu's contract.rs.
const WG: u32 = 32u;
const WMASK: u32 = 0xffffffffu >> (32u - 8u * W);
const MODEL_SCALE: u32 = 1u << MODEL_PROB_BITS;
// A context table in scratch: its symbol count, then 260 rank entries (end of the symbol's
// slot range | symbol << 16, by increasing symbol).
const MT_CTX_WORDS: u32 = 1u + MODEL_SYMBOLS;
// After the rank tables (MODEL_RANK_WORDS = MODEL_CONTEXTS * MT_CTX_WORDS), each context's
// MODEL_SCALE decode slots (`model_slots`), where `params.model_slots` says they fit.
// Where a literal's plane-1 byte goes: byte W - 2 of its rotated value (for W = 2 and 4; the
// modulus keeps the constant a valid shift for W = 1, where no literal has planes).
const LIT_SHIFT_1: u32 = (8u * W + 16u) % 32u;

// The decode table: symbol of slot `i` in byte `i % 4` of word `i / 4`.
var<workgroup> slots: array<u32, 1024>;
// Per symbol: frequency | cumulative frequency << 16 (while a context, row or sign plane is
// decoded, which has no table of its own: the stream tables' indices by byte instead).
var<workgroup> fc: array<u32, 256>;
// Per present symbol in increasing order (its rank): the end of its slot range, the symbol.
var<workgroup> rank_end: array<u32, 256>;
var<workgroup> rank_sym: array<u32, 256>;
// Lanes not taken four at a time: for each of up to 32 lanes, two blocks of 128 rounds, four
// rounds a word (a ring: the block being decoded and the one before it, where a row or sign
// plane's lane finds the symbols one row up).
var<workgroup> stage: array<u32, 2048>;
var<workgroup> lane_x: array<u32, 32>;
var<workgroup> lane_pos: array<u32, 32>;

// This chunk's stream bytes [cpos, cend) and scratch region.
var<private> cend: u32;
var<private> sbase: u32;
// A modelled chunk: the stream byte after its context tables (invocation 0 parses them).
var<workgroup> model_next: u32;

fn byte_at(b: u32) -> u32 {
    return (word(b >> 2u) >> ((b & 3u) * 8u)) & 0xffu;
}

// A little-endian u16 / u32 at byte `b`; a read past the chunk sets ERR_OVERRUN.
fn u16_at(b: u32) -> u32 {
    return byte_at(b) | (byte_at(b + 1u) << 8u);
}

fn u32_at(b: u32) -> u32 {
    return u16_at(b) | (u16_at(b + 2u) << 16u);
}

fn need(b: u32, n: u32) {
    if (b + n > cend || b + n < b) {
        err = err | ERR_OVERRUN;
    }
}

// 4 stream bytes from byte `b` (any alignment).
fn bytes4(b: u32) -> u32 {
    let sh = (b & 3u) * 8u;
    let lo = word(b >> 2u) >> sh;
    return select(lo | (word((b >> 2u) + 1u) << (32u - sh)), lo, sh == 0u);
}

// Byte `i` of the scratch region.
fn sbyte(i: u32) -> u32 {
    return (scratch[sbase + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
}

// 4 bytes of the scratch region from byte `b` (any alignment).
fn plane_word(b: u32) -> u32 {
    let i = sbase + (b >> 2u);
    let sh = (b & 3u) * 8u;
    if (sh == 0u) {
        return scratch[i];
    }
    return (scratch[i] >> sh) | (scratch[i + 1u] << (32u - sh));
}

// Keep the low `n` bytes of a word (n in 1..4).
fn low_bytes(v: u32, n: u32) -> u32 {
    return select(v & ((1u << (8u * n)) - 1u), v, n >= 4u);
}

// One decoding step of a lane with state `x` whose next words are in its window `w`: returns
// the symbol (the format's decoding rule, docs/format-rans.md "Lanes").
fn step(x: ptr<function, u32>, w: ptr<function, Window>) -> u32 {
    let sl = *x & 4095u;
    let sym = (slots[sl >> 2u] >> ((sl & 3u) * 8u)) & 0xffu;
    return advance(x, w, sym, fc[sym]);
}

// A lane's next stream bytes for four steps (at most four u16, eight bytes from byte `b`):
// the three words from word b / 4, with the bit offset of byte `b` in them. Read with the index
// clamped and no error bit: a lane that reads past its own words fails the end check of
// `plane_lanes` (its position must end where the next lane's words start), and every lane's
// words lie inside the stream (`need`).
struct Window {
    w0: u32,
    w1: u32,
    w2: u32,
    o: u32,
}

fn window_at(b: u32) -> Window {
    let last = arrayLength(&stream) - 1u;
    let i = b >> 2u;
    return Window(stream[min(i, last)], stream[min(i + 1u, last)], stream[min(i + 2u, last)], (b & 3u) * 8u);
}

// The byte after what a window has given out.
fn window_end(b: u32, w: Window) -> u32 {
    return (b & ~3u) + w.o / 8u;
}

// The stage word of `lane`'s round `r` (four rounds a word): a ring of 64 words a lane, so a
// block of up to 128 rounds and the block before it are both there (blocks start on multiples
// of four rounds).
fn ring_at(lane: u32, r: u32) -> u32 {
    return lane * 64u + (r / 4u) % 64u;
}

// The symbol one row up of a lane's round `rr` (at least `qrows`, the rounds a row takes),
// whose symbol is at scratch byte `at`: in the lane's word being built (`w`, rounds from
// rb + 4t), in an earlier stage word of the block (rounds from `rb`), or in scratch (an
// earlier block).
fn lane_up(w: u32, rr: u32, rb: u32, t: u32, qrows: u32, at: u32) -> u32 {
    let ru = rr - qrows;
    if (ru >= rb + 4u * t) {
        return (w >> (8u * (ru - rb - 4u * t))) & 0xffu;
    }
    if (ru >= rb) {
        return (stage[ring_at(slot, ru)] >> (8u * (ru % 4u))) & 0xffu;
    }
    return sbyte(at - params.row_distance);
}

// The symbols one row up of a lane's rounds rr0 .. rr0 + 3 (rr0 a multiple of 4), a byte each,
// where they are all in the lane's stage ring (4 <= qrows <= 128: in an earlier word of this
// block or in the block before); the bytes of rounds in the first row mean nothing. One or two
// ring reads for four symbols (`lane_up` makes two reads a symbol on lavapipe, which runs
// both of its branches).
fn ring_up(rr0: u32, qrows: u32) -> u32 {
    // The ring holds 256 rounds: 256 more rounds back is the same word.
    let ru = rr0 + 256u - qrows;
    let s = (ru % 4u) * 8u;
    let lo = stage[ring_at(slot, ru)];
    let hi = stage[ring_at(slot, ru + 4u)];
    return select((lo >> s) | (hi << (32u - s)), lo, s == 0u);
}

// No context plane may follow (`plane`'s `top`).
const NO_CONTEXT: u32 = 0xffffffffu;
// The plane may be a row plane (`plane`'s `top`: plane 0 of a dense chunk).
const ROW_PLANE: u32 = 0xfffffffeu;
// The plane may be a context plane or a sign plane (`plane`'s `top`: plane 1 of a dense
// chunk, whose plane 0 is at scratch byte 0).
const DENSE_PLANE_1: u32 = 0xfffffffdu;

// The stream's table of an element whose plane-0 byte (or, for a row plane, the byte one row
// up) is `e` (CTX_ABSENT: none), from the plane's table indices that `plane_lanes` copied into
// `fc` (`at`: the sign class's first word there, else 0).
fn context_table(at: u32, e: u32) -> u32 {
    return (fc[at + e / 4u] >> ((e % 4u) * 8u)) & 0xffu;
}

// `step` with table `t` of the stream's tables at `tables` (a context or row plane).
fn step_in(x: ptr<function, u32>, w: ptr<function, Window>, tables: u32, t: u32) -> u32 {
    // The slot's entry: symbol | cum << SLOT_CUM_SHIFT | (freq - 1) << SLOT_FREQ_SHIFT.
    let e = chunk_off[tables + CTX_INDEX_WORDS + t * CTX_TABLE_WORDS + (*x & 4095u)];
    let cum = (e >> SLOT_CUM_SHIFT) & ((1u << PROB_BITS) - 1u);
    return advance(x, w, e & 0xffu, ((e >> SLOT_FREQ_SHIFT) + 1u) | (cum << 16u));
}

// Table `tb` of a context, row or sign plane's step, where it exists; CTX_ABSENT (a context
// without a table) is an error, decoded with table 0.
fn present_table(tb: u32) -> u32 {
    if (tb == CTX_ABSENT) {
        err = err | ERR_VALUE;
        return 0u;
    }
    return tb;
}

// A context plane's step: the context table of its element's plane-0 byte `e`.
fn context_step(x: ptr<function, u32>, w: ptr<function, Window>, e: u32) -> u32 {
    return step_in(x, w, params.ctx_at, present_table(context_table(0u, e)));
}

// A sign plane's step: the sign table of the element's plane-0 byte `e` under the class of the
// symbol one row up, `up` (`first`: none).
fn sign_step(x: ptr<function, u32>, w: ptr<function, Window>, first: bool, up: u32, e: u32) -> u32 {
    let cls = select(1u + (up & 1u), 0u, first);
    let tb = present_table(context_table(cls * CTX_INDEX_WORDS, e));
    return step_in(x, w, params.sign_at + (SIGN_CLASSES - 1u) * CTX_INDEX_WORDS, tb);
}

// `step_in` with row table `tb` (`context_table` of the symbol one row up, or the first row's).
fn row_step(x: ptr<function, u32>, w: ptr<function, Window>, tb: u32) -> u32 {
    return step_in(x, w, params.row_at, present_table(tb));
}

// A step of a row plane (`signs` false: the row table of `up`, the symbol one row up, or the
// first row's) or a sign plane (the sign table of the element's plane-0 byte, at scratch byte
// `e_at`, under `up`'s class) whose lanes run across rows; `first`: the element is in the
// first row.
fn across_step(x: ptr<function, u32>, w: ptr<function, Window>, signs: bool, first: bool, up: u32, e_at: u32) -> u32 {
    if (signs) {
        return sign_step(x, w, first, up, sbyte(e_at));
    }
    var tb = params.row_first;
    if (!first) {
        tb = context_table(0u, up);
    }
    return row_step(x, w, tb);
}

// The state after symbol `sym` of slot `x mod 4096` with `e` = its frequency | cumulative <<
// 16, and the lane's next u16 taken from its window `w` if the state fell below L (no memory
// read: on lavapipe every read a lane makes is a loop over the vector's invocations).
fn advance(x: ptr<function, u32>, w: ptr<function, Window>, sym: u32, e: u32) -> u32 {
    let xi = *x;
    let sl = xi & 4095u;
    *x = refill((e & 0xffffu) * (xi >> 12u) + sl - (e >> 16u), w);
    return sym;
}

// State `y` after a step, renormalised: below L, shifted up by the lane's next u16 from its
// window `w` (taken with shifts and selects, no read).
fn refill(y: u32, w: ptr<function, Window>) -> u32 {
    let o = (*w).o;
    let lo = select(select((*w).w2, (*w).w1, o < 64u), (*w).w0, o < 32u);
    let hi = select((*w).w2, (*w).w1, o < 32u);
    let s = o & 31u;
    let v = select((lo >> s) | (hi << (32u - s)), lo, s == 0u) & 0xffffu;
    let r = y < L;
    (*w).o = o + select(0u, 16u, r);
    return select(y, (y << 16u) | v, r);
}

// Decode the plane of `m` symbols at stream byte `at` into scratch bytes [dst, dst + m) (dst
// a multiple of 4). Returns the byte after the plane. Called by every invocation, with the
// same arguments. `top`: where plane 0 of the same elements is in scratch if this plane may
// be a context plane (plane 1 of a version-4 stream's sparse chunk), DENSE_PLANE_1 if it may
// be a context or sign plane (plane 1 of a dense chunk: plane 0 at scratch byte 0), ROW_PLANE
// if it may be a row plane (plane 0 of a dense chunk), else NO_CONTEXT. (A sign plane is
// decoded as a context plane is, in the phases below: after plane 0.)
//
// `how`: DECODE, SKIP (parse only, to find the plane's end: the tables and lane headers are
// checked, nothing is written to scratch), DEFER_CONTEXT (decode unless it is a context plane)
// or ONLY_CONTEXT (decode only if it is one): the plane-parallel phases below; HOLD: as
// DECODE, but a constant or raw plane is not written: `held` says where the join finds it
// (its byte, or its bytes in the stream), and the join then reads no scratch for it (planes 1
// to 3 of a sparse tensor's chunks are often constant, an embedding's mantissa planes raw; the
// join and the copies were most of their decode).
fn plane(at: u32, m: u32, dst: u32, top_or: u32, how: u32) -> u32 {
    need(at, 1u);
    let kind = byte_at(at);
    let words = (m + 3u) / 4u;
    let dw = sbase + dst / 4u;
    let dense1 = top_or == DENSE_PLANE_1;
    let top = select(top_or, 0u, dense1);
    let rows = kind == PLANE_ROW_CONTEXT && top == ROW_PLANE && params.row_at != 0u;
    let signs = kind == PLANE_SIGN && dense1 && W == 2u && params.sign_at != 0u;
    let contexts = (kind == PLANE_CONTEXT && top != NO_CONTEXT && top != ROW_PLANE
        && params.ctx_at != 0u) || signs;
    let decode = how == DECODE || how == HOLD || (how == DEFER_CONTEXT && !contexts)
        || (how == ONLY_CONTEXT && contexts);
    if (kind == PLANE_RAW) {
        need(at + 1u, m);
        if (how == HOLD) {
            held = vec2<u32>(HELD_RAW, at + 1u);
            return at + 1u + m;
        }
        for (var q = slot; q < words && decode; q = q + WG) {
            scratch[dw + q] = low_bytes(bytes4(at + 1u + 4u * q), m - 4u * q);
        }
        return at + 1u + m;
    }
    if (kind == PLANE_CONST) {
        need(at + 1u, 1u);
        if (how == HOLD) {
            held = vec2<u32>(HELD_CONST, byte_at(at + 1u) * 0x01010101u);
            return at + 2u;
        }
        let s = byte_at(at + 1u) * 0x01010101u;
        for (var q = slot; q < words && decode; q = q + WG) {
            scratch[dw + q] = low_bytes(s, m - 4u * q);
        }
        return at + 2u;
    }
    if (kind != PLANE_RANS && !contexts && !rows) {
        err = err | ERR_TAG;
        return cend;
    }
    var lh = at + 1u;
    if (contexts) {
        // Plane 0, written by every invocation (or by an earlier dispatch), is read below by
        // the lanes.
        storageBarrier();
    } else if (!rows) {
        lh = plane_table(at);
    }
    return plane_lanes(lh, m, dst, top, contexts && !signs, rows, signs, decode);
}

// `plane` where the chunk has bytes left; past its end (an earlier plane's error returns the
// chunk's end) the chunk is short, not complete.
fn next_plane(at: u32, m: u32, dst: u32, top: u32, how: u32) -> u32 {
    if (at >= cend) {
        err = err | ERR_OVERRUN;
        return at;
    }
    return plane(at, m, dst, top, how);
}

// `plane`'s `how`.
const DECODE: u32 = 0u;
const SKIP: u32 = 1u;
const DEFER_CONTEXT: u32 = 2u;
const ONLY_CONTEXT: u32 = 3u;
const HOLD: u32 = 4u;

// `plane` under HOLD: (HELD_CONST, the byte four times) or (HELD_RAW, the stream byte where
// its symbols start), left as the caller set it, (HELD_NONE, 0), for a plane written to
// scratch; per plane of the chunk being joined, as `planes_of` left them (all HELD_NONE where the join is a dispatch of its
// own: every plane is then in scratch).
const HELD_NONE: u32 = 0u;
const HELD_CONST: u32 = 1u;
const HELD_RAW: u32 = 2u;
var<private> held: vec2<u32>;
var<private> held_planes: array<vec2<u32>, 4>;

// 4 bytes of plane `p` (which starts at scratch byte `p * K`) from its byte `b` (any
// alignment): from scratch, the held constant, or the stream.
fn plane_word_at(p: u32, K: u32, b: u32) -> u32 {
    let h = held_planes[p];
    if (h.x == HELD_CONST) {
        return h.y;
    }
    if (h.x == HELD_RAW) {
        return bytes4(h.y + b);
    }
    return plane_word(p * K + b);
}

// Byte `i` of plane `p` (as `plane_word_at`).
fn plane_byte_at(p: u32, K: u32, i: u32) -> u32 {
    let h = held_planes[p];
    if (h.x == HELD_CONST) {
        return h.y & 0xffu;
    }
    if (h.x == HELD_RAW) {
        return byte_at(h.y + i);
    }
    return sbyte(p * K + i);
}

// A rANS plane's frequency table at stream byte `at` (its kind byte) into the workgroup's
// decode table (`slots`, `fc`); returns the byte after it. Every invocation takes up to 8
// symbols by rank (`first_rank` on), their symbols and frequencies, then `table_slots` builds
// the decode table from them.
fn plane_table(at: u32) -> u32 {
    if (params.compact_tables != 0u) {
        return plane_table_compact(at);
    }
    // The wide table: P symbols, listed or as a 256-bit map, then P u16 frequencies.
    need(at + 1u, 1u);
    let p = byte_at(at + 1u) + 1u;
    let listed = p <= LIST_MAX;
    let sym_at = at + 2u;
    let freq_at = sym_at + select(32u, p, listed);
    need(freq_at, 2u * p);
    // Each invocation takes 8 symbols: in a list, entry `slot` (if any); in a map, the
    // symbols of map byte `slot`.
    var f8: array<u32, 8>;
    var s8: array<u32, 8>;
    var mine = 0u;
    var first_rank = slot;
    if (listed) {
        if (slot < p) {
            s8[0] = byte_at(sym_at + slot);
            f8[0] = u16_at(freq_at + 2u * slot);
            mine = 1u;
            if (slot > 0u && byte_at(sym_at + slot - 1u) >= s8[0]) {
                err = err | ERR_SYMBOL;
            }
        }
    } else {
        let bits = byte_at(sym_at + slot);
        // Rank of this byte's first symbol among the present ones.
        let rank = scan(countOneBits(bits));
        if (rank.y != p) {
            err = err | ERR_SYMBOL;
        }
        var r = rank.x;
        first_rank = rank.x;
        for (var b = 0u; b < 8u; b = b + 1u) {
            if (((bits >> b) & 1u) != 0u) {
                s8[mine] = slot * 8u + b;
                f8[mine] = u16_at(freq_at + 2u * min(r, 255u));
                mine = mine + 1u;
                r = r + 1u;
            }
        }
    }
    table_slots(p, mine, first_rank, s8, f8);
    return freq_at + 2u * p;
}

// A varint at stream byte `b` (docs/format-rans.md, "Compact tables"): (value, next byte).
// A second byte of 0 or with bit 7 set (not the shortest form, or longer than two bytes)
// sets ERR_SYMBOL.
fn varint(b: u32) -> vec2<u32> {
    need(b, 1u);
    let lo = byte_at(b);
    if (lo < 0x80u) {
        return vec2<u32>(lo, b + 1u);
    }
    need(b + 1u, 1u);
    let hi = byte_at(b + 1u);
    if (hi == 0u || hi >= 0x80u) {
        err = err | ERR_SYMBOL;
    }
    return vec2<u32>((lo & 0x7fu) | ((hi & 0x7fu) << 7u), b + 2u);
}

// The end of a compact table's frequencies, found by the invocation that decodes the last
// listed one.
var<workgroup> freqs_end: u32;

// A compact plane table (flag bit 2): `P` (varint), the symbol set (a byte `R`: 0 and a
// 256-bit map, or `R` runs of varint gap and length - 1), then the frequencies of all present
// symbols but the last (varints; the last is what they leave of 4096). Every invocation walks
// the runs (at most RUNS_MAX) for the symbols of ranks 8 slot .. 8 slot + 7; the frequencies
// are found in parallel: each invocation looks at 16 bytes of them, a byte below 128 ends a
// value, and a scan of the ends per invocation gives each value its rank.
fn plane_table_compact(at: u32) -> u32 {
    let pv = varint(at + 1u);
    let p = pv.x;
    if (p == 0u || p > 256u) {
        err = err | ERR_SYMBOL;
    }
    let pp = clamp(p, 1u, 256u);
    need(pv.y, 1u);
    let form = byte_at(pv.y);
    var pos = pv.y + 1u;
    var f8: array<u32, 8>;
    var s8: array<u32, 8>;
    var mine = 0u;
    var first_rank = slot * 8u;
    if (form == 0u) {
        need(pos, 32u);
        let bits = byte_at(min(pos + slot, cend));
        let rank = scan(countOneBits(bits));
        if (rank.y != p) {
            err = err | ERR_SYMBOL;
        }
        first_rank = rank.x;
        for (var b = 0u; b < 8u; b = b + 1u) {
            if (((bits >> b) & 1u) != 0u) {
                s8[mine] = slot * 8u + b;
                mine = mine + 1u;
            }
        }
        pos = pos + 32u;
    } else {
        if (form > RUNS_MAX) {
            err = err | ERR_SYMBOL;
        }
        let lo = slot * 8u;
        var end = 0u;
        var n = 0u;
        for (var k = 0u; k < min(form, RUNS_MAX); k = k + 1u) {
            let g = varint(pos);
            let l = varint(g.y);
            pos = l.y;
            let first = end + g.x;
            let len = l.x + 1u;
            if ((k > 0u && g.x == 0u) || first + len > 256u || n + len > pp) {
                err = err | ERR_SYMBOL;
            }
            // Ranks n .. n + len are symbols first .. first + len; take those of lo .. lo + 8.
            for (var r = max(lo, n); r < min(lo + 8u, n + len); r = r + 1u) {
                s8[r - lo] = first + (r - n);
            }
            end = first + len;
            n = n + len;
        }
        if (n != p) {
            err = err | ERR_SYMBOL;
        }
        mine = select(0u, min(8u, pp - lo), pp > lo);
    }
    // The P - 1 listed frequencies: at most 2 (P - 1) bytes from `pos`, 16 per invocation.
    let nf = pp - 1u;
    let limit = min(pos + 2u * nf, cend);
    let w0 = pos + 16u * slot;
    var ends = 0u;
    for (var b = w0; b < min(w0 + 16u, limit); b = b + 1u) {
        if (byte_at(b) < 0x80u) {
            ends = ends + 1u;
        }
    }
    if (slot == 0u) {
        freqs_end = pos;
    }
    let er = scan(ends);
    if (er.y < nf) {
        err = err | ERR_OVERRUN;
    }
    var q = er.x;
    var fsum = 0u;
    for (var b = w0; b < min(w0 + 16u, limit); b = b + 1u) {
        let v = byte_at(b);
        if (v < 0x80u) {
            if (q < nf) {
                var f = v;
                if (b > pos && byte_at(b - 1u) >= 0x80u) {
                    // The second byte of two (never 0, never a third byte before it).
                    f = (byte_at(b - 1u) & 0x7fu) | (v << 7u);
                    if (v == 0u || (b > pos + 1u && byte_at(b - 2u) >= 0x80u)) {
                        err = err | ERR_SYMBOL;
                    }
                }
                if (f == 0u || f >= 4096u) {
                    err = err | ERR_SYMBOL;
                }
                rank_end[q] = f;
                fsum = fsum + f;
                if (q + 1u == nf) {
                    freqs_end = b + 1u;
                }
            }
            q = q + 1u;
        }
    }
    // What the listed ones leave is the last symbol's.
    let total = scan(fsum).y;
    if (total >= 4096u) {
        err = err | ERR_SYMBOL;
    }
    for (var i = 0u; i < 8u; i = i + 1u) {
        if (i < mine) {
            let r = first_rank + i;
            f8[i] = select(rank_end[min(r, 255u)], 4096u - min(total, 4095u), r == nf);
        }
    }
    let next = workgroupUniformLoad(&freqs_end);
    table_slots(pp, mine, first_rank, s8, f8);
    return next;
}

// Build the decode table from each invocation's `mine` symbols `s8` of ranks `first_rank` on
// and their frequencies `f8` (`p` symbols in all; every frequency at least 1, summing to
// 4096, else ERR_SYMBOL): `fc` by symbol, the ranks' (range end, symbol), then 128 slots per
// invocation.
fn table_slots(p: u32, mine: u32, first_rank: u32, s8: array<u32, 8>, f8: array<u32, 8>) {
    var fsum = 0u;
    for (var i = 0u; i < 8u; i = i + 1u) {
        if (i < mine) {
            if (f8[i] == 0u) {
                err = err | ERR_SYMBOL;
            }
            fsum = fsum + f8[i];
        }
    }
    for (var i = 0u; i < 8u; i = i + 1u) {
        fc[slot * 8u + i] = 0u;
    }
    let cum = scan(fsum);
    if (cum.y != 4096u) {
        err = err | ERR_SYMBOL;
    }
    workgroupBarrier();
    // Each symbol's (frequency, cumulative) by symbol, and (range end, symbol) by rank.
    var c = cum.x;
    for (var i = 0u; i < 8u; i = i + 1u) {
        if (i < mine) {
            fc[min(s8[i], 255u)] = min(f8[i], 4096u) | (min(c, 4096u) << 16u);
            c = c + f8[i];
            let r = min(first_rank + i, 255u);
            rank_end[r] = min(c, 4096u);
            rank_sym[r] = min(s8[i], 255u);
        }
    }
    workgroupBarrier();
    // Slots 128 slot .. 128 slot + 127: the first rank whose range reaches past the first
    // slot by binary search, then walk the ranks (a bad table leaves some slots wrong; the
    // error is already set).
    let ranks = min(p, 256u);
    var lo = 0u;
    var hi = ranks - 1u;
    let x0 = slot * 128u;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (rank_end[mid] <= x0) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    var r = lo;
    var rend = rank_end[r];
    var sym = rank_sym[r];
    for (var j = 0u; j < 128u; j = j + 4u) {
        var w = 0u;
        for (var b = 0u; b < 4u; b = b + 1u) {
            let x = x0 + j + b;
            while (x >= rend && r + 1u < ranks) {
                r = r + 1u;
                rend = rank_end[r];
                sym = rank_sym[r];
            }
            w = w | (sym << (8u * b));
        }
        slots[(x0 + j) / 4u] = w;
    }
}

// After a block of `block` rounds from round `rb` (of `rounds`) of a plane's `k` lanes (`m`
// symbols) is in the stage ring: every invocation gathers the block's plane words into scratch
// bytes from `dst` (a row plane's lanes read them from there in later blocks).
fn gather_block(rb: u32, block: u32, rounds: u32, k: u32, m: u32, dst: u32, rows: bool) {
    workgroupBarrier();
    let i0 = rb * k;
    let i1 = min(i0 + block * k, m);
    if (k % 4u == 0u) {
        // Lanes 4g..4g+3 over rounds 4t..4t+3 are four stage words (one per lane,
        // a round per byte) and four plane words (one per round, a lane per byte): a
        // 4x4 byte transpose, one stage read per plane word.
        let groups = k / 4u;
        let nt = (min(block, rounds - rb) + 3u) / 4u;
        for (var bi = slot; bi < nt * groups; bi = bi + WG) {
            let t = bi / groups;
            let g = bi - t * groups;
            let r = rb + 4u * t;
            let s0 = stage[ring_at(4u * g, r)];
            let s1 = stage[ring_at(4u * g + 1u, r)];
            let s2 = stage[ring_at(4u * g + 2u, r)];
            let s3 = stage[ring_at(4u * g + 3u, r)];
            for (var j = 0u; j < 4u; j = j + 1u) {
                let q = (rb + 4u * t + j) * groups + g;
                if (4u * q < i1) {
                    let sh = 8u * j;
                    scratch[sbase + dst / 4u + q] = ((s0 >> sh) & 0xffu)
                        | (((s1 >> sh) & 0xffu) << 8u)
                        | (((s2 >> sh) & 0xffu) << 16u)
                        | (((s3 >> sh) & 0xffu) << 24u);
                }
            }
        }
    } else {
        for (var q = i0 / 4u + slot; q < (i1 + 3u) / 4u; q = q + WG) {
            var w = 0u;
            // Byte 4q - i0 of the block is lane `lane`'s round `rr` (one division a word).
            var rr = (4u * q - i0) / k;
            var lane = 4u * q - i0 - rr * k;
            for (var b = 0u; b < 4u; b = b + 1u) {
                if (4u * q + b < i1) {
                    let sw = stage[ring_at(lane, rb + rr)];
                    w = w | (((sw >> (8u * (rr % 4u))) & 0xffu) << (8u * b));
                }
                lane = lane + 1u;
                if (lane == k) {
                    lane = 0u;
                    rr = rr + 1u;
                }
            }
            scratch[sbase + dst / 4u + q] = w;
        }
    }
    workgroupBarrier();
    if (rows) {
        // A row plane's lanes read this block's symbols from scratch in later blocks.
        storageBarrier();
    }
}

// The lanes of a plane of `m` symbols from stream byte `lh` (count, states, word counts,
// then the words) into scratch bytes [dst, dst + m), decoded with the workgroup's table or,
// for a context plane, each symbol with its element's context table (plane 0 at `top`), or,
// for a row plane, with the row table of the symbol U back, or, for a sign plane (`signs`),
// with the sign table of its element's plane-0 byte (at `top`) under the class of the symbol
// U back (the row plane's lanes and loops). Returns the byte after the plane.
// `decode` false: only the plane's end (its lane header checked).
fn plane_lanes(lh: u32, m: u32, dst: u32, top: u32, contexts: bool, row_plane: bool, signs: bool, decode: bool) -> u32 {
    // A sign plane's lanes follow the row plane's rules.
    let rows = row_plane || signs;
    need(lh, 1u);
    let k = byte_at(lh);
    if (k == 0u || k > MAX_LANES) {
        err = err | ERR_TAG;
        return cend;
    }
    // A row plane's lanes divide its row distance (so a symbol's row-up symbol is its own
    // lane's, qrows rounds back), or (version 7, `across`) are at most a quarter of it: then
    // the symbol one row up is another lane's, and blocks of at most U / k rounds (a
    // multiple of 4) between barriers put it in an earlier block, in scratch.
    let qrows = select(0u, params.row_distance / k, rows);
    let across = rows && params.row_distance % k != 0u;
    if (across && (params.row_across == 0u || 4u * k > params.row_distance)) {
        err = err | ERR_VALUE;
        return cend;
    }
    // Lanes across rows that fit in one subgroup, with the symbol one row up at most eight
    // rounds back (qrows <= 7): each lane keeps its last eight symbols and takes the one it
    // needs from its source lane by a subgroup shuffle, so their blocks need not be short.
    // (LANES_ACROSS, prepended by the host: the stream's encoder gave its planes such lanes;
    // false, this loop folds away.)
    let shuffled = LANES_ACROSS && across && qrows <= 7u && k <= shuffle_lanes();
    let block = select(128u, min(128u, qrows & ~3u), across && !shuffled);
    // A row or sign plane whose lanes find the symbols one row up in their stage ring.
    let ring = rows && !across && qrows >= 4u && qrows <= 128u;
    need(lh + 1u, 6u * k);
    var n = 0u;
    var x = L;
    if (slot < k) {
        x = u32_at(lh + 1u + 4u * slot);
        n = u16_at(lh + 1u + 4u * k + 2u * slot);
        if (x < L) {
            err = err | ERR_VALUE;
        }
    }
    let lw = scan(n);
    let words_at = lh + 1u + 6u * k;
    let end = words_at + 2u * lw.y;
    need(words_at, 2u * lw.y);
    if (!decode) {
        return end;
    }
    lane_x[slot] = x;
    lane_pos[slot] = words_at + 2u * lw.x;
    // A context, row or sign plane's table indices by byte (one class after another for a
    // sign plane) into `fc`, which no table of the plane's own uses: each step then reads its
    // index from workgroup memory, not from the stream's tables in device memory.
    if (contexts || rows) {
        let src = select(select(params.ctx_at, params.row_at, rows), params.sign_at, signs);
        let words = select(CTX_INDEX_WORDS, SIGN_CLASSES * CTX_INDEX_WORDS, signs);
        for (var j = slot; j < words; j = j + WG) {
            fc[j] = chunk_off[src + j];
        }
    }
    workgroupBarrier();
    {
        // Invocation j < k decodes lane j, 128 rounds at a time, packing four rounds to a
        // word of `stage` (lane-major); then all invocations gather the block's plane words
        // from it. (Four lanes to an invocation, each round then one whole plane word, needs
        // no staging but leaves three invocations in four idle: slower on lavapipe, and a GPU
        // wants every lane on its own invocation.)
        let live = slot < k && (err & (ERR_OVERRUN | ERR_TAG)) == 0u;
        var x = L;
        var pp = 0u;
        if (live) {
            x = lane_x[slot];
            pp = lane_pos[slot];
        }
        let rounds = (m + k - 1u) / k;
        // Three block loops, one for plain and context planes, one for row and sign planes
        // whose lanes do not divide U (`across`), one for the other row and sign planes, each
        // with its own copies of the lane loop: on lavapipe every loop body runs at least once
        // and both sides of every branch run, so one block loop choosing among all seven
        // copies ran a masked pass of the six not taken in every block (a tenth of a plain
        // plane's decode; half of an `across` plane's, whose blocks are as short as 4 rounds).
        // (A block loop for each copy ran none, but compiled the gather seven times: half as
        // long again to build, where CI builds every pipeline from scratch.)
        if (!rows) {
            for (var rb = 0u; rb < rounds; rb = rb + block) {
                // Every lane has all `block` rounds of a block but the plane's last.
                let full = (rb + block) * k <= m;
                if (live && full && !contexts) {
                    // The common block: a plain plane's, whole (no per-symbol bound or table
                    // choice).
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = step(&x, &win);
                        w = w | (step(&x, &win) << 8u);
                        w = w | (step(&x, &win) << 16u);
                        w = w | (step(&x, &win) << 24u);
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                } else if (live && full) {
                    // A context plane's whole block (in the general loop, a transformer's context
                    // planes ran a tenth slower on lavapipe).
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rb + 4u * t + b) * k + slot;
                            w = w | (context_step(&x, &win, sbyte(top + i)) << (8u * b));
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                } else if (live) {
                    // A context plane's last block, and a plain plane's.
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rb + 4u * t + b) * k + slot;
                            if (full || i < m) {
                                var s = 0u;
                                if (contexts) {
                                    s = context_step(&x, &win, sbyte(top + i));
                                } else {
                                    s = step(&x, &win);
                                }
                                w = w | (s << (8u * b));
                            }
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                }
                gather_block(rb, block, rounds, k, m, dst, rows);
            }
        } else if (shuffled) {
            // A row or sign plane whose lanes do not divide U, in one subgroup (`shuffled`):
            // element i's symbol one row up, i - U = i - (qrows k + d), is lane j - d's
            // (j >= d) or lane j - d + k's, `back` = qrows or qrows + 1 rounds back, which that
            // lane holds in the last eight symbols it decoded (`h0`: rounds r - 4 .. r - 1, a
            // byte each, r - 1 the highest; `h1`: r - 8 .. r - 5). Every invocation of the
            // subgroup runs the shuffles; only live lanes step.
            let d = params.row_distance % k;
            let src = select(slot - d, slot + k - d, slot < d);
            let back = qrows + select(0u, 1u, slot < d);
            var h0 = 0u;
            var h1 = 0u;
            for (var rb = 0u; rb < rounds; rb = rb + block) {
                let full = (rb + block) * k <= m;
                if (slot < shuffle_lanes()) {
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let w0 = lane_shuffle(h0, src);
                            let w1 = lane_shuffle(h1, src);
                            let i = (rb + 4u * t + b) * k + slot;
                            var s = 0u;
                            if (live && (full || i < m)) {
                                let first = i < params.row_distance;
                                let up = select(w1 >> (8u * (8u - back)), w0 >> (8u * (4u - back)), back <= 4u) & 0xffu;
                                s = across_step(&x, &win, signs, first, up, top + i);
                            }
                            w = w | (s << (8u * b));
                            h1 = (h1 >> 8u) | (h0 << 24u);
                            h0 = (h0 >> 8u) | (s << 24u);
                        }
                        if (live) {
                            pp = window_end(pp, win);
                            stage[ring_at(slot, rb + 4u * t)] = w;
                        }
                    }
                }
                gather_block(rb, block, rounds, k, m, dst, rows);
            }
        } else if (across) {
            // A row or sign plane whose lanes do not divide U: the symbol one row up is in an
            // earlier block, in scratch. (Its blocks are U / k rounds at most, 4 for a CNN's
            // [40, 144, 59, 59] BF16 activations with U = 59 and 8 lanes: in the row loop
            // below, each ran a masked pass of the four other copies, and the plane decoded
            // at half the speed.)
            for (var rb = 0u; rb < rounds; rb = rb + block) {
                let full = (rb + block) * k <= m;
                if (live) {
                    for (var t = 0u; t < block / 4u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rb + 4u * t + b) * k + slot;
                            if (full || i < m) {
                                let first = i < params.row_distance;
                                var up = 0u;
                                if (!first) {
                                    up = sbyte(dst + i - params.row_distance);
                                }
                                w = w | (across_step(&x, &win, signs, first, up, top + i) << (8u * b));
                            }
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                }
                gather_block(rb, block, rounds, k, m, dst, rows);
            }
        } else {
            for (var rb = 0u; rb < rounds; rb = rb + block) {
                let full = (rb + block) * k <= m;
                if (live && ring && !signs) {
                    // A row plane whose symbols one row up are in the stage ring: four of them
                    // read at once.
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        let rr0 = rb + 4u * t;
                        let ups = ring_up(rr0, qrows);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rr0 + b) * k + slot;
                            if (full || i < m) {
                                let up = (ups >> (8u * b)) & 0xffu;
                                let first = rr0 + b < qrows;
                                let tb = select(context_table(0u, up), params.row_first, first);
                                w = w | (row_step(&x, &win, tb) << (8u * b));
                            }
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                } else if (live && ring) {
                    // A sign plane whose symbols one row up are in the stage ring.
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        let rr0 = rb + 4u * t;
                        let ups = ring_up(rr0, qrows);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rr0 + b) * k + slot;
                            if (full || i < m) {
                                let up = (ups >> (8u * b)) & 0xffu;
                                let e = sbyte(top + i);
                                w = w | (sign_step(&x, &win, rr0 + b < qrows, up, e) << (8u * b));
                            }
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                } else if (live && !signs) {
                    // A row plane: its own loop too (its symbol's table is the row table of the
                    // symbol one row up).
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rb + 4u * t + b) * k + slot;
                            if (full || i < m) {
                                let rr = rb + 4u * t + b;
                                var tb = params.row_first;
                                if (rr >= qrows && qrows > 0u) {
                                    tb = context_table(0u, lane_up(w, rr, rb, t, qrows, dst + i));
                                }
                                w = w | (row_step(&x, &win, tb) << (8u * b));
                            }
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                } else if (live) {
                    // A sign plane, in the row plane's lanes (its table by its element's plane-0
                    // byte and the symbol one row up).
                    for (var t = 0u; t < 32u; t = t + 1u) {
                        var win = window_at(pp);
                        var w = 0u;
                        for (var b = 0u; b < 4u; b = b + 1u) {
                            let i = (rb + 4u * t + b) * k + slot;
                            if (full || i < m) {
                                let rr = rb + 4u * t + b;
                                let first = rr < qrows || qrows == 0u;
                                var up = 0u;
                                if (!first) {
                                    up = lane_up(w, rr, rb, t, qrows, dst + i);
                                }
                                let e = sbyte(top + i);
                                w = w | (sign_step(&x, &win, first, up, e) << (8u * b));
                            }
                        }
                        pp = window_end(pp, win);
                        stage[ring_at(slot, rb + 4u * t)] = w;
                    }
                }
                gather_block(rb, block, rounds, k, m, dst, rows);
            }
        }
        if (live) {
            let last = select(lane_pos[slot + 1u], end, slot + 1u == k);
            if (x != L || pp != last) {
                err = err | ERR_VALUE;
            }
        }
    }
    workgroupBarrier();
    return end;
}

// Parse context table `c` of a modelled chunk at stream byte `at` into this chunk's scratch
// tables (every rule of the format checked); returns the byte after it. Invocation 0 only.
fn model_table(at: u32, c: u32) -> u32 {
    if (params.compact_tables != 0u) {
        return model_table_compact(at, c);
    }
    need(at, 2u);
    let p = u16_at(at);
    let tb = sbase + params.model_at + c * MT_CTX_WORDS;
    scratch[tb] = min(p, MODEL_SYMBOLS);
    if (p == 0u) {
        return at + 2u;
    }
    if (p > MODEL_SYMBOLS) {
        err = err | ERR_SYMBOL;
        scratch[tb] = 0u;
        return cend;
    }
    let listed = p <= MODEL_LIST_MAX;
    let sym_at = at + 2u;
    let freq_at = sym_at + select(33u, 2u * p, listed);
    need(freq_at, 2u * p);
    var cum = 0u;
    var r = 0u;
    if (listed) {
        var prev = 0u;
        for (var i = 0u; i < p; i = i + 1u) {
            let s = u16_at(sym_at + 2u * i);
            if (s >= MODEL_SYMBOLS || (i > 0u && s <= prev)) {
                err = err | ERR_SYMBOL;
            }
            prev = s;
            let f = u16_at(freq_at + 2u * i);
            if (f == 0u) {
                err = err | ERR_SYMBOL;
            }
            cum = cum + f;
            scratch[tb + 1u + i] = min(cum, MODEL_SCALE) | (min(s, 511u) << 16u);
        }
        r = p;
    } else {
        if ((byte_at(sym_at + 32u) >> 4u) != 0u) {
            err = err | ERR_SYMBOL;
        }
        for (var s = 0u; s < MODEL_SYMBOLS; s = s + 1u) {
            if (((byte_at(sym_at + s / 8u) >> (s % 8u)) & 1u) != 0u) {
                if (r < p) {
                    let f = u16_at(freq_at + 2u * r);
                    if (f == 0u) {
                        err = err | ERR_SYMBOL;
                    }
                    cum = cum + f;
                    scratch[tb + 1u + r] = min(cum, MODEL_SCALE) | (s << 16u);
                }
                r = r + 1u;
            }
        }
    }
    if (r != p || cum != MODEL_SCALE) {
        err = err | ERR_SYMBOL;
    }
    return freq_at + 2u * p;
}

// `model_table` of a stream with compact tables (flag bit 2): `P` (varint; 0 an unused
// context), the symbol set (a byte `R`: 0 and a 260-bit map, or `R` runs of varint gap and
// length - 1), the frequencies of all but the last present symbol (varints; the last is what
// they leave of 2048). Invocation 0 only.
fn model_table_compact(at: u32, c: u32) -> u32 {
    let tb = sbase + params.model_at + c * MT_CTX_WORDS;
    let pv = varint(at);
    let p = pv.x;
    scratch[tb] = min(p, MODEL_SYMBOLS);
    if (p == 0u) {
        return pv.y;
    }
    if (p > MODEL_SYMBOLS) {
        err = err | ERR_SYMBOL;
        scratch[tb] = 0u;
        return cend;
    }
    need(pv.y, 1u);
    let form = byte_at(pv.y);
    var pos = pv.y + 1u;
    // Each rank's symbol, in the entry's high half (its range end is added below).
    var n = 0u;
    if (form == 0u) {
        need(pos, 33u);
        if ((byte_at(pos + 32u) >> 4u) != 0u) {
            err = err | ERR_SYMBOL;
        }
        for (var s = 0u; s < MODEL_SYMBOLS; s = s + 1u) {
            if (((byte_at(pos + s / 8u) >> (s % 8u)) & 1u) != 0u) {
                if (n < p) {
                    scratch[tb + 1u + n] = s << 16u;
                }
                n = n + 1u;
            }
        }
        pos = pos + 33u;
    } else {
        if (form > RUNS_MAX) {
            err = err | ERR_SYMBOL;
        }
        var end = 0u;
        for (var k = 0u; k < min(form, RUNS_MAX); k = k + 1u) {
            let g = varint(pos);
            let l = varint(g.y);
            pos = l.y;
            let first = end + g.x;
            let len = l.x + 1u;
            if ((k > 0u && g.x == 0u) || first + len > MODEL_SYMBOLS || n + len > p) {
                err = err | ERR_SYMBOL;
            }
            for (var i = 0u; i < len && n < p; i = i + 1u) {
                scratch[tb + 1u + n] = min(first + i, 511u) << 16u;
                n = n + 1u;
            }
            end = first + len;
        }
    }
    if (n != p) {
        err = err | ERR_SYMBOL;
    }
    var cum = 0u;
    for (var r = 0u; r < p; r = r + 1u) {
        var f = 0u;
        if (r + 1u == p) {
            f = select(MODEL_SCALE - cum, 0u, cum >= MODEL_SCALE);
        } else {
            let v = varint(pos);
            pos = v.y;
            f = v.x;
            if (f >= MODEL_SCALE) {
                err = err | ERR_SYMBOL;
            }
        }
        if (f == 0u) {
            err = err | ERR_SYMBOL;
        }
        cum = cum + f;
        scratch[tb + 1u + r] = (scratch[tb + 1u + r] & 0xffff0000u) | min(cum, MODEL_SCALE);
    }
    if (cum != MODEL_SCALE) {
        err = err | ERR_SYMBOL;
    }
    return pos;
}

// One step of the binary search for the first rank whose slot range ends past `sl`.
fn rank_step(tb: u32, sl: u32, lohi: vec2<u32>) -> vec2<u32> {
    let mid = (lohi.x + lohi.y) / 2u;
    if ((scratch[tb + 1u + mid] & 0xffffu) <= sl) {
        return vec2<u32>(min(mid + 1u, lohi.y), lohi.y);
    }
    return vec2<u32>(lohi.x, mid);
}

// The rank of the symbol whose slot range holds slot `sl` in the context table at scratch word
// `tb` with `p` (1 to 260) symbols: a binary search of nine steps (2^9 > 260), written out
// without a loop. llvmpipe stops every loop of an invocation after 65535 iterations in all
// (its loop limiter, shared by every loop of a shader), so the per-element work of a lane's
// loop must have no loop of its own.
fn find_rank(tb: u32, p: u32, sl: u32) -> u32 {
    var lh = vec2<u32>(0u, p - 1u);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    lh = rank_step(tb, sl, lh);
    return lh.x;
}

// A decode slot: symbol | (frequency - 1) << 9 | cumulative frequency << 20 (the CPU
// decoder's entry) of the symbol whose rank entry is `ent` and whose slot range starts at
// `lo` (a broken table's garbage stays in its fields; the chunk is refused).
fn slot_word(ent: u32, lo: u32) -> u32 {
    let f = (ent & 0xffffu) - lo;
    return (ent >> 16u) | (((f - 1u) & 0x7ffu) << 9u) | ((lo & 0x7ffu) << 20u);
}

// The decode slot `sl` of the context table at scratch word `tb` with `p` symbols, found by
// searching its ranks (`find_rank`).
fn search_slot(tb: u32, p: u32, sl: u32) -> u32 {
    let r = find_rank(tb, p, sl);
    var lo = 0u;
    if (r > 0u) {
        lo = scratch[tb + r] & 0xffffu;
    }
    return slot_word(scratch[tb + 1u + r], lo);
}

// Which contexts have a table (their symbol count; 0: none, and the lane refuses a symbol in
// that context), from the parsed tables.
var<workgroup> model_used: array<u32, MODEL_CONTEXTS>;

// Where `params.model_slots` says there is room: every used context table's MODEL_SCALE
// decode slots, after the rank tables in this chunk's scratch, so that a lane reads one word a
// symbol where searching the ranks took ten. Invocation `slot` fills slots slot, slot + WG,
// ... of each table (neighbouring invocations write neighbouring words), walking the ranks up
// from the first (a table the parse found broken still fills every slot). With or without
// them, `model_used` from the tables.
fn model_tables_ready() {
    for (var c = 0u; c < MODEL_CONTEXTS; c = c + 1u) {
        let tb = sbase + params.model_at + c * MT_CTX_WORDS;
        let sb = sbase + params.model_at + MODEL_RANK_WORDS + c * MODEL_SCALE;
        let p = scratch[tb];
        if (slot == 0u) {
            model_used[c] = p;
        }
        if (p != 0u && params.model_slots != 0u) {
            var r = 0u;
            var lo = 0u;
            var ent = scratch[tb + 1u];
            for (var sl = slot; sl < MODEL_SCALE; sl = sl + WG) {
                // (At most p - 1 steps over a table: ranks only increase.)
                for (; (ent & 0xffffu) <= sl && r + 1u < p; r = r + 1u) {
                    lo = ent & 0xffffu;
                    ent = scratch[tb + 2u + r];
                }
                scratch[sb + sl] = slot_word(ent, lo);
            }
        }
    }
}

// Element `i` of this chunk's output: from the word being filled (`acc`, word `accw`) or from
// `out`.
fn element(i: u32, acc: u32, accw: u32) -> u32 {
    let b = i * W;
    var w = acc;
    if (b / 4u != accw) {
        w = out[obase + b / 4u];
    }
    return (w >> ((b & 3u) * 8u)) & WMASK;
}

// A modelled lane's state (`modelled`'s lane loops, `model_element`): the rANS state and the
// next word `pos` (up to `wend`), the next literal `lit` (up to `lit_end`, and `lits` in the
// chunk), the left neighbour's value and context, the output word being filled (`acc`, word
// `accw`), whether no rule was broken (`ok`); and the lane's constants.
struct ModelLane {
    x: u32,
    pos: u32,
    // The lane's words from `pos` for its next four elements (`modelled` loads it every four).
    win: Window,
    wend: u32,
    lit: u32,
    lit_end: u32,
    lits: u32,
    left: u32,
    // The left neighbour's context: 0 none or zero, 1 a repeat, else a literal's
    // 4 + clamp(e - E0, -2, 3) (a function of its symbol alone).
    ctx: u32,
    has_left: bool,
    acc: u32,
    accw: u32,
    ok: bool,
    start: u32,
    end: u32,
    u: u32,
    dict: u32,
    e0: i32,
    K: u32,
    owords: u32,
    nbytes: u32,
    last_chunk: bool,
}

// Element `i` of lane `l`, whose symbol's decode slot (`slot_word`) is `e`: the state step,
// the value by the symbol's class, into the output word. A broken rule sets `err` and clears
// `l.ok` (no `break`: a lane stops through `ok`, which llvmpipe handles where it mishandled a
// break out of this divergent loop).
fn model_element(l: ptr<function, ModelLane>, i: u32, e: u32) {
    if (model_used[(*l).ctx] == 0u) {
        err = err | ERR_SYMBOL;
        (*l).ok = false;
    }
    let sl = (*l).x & (MODEL_SCALE - 1u);
    let sym = e & 0x1ffu;
    let x = (((e >> 9u) & 0x7ffu) + 1u) * ((*l).x >> MODEL_PROB_BITS) + sl - (e >> 20u);
    if (x < L && window_end((*l).pos, (*l).win) + 2u > (*l).wend) {
        err = err | ERR_VALUE;
        (*l).ok = false;
    }
    // (Through a local: naga 30's SPIR-V writer panics on `&((*l).win)`.)
    var win = (*l).win;
    (*l).x = refill(x, &win);
    (*l).win = win;
    var v = 0u;
    if (sym == SYM_LEFT) {
        if (!(*l).has_left) {
            err = err | ERR_SYMBOL;
            (*l).ok = false;
        }
        v = (*l).left;
    } else if (sym == SYM_UP) {
        let u = (*l).u;
        if (u == 0u || i < (*l).start + u) {
            err = err | ERR_SYMBOL;
            (*l).ok = false;
        } else {
            v = element(i - u, (*l).acc, (*l).accw);
        }
    } else if (sym == SYM_DICT) {
        v = (*l).dict;
    } else if (sym >= SYM_LITERAL) {
        let lit = (*l).lit;
        if (sym >= MODEL_SYMBOLS || lit >= (*l).lit_end || lit >= (*l).lits) {
            err = err | ERR_SYMBOL;
            (*l).ok = false;
        } else {
            // (The planes' bytes without a loop: see find_rank.)
            let K = (*l).K;
            var t = (sym - SYM_LITERAL) << (8u * (W - 1u));
            if (W >= 2u) {
                t = t | (sbyte(K + lit) << LIT_SHIFT_1);
            }
            if (W == 4u) {
                t = t | (sbyte(2u * K + lit) << 8u) | sbyte(3u * K + lit);
            }
            (*l).lit = lit + 1u;
            v = t;
            if (params.rotate != 0u) {
                v = ((t >> 1u) | (t << (8u * W - 1u))) & WMASK;
            }
        }
    }
    // Into the word being filled; a full word (or the lane's last) goes out.
    let b = i * W;
    (*l).acc = (*l).acc | (v << ((b & 3u) * 8u));
    if (((b + W) & 3u) == 0u || i + 1u == (*l).end) {
        put(b / 4u, (*l).acc, (*l).owords, (*l).nbytes, (*l).last_chunk);
        (*l).acc = 0u;
        (*l).accw = (b + W) / 4u;
    }
    (*l).left = v;
    (*l).has_left = true;
    var ctx = min(sym, 1u);
    if (sym >= SYM_LITERAL) {
        ctx = u32(CTX_LITERAL + clamp(i32(sym - SYM_LITERAL) - (*l).e0, CTX_LOW, CTX_HIGH));
    }
    (*l).ctx = ctx;
}

// A modelled chunk (docs/format-rans.md, "Modelled chunk") of `n` elements whose mode byte is
// at `at0`: the context tables into scratch, the literal planes into scratch planes 1..W-1 by
// the plane decoder, then each lane by its own invocation, element by element, writing whole
// output words (lanes start on word boundaries). Returns the byte after the chunk.
fn modelled(at0: u32, n: u32, K: u32, last_chunk: bool) -> u32 {
    let h = at0 + 1u;
    need(h, 6u + W);
    let u = u32_at(h);
    var dict = 0u;
    for (var b = 0u; b < W; b = b + 1u) {
        dict = dict | (byte_at(h + 4u + b) << (8u * b));
    }
    let e0 = i32(byte_at(h + 4u + W));
    let k = byte_at(h + 5u + W);
    if (slot == 0u) {
        var at = h + 6u + W;
        for (var c = 0u; c < MODEL_CONTEXTS; c = c + 1u) {
            if (at < cend) {
                at = model_table(at, c);
            }
        }
        model_next = at;
    }
    let lh = workgroupUniformLoad(&model_next);
    storageBarrier();
    model_tables_ready();
    if (k == 0u || k > MAX_LANES) {
        err = err | ERR_TAG;
    }
    let kk = clamp(k, 1u, MAX_LANES);
    need(lh, MODEL_LANE_HEADER * kk);
    var x = L;
    var nw = 0u;
    var z = 0u;
    if (slot < kk) {
        let at = lh + MODEL_LANE_HEADER * slot;
        x = u32_at(at);
        nw = u16_at(at + 4u);
        z = u32_at(at + 6u);
        if (x < L) {
            err = err | ERR_VALUE;
        }
    }
    let ws = scan(nw);
    let zs = scan(min(z, n));
    let words_at = lh + MODEL_LANE_HEADER * kk;
    need(words_at, 2u * ws.y);
    var at = words_at + 2u * ws.y;
    let lits = min(zs.y, n);
    if (zs.y > n) {
        err = err | ERR_VALUE;
    }
    for (var p = 1u; p < W; p = p + 1u) {
        at = next_plane(at, lits, p * K, NO_CONTEXT, DECODE);
    }
    storageBarrier();
    workgroupBarrier();
    let per = 4u * ((n + 4u * kk - 1u) / (4u * kk));
    let owords = (n * W + 3u) / 4u;
    if (slot < kk && (err & (ERR_OVERRUN | ERR_TAG | ERR_BOUNDS)) == 0u) {
        let start = min(slot * per, n);
        let end = min(start + per, n);
        let pos = words_at + 2u * ws.x;
        var l: ModelLane;
        l.x = x;
        l.pos = pos;
        l.wend = pos + 2u * nw;
        l.lit = zs.x;
        l.lit_end = zs.x + z;
        l.lits = lits;
        l.left = 0u;
        l.ctx = 0u;
        l.has_left = false;
        l.acc = 0u;
        l.accw = (start * W) / 4u;
        l.ok = true;
        l.start = start;
        l.end = end;
        l.u = u;
        l.dict = dict;
        l.e0 = e0;
        l.K = K;
        l.owords = owords;
        l.nbytes = n * W;
        l.last_chunk = last_chunk;
        // Two loops, one per way to a symbol's decode slot, so that neither pays for the
        // other's code (a branch between them in one loop cost lavapipe most of the slots'
        // gain).
        if (params.model_slots != 0u) {
            let slots_at = sbase + params.model_at + MODEL_RANK_WORDS;
            for (var i0 = start; i0 < end && l.ok; i0 = i0 + 4u) {
                l.win = window_at(l.pos);
                for (var i = i0; i < min(i0 + 4u, end) && l.ok; i = i + 1u) {
                    let sl = l.x & (MODEL_SCALE - 1u);
                    model_element(&l, i, scratch[slots_at + l.ctx * MODEL_SCALE + sl]);
                }
                l.pos = window_end(l.pos, l.win);
            }
        } else {
            for (var i0 = start; i0 < end && l.ok; i0 = i0 + 4u) {
                l.win = window_at(l.pos);
                for (var i = i0; i < min(i0 + 4u, end) && l.ok; i = i + 1u) {
                    let tb = sbase + params.model_at + l.ctx * MT_CTX_WORDS;
                    let sl = l.x & (MODEL_SCALE - 1u);
                    model_element(&l, i, search_slot(tb, max(model_used[l.ctx], 1u), sl));
                }
                l.pos = window_end(l.pos, l.win);
            }
        }
        if (l.ok && (l.x != L || l.pos != l.wend || l.lit != l.lit_end)) {
            err = err | ERR_VALUE;
        }
    }
    return at;
}

// The block-scaled element `scale * q` (docs/format-rans.md, "Block-scaled chunk"), exact, in
// integers (no float rounding or subnormal flush can differ between devices); `qb` is q's
// two's-complement byte. A product that is not exact and normal sets ERR_VALUE. CPU twin:
// `planepack_rans::internals::scaled::product`.
fn scaled_product(scale: u32, qb: u32) -> u32 {
    if (qb == 0u) {
        return 0u;
    }
    let negative = qb >= 128u;
    let e = (scale >> 23u) & 0xffu;
    let p = ((scale & 0x7fffffu) | 0x800000u) * select(qb, 256u - qb, negative);
    // p is in [2^23, 2^31): `sh` significant bits past 24.
    let sh = 8u - countLeadingZeros(p);
    if (e == 0u || e == 255u || (p & ((1u << sh) - 1u)) != 0u || e + sh > 254u) {
        err = err | ERR_VALUE;
        return 0u;
    }
    let sign = (scale >> 31u) ^ select(0u, 1u, negative);
    return (sign << 31u) | ((e + sh) << 23u) | ((p >> sh) & 0x7fffffu);
}

// A block-scaled chunk (W = 4) of `n` elements whose block-size byte is at `at0`: the blocks'
// scales as four planes of `nb` symbols (each in a quarter of plane 0's scratch: a block has at
// least 4 elements), the integers as one plane of `n` (in plane 1's), then one element per
// invocation step. Returns the byte after the chunk's planes.
fn scaled(at0: u32, n: u32, K: u32) -> u32 {
    need(at0, 1u);
    let b = byte_at(at0);
    if (b < SCALED_BLOCK_LOG2_MIN || b > SCALED_BLOCK_LOG2_MAX) {
        err = err | ERR_VALUE;
    }
    let bl = clamp(b, SCALED_BLOCK_LOG2_MIN, SCALED_BLOCK_LOG2_MAX);
    let nb = (n + (1u << bl) - 1u) >> bl;
    let qs = K / 4u;
    var at = at0 + 1u;
    for (var p = 0u; p < 5u; p = p + 1u) {
        at = next_plane(at, select(nb, n, p == 4u), select(p * qs, K, p == 4u), NO_CONTEXT, DECODE);
    }
    storageBarrier();
    for (var e = slot; e < n; e = e + WG) {
        var t = 0u;
        for (var p = 0u; p < 4u; p = p + 1u) {
            t = (t << 8u) | sbyte(p * qs + (e >> bl));
        }
        if (params.rotate != 0u) {
            t = (t >> 1u) | (t << 31u);
        }
        out[obase + e] = scaled_product(t, sbyte(K + e));
    }
    return at;
}

// Store word `w` of this chunk's output (of `owords` words, `nbytes` bytes), if it is one;
// the last chunk's last word takes the tail bytes after the body's.
var<private> obase: u32;
// A difference chunk's folded step `i` (its bytes in the chunk's W planes, most significant
// first), unfolded, and an element back from the floats' order (CPU twins:
// planepack-rans's difference::unzigzag and unorder).
fn step_at(i: u32, K: u32) -> u32 {
    var z = 0u;
    for (var p = 0u; p < W; p = p + 1u) {
        z = (z << 8u) | sbyte(p * K + i);
    }
    return z;
}

fn unzigzag(z: u32) -> u32 {
    return (z >> 1u) ^ ((0u - (z & 1u)) & WMASK);
}

fn unorder(o: u32) -> u32 {
    let sign = 1u << (8u * W - 1u);
    return select(o ^ WMASK, o ^ sign, (o & sign) != 0u);
}

fn put(w: u32, v: u32, owords: u32, nbytes: u32, last_chunk: bool) {
    if (w < owords) {
        var x = v;
        if (w + 1u == owords && last_chunk && nbytes % 4u != 0u) {
            x = x | (params.tail << (8u * (nbytes % 4u)));
        }
        out[obase + w] = x;
    }
}

// Four elements' bytes so far (one per component) with plane word `w`'s bytes shifted in
// below (the planes go most significant first).
fn push_plane(t: vec4<u32>, w: u32) -> vec4<u32> {
    return (t << vec4<u32>(8u)) | ((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
}

// Four elements rotated back (where the stream rotated them).
fn unrotate4(t: vec4<u32>) -> vec4<u32> {
    if (params.rotate == 0u) {
        return t;
    }
    return ((t >> vec4<u32>(1u)) | (t << vec4<u32>(8u * W - 1u))) & vec4<u32>(WMASK);
}

// Four elements as the W output words from word `ow` of the chunk, which is not its last (no
// tail, no bound).
fn store4(ow: u32, t: vec4<u32>) {
    if (W == 4u) {
        out[obase + ow] = t.x;
        out[obase + ow + 1u] = t.y;
        out[obase + ow + 2u] = t.z;
        out[obase + ow + 3u] = t.w;
    } else if (W == 2u) {
        out[obase + ow] = t.x | (t.y << 16u);
        out[obase + ow + 1u] = t.z | (t.w << 16u);
    } else {
        out[obase + ow] = t.x | (t.y << 8u) | (t.z << 16u) | (t.w << 24u);
    }
}

// Join a dense or sparse chunk's planes (in scratch) into its `n` elements (`z` of them coded:
// the nonzero ones of a sparse chunk) in `out`.
fn join(n: u32, z: u32, sparse: bool, K: u32, last_chunk: bool) {
    let nbytes = n * W;
    let owords = (nbytes + 3u) / 4u;
    if (!sparse) {
        // Dense: element e's bytes are byte e of every plane. Four elements a step: one
        // aligned word of each plane, transposed into W output words.
        var g = slot;
        // Where every plane is in scratch at word-aligned starts, the groups before the
        // chunk's last output word read their words there directly, with no tail to add (on
        // lavapipe `plane_word_at` runs the held and unaligned reads too, masked).
        var direct = K % 4u == 0u;
        for (var p = 0u; p < W; p = p + 1u) {
            direct = direct && held_planes[p].x == HELD_NONE;
        }
        if (direct) {
            for (; (g + 1u) * W < owords; g = g + WG) {
                var t = vec4<u32>(0u);
                for (var p = 0u; p < W; p = p + 1u) {
                    let w = scratch[sbase + p * (K / 4u) + g];
                    t = push_plane(t, w);
                }
                t = unrotate4(t);
                store4(g * W, t);
            }
        }
        for (; g < (n + 3u) / 4u; g = g + WG) {
            var t = vec4<u32>(0u);
            for (var p = 0u; p < W; p = p + 1u) {
                let w = plane_word_at(p, K, 4u * g);
                t = push_plane(t, w);
            }
            t = unrotate4(t);
            let ow = g * W;
            if (ow + W < owords) {
                // Not the chunk's last word: no tail, no bound to check.
                store4(ow, t);
            } else {
                // Elements past n in this group are bytes past the planes' ends: dropped
                // by `put` (past the output) or masked off here.
                let have = n - 4u * g;
                let keep = vec4<u32>(select(0u, 0xffffffffu, have > 0u), select(0u, 0xffffffffu, have > 1u), select(0u, 0xffffffffu, have > 2u), select(0u, 0xffffffffu, have > 3u));
                t = t & keep;
                put4(ow, t, owords, nbytes, last_chunk);
            }
        }
    }
    // Join: each invocation takes 32 elements a round (one mask word), in groups of four
    // (whole output words): all four nonzero take four bytes of each plane at once, none
    // nonzero are zeros, a mix goes element by element.
    var seen = z;
    for (var base = 0u; base < n && sparse; base = base + 32u * WG) {
        if (base == 0u) {
            seen = 0u;
        }
        let e0 = base + slot * 32u;
        var valid = 0u;
        if (e0 < n) {
            valid = select(0xffffffffu, (1u << (n - e0)) - 1u, n - e0 < 32u);
        }
        var mw = valid;
        if (sparse) {
            mw = 0u;
            if (e0 < n) {
                mw = scratch[sbase + (params.mask_at + e0 / 8u) / 4u];
            }
            if ((mw & ~valid) != 0u) {
                err = err | ERR_VALUE;
            }
            mw = mw & valid;
        }
        let sc = scan(countOneBits(mw));
        var idx = seen + sc.x;
        seen = seen + sc.y;
        // (No `continue` here: the next round's scan must stay in uniform control flow.)
        for (var q = 0u; q < 32u && e0 < n; q = q + 4u) {
            let bits = (mw >> q) & 15u;
            var v = vec4<u32>(0u);
            if (bits == 15u) {
                var t = vec4<u32>(0u);
                for (var p = 0u; p < W; p = p + 1u) {
                    let w = plane_word_at(p, K, min(idx, K - 4u));
                    t = push_plane(t, w);
                }
                idx = idx + 4u;
                v = t;
            } else if (bits != 0u) {
                for (var i = 0u; i < 4u; i = i + 1u) {
                    if (((bits >> i) & 1u) != 0u) {
                        var t = 0u;
                        for (var p = 0u; p < W; p = p + 1u) {
                            t = (t << 8u) | plane_byte_at(p, K, min(idx, K - 1u));
                        }
                        idx = idx + 1u;
                        v[i] = t;
                    }
                }
            }
            v = unrotate4(v);
            // Four elements are W words of the chunk's output.
            let ow = (e0 + q) * W / 4u;
            put4(ow, v, owords, nbytes, last_chunk);
        }
    }
    if (seen != z) {
        err = err | ERR_VALUE;
    }
}

// A difference chunk (version 5) from stream byte `at` (after its mode byte): returns the byte
// after its planes.
fn difference_chunk(at0: u32, n: u32, K: u32, last_chunk: bool) -> u32 {
    var at = at0;
    let nbytes = n * W;
    for (var p = 0u; p < W; p = p + 1u) {
        at = next_plane(at, n, p * K, NO_CONTEXT, DECODE);
    }
    storageBarrier();
    // The elements are a prefix sum of the steps: each invocation sums its block of
    // elements (a multiple of 4, so its output words are its own), a scan over the
    // invocations gives each block's start, then each block is summed again into the
    // output (CPU twin: planepack-rans's difference::inverse).
    let block = ((n + WG - 1u) / WG + 3u) / 4u * 4u;
    let b0 = min(slot * block, n);
    let b1 = min(b0 + block, n);
    var sum = 0u;
    for (var i = b0; i < b1; i = i + 1u) {
        sum = sum + unzigzag(step_at(i, K));
    }
    var acc = scan(sum).x;
    let owords = (nbytes + 3u) / 4u;
    var word = 0u;
    for (var i = b0; i < b1; i = i + 1u) {
        acc = (acc + unzigzag(step_at(i, K))) & WMASK;
        let v = unorder(acc);
        // Four bytes an output word: W = 4 a word an element, W = 2 two.
        if (W == 4u) {
            put(i, v, owords, nbytes, last_chunk);
        } else {
            word = word | (v << (16u * (i % 2u)));
            if (i % 2u == 1u || i + 1u == b1) {
                put(i / 2u, word, owords, nbytes, last_chunk);
                word = 0u;
            }
        }
    }
    return at;
}

// A tail-dictionary chunk (W = 4, header flag T, which the host checks) from stream byte
// `at0` (after its mode byte): the dictionary's size, its 3-byte entries, the exponent plane
// and the index plane (in scratch at 0 and K), then an element per invocation step: the
// exponent byte over the entry. An index past the dictionary sets ERR_VALUE. Returns the byte
// after the planes. CPU twin: planepack-rans's tails::decode.
fn tails_chunk(at0: u32, n: u32, K: u32) -> u32 {
    need(at0, 1u);
    let d = byte_at(at0) + 1u;
    let dict = at0 + 1u;
    need(dict, 3u * d);
    var at = dict + 3u * d;
    for (var p = 0u; p < 2u; p = p + 1u) {
        at = next_plane(at, n, p * K, NO_CONTEXT, DECODE);
    }
    storageBarrier();
    for (var e = slot; e < n; e = e + WG) {
        let i = sbyte(K + e);
        if (i >= d) {
            err = err | ERR_VALUE;
        }
        // (The planes follow the dictionary, so its last entry's fourth byte is in the chunk.)
        let tail = bytes4(dict + 3u * min(i, d - 1u)) & 0xffffffu;
        var t = (sbyte(e) << 24u) | tail;
        if (params.rotate != 0u) {
            t = (t >> 1u) | (t << 31u);
        }
        out[obase + e] = t;
    }
    return at;
}

// A raw chunk of `n` elements from its mode byte at `at0`: returns the byte after it.
fn raw_chunk(at0: u32, n: u32, first: u32) -> u32 {
    let nbytes = n * W;
    let at = at0 + 1u;
    need(at, nbytes);
    for (var q = slot; q < (nbytes + 3u) / 4u; q = q + WG) {
        var v = low_bytes(bytes4(at + 4u * q), nbytes - 4u * q);
        if (4u * q + 4u > nbytes && first + n == params.elems) {
            v = v | (params.tail << (8u * (nbytes % 4u)));
        }
        out[obase + q] = v;
    }
    return at + nbytes;
}

// The chunk modes PHASE_OTHER decodes (modelled, block-scaled, difference, tail dictionary:
// bit `mode` of OTHER_MODES, the host's list of them, from which it lists such chunks), in a
// dispatch of their own: on lavapipe every `if` runs both its sides, masked, so a kernel that
// could take any mode ran a pass of all of these for every dense chunk.
fn other_mode(mode: u32) -> bool {
    return mode < 32u && ((OTHER_MODES >> mode) & 1u) != 0u;
}

// A chunk of one of the other modes from its mode byte at `at0` (a mode its width does not
// allow is an error): returns the byte after it.
fn other_chunk(at0: u32, mode: u32, n: u32, K: u32, first: u32) -> u32 {
    var at = at0 + 1u;
    if (mode == CHUNK_MODELLED) {
        at = modelled(at0, n, K, first + n == params.elems);
    } else if (mode == CHUNK_SCALED && W == 4u) {
        at = scaled(at, n, K);
    } else if (mode == CHUNK_DIFFERENCE && W != 1u) {
        at = difference_chunk(at, n, K, first + n == params.elems);
    } else if (mode == CHUNK_TAILS && W == 4u) {
        at = tails_chunk(at, n, K);
    } else {
        err = err | ERR_TAG;
    }
    return at;
}

// A dense or sparse chunk's plane slots in order: the mask plane (slot 0, sparse chunks only),
// then planes 0 .. W - 1 (slots 1 .. W). Walks them from the chunk's mode byte at `at0` up to
// slot `pick` (ALL_SLOTS: every one), decoding slot `pick` as `how` says (every slot, for
// ALL_SLOTS) and parsing the ones before it only; returns the byte after the last slot walked.
const ALL_SLOTS: u32 = 0xffffffffu;
fn planes_of(at0: u32, n: u32, sparse: bool, K: u32, pick: u32, how: u32) -> u32 {
    var at = at0 + 1u;
    let z = coded_of(at0, n, sparse);
    if (sparse) {
        at = plane(at + 4u, (n + 7u) / 8u, params.mask_at, NO_CONTEXT, slot_how(pick, 0u, how));
    }
    for (var p = 0u; p < W; p = p + 1u) {
        if (pick != ALL_SLOTS && p + 1u > pick) {
            break;
        }
        var top = select(NO_CONTEXT, 0u, p == 1u);
        if (p == 0u && !sparse) {
            top = ROW_PLANE;
        }
        if (p == 1u && !sparse) {
            top = DENSE_PLANE_1;
        }
        // Planes 1 to 3 are read by the join only (plane 0 may be a context plane's `top`):
        // a whole chunk's join takes their constant or raw symbols where `plane` held them.
        let h = slot_how(pick, p + 1u, how);
        held = vec2<u32>(HELD_NONE, 0u);
        at = next_plane(at, z, p * K, top, select(h, HOLD, h == DECODE && pick == ALL_SLOTS && p > 0u));
        held_planes[p] = held;
    }
    return at;
}

// How `planes_of` takes slot `s` when it was asked for slot `pick` as `how`.
fn slot_how(pick: u32, s: u32, how: u32) -> u32 {
    return select(SKIP, how, pick == s || pick == ALL_SLOTS);
}

// The coded element count of the dense or sparse chunk whose mode byte is at `at0`: n, or a
// sparse chunk's nonzero count (its u32 after the mode byte; more than n is an error).
fn coded_of(at0: u32, n: u32, sparse: bool) -> u32 {
    if (!sparse) {
        return n;
    }
    need(at0 + 1u, 4u);
    let z = u32_at(at0 + 1u);
    if (z > n) {
        err = err | ERR_VALUE;
    }
    return min(z, n);
}

// The kernel runs in one of five phases (`PHASE`, prepended by the host like `W`, so each is a
// pipeline of its own and the code of the others folds away):
//
// PHASE_WHOLE: a workgroup per chunk decodes all its planes, one after the other, and joins
// them (the shape for lavapipe, where every invocation is a CPU's time: no plane is parsed
// twice). Raw chunks too; a chunk of the other modes is left to PHASE_OTHER.
//
// PHASE_PLANES, PHASE_CONTEXT, PHASE_JOIN (three dispatches, for GPUs): a chunk's planes are
// independent streams, so a workgroup per chunk and plane slot (W + 1 of them a chunk) decodes
// one plane, after parsing (not decoding) the ones before it to find where it starts; a
// context plane (plane 1 coded with plane 0's byte as context) waits for the second dispatch,
// when plane 0 is in scratch; the third joins the planes into elements. Raw chunks are copied
// by their slot-0 workgroup in the first. On a GPU a chunk's planes were a serial chain of lane
// steps, one workgroup of 32 invocations per chunk: a 3 MB tensor of 64 KiB chunks kept 48
// workgroups busy on a GPU of 132 multiprocessors.
//
// PHASE_OTHER (beside either, where the stream has such chunks): a workgroup per chunk of the
// other modes (`other_mode`: modelled, block-scaled, difference, tail dictionary), over the
// host's list of them. In a kernel of their own, a dense chunk's decode runs none of their
// code (on lavapipe, where both sides of every `if` run, it ran a masked pass of all of them
// per chunk), and a stream without them never builds their pipeline.
const PHASE_WHOLE: u32 = 0u;
const PHASE_PLANES: u32 = 1u;
const PHASE_CONTEXT: u32 = 2u;
const PHASE_JOIN: u32 = 3u;
const PHASE_OTHER: u32 = 4u;
const SLOTS: u32 = W + 1u;

// Four elements (`v`, one per component) as the W output words from word `ow` of the chunk.
fn put4(ow: u32, v: vec4<u32>, owords: u32, nbytes: u32, last_chunk: bool) {
    if (W == 4u) {
        put(ow, v.x, owords, nbytes, last_chunk);
        put(ow + 1u, v.y, owords, nbytes, last_chunk);
        put(ow + 2u, v.z, owords, nbytes, last_chunk);
        put(ow + 3u, v.w, owords, nbytes, last_chunk);
    } else if (W == 2u) {
        put(ow, v.x | (v.y << 16u), owords, nbytes, last_chunk);
        put(ow + 1u, v.z | (v.w << 16u), owords, nbytes, last_chunk);
    } else {
        put(ow, v.x | (v.y << 8u) | (v.z << 16u) | (v.w << 24u), owords, nbytes, last_chunk);
    }
}

fn run(wg: vec3<u32>) {
    let g = wg.y * params.chunks_x + wg.x;
    var c = g;
    var s = 0u;
    if (PHASE == PHASE_PLANES) {
        c = g / SLOTS;
        s = g % SLOTS;
    }
    if (PHASE == PHASE_OTHER) {
        if (g >= params.n_other) {
            return;
        }
        c = chunk_off[params.other_at + g];
    }
    err = 0u;
    let K = params.chunk_elems;
    let body = params.elems * W;
    // The tail: a word of its own (W = 4 or 1, or a body ending on a word boundary), else
    // merged into the body's last word below.
    if ((PHASE == PHASE_WHOLE || PHASE == PHASE_JOIN) && c == 0u && slot == 0u
        && params.tail_len > 0u && body % 4u == 0u) {
        out[body / 4u] = params.tail;
    }
    if (c >= params.n_chunks) {
        return;
    }
    let at0 = chunk_off[c];
    cend = chunk_off[c + 1u];
    sbase = c * params.scratch_words;
    let first = c * K;
    let n = min(K, params.elems - first);
    obase = first * W / 4u;
    let last_chunk = first + n == params.elems;
    need(at0, 1u);
    let mode = byte_at(at0);
    let sparse = mode == CHUNK_SPARSE;
    let planar = mode == CHUNK_DENSE || sparse;
    // A chunk of the other modes is PHASE_OTHER's; any mode else is an error.
    if (!planar && mode != CHUNK_RAW && !other_mode(mode)) {
        err = err | ERR_TAG;
    }
    if (PHASE == PHASE_WHOLE) {
        // (A chunk of the other modes is not walked here: PHASE_OTHER checks its end.)
        var at = cend;
        if (planar) {
            at = planes_of(at0, n, sparse, K, ALL_SLOTS, DECODE);
            storageBarrier();
            join(n, coded_of(at0, n, sparse), sparse, K, last_chunk);
        } else if (mode == CHUNK_RAW) {
            at = raw_chunk(at0, n, first);
        }
        if (at != cend) {
            err = err | ERR_LENGTH;
        }
    } else if (PHASE == PHASE_OTHER) {
        if (other_chunk(at0, mode, n, K, first) != cend) {
            err = err | ERR_LENGTH;
        }
    } else if (PHASE == PHASE_PLANES) {
        if (planar && (sparse || s > 0u)) {
            let at = planes_of(at0, n, sparse, K, s, DEFER_CONTEXT);
            // The last slot's workgroup has walked the whole chunk.
            if (s == W && at != cend) {
                err = err | ERR_LENGTH;
            }
        } else if (mode == CHUNK_RAW && s == 0u) {
            if (raw_chunk(at0, n, first) != cend) {
                err = err | ERR_LENGTH;
            }
        }
    } else if (PHASE == PHASE_CONTEXT) {
        if (planar && W > 1u) {
            planes_of(at0, n, sparse, K, 2u, ONLY_CONTEXT);
        }
    } else if (planar) {
        join(n, coded_of(at0, n, sparse), sparse, K, last_chunk);
    }
    if (err != 0u) {
        atomicOr(&status[0], err);
        atomicMin(&status[1], c);
    }
}
