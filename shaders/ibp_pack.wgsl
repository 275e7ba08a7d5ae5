// IBP encoder, step 3: pack every row with a given mask (docs/format-ibp.md, "Row"), in place
// (row `r` at bytes `[r V B, (r + 1) V B)` of `out`, its stored form at the start of the slot,
// zeros after it), its stored size into `sizes[r]`, its bit into the row bitmask. One
// invocation per row, in two walks over the row's chunks: the first sizes the packed form
// (participating chunks cost `W - popcount(mask)` bits, the others `W`) and so decides packed
// or raw (packed only if strictly smaller, as the CPU encoder and the reference decide); the
// second writes it: participation bits into the header units as it goes, fields into an
// accumulator of one W-bit unit filled from its most significant bit.
//
// `out`, `sizes` and `bitmask` must start zeroed (wgpu zeroes new buffers): units are ORed
// in, which is also why running the launch again writes the same bytes. The host sized every
// buffer from the group's shape; each invocation writes only its own row's slot, size and
// bitmask bit.

struct Params {
    columns: u32,
    n_rows: u32,
    rows_x: u32,
    // Header units: H / B, H = align_B(ceil(V / 8)).
    header_units: u32,
}

@group(0) @binding(0) var<storage, read> rows: array<u32>;
@group(0) @binding(1) var<storage, read> masks: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<storage, read_write> sizes: array<u32>;
@group(0) @binding(4) var<storage, read_write> bitmask: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> params: Params;

const WMASK: u32 = 0xffffffffu >> (32u - min(W, 32u));

var<private> row_unit: u32;
var<private> acc: vec2<u32>;
var<private> fill: u32;
var<private> unit: u32;

fn participates(x: vec2<u32>, j: u32) -> bool {
    let m = masks[j];
    return all((x & m.xy) == m.zw);
}

// Unit `k` (W bits, little-endian) of this row's slot.
fn emit(k: u32, v: vec2<u32>) {
    let i = row_unit + k;
    if (W == 64u) {
        out[2u * i] = v.x;
        out[2u * i + 1u] = v.y;
    } else if (W == 32u) {
        out[i] = v.x;
    } else {
        out[i / 2u] = out[i / 2u] | ((v.x & 0xffffu) << ((i & 1u) * 16u));
    }
}

fn shl64(v: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return v;
    }
    if (s >= 32u) {
        return vec2<u32>(0u, v.x << (s - 32u));
    }
    return vec2<u32>(v.x << s, (v.y << s) | (v.x >> (32u - s)));
}

fn shr64(v: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return v;
    }
    if (s >= 32u) {
        return vec2<u32>(v.y >> (s - 32u), 0u);
    }
    return vec2<u32>((v.x >> s) | (v.y << (32u - s)), v.y >> s);
}

// The bits of `x` where `sel` is set, packed toward bit 0, a run of set bits at a time.
fn pext32(x: u32, sel: u32) -> u32 {
    var out_bits = 0u;
    var k = 0u;
    var s = sel;
    for (var g = 0u; g < 32u && s != 0u; g = g + 1u) {
        let start = countTrailingZeros(s);
        let len = min(countTrailingZeros(~(s >> start)), 32u - start);
        let run = select((1u << len) - 1u, 0xffffffffu, len == 32u);
        out_bits = out_bits | (((x >> start) & run) << k);
        k = k + len;
        s = select(s & ~(run << start), 0u, len == 32u);
    }
    return out_bits;
}

fn pext(x: vec2<u32>, sel: vec2<u32>) -> vec2<u32> {
    if (W < 64u) {
        return vec2<u32>(pext32(x.x, sel.x), 0u);
    }
    let k = countOneBits(sel.x);
    return vec2<u32>(pext32(x.x, sel.x), 0u) | shl64(vec2<u32>(pext32(x.y, sel.y), 0u), k);
}

// Append an `n`-bit field, most significant bit first.
fn append(f: vec2<u32>, n: u32) {
    if (n == 0u) {
        return;
    }
    let r = W - fill;
    if (W == 64u) {
        if (n < r) {
            acc = acc | shl64(f, r - n);
            fill = fill + n;
            return;
        }
        acc = acc | shr64(f, n - r);
        emit(unit, acc);
        unit = unit + 1u;
        let rem = n - r;
        acc = select(shl64(f, 64u - rem), vec2<u32>(0u), rem == 0u);
        fill = rem;
    } else {
        if (n < r) {
            acc.x = acc.x | (f.x << (r - n));
            fill = fill + n;
            return;
        }
        acc.x = acc.x | (f.x >> (n - r));
        emit(unit, acc);
        unit = unit + 1u;
        let rem = n - r;
        acc.x = select((f.x << (W - rem)) & WMASK, 0u, rem == 0u);
        fill = rem;
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r = (wg.y * params.rows_x + wg.x) * 64u + li;
    if (r >= params.n_rows) {
        return;
    }
    let v = params.columns;
    row_unit = r * v;
    var bits = 0u;
    for (var j = 0u; j < v; j = j + 1u) {
        let x = chunk(r, v, j);
        let m = masks[j];
        bits += select(W, W - countOneBits(m.x) - countOneBits(m.y), participates(x, j));
    }
    let units = params.header_units + (bits + W - 1u) / W;
    let packed = units < v;
    sizes[r] = select(v, units, packed) * B;
    if (!packed) {
        for (var j = 0u; j < v; j = j + 1u) {
            emit(j, chunk(r, v, j));
        }
        return;
    }
    atomicOr(&bitmask[r / 32u], 1u << (r % 32u));
    acc = vec2<u32>(0u);
    fill = 0u;
    unit = params.header_units;
    var head = vec2<u32>(0u);
    for (var j = 0u; j < v; j = j + 1u) {
        let x = chunk(r, v, j);
        let m = masks[j];
        let t = j % W;
        if (participates(x, j)) {
            if (t < 32u) {
                head.x = head.x | (1u << t);
            } else {
                head.y = head.y | (1u << (t - 32u));
            }
            append(pext(x, ~m.xy & vec2<u32>(WMASK, select(0u, 0xffffffffu, W == 64u))), W - countOneBits(m.x) - countOneBits(m.y));
        } else {
            append(x, W);
        }
        if (t == W - 1u || j + 1u == v) {
            emit(j / W, head);
            head = vec2<u32>(0u);
        }
    }
    if (fill > 0u) {
        emit(unit, acc);
    }
}
