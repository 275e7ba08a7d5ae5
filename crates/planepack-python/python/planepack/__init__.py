"""planepack from Python: lossless compression of numpy arrays with the planepack codecs.

    >>> import numpy as np, planepack
    >>> x = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)
    >>> blob = planepack.compress(x)                     # bytes: a .ppk container of one array
    >>> y = planepack.decompress(blob)                   # dtype and shape restored, bit-exact
    >>> bool((x.view(np.uint32) == y.view(np.uint32)).all())
    True

``compress`` writes exactly what ``planepack compress x.npy`` writes (a container of the array
as a ``.npy`` file, every tensor part checksummed), so the command line reads it too.
``codec`` is ``"auto"`` (per part, the smallest payload; with ``link=GBPS`` the fastest
transfer by PlaneZip's equation (2), ``engine=GBPS`` being the decoder's speed) or any name of
``codecs()``. The coding runs with the GIL released, a large array's parts (64 MiB each) on
all cores.

Dicts of arrays go to and from container files with the safetensors Python API's shape:
``save_file(tensors, "x.ppk")``, ``load_file("x.ppk")``, and ``safe_open("x.ppk")`` to decode one
tensor at a time. The file is a container of a safetensors file (tensors in the dict's order,
header padded to 8 bytes), so ``planepack decompress x.ppk`` gives a file any safetensors reader
opens.

Not yet here (issue 18): zero-copy input (the array is copied once into the coder),
bfloat16 and torch tensors, bench, and the PyTorch saved-tensor hook.
"""

import io
import json

import numpy as np

from ._planepack import (
    CorruptError,
    InvalidInputError,
    Reader,
    codecs,
    compress_npy,
    compress_safetensors_to,
    decompress_npy,
)

__all__ = [
    "compress",
    "decompress",
    "save_file",
    "load_file",
    "safe_open",
    "codecs",
    "CorruptError",
    "InvalidInputError",
]

# numpy dtype <-> safetensors dtype name (little-endian; safetensors has no big-endian types).
_TO_SAFETENSORS = {
    "<f2": "F16", "<f4": "F32", "<f8": "F64",
    "|i1": "I8", "<i2": "I16", "<i4": "I32", "<i8": "I64",
    "|u1": "U8", "<u2": "U16", "<u4": "U32", "<u8": "U64",
    "|b1": "BOOL", "<c8": "C64",
}
_FROM_SAFETENSORS = {v: np.dtype(k) for k, v in _TO_SAFETENSORS.items()}


def _npy_header(array: np.ndarray) -> bytes:
    """The .npy header numpy writes for ``array`` (format 1.0, or 2.0 for huge headers)."""
    out = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(array)
    try:
        np.lib.format.write_array_header_1_0(out, header)
    except ValueError:
        np.lib.format.write_array_header_2_0(out, header)
    return out.getvalue()


def compress(array, codec: str = "auto", link: float = None, engine: float = None) -> bytes:
    """Compress a numpy array (any shape, 0-d included) into container bytes.

    The array must be C-contiguous: a strided view or a Fortran-ordered array is refused
    (pass ``np.ascontiguousarray(a)``, which makes the copy explicit). Dtypes planepack does
    not support (objects, strings, structured) raise InvalidInputError.
    """
    a = np.asarray(array)
    if not a.flags.c_contiguous:
        raise ValueError(
            "planepack.compress takes C-contiguous arrays; pass np.ascontiguousarray(a)"
        )
    if a.dtype.hasobject:
        raise InvalidInputError(f"arrays of Python objects cannot be compressed ({a.dtype})")
    return compress_npy(_npy_header(a), a.tobytes(), codec, link, engine)


def decompress(data) -> np.ndarray:
    """The array ``compress`` was given, bit for bit, as a new writable array.

    Raises CorruptError when ``data`` is damaged or not a container (every byte is checked).
    """
    header_len, buf = decompress_npy(bytes(data) if not isinstance(data, bytes) else data)
    f = io.BytesIO(bytes(buf[:header_len]))
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    if fortran:
        raise CorruptError("Fortran-ordered arrays are not written by compress")
    return np.frombuffer(buf, dtype=dtype, offset=header_len).reshape(shape)


def save_file(tensors, filename, metadata=None, codec="auto", link=None, engine=None):
    """Write a dict of name -> numpy array as a container file (the safetensors API's shape).

    Tensors are stored in the dict's order, each with the codec ``codec`` chooses per part.
    ``metadata`` (str -> str) goes to the header's ``__metadata__``.
    """
    header = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise InvalidInputError("metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    chunks, offset = [], 0
    for name, value in tensors.items():
        a = np.asarray(value)
        if not a.flags.c_contiguous:
            raise ValueError(f"tensor {name!r} is not C-contiguous; pass np.ascontiguousarray")
        st = _TO_SAFETENSORS.get(a.dtype.str)
        if st is None:
            raise InvalidInputError(f"tensor {name!r}: dtype {a.dtype} has no safetensors type")
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        chunks.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    preamble = len(text).to_bytes(8, "little") + text
    compress_safetensors_to(preamble, b"".join(chunks), str(filename), codec, link, engine)


class safe_open:
    """A container file read one tensor at a time (the safetensors ``safe_open`` shape).

        with planepack.safe_open("x.ppk") as f:
            for name in f.keys():
                t = f.get_tensor(name)   # decoded now, every part's checksums checked
    """

    def __init__(self, filename, framework="np"):
        if framework not in ("np", "numpy"):
            raise ValueError("only framework='np' is supported so far")
        self._reader = Reader(str(filename))
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
        np_dtype = _FROM_SAFETENSORS.get(dtype)
        if np_dtype is None:
            raise InvalidInputError(f"tensor {name!r}: {dtype} has no numpy dtype")
        return np.frombuffer(self._reader.read(name), dtype=np_dtype).reshape(shape)


def load_file(filename):
    """Every tensor of a container file as a dict of name -> numpy array."""
    with safe_open(filename) as f:
        return {name: f.get_tensor(name) for name in f.keys()}
