// Bit-plane stream decoder (docs/format-bitplane.md), one workgroup per 4 KB chunk, one
// invocation per 128-byte block.
//
// The host prepends the element width (`const W: u32 = 32u;` and `const RUN_BITS: u32`, the
// zero-run field width), so each width is its own pipeline and every width test below folds
// away at compile time. It has checked the stream header and located every chunk
// (`chunk_off`, byte offsets of the chunks' 16-bit length fields). Here, each invocation reads
// its block's 13-bit table entry; a workgroup prefix sum over the payload lengths (`scan`,
// from scan_subgroup.wgsl or scan_workgroup.wgsl) gives every block's first bit; each
// invocation decodes its block; the chunk is then written out with coalesced stores from
// workgroup memory.
//
// Why this shape: memory operations are what a block costs (on lavapipe each one is a loop
// over the SIMD lanes, and lavapipe executes both sides of every branch whose condition
// differs between invocations). So the bit transpose works on 32 private words indexed only by
// constants (registers, 32 loads in and 32 stores out of the tile instead of 320 tile
// operations), the stream is read through a two-word window that advances with one load per
// read, and each width is compiled alone. Planes (at a data-dependent plane index) and the
// elements of ZVC and ZBX (at data-dependent positions) go through workgroup memory: as
// private arrays indexed by a variable, they would be as slow, and shift registers that
// avoid the index were slower still.
//
// Untrusted input: every read is bounds-checked against the buffer, every loop is bounded,
// writes go only to this chunk's blocks, a block must consume exactly its declared length and
// the chunk's blocks exactly the chunk, and any rule of the format that is broken sets a bit
// in `status[0]` (the first failing block's index goes to `status[1]`); the host then returns
// an error instead of the output.

struct Params {
    n_chunks: u32,
    n_blocks: u32,
    // Also the compile-time W: the host picks the pipeline by the stream's width.
    width: u32,
    raw_len: u32,
    chunks_x: u32,
}

@group(0) @binding(0) var<storage, read> stream: array<u32>;
@group(0) @binding(1) var<storage, read> chunk_off: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;

var<private> cbase: u32;
var<private> climit: u32;

fn byte_at(b: u32) -> u32 {
    return (word(b >> 2u) >> ((b & 3u) * 8u)) & 0xffu;
}

// `n` (0..=32) bits at bit `p` of the chunk's bit stream, least significant first; past the
// chunk, ERR_OVERRUN. For the block table and the chunk's padding.
fn bits(p: u32, n: u32) -> u32 {
    if (p + n > climit) {
        err = err | ERR_OVERRUN;
        return 0u;
    }
    let b = cbase + (p >> 3u);
    let sh = (b & 3u) * 8u + (p & 7u);
    let lo = word(b >> 2u) >> sh;
    let hi = select(0u, word((b >> 2u) + 1u) << (32u - sh), sh != 0u);
    return select((lo | hi) & ((1u << n) - 1u), lo | hi, n >= 32u);
}

// ---- The block reader ---------------------------------------------------------------------
//
// Stream words rd_k and rd_k + 1, and the position's bit offset in the first. A block may
// read past its declared length or its chunk (a short last symbol, or a corrupt stream): the
// block must end exactly at its length (checked after decoding), and past the buffer the
// bits are zero with ERR_BOUNDS.
var<private> rd_k: u32;
var<private> rd_s: u32;
var<private> rd_r0: u32;
var<private> rd_r1: u32;

// Start at bit `p` of the chunk.
fn rd_at(p: u32) {
    let a = cbase * 8u + p;
    rd_k = a >> 5u;
    rd_s = a & 31u;
    rd_r0 = word(rd_k);
    rd_r1 = word(rd_k + 1u);
}

// The chunk bit position.
fn rd_pos() -> u32 {
    return rd_k * 32u + rd_s - cbase * 8u;
}

// The next 32 bits, without moving.
fn rd_peek() -> u32 {
    return (rd_r0 >> rd_s) | select(0u, rd_r1 << (32u - rd_s), rd_s != 0u);
}

// Move past `n` (0..=32) bits: one load.
fn rd_skip(n: u32) {
    let t = rd_s + n;
    let adv = t >= 32u;
    let next = word(rd_k + 2u);
    rd_r0 = select(rd_r0, rd_r1, adv);
    rd_r1 = select(rd_r1, next, adv);
    rd_k = rd_k + select(0u, 1u, adv);
    rd_s = t & 31u;
}

// The next `n` (0..=32) bits, and move past them.
fn rd_bits(n: u32) -> u32 {
    let v = rd_peek();
    rd_skip(n);
    return select(v & ((1u << n) - 1u), v, n >= 32u);
}

// ---- Planes -------------------------------------------------------------------------------

// Word `q` of the all-ones `p`-bit plane.
fn ones_word(p: u32, q: u32) -> u32 {
    let n = min(max(p, 32u * q) - 32u * q, 32u);
    return select((1u << n) - 1u, 0xffffffffu, n >= 32u);
}

// Word `q` of the plane with only bit `i` set.
fn onehot_word(i: u32, q: u32) -> u32 {
    return select(0u, 1u << (i & 31u), (i >> 5u) == q);
}

fn put_plane(j: u32, plane: vec4<u32>, b: u32) {
    for (var q = 0u; q < PER; q = q + 1u) {
        tile[j * 32u + plane_row(b, q)] = plane[q];
    }
}

// Decode the W planes of `p_bits`-bit values at the reader into `blk` as elements, through
// tile slot `j`.
fn decode_planes(j: u32, p_bits: u32) {
    var prev = vec4<u32>(0u);
    var left = W;
    // Every symbol produces at least one plane, so this loop runs at most W times.
    for (var guard = 0u; guard < W && left > 0u; guard = guard + 1u) {
        // One look at the next 32 bits serves the prefix code and its field (at most 12 bits).
        let w = rd_peek();
        let raw = (w & 1u) == 1u;
        let code = (w >> 3u) & 3u;
        var planes = 1u;
        var hdr = 5u;
        var x = vec4<u32>(0u);
        var keep_prev = false;
        if (raw) {
            hdr = 1u;
        } else if ((w & 2u) != 0u) {
            // 01: a run of r >= 2 zero symbols: r planes equal to the previous one.
            planes = ((w >> 2u) & ((1u << RUN_BITS) - 1u)) + 2u;
            hdr = 2u + RUN_BITS;
            keep_prev = true;
        } else if ((w & 4u) != 0u) {
            // 001: one zero symbol.
            hdr = 3u;
            keep_prev = true;
        } else if (code == 0u) {
            // 00000: all ones.
            for (var q = 0u; q < PER; q = q + 1u) {
                x[q] = ones_word(p_bits, q);
            }
        } else if (code == 2u) {
            // 00001: the plane itself is zero (x = prev, so that x ^ prev = 0).
            x = prev;
        } else if (code == 1u) {
            // 00010: two adjacent ones at p, p + 1.
            let fb = bits_for(p_bits - 1u);
            let at = (w >> 5u) & ((1u << fb) - 1u);
            hdr = 5u + fb;
            if (p_bits < 2u || at > p_bits - 2u) {
                err = err | ERR_SYMBOL;
            }
            for (var q = 0u; q < PER; q = q + 1u) {
                x[q] = onehot_word(at, q) | onehot_word(at + 1u, q);
            }
        } else {
            // 00011: a single one at p.
            let fb = bits_for(p_bits);
            let at = (w >> 5u) & ((1u << fb) - 1u);
            hdr = 5u + fb;
            if (at >= p_bits) {
                err = err | ERR_SYMBOL;
            }
            for (var q = 0u; q < PER; q = q + 1u) {
                x[q] = onehot_word(at, q);
            }
        }
        rd_skip(hdr);
        // A raw plane's P bits follow its code bit (read whatever the symbol: one load per
        // plane word, none consumed unless the symbol is raw).
        for (var q = 0u; q < PER; q = q + 1u) {
            let n = select(0u, min(max(p_bits, 32u * q) - 32u * q, 32u), raw);
            let v = rd_bits(n);
            x[q] = select(x[q], v, raw);
        }
        if (planes > left) {
            err = err | ERR_SYMBOL;
            planes = left;
        }
        var plane = prev;
        if (!keep_prev) {
            plane = x ^ prev;
        }
        for (var k = 0u; k < planes; k = k + 1u) {
            put_plane(j, plane, left - 1u - k);
        }
        prev = plane;
        left = left - planes;
    }
    planes_to_elements(j);
}

// Sign-extend the low `s` bits of `v` to the element width.
fn sign_extend(v: u32, s: u32) -> u32 {
    if (((v >> (s - 1u)) & 1u) == 1u) {
        return (v | ~((1u << s) - 1u)) & WMASK;
    }
    return v;
}

// Element `i` of the block in the tile's slot `j`.
fn get_elem(j: u32, i: u32) -> u32 {
    return (tile[j * 32u + i / PER] >> ((i % PER) * W)) & WMASK;
}

fn set_elem(j: u32, i: u32, e: u32) {
    let k = j * 32u + i / PER;
    let sh = (i % PER) * W;
    tile[k] = (tile[k] & ~(WMASK << sh)) | (e << sh);
}

// The nonzero mask M (N bits) at the reader.
fn read_mask() -> vec4<u32> {
    var m = vec4<u32>(0u);
    for (var q = 0u; q < PER; q = q + 1u) {
        m[q] = rd_bits(32u);
    }
    return m;
}

// Decode block `j` (tag, payload length, first payload bit) into tile slot `j`.
fn decode_block(j: u32, tag: u32, len: u32, start: u32) {
    blk = array<u32, 32>();
    rd_at(start);
    var m = vec4<u32>(0u);
    if (tag == MODE_RAW) {
        for (var k = 0u; k < 32u; k = k + 1u) {
            blk[k] = rd_bits(32u);
        }
    } else if (tag == MODE_ZVC || tag == MODE_ZBX) {
        m = read_mask();
    }
    var p_bits = N;
    if (tag >= MODE_BX && tag <= MODE_ZBX) {
        var base = 0u;
        if (tag == MODE_ZBX) {
            p_bits = countOneBits(m.x) + countOneBits(m.y) + countOneBits(m.z) + countOneBits(m.w);
            if (p_bits < 2u) {
                err = err | ERR_VALUE;
            }
        } else if (tag == MODE_DBX) {
            p_bits = N - 1u;
            let c = rd_peek();
            if ((c & 1u) == 1u) {
                rd_skip(1u);
                base = rd_bits(W);
            } else {
                // Code bits in stream order: 00 zero, 01 -> 4 bits, 10 -> 8 bits, 11 -> 16 bits.
                let code = ((c >> 1u) & 1u) | (((c >> 2u) & 1u) << 1u);
                var sz = 0u;
                if (code == 2u) {
                    sz = 4u;
                } else if (code == 1u) {
                    sz = 8u;
                } else if (code == 3u) {
                    sz = 16u;
                }
                if (sz >= W) {
                    err = err | ERR_SYMBOL;
                    sz = 0u;
                }
                rd_skip(3u);
                if (sz > 0u) {
                    base = sign_extend(rd_bits(sz), sz);
                }
            }
        }
        decode_planes(j, p_bits);
        if (tag == MODE_DBX) {
            // Element i holds delta i (element N - 1 is zero): a running sum from the base.
            var e = base;
            for (var k = 0u; k < 32u; k = k + 1u) {
                let d = blk[k];
                var v = 0u;
                for (var t = 0u; t < PER; t = t + 1u) {
                    v = v | (e << (t * W));
                    e = (e + (d >> (t * W))) & WMASK;
                }
                blk[k] = v;
            }
        }
    }
    for (var k = 0u; k < 32u; k = k + 1u) {
        tile[j * 32u + k] = blk[k];
    }
    if (tag == MODE_ZVC) {
        let cnt = countOneBits(m.x) + countOneBits(m.y) + countOneBits(m.z) + countOneBits(m.w);
        if (len != N + cnt * W) {
            err = err | ERR_LENGTH;
            return;
        }
        for (var q = 0u; q < PER; q = q + 1u) {
            var mq = m[q];
            for (var guard = 0u; guard < 32u && mq != 0u; guard = guard + 1u) {
                let i = q * 32u + countTrailingZeros(mq);
                let e = rd_bits(W);
                if (e == 0u) {
                    err = err | ERR_VALUE;
                }
                set_elem(j, i, e);
                mq = mq & (mq - 1u);
            }
        }
    } else if (tag == MODE_ZBX) {
        // Values 0..k-1 sit at elements 0..k-1: move value t to the t-th set bit of M, from
        // the last down (the t-th set bit is at or after t, so nothing is overwritten early).
        var t = p_bits;
        for (var qq = 0u; qq < PER; qq = qq + 1u) {
            let q = PER - 1u - qq;
            var mq = m[q];
            for (var guard = 0u; guard < 32u && mq != 0u && t > 0u; guard = guard + 1u) {
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
    let used = select(rd_pos() - start, BLOCK_BITS, tag == MODE_RAW);
    if (tag != MODE_ZERO && tag != MODE_ZVC && used != select(len, BLOCK_BITS, tag == MODE_RAW)) {
        err = err | ERR_LENGTH;
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
        let e = bits(TABLE_ENTRY_BITS * j, TABLE_ENTRY_BITS);
        tag = e & ((1u << TAG_BITS) - 1u);
        len = e >> TAG_BITS;
        plen = len;
        if (tag == MODE_RAW) {
            plen = BLOCK_BITS;
        }
        if (tag > MODE_ZERO || ((tag == MODE_RAW || tag == MODE_ZERO) && len != 0u) || ((tag >= MODE_BX && tag <= MODE_ZBX) && len >= BLOCK_BITS)) {
            err = err | ERR_TAG;
            plen = 0u;
        }
    }
    let sc = scan(plen);
    let used = TABLE_ENTRY_BITS * nb + sc.y;
    if (j == 0u) {
        if ((used + 7u) / 8u * 8u != climit) {
            err = err | ERR_LENGTH;
        } else if (bits(used, climit - used) != 0u) {
            err = err | ERR_VALUE;
        }
    }
    if (live && (err & ERR_TAG) == 0u) {
        decode_block(j, tag, len, TABLE_ENTRY_BITS * nb + sc.x);
        // The padding bytes of the tensor's last block must be zero.
        let rem = params.raw_len % 128u;
        if (first + j + 1u == params.n_blocks && rem != 0u) {
            for (var k = rem / 4u; k < 32u; k = k + 1u) {
                let keep = select(0u, 0xffffffffu >> (32u - 8u * (rem % 4u)), k == rem / 4u && rem % 4u != 0u);
                if ((tile[j * 32u + k] & ~keep) != 0u) {
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
