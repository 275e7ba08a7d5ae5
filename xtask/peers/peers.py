"""Measure the peers that users compare planepack with, through their own PyPI packages:
ZipNN, python-blosc2 (shuffle + zstd-5, and shuffle + bytedelta + zstd at 5 and 9) and OpenZL
(each of its float graphs and the generic one, and the best graph per tensor).

Run by `cargo xtask peers` (and by `cargo xtask bench`), which writes the tensors of every
dataset group as raw files plus a manifest, runs this script in a virtual environment that
has the packages, and merges the records it prints into results.json.

The rules are the harness's (crates/planepack-harness/src/measure.rs):
* every tensor is compressed on its own, decompressed, and compared byte for byte with the
  input before any figure counts (a mismatch aborts the run);
* encode and decode are timed as the median of repeated runs after a warm-up, GB/s of raw
  bytes; decode runs alternate with a copy of the same bytes (numpy.copyto, i.e. memcpy),
  each under its own clock, so decode / memcpy compares like with like;
* single-core figures use one thread; all-core figures use every core;
* the compressed size counts everything the package's decompress call needs.

ZipNN rewrites the input buffer it is given for float32/bfloat16, so each timed encode gets a
fresh copy made outside the timed region.

Memory: ZipNN imports PyTorch, about 0.5 GB resident before any data. So the script runs
ZipNN in one child process and the other peers in another, one after the other, and merges
their records in group order; no process holds PyTorch and another library's buffers for a
64 MiB batch at once (`cargo xtask bench --workloads` must stay within 1 GiB resident).
"""

import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np


def time_runs(settings, fn, prepare=None):
    """Seconds of each timed run of fn(prepared) after one warm-up."""
    arg = prepare() if prepare else None
    fn(arg)
    runs = []
    start = time.perf_counter()
    while len(runs) < settings["max_runs"] and (
        len(runs) < settings["min_runs"] or time.perf_counter() - start < settings["min_seconds"]
    ):
        arg = None  # the last run's copies go before the next run's are made
        arg = prepare() if prepare else None
        t = time.perf_counter()
        fn(arg)
        runs.append(time.perf_counter() - t)
    return runs


def time_interleaved(settings, a, b):
    a()
    b()
    ra, rb = [], []
    start = time.perf_counter()
    while len(ra) < settings["max_runs"] and (
        len(ra) < settings["min_runs"]
        or time.perf_counter() - start < 2 * settings["min_seconds"]
    ):
        t = time.perf_counter()
        a()
        ra.append(time.perf_counter() - t)
        t = time.perf_counter()
        b()
        rb.append(time.perf_counter() - t)
    return ra, rb


def rates(nbytes, secs):
    r = [nbytes / max(s, 1e-12) / 1e9 for s in secs]
    return statistics.median(r), [min(r), max(r)]


class ZipNN:
    """ZipNN (byte grouping + Huffman/zstd), its defaults, the dtype it is told."""

    DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}

    def __init__(self):
        import zipnn

        self.mod = zipnn
        self.name = "zipnn"
        self.version = "zipnn " + version_of("zipnn") + " (PyPI)"

    def takes(self, dtype):
        return dtype in self.DTYPES

    def make(self, dtype, threads):
        return self.mod.ZipNN(
            input_format="byte", bytearray_dtype=self.DTYPES[dtype], threads=threads
        )

    def compress(self, coder, data):
        return coder.compress(data)

    def decompress(self, coder, blob):
        return coder.decompress(blob)


class PyBlosc2:
    """python-blosc2 (its own C-Blosc2 build, with the filter plugins), one filter chain and
    zstd at one level: shuffle at Blosc2's default level 5 (a cross-check of the Rust-bound
    C-Blosc2), and shuffle + bytedelta, the chain Blosc2 recommends for floats, at levels 5
    and 9 (bytedelta is a plugin filter, which the blosc2-sys crate builds without)."""

    def __init__(self, chain="shuffle", level=5):
        import blosc2

        self.mod = blosc2
        self.chain = chain
        self.level = level
        self.name = "pyblosc2-%s-zstd-%d" % (chain, level)
        self.version = "python-blosc2 %s (C-Blosc2 %s, PyPI)" % (
            blosc2.__version__,
            str(getattr(blosc2, "blosclib_version", "?")).split(" ")[0],
        )

    def takes(self, dtype):
        return True

    def make(self, dtype, threads):
        size = {"bf16": 2, "f16": 2, "f32": 4, "u8": 1}[dtype]
        return (size, threads)

    def compress(self, coder, data):
        size, threads = coder
        b = self.mod
        b.set_nthreads(threads)
        if self.chain == "shuffle":
            filters, meta = [b.Filter.SHUFFLE], [0]
        else:
            # bytedelta reads the element width from its meta byte.
            filters, meta = [b.Filter.SHUFFLE, b.Filter.BYTEDELTA], [0, size]
        return b.compress2(
            bytes(data),
            typesize=size,
            clevel=self.level,
            filters=filters,
            filters_meta=meta,
            codec=b.Codec.ZSTD,
        )

    def decompress(self, coder, blob):
        self.mod.set_nthreads(coder[1])
        return self.mod.decompress2(blob)


class OpenZL:
    """OpenZL (Meta's format-aware compressor), through its PyPI package, on a numeric input of
    the element width: one graph per instance. `GRAPHS` are the ones measured: the generic
    `Compress` graph, and the float graphs (the element split into exponent and sign+fraction
    streams by `Float32Deconstruct`/`BFloat16Deconstruct`/`Float16Deconstruct`) feeding
    `Compress` or the order-0 `Entropy` graph. `OpenZLBest` takes the smallest per tensor."""

    GRAPHS = ("generic", "float-compress", "float-entropy")
    NUMERIC = {"bf16": "uint16", "f16": "uint16", "f32": "uint32", "u8": "uint8"}

    def __init__(self, graph):
        import openzl.ext as zl

        self.zl = zl
        self.graph = graph
        self.name = "openzl-" + graph
        self.version = "openzl " + version_of("openzl") + " (PyPI), graph " + graph

    def takes(self, dtype):
        # The float graphs need a float dtype; the generic graph takes bytes too. The Entropy
        # graph refuses FP32's 24-bit sign+fraction stream (its conversion takes 1- and 2-byte
        # elements only: "Check `eltWidth != 2' failed").
        if self.graph == "float-entropy" and dtype == "f32":
            return False
        return dtype in self.NUMERIC and (self.graph == "generic" or dtype != "u8")

    def make(self, dtype, threads):
        zl = self.zl
        c = zl.Compressor()
        if self.graph == "generic":
            g = zl.graphs.Compress()(c)
        else:
            node = {"bf16": zl.nodes.BFloat16Deconstruct, "f16": zl.nodes.Float16Deconstruct,
                    "f32": zl.nodes.Float32Deconstruct}[dtype]()
            succ = zl.graphs.Compress if self.graph == "float-compress" else zl.graphs.Entropy
            g = node(c, sign_frac=succ(), exponent=succ())
        c.select_starting_graph(g)
        return (c, self.NUMERIC[dtype])

    def compress(self, coder, data):
        # A compression context serves one compression (a second call on it fails with
        # "Check `!(CCTX_isGraphSet(cctx))' failed" in openzl 0.3.0), so each call makes its
        # own, as a user compressing many tensors must; the compressor is made once.
        c, numeric = coder
        cctx = self.zl.CCtx()
        cctx.ref_compressor(c)
        cctx.set_parameter(self.zl.CParam.FormatVersion, self.zl.MAX_FORMAT_VERSION)
        values = np.frombuffer(data, dtype=numeric)
        return cctx.compress([self.zl.Input(self.zl.Type.Numeric, values)])

    def decompress(self, coder, blob):
        out = self.zl.DCtx().decompress(blob)
        return out[0].content.as_bytes()


class OpenZLBest:
    """OpenZL with the graph that gives the smallest output, chosen per tensor (what a user
    who tried every graph would store): one peer row beside each graph's own."""

    def __init__(self):
        self.graphs = [OpenZL(g) for g in OpenZL.GRAPHS]
        self.name = "openzl-best"
        self.version = "openzl " + version_of("openzl") + " (PyPI), best graph per tensor"

    def takes(self, dtype):
        return any(g.takes(dtype) for g in self.graphs)

    def make(self, dtype, threads):
        return [(g, g.make(dtype, threads)) for g in self.graphs if g.takes(dtype)]

    def choose(self, coders, data):
        """The (graph, coder) whose output is smallest for `data`."""
        best = None
        for g, c in coders:
            try:
                n = len(g.compress(c, data))
            except Exception:  # a graph may refuse an input (OpenZL raises on failure)
                continue
            if best is None or n < best[0]:
                best = (n, g, c)
        if best is None:
            raise SystemExit("no OpenZL graph takes a tensor of %d bytes" % len(data))
        return best[1], best[2]

    def compress(self, coder, data):
        g, c = coder
        return g.compress(c, data)

    def decompress(self, coder, blob):
        g, c = coder
        return g.decompress(c, blob)


def version_of(pkg):
    from importlib.metadata import version

    return version(pkg)


def measure(peer, group, settings, cores, cpu):
    tensors = [np.fromfile(t["path"], dtype=np.uint8) for t in group["tensors"]]
    raw = sum(t.nbytes for t in tensors)
    one = peer.make(group["dtype"], 1)
    # A peer that picks a configuration per tensor (OpenZLBest) gets one coder per tensor.
    # Copies of a tensor are made one at a time and dropped at once: a 64 MiB batch must not
    # hold several copies of itself beside the library's own buffers (the bench's memory bound).
    coders = [peer.choose(one, bytearray(t)) if hasattr(peer, "choose") else one for t in tensors]
    enc = []
    for t, one in zip(tensors, coders):
        blob = peer.compress(one, bytearray(t))
        back = peer.decompress(one, blob)
        same = np.array_equal(np.frombuffer(back, dtype=np.uint8), t)
        del back
        if not same:
            raise SystemExit(
                "%s does not round-trip on %s (%s)" % (peer.name, group["dataset"], group["dtype"])
            )
        enc.append(blob if isinstance(blob, bytes) else bytes(blob))
        del blob
    compressed = sum(len(e) for e in enc)

    def fresh():
        return [bytearray(t) for t in tensors]

    enc_runs = time_runs(
        settings, lambda copies: [peer.compress(k, c) for k, c in zip(coders, copies)], fresh
    )
    dsts = [np.empty_like(t) for t in tensors]

    def copy_all():
        for t, d in zip(tensors, dsts):
            np.copyto(d, t)

    dec_runs, memcpy_runs = time_interleaved(
        settings, lambda: [peer.decompress(k, e) for k, e in zip(coders, enc)], copy_all
    )
    if hasattr(peer, "choose"):
        # One thread either way (OpenZL's Python API has no thread setting).
        all_runs = time_runs(settings, lambda _: [peer.decompress(k, e) for k, e in zip(coders, enc)])
    else:
        allc = peer.make(group["dtype"], cores)
        all_runs = time_runs(settings, lambda _: [peer.decompress(allc, e) for e in enc])
    if group.get("size_class") == "Small" and len(tensors) > 1 and cores > 1:
        # Tensors under 1 MiB also several at once, each on one thread (the library's own
        # threads have next to nothing to split there), as planepack's codecs are measured;
        # the faster counts. Threads of Python run at once only where the package releases
        # the GIL, which is what a user of it gets. Each thread has its own one-thread coder
        # (ZipNN's coder aborts the process when two threads use one); a peer that chose a
        # coder per tensor (OpenZL's best graph) decodes with a context made per call.
        local = threading.local()

        def decode(i):
            if hasattr(peer, "choose"):
                return peer.decompress(coders[i], enc[i])
            if not hasattr(local, "coder"):
                local.coder = peer.make(group["dtype"], 1)
            return peer.decompress(local.coder, enc[i])

        with concurrent.futures.ThreadPoolExecutor(cores) as pool:
            at_once = time_runs(settings, lambda _: list(pool.map(decode, range(len(enc)))))
        if statistics.median(at_once) < statistics.median(all_runs):
            all_runs = at_once
    e, es = rates(raw, enc_runs)
    d, ds = rates(raw, dec_runs)
    a, _ = rates(raw, all_runs)
    m, _ = rates(raw, memcpy_runs)
    return {
        "dataset": group["dataset"],
        "category": group["category"],
        "dtype": group["dtype"],
        "size_class": group.get("size_class"),
        "codec": peer.name,
        "tensors": len(tensors),
        "raw_bytes": raw,
        "compressed_bytes": compressed,
        "ratio": raw / max(compressed, 1),
        "encode_gbps": e,
        "encode_gbps_spread": es,
        "decode_gbps": d,
        "decode_gbps_spread": ds,
        "decode_allcore_gbps": a,
        "memcpy_gbps": m,
        "device": group["device"],
        "implementation": peer.version,
        "simd_tier": peer.version + "'s own run-time dispatch",
        "cpu": cpu,
        "threads": cores,
        "gpu_decoder": False,
        "notes": {"measured_from": "Python, through the package's own API"},
    }


def run_part(manifest, part):
    """The records of the peers of `part` ("zipnn" or "others"), each tagged with its group's
    index."""
    settings = manifest["settings"]
    cores = os.cpu_count() or 1
    if part == "zipnn":
        makers = [ZipNN]
    else:
        makers = [
            PyBlosc2,
            lambda: PyBlosc2("shuffle-bytedelta", 5),
            lambda: PyBlosc2("shuffle-bytedelta", 9),
            OpenZLBest,
        ] + [lambda g=g: OpenZL(g) for g in OpenZL.GRAPHS]
    peers = []
    for make in makers:
        try:
            peers.append(make())
        except ImportError as e:
            raise SystemExit("peer package missing: %s" % e)
    skip = set(manifest.get("skip", []))
    peers = [p for p in peers if p.name not in skip]
    records = []
    for i, g in enumerate(manifest["groups"]):
        for p in peers:
            if not p.takes(g["dtype"]):
                continue
            print("  %s %s %s" % (g["dataset"], g["dtype"], p.name), file=sys.stderr, flush=True)
            r = measure(p, g, settings, cores, manifest["cpu"])
            r["group_index"] = i
            records.append(r)
    return records


def main():
    manifest = json.load(open(sys.argv[1]))
    if len(sys.argv) > 3:
        json.dump(run_part(manifest, sys.argv[3]), open(sys.argv[2], "w"))
        return
    parts = []
    for part in ("zipnn", "others"):
        out = sys.argv[2] + "." + part
        subprocess.run([sys.executable, __file__, sys.argv[1], out, part], check=True)
        parts.append(json.load(open(out)))
        os.remove(out)
    # Group by group, ZipNN first, as one process used to list them (sorted() is stable).
    records = sorted(parts[0] + parts[1], key=lambda r: r["group_index"])
    for r in records:
        del r["group_index"]
    json.dump(records, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
