// IBP encoder, step 2: the reference's score of candidate masks (`planepack_ibp::mask::score`):
// per row, the invariant bits its participating chunks save, less V, counted only when
// positive; summed per workgroup (64 rows) as a 64-bit (low, high) pair, which the host adds
// up. All candidates (at most IBP_MAX_CANDIDATES, generated from Rust) in one pass, so each
// chunk is read once: candidate c's masks are `all_masks[c V ..]`, its sums
// `partial[c groups ..]`.

struct Params {
    columns: u32,
    n_rows: u32,
    rows_x: u32,
    groups: u32,
    candidates: u32,
}

@group(0) @binding(0) var<storage, read> rows: array<u32>;
@group(0) @binding(1) var<storage, read> all_masks: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> partial: array<vec2<u32>>;
@group(0) @binding(3) var<uniform> params: Params;

var<workgroup> sums: array<vec2<u32>, 64>;

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let g = wg.y * params.rows_x + wg.x;
    let r = g * 64u + li;
    let nc = min(params.candidates, IBP_MAX_CANDIDATES);
    var saved: array<u32, IBP_MAX_CANDIDATES>;
    let live = g < params.groups && r < params.n_rows;
    let v = params.columns;
    if (live) {
        for (var j = 0u; j < v; j = j + 1u) {
            let x = chunk(r, v, j);
            for (var c = 0u; c < nc; c = c + 1u) {
                let m = all_masks[c * v + j];
                if (all((x & m.xy) == m.zw)) {
                    saved[c] += countOneBits(m.x) + countOneBits(m.y);
                }
            }
        }
    }
    for (var c = 0u; c < nc; c = c + 1u) {
        sums[li] = vec2<u32>(select(0u, saved[c] - v, saved[c] > v), 0u);
        workgroupBarrier();
        for (var s = 32u; s > 0u; s = s >> 1u) {
            if (li < s) {
                sums[li] = add64(sums[li], sums[li + s]);
            }
            workgroupBarrier();
        }
        if (li == 0u && g < params.groups) {
            partial[c * params.groups + g] = sums[0];
        }
        workgroupBarrier();
    }
}
