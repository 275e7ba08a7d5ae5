// rANS encoder, step 1 (the offload direction): what the host plans a chunk from, counted on
// the device. One workgroup per job (a chunk, or one of the rotation samples): the histogram of
// each byte plane of its elements (rotated as the job says), of its zero mask's bytes, and its
// count of nonzero elements; for chunks also the zero mask (one word per 32 elements) and the
// nonzero elements in order (compacted by a workgroup prefix sum per tile), which the lane
// coder and the assembly read as the sparse layout's planes. CPU counterparts: the encoder's
// `split`, `histogram`, `count_zeros` and `take_zeros_out` (planepack-rans); the tests compare
// every stream the GPU writes with the CPU encoder's.
//
// `W` (element bytes) and the scan (`shaders/scan_*.wgsl`, which calls `run`) are put around
// this file by planepack-gpu.

struct Params {
    n_jobs: u32,
    jobs_x: u32,
    // 1 for chunks: write the zero mask and the nonzero elements.
    write_out: u32,
    // Words per job in `hist`: (W + 1) * 256 counts, then the nonzero count.
    hist_stride: u32,
}

@group(0) @binding(0) var<storage, read> data: array<u32>;
// Per job: first element, elements, rotate (0 or 1), unused.
@group(0) @binding(1) var<storage, read> jobs: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> hist: array<u32>;
@group(0) @binding(3) var<storage, read_write> nz: array<u32>;
@group(0) @binding(4) var<storage, read_write> mask: array<u32>;
@group(0) @binding(5) var<uniform> params: Params;
@group(0) @binding(6) var<storage, read_write> status: array<atomic<u32>>;

const WG: u32 = 256u;
const BINS: u32 = (W + 1u) * 256u;

var<workgroup> h: array<atomic<u32>, BINS>;
var<workgroup> tile_mask: array<atomic<u32>, 8>;
var<workgroup> job_desc: vec4<u32>;

fn run(wg: vec3<u32>) {
    let job = wg.y * params.jobs_x + wg.x;
    if (job >= params.n_jobs) {
        return;
    }
    for (var i = slot; i < BINS; i = i + WG) {
        atomicStore(&h[i], 0u);
    }
    if (slot < WG / 32u) {
        atomicStore(&tile_mask[slot], 0u);
    }
    if (slot == 0u) {
        job_desc = jobs[job];
    }
    let d = workgroupUniformLoad(&job_desc);
    let start = d.x;
    let n = d.y;
    let rotate = d.z;
    let mask_bytes = (n + 7u) / 8u;
    var base = 0u;
    let tiles = (n + WG - 1u) / WG;
    for (var t = 0u; t < tiles; t = t + 1u) {
        let e = t * WG + slot;
        var v = 0u;
        if (e < n) {
            v = rotated(element(start + e), rotate);
            for (var j = 0u; j < W; j = j + 1u) {
                atomicAdd(&h[j * 256u + plane_byte(v, j)], 1u);
            }
        }
        let nzf = select(0u, 1u, v != 0u);
        if (nzf != 0u) {
            atomicOr(&tile_mask[slot / 32u], 1u << (slot % 32u));
        }
        let s = scan(nzf);
        if (nzf != 0u && params.write_out != 0u) {
            nz[start + base + s.x] = v;
        }
        base = base + s.y;
        workgroupBarrier();
        if (slot < WG / 32u) {
            let w = atomicLoad(&tile_mask[slot]);
            atomicStore(&tile_mask[slot], 0u);
            let word = t * (WG / 32u) + slot;
            if (word * 4u < mask_bytes) {
                if (params.write_out != 0u) {
                    mask[start / 32u + word] = w;
                }
                for (var b = 0u; b < 4u; b = b + 1u) {
                    if (word * 4u + b < mask_bytes) {
                        atomicAdd(&h[W * 256u + ((w >> (8u * b)) & 0xffu)], 1u);
                    }
                }
            }
        }
        workgroupBarrier();
    }
    let o = job * params.hist_stride;
    for (var i = slot; i < BINS; i = i + WG) {
        hist[o + i] = atomicLoad(&h[i]);
    }
    if (slot == 0u) {
        hist[o + BINS] = base;
    }
}
