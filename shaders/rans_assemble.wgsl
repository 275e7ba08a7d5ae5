// rANS encoder, step 3: the stream, written from the pieces the host laid out once it knew
// every coded lane's length. A segment is a run of output bytes taken from one source: the
// host's literal bytes (header, chunk table, mode and plane kind bytes, frequency tables, lane
// headers), a lane's words, the raw tensor (raw chunks, the tail), a dense plane, a sparse
// plane or the zero mask. One invocation per output word: it finds its segment by binary search
// (segments are sorted by their first output byte, none empty), then takes its four bytes,
// moving to the next segment where one ends. Every index is bounded by host-sized buffers.

struct Params {
    n_segs: u32,
    n_words: u32,
    groups_x: u32,
    total: u32,
    rotate: u32,
}

@group(0) @binding(0) var<storage, read> data: array<u32>;
@group(0) @binding(1) var<storage, read> nz: array<u32>;
@group(0) @binding(2) var<storage, read> mask: array<u32>;
@group(0) @binding(3) var<storage, read> words: array<u32>;
// Per segment: first output byte, source | plane << 4, first source unit (a byte, or an
// element for planes), unused.
@group(0) @binding(4) var<storage, read> segs: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> lit: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<u32>;
@group(0) @binding(7) var<uniform> params: Params;

fn seg_byte(s: vec4<u32>, off: u32) -> u32 {
    let source = s.y & 15u;
    let plane = s.y >> 4u;
    let i = s.z + off;
    if (source == SRC_LITERAL) {
        return byte_of(lit[i >> 2u], i);
    }
    if (source == SRC_WORDS) {
        return byte_of(words[i >> 2u], i);
    }
    if (source == SRC_RAW) {
        return byte_of(data[i >> 2u], i);
    }
    if (source == SRC_DENSE) {
        return plane_byte(rotated(element(i), params.rotate), plane);
    }
    if (source == SRC_NONZERO) {
        return plane_byte(nz[i], plane);
    }
    return byte_of(mask[i >> 2u], i);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let q = (wg.y * params.groups_x + wg.x) * 256u + li;
    if (q >= params.n_words) {
        return;
    }
    let n = params.n_segs;
    // The last segment starting at or before byte 4q.
    var lo = 0u;
    var hi = n;
    for (var g = 0u; g < 32u && hi - lo > 1u; g = g + 1u) {
        let mid = (lo + hi) / 2u;
        if (segs[mid].x <= 4u * q) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    var r = lo;
    var v = 0u;
    for (var b = 0u; b < 4u; b = b + 1u) {
        let o = 4u * q + b;
        if (o >= params.total) {
            break;
        }
        for (var g = 0u; g < 4u && r + 1u < n && segs[r + 1u].x <= o; g = g + 1u) {
            r = r + 1u;
        }
        let s = segs[r];
        v = v | (seg_byte(s, o - s.x) << (8u * b));
    }
    out[q] = v;
}
