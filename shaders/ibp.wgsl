// IBP row decoder (docs/format-ibp.md): a workgroup decodes several rows, a few invocations each.
//
// The host has checked the stream (mask, bitval, row bitmask) and placed every stored row
// (`row_span`: byte start and end of row `i` at `2 i`, `2 i + 1`; rows may be back to back, as
// in the condensed layout and the `Ibp` stream, or in fixed slots, as in the in-place layout). Output row `r` is stored row `row_ids[r]`: the
// identity for a whole tensor, any list of row indices for a gather. A raw row is copied; a
// packed row is decoded `WG` chunks at a time: each invocation owns one output word (one
// chunk, or two 16-bit chunks), computes the width of its fields, and a workgroup prefix
// sum (`scan`) gives every field's bit position in the row's MSB-first word stream. One extra
// workgroup copies the tensor's tail bytes when `tail_len > 0`.
//
// Untrusted input: every read is bounds-checked, loops are bounded by the row's chunk count,
// writes stay inside the output row, and a row whose fields do not add up to its stored
// length, or whose padding is not zero, sets a bit in `status[0]` (row index in `status[1]`).

struct Params {
    columns: u32,
    width: u32,
    n_out: u32,
    n_rows: u32,
    mask_off: u32,
    bitmask_off: u32,
    tail_off: u32,
    tail_len: u32,
    rows_x: u32,
    // Invocations per row (a power of two dividing WG); a workgroup decodes WG / lanes rows,
    // each invocation a run of consecutive output words of its row.
    lanes: u32,
}

@group(0) @binding(0) var<storage, read> stream: array<u32>;
@group(0) @binding(1) var<storage, read> row_span: array<u32>;
@group(0) @binding(2) var<storage, read> row_ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read_write> status: array<atomic<u32>>;

const WG: u32 = 64u;

// The last two 32-bit units of the field stream read (unit fr_k and fr_k + 1).
var<private> fr_k: u32;
var<private> fr_u0: u32;
var<private> fr_u1: u32;
// The last stream word read for participation bits.
var<private> bm_i: u32;
var<private> bm_w: u32;
// Mask and bitval of every column, loaded once per workgroup when the row has at most
// CACHE_COLS chunks; from the stream otherwise.
const CACHE_COLS: u32 = 512u;
var<workgroup> col_mask: array<vec2<u32>, CACHE_COLS>;
var<workgroup> col_bitval: array<vec2<u32>, CACHE_COLS>;
var<private> cols_cached: bool;
var<workgroup> seg: array<u32, WG>;

// 32 bits at any byte offset, little-endian.
fn load32(b: u32) -> u32 {
    let sh = (b & 3u) * 8u;
    let lo = word(b >> 2u);
    if (sh == 0u) {
        return lo;
    }
    return (lo >> sh) | (word((b >> 2u) + 1u) << (32u - sh));
}

// Chunk-width word `j` (W bits) of the array at byte `at`, as (low 32, high 32).
fn wword(at: u32, j: u32) -> vec2<u32> {
    let w = params.width;
    if (w == 64u) {
        return vec2<u32>(load32(at + 8u * j), load32(at + 8u * j + 4u));
    }
    let v = load32(at + (w / 8u) * j);
    if (w == 32u) {
        return vec2<u32>(v, 0u);
    }
    return vec2<u32>(v & 0xffffu, 0u);
}

// 32-bit unit `k` of a row's MSB-first field stream starting at byte `at`.
fn unit(at: u32, k: u32) -> u32 {
    let w = params.width;
    if (w == 32u) {
        return load32(at + 4u * k);
    }
    if (w == 64u) {
        // Word k/2 (u64, little-endian): its high half comes first in the stream.
        return load32(at + 8u * (k >> 1u) + 4u * (1u - (k & 1u)));
    }
    let v = load32(at + 4u * k);
    return (v << 16u) | (v >> 16u);
}

// `n` (1..=32) bits at stream bit `p`, the first one most significant.
fn msb_bits(at: u32, p: u32, n: u32) -> u32 {
    let k = p >> 5u;
    let s = p & 31u;
    // Consecutive fields share stream words: keep the last two units.
    if (k != fr_k) {
        fr_k = k;
        fr_u0 = unit(at, k);
        fr_u1 = unit(at, k + 1u);
    }
    var v = fr_u0 << s;
    if (s != 0u) {
        v = v | (fr_u1 >> (32u - s));
    }
    return v >> (32u - n);
}

// A field of `n` (0..=64) bits at `p`, as (low, high).
fn field(at: u32, p: u32, n: u32) -> vec2<u32> {
    if (n == 0u) {
        return vec2<u32>(0u);
    }
    if (n <= 32u) {
        return vec2<u32>(msb_bits(at, p, n), 0u);
    }
    return vec2<u32>(msb_bits(at, p + n - 32u, 32u), msb_bits(at, p, n - 32u));
}

// Bits `k ..` of the 64-bit value `f` (low, high), as one word.
fn take64(f: vec2<u32>, k: u32) -> u32 {
    if (k == 0u) {
        return f.x;
    }
    if (k < 32u) {
        return (f.x >> k) | (f.y << (32u - k));
    }
    if (k < 64u) {
        return f.y >> (k - 32u);
    }
    return 0u;
}

// Deposit bits of `f` from bit `k` on into the set bits of `m`; returns (word, next k).
// Works run by run of consecutive set bits: a column mask has few runs (sign, exponent,
// mantissa boundaries), so this loops a few times rather than once per bit.
fn deposit(f: vec2<u32>, m_in: u32, k_in: u32) -> vec2<u32> {
    var m = m_in;
    var k = k_in;
    var r = 0u;
    for (var guard = 0u; guard < 16u && m != 0u; guard = guard + 1u) {
        let at = countTrailingZeros(m);
        let len = countTrailingZeros(~(m >> at));
        var run = 0xffffffffu;
        if (len < 32u) {
            run = (1u << len) - 1u;
        }
        r = r | ((take64(f, k) & run) << at);
        m = m & ~(run << at);
        k = k + len;
    }
    return vec2<u32>(r, k);
}

// pdep for up to 64 bits: the low bits of `f` placed at the set bits of `sel`.
fn pdep(f: vec2<u32>, sel: vec2<u32>) -> vec2<u32> {
    let lo = deposit(f, sel.x, 0u);
    let hi = deposit(f, sel.y, lo.y);
    return vec2<u32>(lo.x, hi.x);
}

// Field width of chunk `j` of the row whose bitmap starts at `start`, and whether it
// participates (1) or not (0).
fn mask_of(j: u32) -> vec2<u32> {
    if (cols_cached) {
        return col_mask[j];
    }
    return wword(params.mask_off, j);
}

fn bitval_of(j: u32) -> vec2<u32> {
    if (cols_cached) {
        return col_bitval[j];
    }
    return wword(params.mask_off + params.columns * (params.width / 8u), j);
}

// Participation bit of chunk `j` of the row whose bitmap starts at byte `start`.
fn part_bit(start: u32, j: u32) -> u32 {
    let byte = start + (j >> 3u);
    let i = byte >> 2u;
    if (i != bm_i) {
        bm_i = i;
        bm_w = word(i);
    }
    return (bm_w >> ((byte & 3u) * 8u + (j & 7u))) & 1u;
}

fn chunk_width(start: u32, j: u32) -> vec2<u32> {
    let w = params.width;
    if (part_bit(start, j) == 1u) {
        let mj = mask_of(j);
        return vec2<u32>(w - countOneBits(mj.x) - countOneBits(mj.y), 1u);
    }
    return vec2<u32>(w, 0u);
}

// Chunk `j` decoded from its field at stream bit `p`.
fn chunk_value(fields_at: u32, j: u32, p: u32, cw: vec2<u32>) -> vec2<u32> {
    let f = field(fields_at, p, cw.x);
    if (cw.y == 1u) {
        return bitval_of(j) | pdep(f, ~mask_of(j) & width_mask());
    }
    return f;
}

fn width_mask() -> vec2<u32> {
    let w = params.width;
    if (w == 64u) {
        return vec2<u32>(0xffffffffu);
    }
    if (w == 32u) {
        return vec2<u32>(0xffffffffu, 0u);
    }
    return vec2<u32>(0xffffu, 0u);
}

fn tail() {
    // Copy `tail_len` bytes to the end of the output, one word per invocation.
    let base = params.n_out * params.columns * (params.width / 8u);
    let words = (params.tail_len + 3u) / 4u;
    for (var t = slot; t < words; t = t + WG) {
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

// Width and participation of the (one or two) chunks of output word `u`.
fn unit_width(start: u32, u: u32, per: u32) -> u32 {
    var sum = chunk_width(start, u * per).x;
    if (per == 2u) {
        sum = sum + chunk_width(start, u * per + 1u).x;
    }
    return sum;
}

fn run(wg: vec3<u32>) {
    let g = wg.y * params.rows_x + wg.x;
    let lanes = params.lanes;
    let rpg = WG / lanes;
    let body_groups = (params.n_out + rpg - 1u) / rpg;
    let has_tail = params.tail_len > 0u;
    if (g > body_groups || (g == body_groups && !has_tail)) {
        return;
    }
    err = 0u;
    if (g == body_groups) {
        tail();
        if (err != 0u) {
            atomicOr(&status[0], err);
        }
        return;
    }
    let w = params.width;
    let b = w / 8u;
    let v = params.columns;
    let row_bytes = v * b;
    let per = select(1u, 2u, w == 16u);
    let units = v / per;
    // This invocation: row k of the group, output words [u_lo, u_hi) of it.
    let k = slot / lanes;
    let l = slot % lanes;
    let upl = (units + lanes - 1u) / lanes;
    fr_k = 0xffffffffu;
    bm_i = 0xffffffffu;
    cols_cached = v <= CACHE_COLS;
    if (cols_cached) {
        for (var j = slot; j < v; j = j + WG) {
            col_mask[j] = wword(params.mask_off, j);
            col_bitval[j] = wword(params.mask_off + v * b, j);
        }
    }
    workgroupBarrier();
    let u_lo = min(l * upl, units);
    let u_hi = min(u_lo + upl, units);
    let r = g * rpg + k;
    let mine = r < params.n_out;
    var row = 0u;
    var start = 0u;
    var stored = 0u;
    var packed = false;
    if (mine) {
        row = row_ids[r];
        if (row >= params.n_rows) {
            err = err | ERR_ROW;
            row = 0u;
        }
        start = row_span[2u * row];
        stored = row_span[2u * row + 1u] - start;
        packed = ((word(params.bitmask_off / 4u + row / 32u) >> (row % 32u)) & 1u) == 1u;
    }
    let base = r * (row_bytes / 4u);
    let h = ((v + 7u) / 8u + b - 1u) / b * b;
    let fields_at = start + h;
    let live = mine && packed;
    var sum = 0u;
    if (live) {
        for (var u = u_lo; u < u_hi; u = u + 1u) {
            sum = sum + unit_width(start, u, per);
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
    if (live) {
        var p = sc.x - before;
        for (var u = u_lo; u < u_hi; u = u + 1u) {
            let c0 = chunk_width(start, u * per);
            let x0 = chunk_value(fields_at, u * per, p, c0);
            p = p + c0.x;
            if (w == 64u) {
                out[base + 2u * u] = x0.x;
                out[base + 2u * u + 1u] = x0.y;
            } else if (w == 32u) {
                out[base + u] = x0.x;
            } else {
                let c1 = chunk_width(start, u * per + 1u);
                let x1 = chunk_value(fields_at, u * per + 1u, p, c1);
                p = p + c1.x;
                out[base + u] = x0.x | (x1.x << 16u);
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
        let running = total;
        let d = (running + w - 1u) / w * b;
        if (h + d != stored || stored >= row_bytes) {
            err = err | ERR_LENGTH;
        } else {
            let pad = d * 8u - running;
            let rest = field(fields_at, running, pad);
            if (rest.x != 0u || rest.y != 0u) {
                err = err | ERR_VALUE;
            }
            for (var j = v; j < h * 8u; j = j + 1u) {
                if (part_bit(start, j) == 1u) {
                    err = err | ERR_VALUE;
                }
            }
        }
    }
    if (err != 0u) {
        atomicOr(&status[0], err);
        atomicMin(&status[1], r);
    }
}
