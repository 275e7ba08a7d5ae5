// The row map's second pass (docs/format-rans.md, "Row map"): the rANS kernel decoded the
// original rows, back to back, into `body`; here every output word gathers its bytes from the
// row it belongs to, or from the original row a copied row repeats. The host checked the row
// map and turned it into `row_src` (for each row, its index among the originals), so this pass
// reads no stream and cannot fail; reads past `body` (impossible for a checked map) would be
// clamped by the device's bounds checks, never out of bounds.

struct Params {
    // Output bytes, row length in bytes, output words, workgroups in x.
    len: u32,
    row_bytes: u32,
    n_words: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> body: array<u32>;
@group(0) @binding(1) var<storage, read> row_src: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let q = (wg.y * params.groups_x + wg.x) * 256u + li;
    if (q >= params.n_words) {
        return;
    }
    // One division a word (four were most of this pass's time on lavapipe, which has no
    // vector integer division).
    let o0 = 4u * q;
    var row = o0 / params.row_bytes;
    var at = o0 - row * params.row_bytes;
    if (params.row_bytes % 4u == 0u) {
        // Rows of whole words (every FP32 tensor's, and most): a word lies in one row, and
        // that row starts on a word in `body` too.
        out[q] = body[(row_src[row] * params.row_bytes + at) >> 2u];
        return;
    }
    var v = 0u;
    for (var b = 0u; b < 4u; b = b + 1u) {
        if (o0 + b < params.len) {
            let i = row_src[row] * params.row_bytes + at;
            v = v | (((body[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu) << (8u * b));
        }
        at = at + 1u;
        if (at == params.row_bytes) {
            at = 0u;
            row = row + 1u;
        }
    }
    out[q] = v;
}
