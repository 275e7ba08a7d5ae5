// rANS encoder, step 3: the stream, written from the pieces the host laid out once it knew
// every coded lane's length. A segment is a run of output bytes taken from one source: the
// host's literal bytes (header, chunk table, mode and plane kind bytes, frequency tables, lane
// headers), a lane's words, the raw tensor (raw chunks, the tail), a dense plane, a sparse
// plane or the zero mask. One invocation per output word: it finds its segment by binary search
// (segments are sorted by their first output byte, none empty), then takes its four bytes,
// moving to the next segment where one ends (the host lists, per 1 KiB of output, the segment
// its first byte is in, so the search is short). Every index is bounded by host-sized
// buffers.

struct Params {
    n_segs: u32,
    n_words: u32,
    groups_x: u32,
    total: u32,
    rotate: u32,
    // Word of `lit` where the literal bytes start; before it, per 1 KiB block of output (a
    // workgroup's words) the segment holding its first byte, and one more entry (n_segs - 1).
    lit_at: u32,
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
        return byte_of(lit[params.lit_at + (i >> 2u)], i);
    }
    if (source == SRC_WORDS) {
        return byte_of(words[i >> 2u], i);
    }
    if (source == SRC_RAW) {
        return byte_of(data[i >> 2u], i);
    }
    return source_byte(source, plane, i, params.rotate);
}

// Bytes `off .. off + 4` of segment `s` (all inside it), as one word.
fn seg_word(s: vec4<u32>, off: u32) -> u32 {
    let source = s.y & 15u;
    let plane = s.y >> 4u;
    let i = s.z + off;
    if (source == SRC_DENSE || source == SRC_NONZERO) {
        var v = 0u;
        for (var b = 0u; b < 4u; b = b + 1u) {
            v = v | (source_byte(source, plane, i + b, params.rotate) << (8u * b));
        }
        return v;
    }
    // Byte-addressed sources: one or two aligned words, shifted together.
    var base = i;
    if (source == SRC_LITERAL) {
        base = i + 4u * params.lit_at;
    }
    let sh = (base & 3u) * 8u;
    let w0 = word_of(source, base >> 2u);
    if (sh == 0u) {
        return w0;
    }
    let w1 = word_of(source, (base >> 2u) + 1u);
    return (w0 >> sh) | (w1 << (32u - sh));
}

// Word `w` of a byte-addressed source (`lit` from its start).
fn word_of(source: u32, w: u32) -> u32 {
    if (source == SRC_LITERAL) {
        return lit[min(w, arrayLength(&lit) - 1u)];
    }
    if (source == SRC_WORDS) {
        return words[min(w, arrayLength(&words) - 1u)];
    }
    if (source == SRC_RAW) {
        return data[min(w, arrayLength(&data) - 1u)];
    }
    return mask[min(w, arrayLength(&mask) - 1u)];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let q = (wg.y * params.groups_x + wg.x) * 256u + li;
    if (q >= params.n_words) {
        return;
    }
    let n = params.n_segs;
    // The last segment starting at or before byte 4q, between the segments of this block's
    // first byte and of the next block's.
    let block = q / 256u;
    var lo = min(lit[block], n - 1u);
    var hi = min(lit[block + 1u] + 1u, n);
    for (var g = 0u; g < 32u && hi - lo > 1u; g = g + 1u) {
        let mid = (lo + hi) / 2u;
        if (segs[mid].x <= 4u * q) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    var r = lo;
    var s = segs[r];
    var end = params.total;
    if (r + 1u < n) {
        end = segs[r + 1u].x;
    }
    let o0 = 4u * q;
    // Most words lie inside one segment: their four bytes from one source, with no segment
    // test per byte.
    if (o0 >= s.x && o0 + 4u <= end) {
        out[q] = seg_word(s, o0 - s.x);
        return;
    }
    var v = 0u;
    for (var b = 0u; b < 4u; b = b + 1u) {
        let o = o0 + b;
        if (o >= params.total) {
            break;
        }
        // Segments are not empty, so the next byte is in this segment or the next one.
        if (o >= end && r + 1u < n) {
            r = r + 1u;
            s = segs[r];
            end = params.total;
            if (r + 1u < n) {
                end = segs[r + 1u].x;
            }
        }
        v = v | (seg_byte(s, o - s.x) << (8u * b));
    }
    out[q] = v;
}
