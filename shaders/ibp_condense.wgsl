// IBP encoder, step 4: the rows packed in place (ibp_pack.wgsl) copied back to back (the
// condensed layout, what crosses the link). `starts[r]` is row r's first byte in the output
// (the host's prefix sum of the packed sizes; `starts[n_rows]` is the total). One invocation
// per output word: it finds its row by binary search, then takes its four bytes, moving to
// the next row where one ends. Every index is bounded by the host-sized buffers.

struct Params {
    n_rows: u32,
    row_bytes: u32,
    n_words: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> inplace: array<u32>;
@group(0) @binding(1) var<storage, read> starts: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let q = (wg.y * params.groups_x + wg.x) * 256u + li;
    if (q >= params.n_words) {
        return;
    }
    let n = params.n_rows;
    let total = starts[n];
    // The last row starting at or before byte 4q.
    var lo = 0u;
    var hi = n;
    for (var g = 0u; g < 32u && hi - lo > 1u; g = g + 1u) {
        let mid = (lo + hi) / 2u;
        if (starts[mid] <= 4u * q) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    var r = lo;
    var v = 0u;
    for (var b = 0u; b < 4u; b = b + 1u) {
        let o = 4u * q + b;
        if (o >= total) {
            break;
        }
        for (var g = 0u; g < 4u && r + 1u < n && starts[r + 1u] <= o; g = g + 1u) {
            r = r + 1u;
        }
        let i = r * params.row_bytes + (o - starts[r]);
        v = v | (((inplace[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu) << (8u * b));
    }
    out[q] = v;
}
