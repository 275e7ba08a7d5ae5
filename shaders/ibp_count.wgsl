// IBP encoder, step 1: how many rows have each bit of each column set (the counts the mask is
// built from, `planepack_ibp::mask::BitCounts`). Invocation = one column over a strip of
// `strip` rows: it counts in registers and adds its nonzero counts to the totals once, so the
// atomics are per (strip, column, bit), not per row. Reads are bounded by the loop limits the
// host set from the buffer's size; the kernel reads no untrusted structure.

struct Params {
    columns: u32,
    n_rows: u32,
    strip: u32,
    cols_x: u32,
}

@group(0) @binding(0) var<storage, read> rows: array<u32>;
@group(0) @binding(1) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let j = wg.x * 64u + li;
    if (j >= params.columns) {
        return;
    }
    let r0 = wg.y * params.strip;
    let r1 = min(r0 + params.strip, params.n_rows);
    var c: array<u32, W>;
    for (var r = r0; r < r1; r = r + 1u) {
        let x = chunk(r, params.columns, j);
        var lo = x.x;
        for (var g = 0u; g < 32u && lo != 0u; g = g + 1u) {
            c[countTrailingZeros(lo)] += 1u;
            lo = lo & (lo - 1u);
        }
        if (W == 64u) {
            var hi = x.y;
            for (var g = 0u; g < 32u && hi != 0u; g = g + 1u) {
                c[min(32u + countTrailingZeros(hi), W - 1u)] += 1u;
                hi = hi & (hi - 1u);
            }
        }
    }
    for (var b = 0u; b < W; b = b + 1u) {
        if (c[b] != 0u) {
            atomicAdd(&counts[j * W + b], c[b]);
        }
    }
}
