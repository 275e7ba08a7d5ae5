// Bit-plane stream encoder (docs/format-bitplane.md), the twin of planepack-bitplane's encoder
// byte for byte: one workgroup per 4 KB chunk, one invocation per 128-byte block. Each
// invocation sizes every mode of its block exactly (ZERO, RAW, ZVC, BX, ZBX, DBX, with the
// plane code walked in counting mode), keeps the smallest with the CPU's tie order (a later
// mode must be strictly smaller; a non-RAW payload must stay under 1024 bits), then a prefix
// sum over the chunk's payload lengths (the scan files, as in the decoder) places every block,
// and each invocation writes its table entry and payload with the same walker in writing
// mode. Blocks of a chunk write disjoint bits of the chunk's slot (`CHUNK_SLOT_WORDS` words,
// room for the largest chunk), so words they share are ORed atomically into a zeroed buffer;
// invocation 0 writes the chunk's 16-bit length and `lens[c]`. The host then copies the
// chunks back to back (ibp_condense.wgsl) and writes the stream header.
//
// The codes, mode tags, table layout and slot size are generated from Rust (contract.rs);
// bytes past `raw_len` read as zero (the last block's padding), whatever the buffer holds.
// A written payload whose length differs from its planned size sets ERR_LENGTH: an encoder
// bug becomes an error, never a wrong stream.

struct Params {
    n_chunks: u32,
    n_blocks: u32,
    raw_len: u32,
    chunks_x: u32,
}

@group(0) @binding(0) var<storage, read> raw: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> lens: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> status: array<atomic<u32>>;

// The block's elements, kept while `blk` is transposed for each candidate.
var<private> elems: array<u32, 32>;
// The writer: bit position in the chunk's slot, the slot's first word; or a counter. Bits are
// gathered in `acc` (the `nacc` low bits of the word at `wpos`, whose first bits may belong to
// the block before) and ORed into the slot a whole word at a time, so a payload costs one
// atomic per word it touches rather than one or two per field.
var<private> wpos: u32;
var<private> wbase: u32;
var<private> counting: bool;
var<private> count: u32;
var<private> acc: u32;
var<private> nacc: u32;

// Start writing at bit `pos` of the chunk's slot.
fn seek(pos: u32) {
    wpos = pos;
    acc = 0u;
    nacc = pos & 31u;
}

// OR the gathered bits of the current word into the slot.
fn flush() {
    if (nacc > 0u && acc != 0u) {
        atomicOr(&out[wbase + (wpos >> 5u)], acc);
    }
}

// Append the low `n` (0..=32) bits of `v` (no bits above `n`), least significant first.
fn put(v: u32, n: u32) {
    if (counting) {
        count = count + n;
        return;
    }
    if (n == 0u) {
        return;
    }
    acc = acc | (v << nacc);
    if (nacc + n >= 32u) {
        // The word is complete: store it, keep the bits of `v` that did not fit.
        atomicOr(&out[wbase + (wpos >> 5u)], acc);
        acc = select(v >> (32u - nacc), 0u, nacc == 0u);
        nacc = nacc + n - 32u;
    } else {
        nacc = nacc + n;
    }
    wpos = wpos + n;
}

fn low_bits(v: u32, n: u32) -> u32 {
    return select(v & ((1u << n) - 1u), v, n >= 32u);
}

// Element `i` of the block.
fn elem(i: u32) -> u32 {
    return (elems[i / PER] >> ((i % PER) * W)) & WMASK;
}

// Element `i` of `blk` set to `e` (blk zeroed before).
fn set_blk(i: u32, e: u32) {
    blk[i / PER] = blk[i / PER] | (e << ((i % PER) * W));
}

fn load_elems() {
    for (var k = 0u; k < 32u; k = k + 1u) {
        blk[k] = elems[k];
    }
}

// The nonzero elements in index order, then zeros.
fn load_packed() {
    blk = array<u32, 32>();
    var c = 0u;
    for (var i = 0u; i < N; i = i + 1u) {
        let x = elem(i);
        if (x != 0u) {
            set_blk(c, x);
            c = c + 1u;
        }
    }
}

// The wrap-around deltas e[i+1] - e[i], i < N - 1, then a zero.
fn load_deltas() {
    blk = array<u32, 32>();
    for (var i = 0u; i + 1u < N; i = i + 1u) {
        set_blk(i, (elem(i + 1u) - elem(i)) & WMASK);
    }
}

// Plane `b` of tile slot `j` (PER words; the rest zero).
fn plane(j: u32, b: u32) -> vec4<u32> {
    var p = vec4<u32>(0u);
    for (var q = 0u; q < PER; q = q + 1u) {
        p[q] = plane_word(j, b, q);
    }
    return p;
}

fn is_zero(p: vec4<u32>) -> bool {
    return all(p == vec4<u32>(0u));
}

// Word `q` of the all-ones `p`-bit plane.
fn ones_word_of(p: u32, q: u32) -> u32 {
    let n = min(max(p, 32u * q) - 32u * q, 32u);
    return select((1u << n) - 1u, 0xffffffffu, n >= 32u);
}

// The W planes in tile slot `j`, `p_bits` significant bits each, coded from the top (the
// table of docs/format-bitplane.md in its order of precedence; zero symbols in maximal runs).
fn encode_planes(j: u32, p_bits: u32) {
    let two_field = bits_for(p_bits - 1u);
    let one_field = bits_for(p_bits);
    var all_p = vec4<u32>(0u);
    for (var q = 0u; q < PER; q = q + 1u) {
        all_p[q] = ones_word_of(p_bits, q);
    }
    var run = 0u;
    var above = vec4<u32>(0u);
    for (var bb = 0u; bb < W; bb = bb + 1u) {
        let b = W - 1u - bb;
        let dbp = plane(j, b);
        let dbx = dbp ^ above;
        above = dbp;
        let pc = countOneBits(dbx.x) + countOneBits(dbx.y) + countOneBits(dbx.z) + countOneBits(dbx.w);
        // The lowest and highest set bits.
        var tz = 0u;
        var hi = 0u;
        var found = false;
        for (var q = 0u; q < PER; q = q + 1u) {
            if (dbx[q] != 0u) {
                if (!found) {
                    tz = 32u * q + countTrailingZeros(dbx[q]);
                    found = true;
                }
                hi = 32u * q + 31u - countLeadingZeros(dbx[q]);
            }
        }
        let zero = pc == 0u;
        let is_all = all(dbx == all_p);
        let dbp_zero = is_zero(dbp);
        let one = pc == 1u;
        let two = pc == 2u && hi == tz + 1u;
        if (!(zero || is_all || dbp_zero || one || two)) {
            run = 0u;
            put(CODE_RAW, CODE_RAW_LEN);
            for (var q = 0u; q < PER; q = q + 1u) {
                if (p_bits > 32u * q) {
                    let n = min(p_bits - 32u * q, 32u);
                    put(low_bits(dbx[q], n), n);
                }
            }
            continue;
        }
        run = select(0u, run + 1u, zero);
        if (zero) {
            // The run goes on if the next plane repeats this one.
            let continues = b > 0u && all(plane(j, b - 1u) == dbp);
            if (!continues) {
                if (run == 1u) {
                    put(CODE_ZERO1, CODE_ZERO1_LEN);
                } else {
                    put(CODE_RUN | ((run - 2u) << CODE_RUN_LEN), CODE_RUN_LEN + RUN_BITS);
                }
            }
        } else if (is_all) {
            put(CODE_ALL_ONES, CODE_ALL_ONES_LEN);
        } else if (dbp_zero) {
            put(CODE_ZERO_DBP, CODE_ZERO_DBP_LEN);
        } else if (one) {
            put(CODE_ONE_ONE, CODE_ONE_ONE_LEN);
            put(tz, one_field);
        } else {
            put(CODE_TWO_ONES, CODE_TWO_ONES_LEN);
            put(tz, two_field);
        }
    }
}

// Does the W-bit value `v` equal the sign extension of its low `k` (1..=16) bits?
fn fits_signed(v: u32, k: u32) -> bool {
    let s = 32u - k;
    return (u32(i32(v << s) >> s) & WMASK) == v;
}

// The DBX base element (BPC's base code truncated to W).
fn encode_base(v: u32) {
    if (v == 0u) {
        put(CODE_BASE0, CODE_BASE0_LEN);
    } else if (fits_signed(v, 4u)) {
        put(CODE_BASE4, CODE_BASE4_LEN);
        put(v & 0xfu, 4u);
    } else if (W >= 16u && fits_signed(v, 8u)) {
        put(CODE_BASE8, CODE_BASE8_LEN);
        put(v & 0xffu, 8u);
    } else if (W == 32u && fits_signed(v, 16u)) {
        put(CODE_BASE16, CODE_BASE16_LEN);
        put(v & 0xffffu, 16u);
    } else {
        put(CODE_RAW, CODE_RAW_LEN);
        put(v, W);
    }
}

fn start_count() {
    counting = true;
    count = 0u;
}

// The payload of block `j` in `mode` (its planes, if any, are computed here).
fn payload(j: u32, mode: u32, m: vec4<u32>, k: u32) {
    if (mode == MODE_RAW) {
        for (var q = 0u; q < 32u; q = q + 1u) {
            put(elems[q], 32u);
        }
    } else if (mode == MODE_ZVC) {
        for (var q = 0u; q < PER; q = q + 1u) {
            put(m[q], 32u);
        }
        for (var i = 0u; i < N; i = i + 1u) {
            let x = elem(i);
            if (x != 0u) {
                put(x, W);
            }
        }
    } else if (mode == MODE_BX) {
        load_elems();
        elements_to_planes(j);
        encode_planes(j, N);
    } else if (mode == MODE_ZBX) {
        for (var q = 0u; q < PER; q = q + 1u) {
            put(m[q], 32u);
        }
        load_packed();
        elements_to_planes(j);
        encode_planes(j, k);
    } else if (mode == MODE_DBX) {
        encode_base(elem(0u));
        load_deltas();
        elements_to_planes(j);
        encode_planes(j, N - 1u);
    }
}

fn run(wg: vec3<u32>) {
    let c = wg.y * params.chunks_x + wg.x;
    if (c >= params.n_chunks) {
        return;
    }
    let first = c * 32u;
    let nb = min(32u, params.n_blocks - first);
    let j = slot;
    let live = j < nb;
    var mode = MODE_ZERO;
    var bits = 0u;
    var m = vec4<u32>(0u);
    var k = 0u;
    if (live) {
        // The block's words, bytes past the tensor read as zero.
        for (var q = 0u; q < 32u; q = q + 1u) {
            let wi = (first + j) * 32u + q;
            var v = 0u;
            if (wi < arrayLength(&raw)) {
                v = raw[wi];
            }
            let left = select(0u, params.raw_len - 4u * wi, params.raw_len > 4u * wi);
            elems[q] = select(v & ((1u << (8u * left)) - 1u), v, left >= 4u);
        }
        load_elems();
        elements_to_planes(j);
        for (var b = 0u; b < W; b = b + 1u) {
            m = m | plane(j, b);
        }
        k = countOneBits(m.x) + countOneBits(m.y) + countOneBits(m.z) + countOneBits(m.w);
        if (k > 0u) {
            mode = MODE_RAW;
            bits = BLOCK_BITS;
            let zvc = N + k * W;
            if (zvc < bits) {
                mode = MODE_ZVC;
                bits = zvc;
            }
            start_count();
            encode_planes(j, N);
            if (count < bits) {
                mode = MODE_BX;
                bits = count;
            }
            if (k >= 2u && k < N) {
                start_count();
                payload(j, MODE_ZBX, m, k);
                if (count < bits) {
                    mode = MODE_ZBX;
                    bits = count;
                }
            }
            start_count();
            payload(j, MODE_DBX, m, k);
            if (count < bits) {
                mode = MODE_DBX;
                bits = count;
            }
        }
    }
    let plen = select(bits, BLOCK_BITS, mode == MODE_RAW);
    let sc = scan(select(0u, plen, live));
    wbase = c * CHUNK_SLOT_WORDS;
    counting = false;
    if (live) {
        let len = select(bits, 0u, mode == MODE_RAW || mode == MODE_ZERO);
        seek(16u + TABLE_ENTRY_BITS * j);
        put(mode | (len << TAG_BITS), TABLE_ENTRY_BITS);
        flush();
        let start = 16u + TABLE_ENTRY_BITS * nb + sc.x;
        seek(start);
        payload(j, mode, m, k);
        flush();
        if (wpos - start != plen) {
            atomicOr(&status[0], ERR_LENGTH);
            atomicMin(&status[1], first + j);
        }
    }
    if (j == 0u) {
        let bytes = 2u + (TABLE_ENTRY_BITS * nb + sc.y + 7u) / 8u;
        lens[c] = bytes;
        atomicOr(&out[wbase], bytes);
    }
}
