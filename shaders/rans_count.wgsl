// rANS encoder, step 1 (the offload direction): what the host plans a chunk from, counted on
// the device. One workgroup per job (a chunk, or one of the rotation samples): the histogram
// of each byte plane of its elements (rotated as the job says), of its zero mask's bytes, and
// its count of nonzero elements, written compactly (below); for chunks also the zero mask (one
// word per 32 elements). A second pass (`COUNT_NONZERO`), only over the chunks whose sparse
// layout the host planned, writes their nonzero elements in order (each invocation takes 32
// elements, one mask word; a tile's invocations place their nonzero elements by a workgroup
// prefix sum), which the lane coder and the assembly read as the sparse layout's planes:
// most chunks of dense tensors never need them, and writing them (4 bytes an element) was a
// fifth of the count step. CPU
// counterparts: the encoder's `split`, `histogram`, `count_zeros` and `take_zeros_out`
// (planepack-rans), and the twin `twins::rans::count_job`; the tests compare every stream the
// GPU writes with the CPU encoder's.
//
// `W` (element bytes) and the scan (`shaders/scan_*.wgsl`, which calls `run`) are put around
// this file by planepack-gpu.

struct Params {
    n_jobs: u32,
    jobs_x: u32,
    // COUNT_RECORDS, COUNT_MASKS or COUNT_NONZERO (contract.rs).
    write_out: u32,
    // Words per job's slot in `hist` (room for its longest record).
    hist_stride: u32,
    // 1: counts as u32; 0: as u16, a count of 65535 or more written as 65535 (the host
    // takes it as the plane's length less the other counts: chunks under 131070 elements
    // have at most one such count).
    wide: u32,
}

@group(0) @binding(0) var<storage, read> data: array<u32>;
// Per job: first element, elements, rotate (0 or 1), unused.
@group(0) @binding(1) var<storage, read> jobs: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> hist: array<u32>;
@group(0) @binding(3) var<storage, read_write> nz: array<u32>;
@group(0) @binding(4) var<storage, read_write> mask: array<u32>;
// Per job: its record's length in bytes.
@group(0) @binding(5) var<storage, read_write> lens: array<u32>;
@group(0) @binding(6) var<uniform> params: Params;
@group(0) @binding(7) var<storage, read_write> status: array<atomic<u32>>;

const WG: u32 = 256u;
// Elements per invocation per tile: one zero-mask word each, so a tile of WG * 32 elements
// needs one prefix sum (and its barriers) for 32 elements an invocation, not one each.
const PER: u32 = 32u;
const BINS: u32 = (W + 1u) * 256u;

var<workgroup> h: array<atomic<u32>, BINS>;
var<workgroup> job_desc: vec4<u32>;
var<workgroup> rec_bits: array<atomic<u32>, 8>;
var<workgroup> rec_counts: array<atomic<u32>, 256>;

fn run(wg: vec3<u32>) {
    let job = wg.y * params.jobs_x + wg.x;
    if (job >= params.n_jobs) {
        return;
    }
    let counting = params.write_out != COUNT_NONZERO;
    for (var i = slot; i < BINS; i = i + WG) {
        atomicStore(&h[i], 0u);
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
    let tiles = (n + WG * PER - 1u) / (WG * PER);
    // Elements per data word.
    let per_word = 4u / W;
    for (var t = 0u; t < tiles; t = t + 1u) {
        // This invocation's elements: word `word` of the zero mask.
        let word = t * WG + slot;
        let first = word * PER;
        var bits = 0u;
        var count = 0u;
        // A data word at a time (a chunk starts on a word: its first element is a multiple
        // of 32).
        for (var k = 0u; k < PER && first + k < n; k = k + per_word) {
            let dw = data[(start + first + k) / per_word];
            for (var u = 0u; u < per_word; u = u + 1u) {
                if (first + k + u < n) {
                    var raw = dw;
                    if (W == 2u) {
                        raw = (dw >> (16u * u)) & 0xffffu;
                    } else if (W == 1u) {
                        raw = (dw >> (8u * u)) & 0xffu;
                    }
                    let v = rotated(raw, rotate);
                    if (counting) {
                        for (var j = 0u; j < W; j = j + 1u) {
                            atomicAdd(&h[j * 256u + plane_byte(v, j)], 1u);
                        }
                    }
                    if (v != 0u) {
                        count = count + 1u;
                        bits = bits | (1u << (k + u));
                    }
                }
            }
        }
        let s = scan(count);
        if (params.write_out == COUNT_NONZERO) {
            // The nonzero elements again, from the mask word: no per-invocation array
            // (a dynamically indexed private array is scattered to the stack on CPU drivers).
            var rest = bits;
            for (var j = 0u; j < 32u && rest != 0u; j = j + 1u) {
                let k = countTrailingZeros(rest);
                rest = rest & (rest - 1u);
                nz[start + base + s.x + j] = rotated(element(start + first + k), rotate);
            }
        }
        base = base + s.y;
        if (counting && word * 4u < mask_bytes) {
            if (params.write_out == COUNT_MASKS) {
                mask[start / 32u + word] = bits;
            }
            for (var b = 0u; b < 4u; b = b + 1u) {
                if (word * 4u + b < mask_bytes) {
                    atomicAdd(&h[W * 256u + ((bits >> (8u * b)) & 0xffu)], 1u);
                }
            }
        }
    }
    // The record: per histogram (the W planes, then the mask bytes) a 256-bit bitmap of the
    // symbols present and their counts in symbol order; then the nonzero count. Only the
    // records' bytes leave the device (the host packs them with `ibp_condense.wgsl`).
    if (!counting) {
        return;
    }
    workgroupBarrier();
    let o = job * params.hist_stride;
    var at = 0u;
    for (var p = 0u; p < W + 1u; p = p + 1u) {
        if (slot < 8u) {
            atomicStore(&rec_bits[slot], 0u);
        }
        atomicStore(&rec_counts[slot], 0u);
        workgroupBarrier();
        let c = atomicLoad(&h[p * 256u + slot]);
        let present = select(0u, 1u, c > 0u);
        let s = scan(present);
        if (present != 0u) {
            atomicOr(&rec_bits[slot / 32u], 1u << (slot % 32u));
            if (params.wide != 0u) {
                atomicStore(&rec_counts[s.x], c);
            } else {
                atomicOr(&rec_counts[s.x / 2u], min(c, 0xffffu) << ((s.x % 2u) * 16u));
            }
        }
        workgroupBarrier();
        var words = (s.y + 1u) / 2u;
        if (params.wide != 0u) {
            words = s.y;
        }
        if (slot < 8u) {
            hist[o + at + slot] = atomicLoad(&rec_bits[slot]);
        }
        if (slot < words) {
            hist[o + at + 8u + slot] = atomicLoad(&rec_counts[slot]);
        }
        at = at + 8u + words;
        workgroupBarrier();
    }
    if (slot == 0u) {
        hist[o + at] = base;
        lens[job] = 4u * (at + 1u);
    }
}
