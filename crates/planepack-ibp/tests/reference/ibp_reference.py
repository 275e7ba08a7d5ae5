"""A transliteration of the IBP reference library's encoder (Kamath et al., EuroSys 2026;
`include/preproc/ibp_preproc_host.cuh` `preproc_data`,
`ibp_preproc_kernels.cuh` `count_bit_kernel` / `create_mask` / `check_feats`, and
`include/compress/ibp_compress_dev.cuh` `compress_and_write`), as described in
../shared/reference/ibp.md §1.1-1.2, written to reproduce its arithmetic, not to be fast:

* the threshold sweep is the reference's float loop, `for (float t = 0.7f; t <= 1.0f; t += 0.05f)`,
  so its thresholds are the f32 sums 0.69999999, 0.75, 0.80000001, 0.85000002, 0.90000004,
  0.95000005, 1.0 (not the literals 0.9f = 0.89999998 and 0.95f = 0.94999999);
* a bit is invariant-one if `(float)ones > t * (float)N` (f32 product), invariant-zero if
  `ones < (1 - t) * N` evaluated in double (t widened to double);
* a threshold's score is the sum over rows of `saved - V` for rows with `saved > V`, where
  `saved` sums `popcount(mask[j])` over participating chunks; a later t must score strictly
  more; a best score <= 0 leaves mask and bitval zero;
* a row is the LSB-first participation bitmap padded to B bytes, then the fields (variable bits
  of a participating chunk, all W bits of another), MSB-first in W-bit words stored
  little-endian, padded to B; stored raw unless H + D < V*B.

`python ibp_reference.py > boundary_vectors.json` writes the boundary-case vectors that
`tests/vectors.rs` checks planepack-ibp against: groups where bits have exactly 10 % or 5 %
deviant rows and (1 - t) * N is a whole number, where the f32 loop's thresholds and the
literals disagree. Rows are described, not stored (splitmix64 from a seed, then the boundary
bits forced); the expected output is the mask, bitval, chosen threshold, score, the first row's
bytes and a SHA-256 of all rows' bytes.
"""

import hashlib
import json
import sys

import numpy as np

f32 = np.float32


def sweep():
    """The reference's thresholds: an f32 loop from 0.7 by 0.05 while t <= 1.0."""
    out, t = [], f32(0.7)
    while t <= f32(1.0):
        out.append(t)
        t = f32(t + f32(0.05))
    return out


def counts(rows, w):
    """ones[j][b]: rows whose chunk j has bit b set."""
    n, v = rows.shape
    ones = np.zeros((v, w), dtype=np.int64)
    for b in range(w):
        ones[:, b] = ((rows >> np.uint64(b)) & np.uint64(1)).sum(axis=0)
    return ones


def create_mask(ones, n, t, w):
    v = ones.shape[0]
    mask = [0] * v
    bitval = [0] * v
    hi = f32(t * f32(n))  # f32 product
    lo = (1.0 - float(t)) * float(n)  # double
    for j in range(v):
        for b in range(w):
            c = int(ones[j][b])
            if f32(c) > hi:
                mask[j] |= 1 << b
                bitval[j] |= 1 << b
            elif float(c) < lo:
                mask[j] |= 1 << b
    return mask, bitval


def score(rows, mask, bitval):
    v = rows.shape[1]
    total = 0
    for row in rows:
        saved = sum(bin(mask[j]).count("1") for j in range(v) if (int(row[j]) & mask[j]) == bitval[j])
        if saved > v:
            total += saved - v
    return total


def preprocess(rows, w, threshold=None):
    """(mask, bitval, threshold used, score): the reference's `preproc_data`."""
    n, v = rows.shape
    ones = counts(rows, w)
    best = None
    for t in [f32(threshold)] if threshold is not None else sweep():
        m, bv = create_mask(ones, n, t, w)
        s = score(rows, m, bv)
        if best is None or s > best[3]:
            best = (m, bv, t, s)
    if best[3] <= 0:
        return [0] * v, [0] * v, best[2], best[3]
    return best


def compress_row(row, mask, bitval, w):
    """The row's bytes and whether it is stored compressed."""
    v, nb = len(row), w // 8
    align = lambda x: -(-x // nb) * nb  # noqa: E731
    header = bytearray(align(-(-v // 8)))
    bits = []
    for j, x in enumerate(int(c) for c in row):
        if (x & mask[j]) == bitval[j]:
            header[j // 8] |= 1 << (j % 8)
            for b in range(w - 1, -1, -1):
                if not (mask[j] >> b) & 1:
                    bits.append((x >> b) & 1)
        else:
            bits.extend((x >> b) & 1 for b in range(w - 1, -1, -1))
    words = -(-len(bits) // w)
    stream = bytearray()
    for k in range(words):
        word = 0
        for p, bit in enumerate(bits[k * w : (k + 1) * w]):
            word |= bit << (w - 1 - p)
        stream += word.to_bytes(nb, "little")
    stream = stream[: align(-(-len(bits) // 8))] if bits else bytearray()
    packed = bytes(header) + bytes(stream)
    raw = b"".join(int(c).to_bytes(nb, "little") for c in row)
    if len(packed) < v * nb:
        return packed, True
    return raw, False


MASK64 = (1 << 64) - 1


def splitmix64(state):
    """(next state, output): the generator both this script and the Rust test use to make rows."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def make_rows(spec):
    """The group a case describes: `n` rows of `columns` chunks of `width` bits, each chunk
    `base` with its low 16 bits from splitmix64(seed), row by row; then every boundary bit
    (column, bit, pct, value) is `value` in exactly pct % of the rows (row i when
    (i * 37 + column) % 100 < pct; n is a multiple of 100) and the other value in the rest."""
    n, v = spec["n"], spec["columns"]
    state = spec["seed"]
    rows = np.zeros((n, v), dtype=np.uint64)
    for i in range(n):
        for j in range(v):
            state, r = splitmix64(state)
            rows[i, j] = spec["base"] | (r & 0xFFFF)
    for j, b, pct, value in spec["boundary"]:
        for i in range(n):
            bit = value if (i * 37 + j) % 100 < pct else 1 - value
            if bit:
                rows[i, j] |= np.uint64(1 << b)
            else:
                rows[i, j] &= ~np.uint64(1 << b)
    return rows


def literal_sweep(rows, w):
    """The mask a sweep over the literal thresholds (0.9f, 0.95f) would give, to show which
    cases tell the two arithmetics apart."""
    best = None
    ones = counts(rows, w)
    for t in (f32(x) for x in (0.7, 0.75, 0.8, 0.85, 0.9, 0.95)):
        m, bv = create_mask(ones, rows.shape[0], t, w)
        s = score(rows, m, bv)
        if best is None or s > best[2]:
            best = (m, bv, s)
    return (best[0], best[1]) if best[2] > 0 else ([0] * rows.shape[1], [0] * rows.shape[1])


def case(spec):
    rows = make_rows(spec)
    w = spec["width"]
    mask, bitval, t, s = preprocess(rows, w, spec.get("threshold"))
    out = [compress_row(r, mask, bitval, w) for r in rows]
    return dict(spec, **{
        "chosen_threshold_bits": format(int(np.asarray(t, dtype=f32).view(np.uint32)), "08x"),
        "score": int(s),
        "mask": [format(m, "x") for m in mask],
        "bitval": [format(b, "x") for b in bitval],
        "packed_rows": sum(p for _, p in out),
        "bytes": sum(len(b) for b, _ in out),
        "sha256": hashlib.sha256(b"".join(b for b, _ in out)).hexdigest(),
        "first_row": out[0][0].hex(),
        "differs_from_literal_sweep": spec.get("threshold") is None and literal_sweep(rows, w) != (mask, bitval),
    })


def self_check():
    """The transliteration reproduces the format's worked examples (reference §1.3, and
    tests/vectors.rs)."""
    m = [0xFFFF0000] * 4 + [0xFF0000FF, 0, 0xFFFFFFFF, 0x80000001]
    bv = [0x3F800000] * 4 + [0x12000034, 0, 0xCAFEBABE, 0x00000001]
    x = [0x3F801234, 0x3F80ABCD, 0x40001111, 0x3F80FFFF, 0x12ABCD34, 0x01020304, 0xCAFEBABE, 0x7FFFFFFF]
    got, packed = compress_row(x, m, bv, 32)
    assert packed and got.hex() == "fb000000cdab341211110040cdabffff04030201fcffffff", got.hex()
    m64 = [0xFFFFFFFFFFFF0000] * 4
    bv64 = [0x3FF0000000000000] * 4
    x64 = [0x3FF0000000001234, 0x3FF0000000005678, 0x3FF000000000ABCD, 0x4000000000000001]
    got, packed = compress_row(x64, m64, bv64, 64)
    assert packed and got.hex() == "07000000000000000040cdab785634120000010000000000", got.hex()


def main():
    self_check()
    # Boundary bits at exactly 5 % and 10 % deviant rows (the f32 loop's 0.90000004 and
    # 0.95000005 against the literals 0.89999998 and 0.94999999), in both polarities, beside
    # bits just inside (3 %, 8 %) and outside (12 %, 20 %), so the sweep's winner varies.
    layouts = [
        [(0, 20, 10, 1), (1, 21, 10, 0), (2, 22, 5, 1), (3, 23, 5, 0), (4, 24, 8, 1), (5, 25, 3, 0)],
        [(0, 20, 5, 1), (1, 21, 5, 0), (2, 22, 5, 1), (3, 23, 5, 0), (4, 24, 5, 1), (5, 25, 5, 0), (6, 26, 5, 1)],
        [(0, 20, 10, 1), (1, 21, 10, 0), (2, 22, 10, 1), (3, 23, 10, 0), (4, 24, 10, 1), (5, 25, 12, 0), (6, 26, 20, 1)],
    ]
    specs = []
    for n in (100, 1000):
        for w, base in ((32, 0x3F800000), (64, 0x3FF0000000000000)):
            for k, layout in enumerate(layouts):
                specs.append({"name": f"n{n}-w{w}-layout{k}", "n": n, "columns": 8, "width": w,
                              "seed": n * 1000 + w * 10 + k, "base": base, "boundary": layout})
    # The KV-cache integration's fixed threshold 0.8 (a Python float the binding makes f32).
    specs.append({"name": "n100-w32-fixed0.8", "n": 100, "columns": 8, "width": 32, "seed": 5,
                  "base": 0x3F800000, "boundary": layouts[2], "threshold": 0.8})
    json.dump({"generator": "crates/planepack-ibp/tests/reference/ibp_reference.py",
               "sweep_bits": [format(int(np.asarray(t, dtype=f32).view(np.uint32)), "08x") for t in sweep()],
               "cases": [case(s) for s in specs]}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
