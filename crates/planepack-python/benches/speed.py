"""Speed of planepack from Python, against the same Rust code with no Python in the loop, and
side by side with ZipNN's and python-blosc2's Python APIs on the same arrays.

    python crates/planepack-python/benches/speed.py --out bench-results/python

Inputs: the committed real datasets (datasets/manifest.toml), each file's tensors of one dtype
joined into one array (the harness's grouping), every array of 1 MiB or more. For each array:
* planepack.compress / planepack.decompress (the container: per-part codec choice, checksums,
  and a verification decode of every payload before it is written) timed from Python;
* the same container calls timed inside Rust (`_planepack.time_compress` / `time_decompress`:
  same input read in place, same options, parse included), so py / rust is the cost of the
  binding alone;
* ZipNN (`ZipNN(input_format="byte", bytearray_dtype=..., threads=1)`) and python-blosc2
  (`compress2`, shuffle + zstd, clevel 5, one thread) on the same bytes, each round trip
  checked.
Every timing is the median of interleaved runs (the Python and Rust runs of one codec
alternate), one thread each; GB/s of raw bytes.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

# One thread each, as the peers are run: planepack's parallel encoder and decoder (rayon) read
# this before the first call. RAYON_NUM_THREADS=0 (all cores) measures what a default call gets.
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import planepack
from planepack import _planepack

ROOT = Path(__file__).resolve().parents[3]
# "auto" (every codec tried per part, for files written once) is left out: it is minutes per
# run. So is IBP: it codes rows, and these arrays are dtype groups joined into one dimension.
CODECS = ["bitplane", "rans"]
ST_NP = {"F32": "<f4", "F16": "<f2", "U8": "|u1", "I8": "|i1", "I32": "<i4", "I64": "<i8"}
ZIPNN_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def threads_note():
    """How many threads planepack ran on (the peers always run on one)."""
    n = os.environ.get("RAYON_NUM_THREADS", "1")
    if n == "1":
        return "One thread each."
    cores = os.cpu_count() if n == "0" else int(n)
    return (
        f"planepack on {cores} threads (RAYON_NUM_THREADS={n}: its parallel encoder and decoder), "
        "ZipNN and python-blosc2 on one."
    )


def datasets():
    """(dataset name, dtype, array or tensor) for every dtype group of 1 MiB or more."""
    import tomllib

    manifest = tomllib.loads((ROOT / "datasets/manifest.toml").read_text())
    for d in manifest["dataset"]:
        path = ROOT / "datasets" / d["file"]
        raw = path.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + n])
        data = raw[8 + n :]
        groups = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            groups.setdefault(info["dtype"], []).append(data[b:e])
        for dtype, chunks in groups.items():
            joined = b"".join(chunks)
            if len(joined) < 1 << 20:
                continue
            if dtype == "BF16":
                yield d["name"], dtype, torch.frombuffer(bytearray(joined), dtype=torch.bfloat16)
            elif dtype in ST_NP:
                yield d["name"], dtype, np.frombuffer(joined, dtype=ST_NP[dtype]).copy()


def median(xs):
    return statistics.median(xs)


def time_pair(runs, a, b):
    """Medians of a() and b() run alternately, after one warm-up of each."""
    a()
    b()
    ta, tb = [], []
    for _ in range(runs):
        t = time.perf_counter()
        a()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        b()
        tb.append(time.perf_counter() - t)
    return median(ta), median(tb)


def raw_bytes_of(x):
    return (planepack._tensor_as_array(x)[0] if isinstance(x, torch.Tensor) else x).tobytes()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench-results/python"))
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    import blosc2
    import zipnn

    blosc2.set_nthreads(1)
    torch.set_num_threads(1)
    rows = []
    for name, dtype, x in datasets():
        nbytes = x.numel() * x.element_size() if isinstance(x, torch.Tensor) else x.nbytes
        raw = raw_bytes_of(x)
        header, arrays = planepack._file_of(x)
        for codec in CODECS:
            blob = planepack.compress(x, codec=codec)
            back = planepack.decompress(blob)
            assert raw_bytes_of(back) == raw, (name, codec)
            # Each operation alternates Python and Rust run by run (one warm-up of each first),
            # so both see the same machine state: compress, then decompress into new memory,
            # then decompress into a reused array.
            rust_blob = _planepack.time_compress(header, arrays, codec, 1)[1]
            assert rust_blob == blob, (name, codec, "the Python and Rust containers differ")
            out = planepack.decompress(blob)
            rust_out_buf = np.empty(len(raw), np.uint8)

            def alternate(py_op, rust_op):
                py_op()
                rust_op()
                py_t, rust_t = [], []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    py_op()
                    py_t.append(time.perf_counter() - t)
                    rust_t.append(rust_op())
                return py_t, rust_t

            py_enc, rust_enc = alternate(lambda: planepack.compress(x, codec=codec),
                                         lambda: _planepack.time_compress(header, arrays, codec, 1)[0][0])
            py_dec, rust_dec = alternate(lambda: planepack.decompress(blob),
                                         lambda: _planepack.time_decompress(blob, 1)[0])
            py_out, rust_out = alternate(lambda: planepack.decompress(blob, out=out),
                                         lambda: _planepack.time_decompress(blob, 1, rust_out_buf)[0])
            gbps = lambda runs: nbytes / median(runs) / 1e9  # noqa: E731
            rows.append(dict(dataset=name, dtype=dtype, mib=nbytes / 2**20, coder=f"planepack {codec}",
                             ratio=nbytes / len(blob), enc=gbps(py_enc), dec=gbps(py_dec), dec_out=gbps(py_out),
                             rust_enc=gbps(rust_enc), rust_dec=gbps(rust_dec), rust_dec_out=gbps(rust_out)))
        if dtype in ZIPNN_DTYPES:
            z = zipnn.ZipNN(input_format="byte", bytearray_dtype=ZIPNN_DTYPES[dtype], threads=1)
            # ZipNN rewrites the buffer it is given: a fresh copy per run, made outside the clock.
            zblob = z.compress(bytearray(raw))
            assert bytes(z.decompress(zblob)) == raw, (name, "zipnn")
            enc, dec = [], []
            for _ in range(args.runs):
                fresh = bytearray(raw)
                t = time.perf_counter()
                z.compress(fresh)
                enc.append(time.perf_counter() - t)
                t = time.perf_counter()
                z.decompress(zblob)
                dec.append(time.perf_counter() - t)
            rows.append(dict(dataset=name, dtype=dtype, mib=nbytes / 2**20, coder="zipnn", ratio=nbytes / len(zblob),
                             enc=nbytes / median(enc) / 1e9, dec=nbytes / median(dec) / 1e9))
        size = {"BF16": 2, "F16": 2, "F32": 4}.get(dtype, 1)
        buf = np.frombuffer(raw, np.uint8)

        def bcompress():
            return blosc2.compress2(buf, typesize=size, clevel=5, filters=[blosc2.Filter.SHUFFLE],
                                    codec=blosc2.Codec.ZSTD)

        bblob = bcompress()
        assert bytes(blosc2.decompress2(bblob)) == raw, (name, "blosc2")
        benc, bdec = time_pair(args.runs, bcompress, lambda: blosc2.decompress2(bblob))
        rows.append(dict(dataset=name, dtype=dtype, mib=nbytes / 2**20, coder="python-blosc2 shuffle-zstd-5",
                         ratio=nbytes / len(bblob), enc=nbytes / benc / 1e9, dec=nbytes / bdec / 1e9))
        print(f"{name} {dtype}: done", file=sys.stderr)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = _machine()
    versions = {
        "python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
        "zipnn": _version("zipnn"), "blosc2": blosc2.__version__,
    }
    (out / "speed.json").write_text(json.dumps({"machine": machine, "versions": versions, "runs": args.runs,
                                                "rows": rows}, indent=1) + "\n")
    lines = [
        "# planepack from Python: speed against the Rust code and the Python peers",
        "",
        f"Machine: {machine}. {threads_note()} Median of {args.runs} interleaved runs; GB/s of raw bytes.",
        "Generated by `python crates/planepack-python/benches/speed.py` (see its docstring for the method);",
        "inputs: every dtype group of 1 MiB or more of the committed datasets, joined into one array.",
        "",
        "planepack's compress writes a checksummed container and decodes every payload to verify it before",
        "writing (so its compress includes a decode); `py/rust` compares the Python call with the same container",
        "call timed inside Rust on the same input: the cost of the binding alone. ZipNN and python-blosc2 are",
        "their own PyPI packages (" + ", ".join(f"{k} {v}" for k, v in versions.items()) + ").",
        "",
        "`decompress` allocates the output (new memory: page faults), as `Container::read` does in Rust;",
        "`into out=` decodes into an array reused from call to call, as `read_into` does with a reused buffer.",
        "",
        "| dataset | dtype | MiB | coder | ratio | compress GB/s | rust | py/rust | decompress GB/s | rust | py/rust | into out= GB/s | rust | py/rust |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "rust_enc" in r:
            rust = (f"{r['rust_enc']:.3f} | {r['enc'] / r['rust_enc']:.3f}",
                    f"{r['rust_dec']:.3f} | {r['dec'] / r['rust_dec']:.3f}",
                    f"{r['dec_out']:.3f} | {r['rust_dec_out']:.3f} | {r['dec_out'] / r['rust_dec_out']:.3f}")
        else:
            rust = ("| ", "| ", "| | ")
        lines.append(f"| {r['dataset']} | {r['dtype']} | {r['mib']:.2f} | {r['coder']} | {r['ratio']:.3f} | "
                     f"{r['enc']:.3f} | {rust[0]} | {r['dec']:.3f} | {rust[1]} | {rust[2]} |")
    pp = [r for r in rows if "rust_enc" in r]
    geo = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
    lines += ["", f"Python / Rust over the {len(pp)} planepack rows (geometric mean, worst):"]
    for what, py, rs in (("compress", "enc", "rust_enc"), ("decompress", "dec", "rust_dec"),
                         ("decompress into out=", "dec_out", "rust_dec_out")):
        q = [r[py] / r[rs] for r in pp]
        lines.append(f"- {what}: {geo(q):.3f}, worst {min(q):.3f}")
    lines.append("")
    for coder in sorted({r["coder"] for r in rows}):
        rs = [r for r in rows if r["coder"] == coder]
        lines.append(f"- {coder}: {len(rs)} arrays, ratio (total raw / total compressed) "
                     f"{sum(r['mib'] for r in rs) / sum(r['mib'] / r['ratio'] for r in rs):.3f}, "
                     f"compress {geo([r['enc'] for r in rs]):.3f} GB/s, decompress {geo([r['dec'] for r in rs]):.3f} GB/s "
                     "(geometric means)")
    (out / "speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _version(pkg):
    from importlib.metadata import version

    return version(pkg)


def _machine():
    """The harness's machine name (CPU model, cores, SIMD tier), through a tiny bench run."""
    r = planepack.bench({"probe": np.zeros(4096, np.float32)}, codecs="raw", quick=True)
    return r.machine


if __name__ == "__main__":
    main()
