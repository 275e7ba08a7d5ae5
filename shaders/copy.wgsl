// The speed reference: copy `n_words` words, as a decoder writes its output. Decoder
// throughput is reported as a fraction of this kernel's on the same device in the same run.

struct Params {
    n_words: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = (wg.y * params.groups_x + wg.x) * 256u + li;
    if (i < params.n_words) {
        dst[i] = src[i];
    }
}
