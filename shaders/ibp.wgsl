// IBP row decoder (docs/format-ibp.md): one workgroup per output row, or several short rows.
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
    // Rows decoded by one workgroup: WG / units when a row has at most WG / 2 output words,
    // so short rows do not leave most invocations idle; else 1.
    rows_per_group: u32,
}

@group(0) @binding(0) var<storage, read> stream: array<u32>;
@group(0) @binding(1) var<storage, read> row_span: array<u32>;
@group(0) @binding(2) var<storage, read> row_ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read_write> status: array<atomic<u32>>;

const WG: u32 = 64u;
const ERR_BOUNDS: u32 = 1u;
const ERR_OVERRUN: u32 = 2u;
const ERR_LENGTH: u32 = 8u;
const ERR_VALUE: u32 = 32u;
const ERR_ROW: u32 = 64u;
const ERR_LAYOUT: u32 = 256u;

var<private> err: u32;
var<workgroup> seg: array<u32, WG>;

fn word(i: u32) -> u32 {
    if (i < arrayLength(&stream)) {
        return stream[i];
    }
    err = err | ERR_BOUNDS;
    return 0u;
}

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
    var v = unit(at, k) << s;
    if (s != 0u) {
        v = v | (unit(at, k + 1u) >> (32u - s));
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

// Deposit the low bits of `f` at the set bits of `sel` (pdep), 64-bit as (low, high). Works
// run by run of consecutive set bits: a column mask has few runs (sign, exponent, mantissa
// boundaries), so this loops a few times rather than once per bit.
fn pdep(f: vec2<u32>, sel: vec2<u32>) -> vec2<u32> {
    var r = vec2<u32>(0u);
    var k = 0u;
    for (var h = 0u; h < 2u; h = h + 1u) {
        var m = sel[h];
        for (var guard = 0u; guard < 16u && m != 0u; guard = guard + 1u) {
            let at = countTrailingZeros(m);
            let len = countTrailingZeros(~(m >> at));
            // The next `len` bits of f, from bit k (k + len <= 64).
            var bits = 0u;
            if (k < 32u) {
                bits = f.x >> k;
                if (k > 0u && k + len > 32u) {
                    bits = bits | (f.y << (32u - k));
                }
            } else {
                bits = f.y >> (k - 32u);
            }
            var run = 0xffffffffu;
            if (len < 32u) {
                run = (1u << len) - 1u;
            }
            r[h] = r[h] | ((bits & run) << at);
            m = m & ~(run << at);
            k = k + len;
        }
    }
    return r;
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

fn run(wg: vec3<u32>) {
    let g = wg.y * params.rows_x + wg.x;
    let rpg = params.rows_per_group;
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
    // This invocation's row (k-th of the group) and its first unit.
    var k = 0u;
    var u0 = slot;
    var iters = (units + WG - 1u) / WG;
    if (rpg > 1u) {
        k = slot / units;
        u0 = slot % units;
        iters = 1u;
    }
    let r = g * rpg + k;
    let mine = k < rpg && r < params.n_out;
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
    var running = 0u;
    for (var it = 0u; it < iters; it = it + 1u) {
        let u = it * WG + u0;
        let live = mine && packed && u < units;
        var widths = array<u32, 2>(0u, 0u);
        var part = array<bool, 2>(false, false);
        var sum = 0u;
        if (live) {
            for (var t = 0u; t < per; t = t + 1u) {
                let j = u * per + t;
                part[t] = ((load32(start + j / 8u) >> (j % 8u)) & 1u) == 1u;
                var fw = w;
                if (part[t]) {
                    let mj = wword(params.mask_off, j);
                    fw = w - countOneBits(mj.x) - countOneBits(mj.y);
                }
                widths[t] = fw;
                sum = sum + fw;
            }
        }
        let sc = scan(sum);
        // Segment the scan by row: subtract the prefix at this row's first slot.
        var before = 0u;
        var total = sc.y;
        if (rpg > 1u) {
            seg[slot] = sc.x;
            workgroupBarrier();
            if (mine) {
                before = seg[k * units];
                if ((k + 1u) * units < WG) {
                    total = seg[(k + 1u) * units];
                }
                total = total - before;
            }
            workgroupBarrier();
        }
        if (live) {
            var p = running + sc.x - before;
            var word_out = 0u;
            for (var t = 0u; t < per; t = t + 1u) {
                let j = u * per + t;
                let f = field(fields_at, p, widths[t]);
                p = p + widths[t];
                var x = f;
                if (part[t]) {
                    let mj = wword(params.mask_off, j);
                    let bj = wword(params.mask_off + v * b, j);
                    x = bj | pdep(f, ~mj & width_mask());
                }
                if (w == 64u) {
                    out[base + 2u * u] = x.x;
                    out[base + 2u * u + 1u] = x.y;
                } else if (w == 32u) {
                    out[base + u] = x.x;
                } else {
                    word_out = word_out | (x.x << (16u * t));
                }
            }
            if (w == 16u) {
                out[base + u] = word_out;
            }
        }
        running = running + total;
    }
    if (mine && !packed) {
        if (stored != row_bytes) {
            err = err | ERR_LENGTH;
        }
        let step = select(WG, units, rpg > 1u);
        for (var t = u0; t < row_bytes / 4u; t = t + step) {
            out[base + t] = load32(start + 4u * t);
        }
    }
    if (mine && packed && u0 == 0u) {
        // The row's length follows from its fields; its padding must be zero.
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
                if (((load32(start + j / 8u) >> (j % 8u)) & 1u) == 1u) {
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
