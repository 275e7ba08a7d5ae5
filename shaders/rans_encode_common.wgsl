// Shared by the rANS encoder's kernels: an element of the raw tensor (`data`, W bytes each,
// little-endian), the sign rotation and the byte planes, as planepack-rans' `split` defines
// them (plane 0 is the most significant byte).

fn element(e: u32) -> u32 {
    if (W == 4u) {
        return data[e];
    }
    if (W == 2u) {
        return (data[e >> 1u] >> ((e & 1u) * 16u)) & 0xffffu;
    }
    return (data[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu;
}

// The element rotated left by one bit when `rotate` (never for single bytes).
fn rotated(v: u32, rotate: u32) -> u32 {
    if (rotate == 0u || W == 1u) {
        return v;
    }
    if (W == 2u) {
        return ((v << 1u) | (v >> 15u)) & 0xffffu;
    }
    return (v << 1u) | (v >> 31u);
}

// Byte `j` of plane order (0: most significant) of a (rotated) element.
fn plane_byte(v: u32, j: u32) -> u32 {
    return (v >> (8u * (W - 1u - j))) & 0xffu;
}

// Byte `i` of a word array.
fn byte_of(w: u32, i: u32) -> u32 {
    return (w >> ((i & 3u) * 8u)) & 0xffu;
}
