// Shared by the rANS encoder's kernels: an element of the raw tensor (`data`, W bytes each,
// little-endian), the sign rotation and the byte planes, as planepack-rans' `split` defines
// them (plane 0 is the most significant byte); and unit `i` of a plane's source. Every kernel
// that includes this file declares `data`, `nz` and `mask`.

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

// Unit `i` of a source with planes: byte `plane` of element `i` of the tensor (rotated as
// `rotate` says) or of the nonzero elements (stored rotated), or byte `i` of the zero masks.
fn source_byte(source: u32, plane: u32, i: u32, rotate: u32) -> u32 {
    if (source == SRC_DENSE) {
        return plane_byte(rotated(element(i), rotate), plane);
    }
    if (source == SRC_NONZERO) {
        return plane_byte(nz[i], plane);
    }
    return byte_of(mask[i >> 2u], i);
}
