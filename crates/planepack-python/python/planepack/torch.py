"""Compressed activation offload for PyTorch: the tensors autograd saves for backward, kept
compressed in host memory and restored bit-exactly.

    import planepack.torch

    with planepack.torch.compressed_saved_tensors() as saved:
        loss = loss_fn(model(x), y)
    loss.backward()                    # every saved tensor decoded when backward needs it
    print(saved.stats)                 # tensors, raw and stored bytes, coding time

It is :func:`torch.autograd.graph.save_on_cpu` with a codec in the middle: each saved tensor of
``min_bytes`` or more is copied to host memory if it is on a device, compressed there, and
the original reference dropped; backward decodes it
(checksums checked) and moves it back to the tensor's device.

``codec`` is any name of ``planepack.codecs()``, or a function of the tensor that returns one
(the codec chosen per tensor: say ``lambda t: "rans" if t.dtype == torch.bfloat16 else
"bitplane"``). The default, ``"bitplane"``, is the fastest encoder; ``"rans"`` stores less and encodes slower; ``"auto"`` tries every codec on every tensor
(zstd included), which suits files written once, not a training step
(bench-results/python/torch-offload.md has the measured trade on a real model).

What it costs, honestly: planepack has no GPU encoder reachable from PyTorch yet, so a CUDA
tensor crosses the link raw (a device-to-host copy of all its bytes) and is then encoded on
the CPU; the saving is host memory, not link traffic. On the way back the compressed bytes are
decoded on the CPU and the raw bytes copied to the device. For CPU training it is a trade of
coding time for memory.

What is kept as is: tensors under ``min_bytes`` (the container's fixed costs would outweigh
the saving), model parameters and views of them (they stay in memory anyway; compressing them
would duplicate them), and sparse or otherwise non-dense tensors. A tensor saved by several
operations (a ReLU output feeding the next layer) is compressed once and shared.
"""

import time
import weakref
from dataclasses import dataclass, field

import torch

from . import compress, decompress


@dataclass
class Stats:
    """What a :class:`compressed_saved_tensors` context stored."""

    #: Saved tensors compressed (counted once however many operations saved them).
    compressed: int = 0
    #: Saved tensors kept as they are (small, parameters, non-dense).
    kept: int = 0
    #: Bytes of the compressed tensors before coding.
    raw_bytes: int = 0
    #: Bytes of their containers (what host memory holds instead).
    stored_bytes: int = 0
    #: Bytes of the tensors kept as they are.
    kept_bytes: int = 0
    #: Seconds spent copying to the host and compressing (pack), and decompressing (unpack).
    pack_seconds: float = 0.0
    unpack_seconds: float = 0.0
    #: raw_bytes per dtype name.
    raw_by_dtype: dict = field(default_factory=dict)
    stored_by_dtype: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """raw_bytes / stored_bytes of the compressed tensors."""
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 1.0


def _is_parameter(t: torch.Tensor) -> bool:
    """A leaf that requires grad (a parameter), or a view of one (a transposed weight)."""
    base = t if t._base is None else t._base
    return isinstance(base, torch.nn.Parameter) or (base.is_leaf and base.requires_grad)


class compressed_saved_tensors(torch.autograd.graph.saved_tensors_hooks):
    """Keep the tensors autograd saves for backward compressed in host memory (a context
    manager; see the module's documentation). ``stats`` counts what it stored."""

    def __init__(self, codec="bitplane", min_bytes: int = 1 << 16, link: float = None, engine: float = None):
        self.stats = Stats()
        # id(tensor) -> (weak reference to it, its version counter, packed record): a tensor
        # saved twice is packed once. The weak reference proves the id still names the same
        # live tensor (ids are reused after a tensor dies), the version that it was not
        # modified in place since.
        shared = {}
        stats = self.stats

        def pack(t: torch.Tensor):
            nbytes = t.numel() * t.element_size()
            if nbytes < min_bytes or t.layout != torch.strided or _is_parameter(t):
                stats.kept += 1
                stats.kept_bytes += nbytes
                return ("kept", t)
            hit = shared.get(id(t))
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                return hit[2]
            start = time.perf_counter()
            host = t.detach()
            if host.device.type != "cpu":
                host = host.to("cpu")  # the raw bytes cross the link (no GPU encoder yet)
            if not host.is_contiguous():
                host = host.contiguous()
            name = codec(t) if callable(codec) else codec
            blob = compress(host, codec=name, link=link, engine=engine)
            stats.pack_seconds += time.perf_counter() - start
            stats.compressed += 1
            stats.raw_bytes += nbytes
            stats.stored_bytes += len(blob)
            name = str(t.dtype).removeprefix("torch.")
            stats.raw_by_dtype[name] = stats.raw_by_dtype.get(name, 0) + nbytes
            stats.stored_by_dtype[name] = stats.stored_by_dtype.get(name, 0) + len(blob)
            record = ("packed", t.device, tuple(t.shape), blob)
            shared[id(t)] = (weakref.ref(t), t._version, record)
            return record

        def unpack(record):
            if record[0] == "kept":
                return record[1]
            _, device, shape, blob = record
            start = time.perf_counter()
            t = decompress(blob, framework="pt").reshape(shape)
            if device.type != "cpu":
                t = t.to(device)
            stats.unpack_seconds += time.perf_counter() - start
            return t

        super().__init__(pack, unpack)
        self._shared = shared

    def __enter__(self):
        super().__enter__()
        return self

    def __exit__(self, *exc):
        # Packing ends with the context; the records live on in the autograd graph only.
        self._shared.clear()
        return super().__exit__(*exc)
