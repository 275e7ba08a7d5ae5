// IBP row decoder (docs/format-ibp.md): a workgroup decodes several rows, a few invocations each.
//
// The host prepends the chunk width and the invocations per row as constants (`const W: u32 =
// 32u;`, `const PER: u32`, chunks per output word: 2 for W = 16, else 1, and `const LANES`), so
// each (width, lanes) is its own pipeline and every width test below folds away at compile
// time. With LANES = 1 the loops over a row's columns are the same in every invocation, so
// the column words (mask, bitval) are loaded at addresses the compiler can see are uniform.
// The host has checked the stream (mask, bitval, row bitmask) and placed every stored row
// (`row_span`: byte start and end of row `i` at `2 i`, `2 i + 1`; rows may be back to back,
// as in the condensed layout and the `Ibp` stream, or in fixed slots, as in the in-place
// layout). Rows and column arrays start on 4-byte boundaries
// for W >= 32 and on 2-byte boundaries for W = 16. A pass decodes entries `first ..
// first + count` of `row_ids`: with `id_stride` 1, output row `e` is stored row `row_ids[e]`
// (the identity for a whole tensor, any list of row indices for a gather); with `id_stride` 2,
// entry `e` is the pair (stored row, output row) at `2 e`. A stream with several masks (one
// per cluster of rows) is decoded in one pass per cluster, `mask_off` pointing at that
// cluster's mask, so that the rows of a workgroup always share one mask.
//
// A raw row is copied. A packed row is split into runs of whole 32-chunk groups (one word of
// its participation bitmap each), one run per invocation. Pass 1: each invocation adds up its
// fields' widths from the bitmap and a workgroup table of the columns' mask popcounts; a
// workgroup prefix sum (`scan`) turns the sums into every run's first bit in the row's field
// stream. Pass 2: each invocation reads its fields in order through a three-word window that
// advances by one load when the position crosses into the next 32 bits, deposits them into the
// columns' free bits and writes its output words. Extra workgroups copy the tensor's tail bytes
// (IBP_TAIL_WORDS_PER_GROUP words each; llvmpipe cuts an invocation's loops short after 65535
// iterations, so no invocation copies a long tail alone).
//
// Why this shape: on GPUs and on lavapipe alike, memory operations are what a chunk costs, and
// lavapipe executes both sides of every branch whose condition differs between invocations.
// So per 32-bit output word pass 2 makes one mask, one bitval and at most one field-stream
// load and one store, pass 1 a quarter of a workgroup load. The field-stream load is the one
// branch: skipping it when no invocation crosses a word pays on sparse rows (narrow fields)
// and costs nothing measurable on dense ones (`examples/gpu_probe.rs`).
//
// Long rows: llvmpipe stops an invocation's loops once 65535 iterations are spent in all; the
// host gives a long row more invocations (`row_lanes` in ibp.rs) and a canary loop at the end
// reports ERR_LOOP if a limit was hit anyway.
//
// Untrusted input: every read is bounds-checked, loops are bounded by the row's chunk count,
// writes stay inside the output row, and a row whose fields do not add up to its stored
// length, or whose padding is not zero, sets a bit in `status[0]` (row index in `status[1]`).

struct Params {
    columns: u32,
    // Also the compile-time W: the host picks the pipeline by the group's width.
    width: u32,
    n_out: u32,
    n_rows: u32,
    mask_off: u32,
    bitmask_off: u32,
    tail_off: u32,
    tail_len: u32,
    rows_x: u32,
    // Also the compile-time LANES: invocations per row (a power of two dividing WG); a
    // workgroup decodes WG / LANES rows, each invocation a run of whole 32-chunk groups of it.
    lanes: u32,
    first: u32,
    count: u32,
    id_stride: u32,
}

@group(0) @binding(0) var<storage, read> stream: array<u32>;
@group(0) @binding(1) var<storage, read> row_span: array<u32>;
@group(0) @binding(2) var<storage, read> row_ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read_write> status: array<atomic<u32>>;

const WG: u32 = 64u;
const B: u32 = W / 8u;

// Columns per tile of the popcount table: pass 1 walks a wider row tile by tile.
const TILE: u32 = 4096u;
// Byte i of word q: popcount of the mask of column 4 q + i of the current tile.
var<workgroup> col_pop: array<u32, TILE / 4u>;
var<workgroup> seg: array<u32, WG>;

// 32 bits at byte `b` (a multiple of 4, or of 2 when W = 16), little-endian.
fn load32(b: u32) -> u32 {
    let lo = word(b >> 2u);
    if (W >= 32u) {
        return lo;
    }
    let hi = word((b >> 2u) + 1u);
    return select(lo, (lo >> 16u) | (hi << 16u), (b & 2u) != 0u);
}

// Word `j` of the W-bit column array at byte `off` (4-aligned), as (low 32, high 32).
fn col_word(off: u32, j: u32) -> vec2<u32> {
    if (W == 64u) {
        let i = (off >> 2u) + 2u * j;
        return vec2<u32>(word(i), word(i + 1u));
    }
    if (W == 32u) {
        return vec2<u32>(word((off >> 2u) + j), 0u);
    }
    let b = off + 2u * j;
    return vec2<u32>((word(b >> 2u) >> ((b & 2u) * 8u)) & 0xffffu, 0u);
}

fn width_mask() -> vec2<u32> {
    if (W == 64u) {
        return vec2<u32>(0xffffffffu);
    }
    if (W == 32u) {
        return vec2<u32>(0xffffffffu, 0u);
    }
    return vec2<u32>(0xffffu, 0u);
}

// ---- The field-stream reader --------------------------------------------------------------
//
// The stream of a row is a sequence of 32-bit units, unit k holding stream bits 32 k .. 32 k + 31
// with the first one most significant. `fr_r0..2` are the raw stream words behind units k,
// k + 1, k + 2; `fr_s` is the position's bit offset in unit k.
var<private> fr_a: u32;
var<private> fr_odd: bool;
var<private> fr_k: u32;
var<private> fr_s: u32;
var<private> fr_r0: u32;
var<private> fr_r1: u32;
var<private> fr_r2: u32;

// The stream word behind unit `j`.
fn raw_unit(j: u32) -> u32 {
    if (W == 64u) {
        // Each u64 is little-endian; its high half comes first in the stream.
        return word(fr_a + (j ^ 1u));
    }
    return word(fr_a + j);
}

// Unit k from the raw words behind units k and k + 1.
fn unit_of(r: u32, next: u32) -> u32 {
    if (W == 16u) {
        // 16-bit words, the first of a unit in the low half of an aligned word, or (a row
        // starting 2 bytes into a word) in the high half of one and the low half of the next.
        return select((r << 16u) | (r >> 16u), (r & 0xffff0000u) | (next & 0xffffu), fr_odd);
    }
    return r;
}

// Start reading the row's field stream at byte `at` (a multiple of B), at stream bit `p`.
fn reader_at(at: u32, p: u32) {
    fr_a = at >> 2u;
    fr_odd = (at & 2u) != 0u;
    fr_k = p >> 5u;
    fr_s = p & 31u;
    fr_r0 = raw_unit(fr_k);
    fr_r1 = raw_unit(fr_k + 1u);
    fr_r2 = raw_unit(fr_k + 2u);
}

// The next `n` (0..=32) bits, the first one most significant, and move past them. One load
// when the position crosses into the next unit.
fn read_bits(n: u32) -> u32 {
    let u0 = unit_of(fr_r0, fr_r1);
    let u1 = unit_of(fr_r1, fr_r2);
    let s = fr_s;
    let v = (u0 << s) | select(0u, u1 >> (32u - s), s != 0u);
    let r = select(0u, v >> (32u - n), n != 0u);
    let t = s + n;
    fr_s = t & 31u;
    if (t >= 32u) {
        fr_k = fr_k + 1u;
        fr_r0 = fr_r1;
        fr_r1 = fr_r2;
        fr_r2 = raw_unit(fr_k + 2u);
    }
    return r;
}

// A field of `n` (0..=W) bits, as (low, high).
fn read_field(n: u32) -> vec2<u32> {
    if (W == 64u) {
        let hi = read_bits(max(n, 32u) - 32u);
        let lo = read_bits(min(n, 32u));
        return vec2<u32>(lo, hi);
    }
    return vec2<u32>(read_bits(n), 0u);
}

// ---- Deposit ------------------------------------------------------------------------------

// Bits `k ..` of the 64-bit value `f` (low, high), as one word.
fn take64(f: vec2<u32>, k: u32) -> u32 {
    let lo = select(f.x >> (k & 31u), 0u, k >= 32u);
    let carry = select(0u, f.y << (32u - k), k > 0u && k < 32u);
    let hi = select(0u, f.y >> (k - 32u), k >= 32u && k < 64u);
    return lo | carry | hi;
}

// Deposit bits of `f` from bit `k` on into the set bits of `m`; returns (word, next k).
// Works run by run of consecutive set bits: a column's free bits form few runs (sign,
// exponent, mantissa boundaries), so this loops a few times rather than once per bit.
fn deposit(f: vec2<u32>, m_in: u32, k_in: u32) -> vec2<u32> {
    var m = m_in;
    var k = k_in;
    var r = 0u;
    for (var guard = 0u; guard < 16u && m != 0u; guard = guard + 1u) {
        let at = countTrailingZeros(m);
        let len = countTrailingZeros(~(m >> at));
        let run = select((1u << len) - 1u, 0xffffffffu, len >= 32u);
        r = r | ((take64(f, k) & run) << at);
        m = m & ~(run << at);
        k = k + len;
    }
    return vec2<u32>(r, k);
}

// `deposit` for a field of at most 32 bits into a 32-bit `m` of at most two runs of set bits
// (the common case: a float column's free bits are the sign and a low run, or one run), in
// closed form; more runs take the loop. A multiply by a run's lowest bit is the shift to it.
fn deposit32(f: u32, m: u32) -> u32 {
    let low1 = m & (0u - m);
    let run1 = m & ~(m + low1);
    let m2 = m ^ run1;
    let low2 = m2 & (0u - m2);
    let run2 = m2 & ~(m2 + low2);
    if ((m2 ^ run2) != 0u) {
        return deposit(vec2<u32>(f, 0u), m, 0u).x;
    }
    let len1 = countOneBits(run1);
    let rest = select(f >> len1, 0u, len1 >= 32u);
    return ((f * low1) & run1) | ((rest * low2) & run2);
}

// pdep for up to 64 bits: the low bits of `f` placed at the set bits of `sel`.
fn pdep(f: vec2<u32>, sel: vec2<u32>) -> vec2<u32> {
    if (W < 64u) {
        return vec2<u32>(deposit32(f.x, sel.x), 0u);
    }
    let lo = deposit(f, sel.x, 0u);
    let hi = deposit(f, sel.y, lo.y);
    return vec2<u32>(lo.x, hi.x);
}

// Chunk `j` of a packed row, its participation bit `part`: its field read from the stream.
fn chunk(j: u32, part: bool) -> vec2<u32> {
    let m = col_word(params.mask_off, j);
    let bv = col_word(params.mask_off + params.columns * B, j);
    let n = select(W, W - countOneBits(m.x) - countOneBits(m.y), part);
    let f = read_field(n);
    return select(f, bv | pdep(f, ~m & width_mask()), part);
}

// Bytes 0..3 of `x` added.
fn byte_sum(x: u32) -> u32 {
    let y = (x & 0x00ff00ffu) + ((x >> 8u) & 0x00ff00ffu);
    return (y & 0xffffu) + (y >> 16u);
}

// The low 4 bits of `b` spread to bytes: 0xff in byte i where bit i is set.
fn spread4(b: u32) -> u32 {
    return ((((b & 0xfu) * 0x00204081u) & 0x01010101u) * 0xffu);
}

fn tail(tg: u32) {
    // Copy tail group `tg`'s words of the `tail_len` bytes to the end of the output, one word
    // per invocation at a time (IBP_TAIL_WORDS_PER_GROUP per group, so no invocation loops long).
    let base = params.n_out * params.columns * B;
    let words = (params.tail_len + 3u) / 4u;
    let lo = tg * IBP_TAIL_WORDS_PER_GROUP;
    let hi = min(words, lo + IBP_TAIL_WORDS_PER_GROUP);
    for (var t = lo + slot; t < hi; t = t + WG) {
        var v = 0u;
        for (var i = 0u; i < 4u; i = i + 1u) {
            let b = 4u * t + i;
            if (b < params.tail_len) {
                let x = params.tail_off + b;
                v = v | (((word(x >> 2u) >> ((x & 3u) * 8u)) & 0xffu) << (8u * i));
            }
        }
        out[base / 4u + t] = v;
    }
}

fn run(wg: vec3<u32>) {
    let g = wg.y * params.rows_x + wg.x;
    let lanes = LANES;
    let rpg = WG / lanes;
    let body_groups = (params.count + rpg - 1u) / rpg;
    let tail_groups = ((params.tail_len + 3u) / 4u + IBP_TAIL_WORDS_PER_GROUP - 1u) / IBP_TAIL_WORDS_PER_GROUP;
    if (g >= body_groups + tail_groups) {
        return;
    }
    err = 0u;
    if (g >= body_groups) {
        tail(g - body_groups);
        if (err != 0u) {
            atomicOr(&status[0], err);
        }
        return;
    }
    let v = params.columns;
    let row_bytes = v * B;
    // This invocation: row k of the workgroup, 32-chunk groups [q_lo, q_hi) of it.
    let k = slot / lanes;
    let l = slot % lanes;
    let groups = (v + 31u) / 32u;
    let gpl = (groups + lanes - 1u) / lanes;
    let q_lo = min(l * gpl, groups);
    let q_hi = min(q_lo + gpl, groups);
    let e = g * rpg + k;
    var r = e;
    var mine = e < params.count;
    var row = 0u;
    var start = 0u;
    var stored = 0u;
    var packed = false;
    if (mine) {
        let at = params.id_stride * (params.first + e);
        row = row_ids[at];
        if (params.id_stride == 2u) {
            r = row_ids[at + 1u];
        }
        if (row >= params.n_rows || r >= params.n_out) {
            err = err | ERR_ROW;
            row = 0u;
            mine = r < params.n_out;
        }
        start = row_span[2u * row];
        stored = row_span[2u * row + 1u] - start;
        packed = ((word(params.bitmask_off / 4u + row / 32u) >> (row % 32u)) & 1u) == 1u;
    }
    let base = r * (row_bytes / 4u);
    let h = ((v + 7u) / 8u + B - 1u) / B * B;
    let fields_at = start + h;
    let live = mine && packed;

    // Pass 1: the widths of this invocation's fields, tile by tile of the popcount table.
    var sum = 0u;
    let tiles = (v + TILE - 1u) / TILE;
    for (var t = 0u; t < tiles; t = t + 1u) {
        let c0 = t * TILE;
        let cols = min(v - c0, TILE);
        workgroupBarrier();
        for (var q = slot; q < (cols + 3u) / 4u; q = q + WG) {
            var packed_pop = 0u;
            for (var i = 0u; i < 4u; i = i + 1u) {
                let j = c0 + 4u * q + i;
                let m = col_word(params.mask_off, min(j, v - 1u));
                let pc = select(0u, countOneBits(m.x) + countOneBits(m.y), j < v);
                packed_pop = packed_pop | (pc << (8u * i));
            }
            col_pop[q] = packed_pop;
        }
        workgroupBarrier();
        if (live) {
            let lo = max(q_lo, c0 / 32u);
            let hi = min(q_hi, (c0 + cols + 31u) / 32u);
            for (var q = lo; q < hi; q = q + 1u) {
                let n_valid = min(32u, v - 32u * q);
                var bm = load32(start + 4u * q);
                bm = bm & select((1u << n_valid) - 1u, 0xffffffffu, n_valid >= 32u);
                let p0 = (32u * q - c0) / 4u;
                var pops = 0u;
                for (var i = 0u; i < 8u; i = i + 1u) {
                    pops = pops + byte_sum(col_pop[p0 + i] & spread4(bm >> (4u * i)));
                }
                sum = sum + n_valid * W - pops;
            }
        }
    }
    let sc = scan(sum);
    // Segment the scan by row: subtract the prefix at this row's first slot.
    seg[slot] = sc.x;
    workgroupBarrier();
    let before = seg[k * lanes];
    var total = sc.y;
    if ((k + 1u) * lanes < WG) {
        total = seg[(k + 1u) * lanes];
    }
    total = total - before;

    // Pass 2: decode this invocation's groups.
    if (live) {
        reader_at(fields_at, sc.x - before);
        for (var q = q_lo; q < q_hi; q = q + 1u) {
            let bm = load32(start + 4u * q);
            let end = min(32u * q + 32u, v);
            for (var j = 32u * q; j < end; j = j + PER) {
                let x0 = chunk(j, ((bm >> (j & 31u)) & 1u) == 1u);
                if (W == 64u) {
                    out[base + 2u * j] = x0.x;
                    out[base + 2u * j + 1u] = x0.y;
                } else if (W == 32u) {
                    out[base + j] = x0.x;
                } else {
                    let x1 = chunk(j + 1u, ((bm >> ((j + 1u) & 31u)) & 1u) == 1u);
                    out[base + j / 2u] = x0.x | (x1.x << 16u);
                }
            }
        }
    }
    if (mine && !packed) {
        if (stored != row_bytes) {
            err = err | ERR_LENGTH;
        }
        for (var t = l; t < row_bytes / 4u; t = t + lanes) {
            out[base + t] = load32(start + 4u * t);
        }
    }
    if (live && l == 0u) {
        // The row's length follows from its fields; its padding must be zero.
        let d = (total + W - 1u) / W * B;
        if (h + d != stored || stored >= row_bytes) {
            err = err | ERR_LENGTH;
        } else {
            let pad = d * 8u - total;
            reader_at(fields_at, total);
            let rest = read_field(pad);
            if (rest.x != 0u || rest.y != 0u) {
                err = err | ERR_VALUE;
            }
            // Bitmap bits v .. 8 h must be zero.
            for (var q = v / 32u; q < (8u * h + 31u) / 32u; q = q + 1u) {
                var bits = load32(start + 4u * q);
                let lo = max(v, 32u * q) - 32u * q;
                let hi = min(8u * h - 32u * q, 32u);
                bits = bits & ~select((1u << lo) - 1u, 0xffffffffu, lo >= 32u);
                bits = bits & select((1u << hi) - 1u, 0xffffffffu, hi >= 32u);
                if (bits != 0u) {
                    err = err | ERR_VALUE;
                }
            }
        }
    }
    // The canary: once llvmpipe's loop limiter has spent an invocation's iterations, every
    // loop stops after its current pass, this one too. The host keeps rows within the budget
    // (LOOP_ITERATIONS_MAX, `row_lanes` in ibp.rs); if it ever misjudges, the launch fails
    // instead of returning rows that were cut short. The trip count is a uniform, so the loop
    // stays a loop.
    var laps = 0u;
    for (var i = 0u; i <= params.lanes; i = i + 1u) {
        laps = laps + 1u;
    }
    if (laps != params.lanes + 1u) {
        err = err | ERR_LOOP;
    }
    if (err != 0u) {
        atomicOr(&status[0], err);
        atomicMin(&status[1], r);
    }
}
