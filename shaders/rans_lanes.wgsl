// rANS encoder, step 2: every lane of every plane the host planned as coded. One invocation per
// lane: it codes the lane's symbols (symbol i of a plane with k lanes belongs to lane i % k)
// backwards with the plane's table, as planepack-rans' lane coder does (32-bit state from L,
// 16-bit renormalisation words, PROB_BITS-bit frequencies), writing its words downwards from
// the end of its region, and reports its final state and word count. A lane emits at most one
// word per symbol, so the host sizes each region by the lane's symbol count: nothing is read
// or written outside the buffers the host sized.
//
// Symbols come from the raw tensor (a dense plane), the compacted nonzero elements (a sparse
// plane) or the zero mask's bytes (`rans_count.wgsl` wrote both).

struct Params {
    n_jobs: u32,
    jobs_x: u32,
    rotate: u32,
}

@group(0) @binding(0) var<storage, read> data: array<u32>;
@group(0) @binding(1) var<storage, read> nz: array<u32>;
@group(0) @binding(2) var<storage, read> mask: array<u32>;
// Per coded plane, 256 entries `freq | cum << 16`.
@group(0) @binding(3) var<storage, read> tables: array<u32>;
// Per lane, two vec4: (source | plane << 4, start, symbols, lanes | lane << 8) and
// (table, region end in 16-bit words (even), unused, unused).
@group(0) @binding(4) var<storage, read> lane_jobs: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read_write> words: array<u32>;
// Per lane: final state, word count.
@group(0) @binding(6) var<storage, read_write> lane_out: array<vec2<u32>>;
@group(0) @binding(7) var<uniform> params: Params;

// (floor(x / f), x mod f), exact, for f in 1..=4096 and x < f * 2^20 (a lane's state after
// renormalisation). Integer division has no vector instruction on CPUs (llvmpipe splits it
// into one scalar division per lane) and is slow on GPUs too, so the quotient is estimated
// in f32 and corrected in integers: x converts with an error under f / 16, the quotient is
// at most 2^20 and WGSL's division is within 2.5 ulp (1/8 there), so the estimate is off by
// at most one either way, and one correction each way makes it exact on every device.
// CPU twin: `twins::rans::div_mod`.
fn div_mod(x: u32, f: u32) -> vec2<u32> {
    var q = u32(f32(x) / f32(f));
    var r = bitcast<i32>(x - q * f);
    if (r < 0) {
        q = q - 1u;
        r = r + i32(f);
    } else if (r >= i32(f)) {
        q = q + 1u;
        r = r - i32(f);
    }
    return vec2<u32>(q, u32(r));
}

fn put_word(p: u32, w: u32) {
    let sh = (p & 1u) * 16u;
    let q = p >> 1u;
    words[q] = (words[q] & ~(0xffffu << sh)) | (w << sh);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let job = (wg.y * params.jobs_x + wg.x) * 64u + li;
    if (job >= params.n_jobs) {
        return;
    }
    let a = lane_jobs[2u * job];
    let b = lane_jobs[2u * job + 1u];
    let source = a.x & 15u;
    let plane = a.x >> 4u;
    let start = a.y;
    let m = a.z;
    let k = a.w & 0xffu;
    let lane = a.w >> 8u;
    let table = b.x * 256u;
    let end = b.y;
    var count = 0u;
    if (lane < m) {
        count = (m - lane + k - 1u) / k;
    }
    var x = L;
    var p = end;
    for (var r = count; r > 0u; r = r - 1u) {
        let s = source_byte(source, plane, start + lane + (r - 1u) * k, params.rotate);
        let e = tables[table + s];
        let f = e & 0xffffu;
        let c = e >> 16u;
        // x >= f * 2^20 in 32 bits (f = 4096 would shift to 0: such a symbol never renormalises).
        let bound = f << (32u - PROB_BITS);
        if (bound != 0u && x >= bound) {
            p = p - 1u;
            put_word(p, x & 0xffffu);
            x = x >> 16u;
        }
        let qr = div_mod(x, f);
        x = (qr.x << PROB_BITS) + qr.y + c;
    }
    lane_out[job] = vec2<u32>(x, end - p);
}
