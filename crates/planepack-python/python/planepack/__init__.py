"""planepack from Python: lossless compression of numpy arrays and torch tensors.

    >>> import numpy as np, planepack
    >>> x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    >>> blob = planepack.compress(x)                     # bytes: a .ppk container of one array
    >>> y = planepack.decompress(blob)                   # dtype and shape restored, bit-exact
    >>> bool((x.view(np.uint32) == y.view(np.uint32)).all())
    True

``compress`` of a numpy array writes exactly what ``planepack compress x.npy`` writes (a
container of the array as a ``.npy`` file, every tensor part checksummed), so the command line
reads it too. A torch tensor (CPU, any dtype safetensors names, bfloat16 included) is stored
the way ``safetensors.torch`` stores one: a container of a safetensors file with one tensor
and ``{"format": "pt"}`` metadata; ``decompress`` gives it back as a torch tensor.

``codec`` is ``"auto"`` (per part, the smallest payload; with ``link=GBPS`` the fastest
transfer by PlaneZip's equation (2), ``engine=GBPS`` being the decoder's speed) or any name of
``codecs()``. Input is read in place (no copy of the array is made before the coder's own
64 MiB part buffers); the coding runs with the GIL released, a large array's parts on all
cores; ``decompress`` decodes straight into the memory of the array it returns.

Dicts of arrays or tensors go to and from container files with the safetensors Python API's
shape: ``save_file(tensors, "x.ppk")``, ``load_file("x.ppk")``, and ``safe_open("x.ppk")`` to
decode one tensor at a time. ``bench(...)`` measures every codec on your arrays or files and
returns the records ``planepack bench --json`` prints. ``planepack.torch`` keeps the tensors
autograd saves for backward compressed in host memory.
"""

import io
import json
import os
import tempfile

import numpy as np

from . import _planepack as _native
from ._planepack import CorruptError, InternalError, InvalidInputError, codecs

__all__ = [
    "compress",
    "decompress",
    "save_file",
    "load_file",
    "safe_open",
    "compress_file",
    "decompress_file",
    "bench",
    "codecs",
    "CorruptError",
    "InvalidInputError",
    "InternalError",
]

# numpy dtype <-> safetensors dtype name (little-endian; safetensors has no big-endian types).
_TO_SAFETENSORS = {
    "<f2": "F16", "<f4": "F32", "<f8": "F64",
    "|i1": "I8", "<i2": "I16", "<i4": "I32", "<i8": "I64",
    "|u1": "U8", "<u2": "U16", "<u4": "U32", "<u8": "U64",
    "|b1": "BOOL", "<c8": "C64",
}
_FROM_SAFETENSORS = {v: np.dtype(k) for k, v in _TO_SAFETENSORS.items()}

# The one tensor of a container compress() wrote from a torch tensor.
_TENSOR_KEY = "tensor"


def _torch():
    import torch

    return torch


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "untyped_storage")


def _torch_dtypes():
    """safetensors dtype name <-> (torch dtype, numpy dtype of the same width viewed in place)."""
    torch = _torch()
    table = {
        "F64": (torch.float64, "<f8"), "F32": (torch.float32, "<f4"),
        "F16": (torch.float16, "<f2"), "BF16": (torch.bfloat16, "<i2"),
        "I64": (torch.int64, "<i8"), "I32": (torch.int32, "<i4"),
        "I16": (torch.int16, "<i2"), "I8": (torch.int8, "|i1"), "U8": (torch.uint8, "|u1"),
        "BOOL": (torch.bool, "|b1"),
    }
    for name, attr, np_view in (("F8_E4M3", "float8_e4m3fn", "|u1"), ("F8_E5M2", "float8_e5m2", "|u1"),
                                ("U16", "uint16", "<u2"), ("U32", "uint32", "<u4"), ("U64", "uint64", "<u8")):
        if hasattr(torch, attr):
            table[name] = (getattr(torch, attr), np_view)
    return table


def _tensor_as_array(t, what="the tensor"):
    """A CPU torch tensor's memory as a numpy array (no copy) and its safetensors dtype name."""
    torch = _torch()
    if t.device.type != "cpu":
        raise ValueError(
            f"{what} is on {t.device}; planepack codes host memory: pass t.cpu() "
            "(a device-to-host copy of the raw bytes, then the CPU encoder)"
        )
    if t.layout != torch.strided:
        raise InvalidInputError(f"{what} has layout {t.layout}; only dense tensors are coded")
    if not t.is_contiguous():
        raise ValueError(f"{what} is not contiguous; pass t.contiguous()")
    t = t.detach()
    for name, (dtype, np_view) in _torch_dtypes().items():
        if t.dtype == dtype:
            if name in _FROM_SAFETENSORS:
                return t.numpy(), name  # shares the tensor's memory
            # No numpy dtype of its own (bfloat16, float8): its bytes, viewed as an integer of
            # the same width, without a copy.
            same_width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
            return t.view(same_width).numpy().view(np.dtype(np_view)), name
    raise InvalidInputError(f"{what} has dtype {t.dtype}, which planepack does not store")


def _safetensors_header(entries, metadata=None):
    """The safetensors header (length prefix included, padded to 8 bytes) for
    ``entries`` = [(name, dtype name, shape, nbytes)] stored in that order."""
    header = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise InvalidInputError("metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def _npy_header(array: np.ndarray) -> bytes:
    """The .npy header numpy writes for ``array`` (format 1.0, or 2.0 for huge headers)."""
    out = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(array)
    try:
        np.lib.format.write_array_header_1_0(out, header)
    except ValueError:
        np.lib.format.write_array_header_2_0(out, header)
    return out.getvalue()


def _as_numpy(x, what="the array") -> np.ndarray:
    """``x`` as a C-contiguous numpy array without copying: an ndarray, or a buffer (bytes,
    bytearray, memoryview: its format and shape kept), or anything numpy converts."""
    if isinstance(x, (bytes, bytearray)):
        a = np.frombuffer(x, dtype=np.uint8)
    else:
        a = np.asarray(x)
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous; pass np.ascontiguousarray(a)")
    if a.dtype.hasobject:
        raise InvalidInputError(f"{what}: arrays of Python objects cannot be compressed ({a.dtype})")
    return a


def compress(array, codec: str = "auto", link: float = None, engine: float = None) -> bytes:
    """Compress a numpy array (any shape, 0-d included), a buffer (bytes, memoryview) or a CPU
    torch tensor (bfloat16 included) into container bytes.

    The input must be C-contiguous: a strided view or a Fortran-ordered array is refused
    (pass ``np.ascontiguousarray(a)`` or ``t.contiguous()``, which makes the copy explicit).
    It is read in place, with the GIL released: do not write to it from another thread
    meanwhile. Dtypes planepack does not support (objects, strings) raise InvalidInputError.
    """
    return _native.compress_file(*_file_of(array), codec, link, engine)


def _file_of(x):
    """(file header, [array]): the tensor file ``compress`` stores for ``x``, its data given as
    an array the native side reads in place. A torch tensor is a one-tensor safetensors file
    with ``{"format": "pt"}`` metadata, anything else a ``.npy`` file."""
    if _is_torch(x):
        a, dtype = _tensor_as_array(x)
        return _safetensors_header([(_TENSOR_KEY, dtype, tuple(x.shape), a.nbytes)], {"format": "pt"}), [a]
    a = _as_numpy(x)
    return _npy_header(a), [a]


def _tensor_from(buf, dtype_name, shape, framework, what):
    """The tensor whose bytes are all of ``buf`` (a uint8 array), viewed in place as
    ``framework``."""
    if framework in ("np", "numpy"):
        np_dtype = _FROM_SAFETENSORS.get(dtype_name)
        if np_dtype is None:
            raise InvalidInputError(f"{what}: {dtype_name} has no numpy dtype; use framework='pt'")
        return np.frombuffer(buf, dtype=np_dtype).reshape(shape)
    if framework in ("pt", "torch"):
        torch = _torch()
        entry = _torch_dtypes().get(dtype_name)
        if entry is None:
            raise InvalidInputError(f"{what}: {dtype_name} has no torch dtype")
        if len(buf) == 0:
            return torch.empty(shape, dtype=entry[0])
        return torch.frombuffer(buf, dtype=torch.uint8).view(entry[0]).reshape(shape)
    raise ValueError(f"framework is 'np' or 'pt', not {framework!r}")


def decompress(data, framework: str = None, out=None):
    """What ``compress`` was given, bit for bit: a new writable numpy array, or a torch tensor
    for a tensor ``compress`` was given as one. ``framework="np"`` or ``"pt"`` asks for the
    other kind (bfloat16 has no numpy dtype).

    ``out``: an array (or CPU tensor) of the same dtype and shape to decode into instead of
    new memory (a buffer reused across calls skips the allocation and its page faults); it is
    returned. Raises CorruptError when ``data`` is damaged or not a container (every byte is
    checked).
    """
    if framework not in (None, "np", "numpy", "pt", "torch"):
        raise ValueError(f"framework is 'np' or 'pt', not {framework!r}")
    packed = data if isinstance(data, bytes) else bytes(data)
    if out is not None:
        if _is_torch(out):
            target = _tensor_as_array(out, "out")[0]
            got = out.dtype
        else:
            target, got = out, getattr(out, "dtype", None)

        def check(npy, preamble):
            # Called after the header is parsed and checked, before anything is written.
            dtype_name, dtype, shape, _ = _describe(npy, preamble)
            want = _torch_dtypes().get(dtype_name, (None,))[0] if _is_torch(out) else dtype
            if got != want or tuple(out.shape) != shape:
                raise ValueError(f"out is {got} of shape {tuple(out.shape)}; the tensor is "
                                 f"{dtype_name or dtype} of shape {shape}")

        _native.decompress_one(packed, target, check)
        return out
    npy, preamble, buf = _native.decompress_one(packed)
    dtype_name, dtype, shape, pt = _describe(npy, preamble)
    if npy:
        a = buf.view(dtype).reshape(shape)
        return _torch().from_numpy(a) if framework in ("pt", "torch") else a
    return _tensor_from(buf, dtype_name, shape, framework or ("pt" if pt else "np"), "the tensor")


def _describe(npy, preamble):
    """(safetensors dtype name, numpy dtype, shape, written from torch) of the one tensor of a
    container (the native side has checked there is one), from its stored file header."""
    if npy:
        f = io.BytesIO(preamble)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if fortran:
            raise CorruptError("Fortran-ordered arrays are not written by compress")
        return _TO_SAFETENSORS.get(dtype.str), dtype, tuple(shape), False
    header = json.loads(preamble[8:])
    (info,) = (v for k, v in header.items() if k != "__metadata__")
    pt = (header.get("__metadata__") or {}).get("format") == "pt"
    return info["dtype"], _FROM_SAFETENSORS.get(info["dtype"]), tuple(info["shape"]), pt


def save_file(tensors, filename, metadata=None, codec="auto", link=None, engine=None):
    """Write a dict of name -> numpy array or CPU torch tensor as a container file (the
    safetensors API's shape; torch and numpy values may be mixed).

    Tensors are stored in the dict's order, read in place, each part coded with the codec
    ``codec`` chooses. ``metadata`` (str -> str) goes to the header's ``__metadata__``.
    """
    entries, arrays = [], []
    for name, value in tensors.items():
        if _is_torch(value):
            a, st = _tensor_as_array(value, f"tensor {name!r}")
            shape = tuple(value.shape)
        else:
            a = _as_numpy(value, f"tensor {name!r}")
            st, shape = _TO_SAFETENSORS.get(a.dtype.str), a.shape
            if st is None:
                raise InvalidInputError(f"tensor {name!r}: dtype {a.dtype} has no safetensors type")
        entries.append((name, st, shape, a.nbytes))
        arrays.append(a)
    _native.compress_file_to(_safetensors_header(entries, metadata), arrays, os.fspath(filename), codec, link, engine)


class safe_open:
    """A container file read one tensor at a time (the safetensors ``safe_open`` shape).

        with planepack.safe_open("x.ppk", framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)   # decoded now, every part's checksums checked
    """

    def __init__(self, filename, framework="np"):
        if framework not in ("np", "numpy", "pt", "torch"):
            raise ValueError(f"framework is 'np' or 'pt', not {framework!r}")
        self._framework = framework
        self._reader = _native.Reader(os.fspath(filename))
        self._info = {name: (dtype, tuple(shape)) for name, dtype, shape in self._reader.tensors()}
        preamble = bytes(self._reader.preamble())
        self._metadata = None
        if preamble[:6] != b"\x93NUMPY":
            self._metadata = json.loads(preamble[8:]).get("__metadata__")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._info)

    def metadata(self):
        return self._metadata

    def get_tensor(self, name):
        dtype, shape = self._info[name]
        return _tensor_from(self._reader.read(name), dtype, shape, self._framework, f"tensor {name!r}")


def load_file(filename, framework="np"):
    """Every tensor of a container file as a dict of name -> numpy array (or torch tensor
    with ``framework="pt"``)."""
    with safe_open(filename, framework) as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def compress_file(src, dst=None, codec="auto", link=None, engine=None):
    """Compress a ``.npy`` or ``.safetensors`` file into a container file (``dst`` defaults to
    ``src + ".ppk"``), as ``planepack compress`` does; returns ``dst``. Read and written one
    part at a time; ``dst`` appears only when complete."""
    dst = os.fspath(dst) if dst is not None else os.fspath(src) + ".ppk"
    _native.compress_path(os.fspath(src), dst, codec, link, engine)
    return dst


def decompress_file(src, dst=None):
    """Restore the original ``.npy``/``.safetensors`` file of a container file, byte for byte
    (``dst`` defaults to ``src`` without ``.ppk``), as ``planepack decompress`` does; returns
    ``dst``."""
    src = os.fspath(src)
    if dst is None:
        if not src.endswith(".ppk"):
            raise ValueError("name the output: src does not end in .ppk")
        dst = src[: -len(".ppk")]
    dst = os.fspath(dst)
    _native.decompress_path(src, dst)
    return dst


class BenchResults(list):
    """The records of a bench (dicts with the fields of ``planepack bench --json``'s records),
    with the machine they were measured on; ``str()`` renders the command's table."""

    def __init__(self, results):
        super().__init__(results["records"])
        self.machine = results["machine"]
        self.quick = results["quick"]
        self.schema_version = results["schema_version"]

    def __str__(self):
        head = f"cpu: {self.machine}; single-core medians; decode and memcpy timed separately, interleaved in the same run"
        rows = [("file", "dtype", "codec", "raw MiB", "ratio", "enc GB/s", "dec GB/s", "dec/memcpy")]
        for r in self:
            rows.append((r["dataset"], r["dtype"], r["codec"], f"{r['raw_bytes'] / 2**20:.2f}", f"{r['ratio']:.3f}",
                         f"{r['encode_gbps']:.2f}", f"{r['decode_gbps']:.2f}", f"{r['decode_gbps'] / r['memcpy_gbps']:.3f}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                 for row in rows]
        return "\n".join([head] + lines)


def bench(arrays_or_files, codecs=None, quick=False) -> BenchResults:
    """Measure planepack's codecs and the CPU peers on your data: the harness of
    ``planepack bench --json`` (every decode checked against the input; single-core medians;
    memcpy timed in the same run).

    ``arrays_or_files``: a path, a list of paths (``.npy``/``.safetensors`` files or folders),
    an array or tensor, or a dict of name -> array/tensor (each benched as one file of that
    name). ``codecs``: exact names (``"bitplane,zstd-19"`` or a list); None for all.
    """
    if isinstance(codecs, str):
        codecs = [c for c in codecs.split(",") if c]
    codecs = list(codecs or [])
    if isinstance(arrays_or_files, (str, os.PathLike)):
        return BenchResults(json.loads(_native.bench_files([os.fspath(arrays_or_files)], codecs, quick)))
    if isinstance(arrays_or_files, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in arrays_or_files):
        return BenchResults(json.loads(_native.bench_files([os.fspath(p) for p in arrays_or_files], codecs, quick)))
    items = arrays_or_files if isinstance(arrays_or_files, dict) else {"array": arrays_or_files}
    with tempfile.TemporaryDirectory(prefix="planepack-bench-") as tmp:
        paths = []
        for name, value in items.items():
            if _is_torch(value):
                a, st = _tensor_as_array(value, f"tensor {name!r}")
                path = os.path.join(tmp, f"{name}.safetensors")
                with open(path, "wb") as f:
                    f.write(_safetensors_header([(name, st, tuple(value.shape), a.nbytes)]))
                    f.write(a.tobytes())
            else:
                path = os.path.join(tmp, f"{name}.npy")
                np.save(path, _as_numpy(value, f"tensor {name!r}"))
            paths.append(path)
        return BenchResults(json.loads(_native.bench_files(paths, codecs, quick)))
