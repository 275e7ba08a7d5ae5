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
``codecs()``. The coding runs with the GIL released.

Not yet here (issue 18): zero-copy input (the array is copied once into the coder),
bfloat16 and torch tensors, save_file/load_file/safe_open for dicts of arrays, bench, and the
PyTorch saved-tensor hook.
"""

import io

import numpy as np

from ._planepack import CorruptError, InvalidInputError, codecs, compress_npy, decompress_npy

__all__ = ["compress", "decompress", "codecs", "CorruptError", "InvalidInputError"]


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
    header_len, buf = decompress_npy(bytes(data))
    f = io.BytesIO(bytes(buf[:header_len]))
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    if fortran:
        raise CorruptError("Fortran-ordered arrays are not written by compress")
    return np.frombuffer(buf, dtype=dtype, offset=header_len).reshape(shape)
