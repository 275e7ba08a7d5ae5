// Shared by the IBP encoder kernels (ibp_count.wgsl, ibp_score.wgsl, ibp_pack.wgsl): reading
// the raw group. The host prepends `const W` (chunk width: 16, 32 or 64) and each kernel
// declares `rows` (the raw rows, row-major, whole 32-bit words per row). Masks reach the
// kernels as one vec4 per column: mask low and high 32 bits, bitval low and high 32 bits.

const B: u32 = W / 8u;

// Chunk `j` of row `r` (of `v` chunks per row), as (low 32 bits, high 32 bits).
fn chunk(r: u32, v: u32, j: u32) -> vec2<u32> {
    let i = r * v + j;
    if (W == 64u) {
        return vec2<u32>(rows[2u * i], rows[2u * i + 1u]);
    }
    if (W == 32u) {
        return vec2<u32>(rows[i], 0u);
    }
    return vec2<u32>((rows[i / 2u] >> ((i & 1u) * 16u)) & 0xffffu, 0u);
}
