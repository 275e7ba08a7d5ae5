// Shared by the bit-plane decoder (bitplane.wgsl) and encoder (bitplane_encode.wgsl): the
// block geometry and the transpose between a block's elements and its bit planes, done in 32
// private words with five exchanges of a row-index bit with a column-index bit (constant
// indices only: registers, not memory). A block's planes live in its 32-word slot of the
// workgroup tile, plane b's word q at row `plane_row(b, q)`. The CPU twin of these functions
// is crates/planepack-gpu/src/twins.rs, tested against planepack-core's transposes.

const WG: u32 = 32u;
// Elements per block, elements per word (= words per plane), the element mask.
const N: u32 = BLOCK_BITS / W;
const PER: u32 = 32u / W;
const WMASK: u32 = 0xffffffffu >> (32u - W);

var<workgroup> tile: array<u32, 1024>;
// The block, as elements (element i at word i / PER, bits (i % PER) W): the block's bytes
// read as little-endian words.
var<private> blk: array<u32, 32>;

fn bits_for(n: u32) -> u32 {
    return select(32u - countLeadingZeros(n - 1u), 0u, n <= 1u);
}

// Columns whose index bit `c` is 0.
fn col_mask(c: u32) -> u32 {
    switch c {
        case 0u: { return 0x55555555u; }
        case 1u: { return 0x33333333u; }
        case 2u: { return 0x0f0f0f0fu; }
        case 3u: { return 0x00ff00ffu; }
        default: { return 0x0000ffffu; }
    }
}

// Exchange row-index bit `a` with column-index bit `c` over the block's 32 words: bit
// (r, col) with r_a = 0, col_c = 1 trades places with (r | 2^a, col - 2^c).
fn swap_bits(a: u32, c: u32) {
    let s = 1u << c;
    let m = col_mask(c);
    for (var i = 0u; i < 16u; i = i + 1u) {
        let lo_r = ((i >> a) << (a + 1u)) | (i & ((1u << a) - 1u));
        let hi_r = lo_r + (1u << a);
        let lo = blk[lo_r];
        let hi = blk[hi_r];
        let t = ((lo >> s) ^ hi) & m;
        blk[hi_r] = hi ^ t;
        blk[lo_r] = lo ^ (t << s);
    }
}

// The row of the block's tile slot where word `q` of plane `b` goes.
fn plane_row(b: u32, q: u32) -> u32 {
    if (W == 32u) {
        return b;
    }
    if (W == 16u) {
        return (q << 4u) | ((b & 1u) << 3u) | (((b >> 3u) & 1u) << 2u) | (((b >> 2u) & 1u) << 1u) | ((b >> 1u) & 1u);
    }
    return ((q >> 1u) << 4u) | ((q & 1u) << 3u) | (((b >> 1u) & 1u) << 2u) | ((b & 1u) << 1u) | ((b >> 2u) & 1u);
}

// The planes in tile slot `j` to elements in `blk`. Five exchanges of one row-index bit with
// one column-index bit leave element i at word i / PER, bits (i % PER) W. For W = 32 this is
// the classic 32 x 32 bit transpose; for 16 and 8 the rows `plane_row` gives are chosen so
// that the result needs no further permutation.
fn planes_to_elements(j: u32) {
    for (var k = 0u; k < 32u; k = k + 1u) {
        blk[k] = tile[j * 32u + k];
    }
    if (W == 32u) {
        for (var k = 0u; k < 5u; k = k + 1u) {
            swap_bits(k, k);
        }
    } else if (W == 16u) {
        swap_bits(3u, 0u);
        swap_bits(3u, 4u);
        swap_bits(2u, 3u);
        swap_bits(1u, 2u);
        swap_bits(0u, 1u);
    } else {
        swap_bits(0u, 2u);
        swap_bits(2u, 1u);
        swap_bits(2u, 4u);
        swap_bits(1u, 0u);
        swap_bits(1u, 3u);
    }
}

// The elements in `blk` to planes in tile slot `j`: the exchanges of planes_to_elements in
// reverse order (each one is its own inverse).
fn elements_to_planes(j: u32) {
    if (W == 32u) {
        for (var k = 0u; k < 5u; k = k + 1u) {
            swap_bits(4u - k, 4u - k);
        }
    } else if (W == 16u) {
        swap_bits(0u, 1u);
        swap_bits(1u, 2u);
        swap_bits(2u, 3u);
        swap_bits(3u, 4u);
        swap_bits(3u, 0u);
    } else {
        swap_bits(1u, 3u);
        swap_bits(1u, 0u);
        swap_bits(2u, 4u);
        swap_bits(2u, 1u);
        swap_bits(0u, 2u);
    }
    for (var k = 0u; k < 32u; k = k + 1u) {
        tile[j * 32u + k] = blk[k];
    }
}

// Word `q` of plane `b` in tile slot `j`.
fn plane_word(j: u32, b: u32, q: u32) -> u32 {
    return tile[j * 32u + plane_row(b, q)];
}
