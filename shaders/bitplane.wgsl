// Bit-plane stream decoder (docs/format-bitplane.md), one workgroup per 4 KB chunk, one
// invocation per 128-byte block.
//
// The host has checked the stream header and located every chunk (`chunk_off`, byte offsets
// of the chunks' 16-bit length fields). Here, each invocation reads its block's 13-bit table
// entry; a workgroup prefix sum over the payload lengths (`scan`, from scan_subgroup.wgsl or
// scan_workgroup.wgsl) gives every block's first bit; each invocation decodes its block into
// workgroup memory; the chunk is then written out with coalesced stores.
//
// Untrusted input: every read is bounds-checked (against the buffer and against the chunk's
// own length), every loop is bounded, writes go only to this chunk's blocks, and any rule of
// the format that is broken sets a bit in `status[0]` (the first failing block's index goes to
// `status[1]`); the host then returns an error instead of the output.

struct Params {
    n_chunks: u32,
    n_blocks: u32,
    width: u32,
    raw_len: u32,
    chunks_x: u32,
}

@group(0) @binding(0) var<storage, read> stream: array<u32>;
@group(0) @binding(1) var<storage, read> chunk_off: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;

const WG: u32 = 32u;

var<workgroup> tile: array<u32, 1024>;
var<private> cbase: u32;
var<private> climit: u32;

fn byte_at(b: u32) -> u32 {
    return (word(b >> 2u) >> ((b & 3u) * 8u)) & 0xffu;
}

// `n` (0..=32) bits at bit `p` of the chunk's bit stream, least significant first.
fn bits(p: u32, n: u32) -> u32 {
    if (n == 0u) {
        return 0u;
    }
    if (p + n > climit) {
        err = err | ERR_OVERRUN;
        return 0u;
    }
    let b = cbase + (p >> 3u);
    let sh = (b & 3u) * 8u + (p & 7u);
    var v = word(b >> 2u) >> sh;
    if (sh + n > 32u) {
        v = v | (word((b >> 2u) + 1u) << (32u - sh));
    }
    if (n < 32u) {
        v = v & ((1u << n) - 1u);
    }
    return v;
}

// The 32 stream bits from bit `p` of the chunk, for decoding a prefix code and its field.
// Unlike `bits`, reading past the chunk or the buffer is not an error here (a short last
// symbol may sit there); past the buffer the bits are zero. Whatever a symbol really
// consumes is checked afterwards: the block must end exactly at its declared length, which
// lies inside the chunk.
fn peek(p: u32) -> u32 {
    let b = cbase + (p >> 3u);
    let sh = (b & 3u) * 8u + (p & 7u);
    let i = b >> 2u;
    let n = arrayLength(&stream);
    let lo = select(0u, stream[min(i, n - 1u)], i < n);
    let hi = select(0u, stream[min(i + 1u, n - 1u)], i + 1u < n);
    // `hi << 32` would be undefined: shift in two steps.
    return (lo >> sh) | ((hi << 1u) << (31u - sh));
}

fn bits_for(n: u32) -> u32 {
    if (n <= 1u) {
        return 0u;
    }
    return 32u - countLeadingZeros(n - 1u);
}

fn wmask() -> u32 {
    if (params.width == 32u) {
        return 0xffffffffu;
    }
    return (1u << params.width) - 1u;
}

// Elements live in the workgroup tile, block-slot `j` at words `32 j ..`: element `i` is
// bits `(i % per) W ..` of word `i / per`, `per = 32 / W`. No private arrays are indexed
// dynamically (they spill on GPUs and crawl on lavapipe): planes go straight into the tile.

fn get_elem(j: u32, i: u32) -> u32 {
    let w = params.width;
    let per = 32u / w;
    return (tile[j * 32u + i / per] >> ((i % per) * w)) & wmask();
}

fn set_elem(j: u32, i: u32, e: u32) {
    let w = params.width;
    let per = 32u / w;
    let k = j * 32u + i / per;
    let sh = (i % per) * w;
    tile[k] = (tile[k] & ~(wmask() << sh)) | (e << sh);
}

// Component `q` of a 128-bit value.
fn comp(v: vec4<u32>, q: u32) -> u32 {
    return select(select(select(v.x, v.y, q == 1u), v.z, q == 2u), v.w, q == 3u);
}

// `n` bits (0..=128) at `p` as a 128-bit value.
fn bits128(p: u32, n: u32) -> vec4<u32> {
    if (n <= 32u) {
        return vec4<u32>(bits(p, n), 0u, 0u, 0u);
    }
    return vec4<u32>(
        bits(p, min(32u, n)),
        bits(p + 32u, min(32u, max(n, 32u) - 32u)),
        bits(p + 64u, min(32u, max(n, 64u) - 64u)),
        bits(p + 96u, min(32u, max(n, 96u) - 96u)),
    );
}

fn ones_word(n: u32, q: u32) -> u32 {
    if (n >= (q + 1u) * 32u) {
        return 0xffffffffu;
    }
    if (n > q * 32u) {
        return (1u << (n - q * 32u)) - 1u;
    }
    return 0u;
}

fn ones128(n: u32) -> vec4<u32> {
    return vec4<u32>(ones_word(n, 0u), ones_word(n, 1u), ones_word(n, 2u), ones_word(n, 3u));
}

// The 128-bit value with only bit `i` set.
fn onehot(i: u32) -> vec4<u32> {
    let q = i >> 5u;
    let b = 1u << (i & 31u);
    return vec4<u32>(select(0u, b, q == 0u), select(0u, b, q == 1u), select(0u, b, q == 2u), select(0u, b, q == 3u));
}

fn popcount128(v: vec4<u32>) -> u32 {
    return countOneBits(v.x) + countOneBits(v.y) + countOneBits(v.z) + countOneBits(v.w);
}

// Sign-extend the low `s` bits of `v` to the element width.
fn sign_extend(v: u32, s: u32) -> u32 {
    if (((v >> (s - 1u)) & 1u) == 1u) {
        return (v | ~((1u << s) - 1u)) & wmask();
    }
    return v;
}

// Planes are decoded into the block's 32 tile words and then transposed in place into
// elements. Plane `b` takes `32 / W` words (its bits for elements 0..31, 32..63, ...), placed
// at the rows `plane_row` gives; five exchanges of one row-index bit with one column-index bit
// (`swap_bits`) then leave element i at word i / per, bits (i % per) W, as the output wants.
// For W = 32 this is the classic 32 x 32 bit transpose; for 16 and 8 the start rows and the
// order of exchanges are chosen so that the result needs no further permutation. Each
// exchange is 16 pairs of word operations: far less work than placing every set bit of every
// plane one at a time.

fn plane_row(b: u32, q: u32) -> u32 {
    let w = params.width;
    if (w == 32u) {
        return b;
    }
    if (w == 16u) {
        return (q << 4u) | ((b & 1u) << 3u) | (((b >> 3u) & 1u) << 2u) | (((b >> 2u) & 1u) << 1u) | ((b >> 1u) & 1u);
    }
    return ((q >> 1u) << 4u) | ((q & 1u) << 3u) | (((b >> 1u) & 1u) << 2u) | ((b & 1u) << 1u) | ((b >> 2u) & 1u);
}

fn put_plane(j: u32, plane: vec4<u32>, b: u32) {
    let per = 32u / params.width;
    for (var q = 0u; q < per; q = q + 1u) {
        tile[j * 32u + plane_row(b, q)] = comp(plane, q);
    }
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
fn swap_bits(j: u32, a: u32, c: u32) {
    let s = 1u << c;
    let m = col_mask(c);
    for (var i = 0u; i < 16u; i = i + 1u) {
        let lo_r = j * 32u + (((i >> a) << (a + 1u)) | (i & ((1u << a) - 1u)));
        let hi_r = lo_r + (1u << a);
        let lo = tile[lo_r];
        let hi = tile[hi_r];
        let t = ((lo >> s) ^ hi) & m;
        tile[hi_r] = hi ^ t;
        tile[lo_r] = lo ^ (t << s);
    }
}

fn planes_to_elements(j: u32) {
    let w = params.width;
    if (w == 32u) {
        for (var k = 0u; k < 5u; k = k + 1u) {
            swap_bits(j, k, k);
        }
    } else if (w == 16u) {
        swap_bits(j, 3u, 0u);
        swap_bits(j, 3u, 4u);
        swap_bits(j, 2u, 3u);
        swap_bits(j, 1u, 2u);
        swap_bits(j, 0u, 1u);
    } else {
        swap_bits(j, 0u, 2u);
        swap_bits(j, 2u, 1u);
        swap_bits(j, 2u, 4u);
        swap_bits(j, 1u, 0u);
        swap_bits(j, 1u, 3u);
    }
}

// Decode the planes of `p_bits`-bit values starting at bit `pos` into the tile as elements
// 0..p_bits; returns the position after them.
fn decode_planes(j: u32, start: u32, p_bits: u32) -> u32 {
    let w = params.width;
    let run_bits = bits_for(w - 1u);
    var pos = start;
    var prev = vec4<u32>(0u);
    var b = i32(w) - 1;
    // Every symbol produces at least one plane, so this loop runs at most `w` times.
    for (var guard = 0u; guard < 32u && b >= 0; guard = guard + 1u) {
        var plane = vec4<u32>(0u);
        // One look at the next 32 bits serves the prefix code and its field (at most 12 bits).
        let w = peek(pos);
        if ((w & 1u) == 1u) {
            plane = bits128(pos + 1u, p_bits) ^ prev;
            pos = pos + 1u + p_bits;
        } else if ((w & 2u) != 0u) {
            // 01: a run of r >= 2 zero symbols: r planes equal to the previous one.
            let r = ((w >> 2u) & ((1u << run_bits) - 1u)) + 2u;
            pos = pos + 2u + run_bits;
            if (i32(r) > b + 1) {
                err = err | ERR_SYMBOL;
                return pos;
            }
            for (var k = 0u; k < r; k = k + 1u) {
                put_plane(j, prev, u32(b));
                b = b - 1;
            }
            continue;
        } else if ((w & 4u) != 0u) {
            // 001: one zero symbol.
            plane = prev;
            pos = pos + 3u;
        } else {
            let code = (w >> 3u) & 3u;
            pos = pos + 5u;
            if (code == 0u) {
                // 00000: all ones.
                plane = ones128(p_bits) ^ prev;
            } else if (code == 2u) {
                // 00001: the plane itself is zero.
                plane = vec4<u32>(0u);
            } else if (code == 1u) {
                // 00010: two adjacent ones at p, p + 1.
                let fb = bits_for(p_bits - 1u);
                let at = (w >> 5u) & ((1u << fb) - 1u);
                pos = pos + fb;
                if (p_bits < 2u || at > p_bits - 2u) {
                    err = err | ERR_SYMBOL;
                    return pos;
                }
                plane = (onehot(at) | onehot(at + 1u)) ^ prev;
            } else {
                // 00011: a single one at p.
                let fb = bits_for(p_bits);
                let at = (w >> 5u) & ((1u << fb) - 1u);
                pos = pos + fb;
                if (at >= p_bits) {
                    err = err | ERR_SYMBOL;
                    return pos;
                }
                plane = onehot(at) ^ prev;
            }
        }
        put_plane(j, plane, u32(b));
        prev = plane;
        b = b - 1;
    }
    planes_to_elements(j);
    return pos;
}

fn decode_block(j: u32, tag: u32, len: u32, start: u32) {
    let w = params.width;
    let n = 1024u / w;
    for (var k = 0u; k < 32u; k = k + 1u) {
        tile[j * 32u + k] = 0u;
    }
    if (tag == 5u) {
        return;
    }
    if (tag == 0u) {
        for (var k = 0u; k < 32u; k = k + 1u) {
            tile[j * 32u + k] = bits(start + 32u * k, 32u);
        }
        return;
    }
    if (tag == 1u) {
        let m = bits128(start, n);
        let cnt = popcount128(m);
        if (len != n + cnt * w) {
            err = err | ERR_LENGTH;
            return;
        }
        var pos = start + n;
        for (var q = 0u; q < 4u; q = q + 1u) {
            var mq = comp(m, q);
            for (var guard = 0u; guard < 32u && mq != 0u; guard = guard + 1u) {
                let i = q * 32u + countTrailingZeros(mq);
                let e = bits(pos, w);
                pos = pos + w;
                if (e == 0u) {
                    err = err | ERR_VALUE;
                }
                set_elem(j, i, e);
                mq = mq & (mq - 1u);
            }
        }
        return;
    }
    // Plane-coded modes.
    var pos = start;
    var m = vec4<u32>(0u);
    var p_bits = n;
    var base = 0u;
    if (tag == 4u) {
        m = bits128(pos, n);
        pos = pos + n;
        p_bits = popcount128(m);
        if (p_bits < 2u) {
            err = err | ERR_VALUE;
            return;
        }
    } else if (tag == 3u) {
        p_bits = n - 1u;
        if (bits(pos, 1u) == 1u) {
            base = bits(pos + 1u, w);
            pos = pos + 1u + w;
        } else {
            // Code bits in stream order: 00 zero, 01 -> 4 bits, 10 -> 8 bits, 11 -> 16 bits.
            let code = bits(pos + 1u, 1u) | (bits(pos + 2u, 1u) << 1u);
            pos = pos + 3u;
            var sz = 0u;
            if (code == 2u) {
                sz = 4u;
            } else if (code == 1u) {
                sz = 8u;
            } else if (code == 3u) {
                sz = 16u;
            }
            if (sz >= w) {
                err = err | ERR_SYMBOL;
                return;
            }
            if (sz > 0u) {
                base = sign_extend(bits(pos, sz), sz);
                pos = pos + sz;
            }
        }
    }
    pos = decode_planes(j, pos, p_bits);
    if (pos - start != len) {
        err = err | ERR_LENGTH;
        return;
    }
    if (tag == 3u) {
        // Element i holds delta i (element n - 1 is zero): a running sum from the base.
        var e = base;
        for (var i = 0u; i < n; i = i + 1u) {
            let d = get_elem(j, i);
            set_elem(j, i, e);
            e = (e + d) & wmask();
        }
    } else if (tag == 4u) {
        // Values 0..k-1 sit at elements 0..k-1: move value t to the t-th set bit of M, from
        // the last down (the t-th set bit is at or after t, so nothing is overwritten early).
        var t = p_bits;
        for (var qq = 0u; qq < 4u; qq = qq + 1u) {
            let q = 3u - qq;
            var mq = comp(m, q);
            for (var guard = 0u; guard < 32u && mq != 0u; guard = guard + 1u) {
                let i = q * 32u + 31u - countLeadingZeros(mq);
                t = t - 1u;
                let e = get_elem(j, t);
                if (e == 0u) {
                    err = err | ERR_VALUE;
                }
                set_elem(j, t, 0u);
                set_elem(j, i, e);
                mq = mq & ~(1u << (i & 31u));
            }
        }
    }
}

fn run(wg: vec3<u32>) {
    let c = wg.y * params.chunks_x + wg.x;
    if (c >= params.n_chunks) {
        return;
    }
    err = 0u;
    let cb = chunk_off[c];
    let clen = byte_at(cb) | (byte_at(cb + 1u) << 8u);
    cbase = cb + 2u;
    climit = 0u;
    if (clen >= 2u) {
        climit = (clen - 2u) * 8u;
    } else {
        err = err | ERR_LENGTH;
    }
    let first = c * 32u;
    let nb = min(32u, params.n_blocks - first);
    let j = slot;
    let live = j < nb;
    var tag = 0u;
    var len = 0u;
    var plen = 0u;
    if (live) {
        let e = bits(13u * j, 13u);
        tag = e & 7u;
        len = e >> 3u;
        plen = len;
        if (tag == 0u) {
            plen = 1024u;
        }
        if (tag > 5u || ((tag == 0u || tag == 5u) && len != 0u) || ((tag == 2u || tag == 3u || tag == 4u) && len >= 1024u)) {
            err = err | ERR_TAG;
            plen = 0u;
        }
    }
    let sc = scan(plen);
    let used = 13u * nb + sc.y;
    if (j == 0u) {
        if ((used + 7u) / 8u * 8u != climit) {
            err = err | ERR_LENGTH;
        } else if (bits(used, climit - used) != 0u) {
            err = err | ERR_VALUE;
        }
    }
    if (live && (err & ERR_TAG) == 0u) {
        decode_block(j, tag, len, 13u * nb + sc.x);
        // The padding bytes of the tensor's last block must be zero.
        let rem = params.raw_len % 128u;
        if (first + j + 1u == params.n_blocks && rem != 0u) {
            for (var b = rem; b < 128u; b = b + 1u) {
                if (((tile[j * 32u + b / 4u] >> ((b % 4u) * 8u)) & 0xffu) != 0u) {
                    err = err | ERR_VALUE;
                }
            }
        }
    }
    workgroupBarrier();
    for (var k = 0u; k < 32u; k = k + 1u) {
        let t = k * 32u + slot;
        if (t / 32u < nb) {
            out[first * 32u + t] = tile[t];
        }
    }
    if (err != 0u) {
        atomicOr(&status[0], err);
        atomicMin(&status[1], first + j);
    }
}
