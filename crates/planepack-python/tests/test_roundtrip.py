"""planepack from Python: bit-exact round trips of every supported dtype, shape and codec, and
clear errors (never a crash) on bad input."""

import numpy as np
import pytest

import planepack

DTYPES = ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "?", "c8"]
SHAPES = [(), (0,), (1,), (7,), (3, 0), (33, 5), (4, 3, 17), (70000,)]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    raw = rng.integers(0, 256, size=n * np.dtype(dtype).itemsize, dtype=np.uint8)
    a = raw.view(dtype).reshape(shape) if dtype != "?" else (raw[:n] & 1).astype("?").reshape(shape)
    return a


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_dtype_and_shape(dtype, shape):
    a = sample(dtype, shape)
    b = planepack.decompress(planepack.compress(a))
    same_bits(a, b)
    assert b.flags.writeable and b.flags.c_contiguous


def test_float_specials_bit_exact():
    bits = np.array(
        [0x7FC01234, 0xFFC00001, 0x80000000, 0x00000001, 0x7F800000, 0xFF800000, 0, 0x3F800000],
        dtype=np.uint32,
    )
    a = np.tile(bits, 1000).view(np.float32)
    for codec in planepack.codecs():
        same_bits(a, planepack.decompress(planepack.compress(a, codec=codec)))


@pytest.mark.parametrize("codec", planepack.codecs())
def test_every_codec(codec):
    rng = np.random.default_rng(3)
    relu = np.maximum(rng.standard_normal((512, 96)), 0).astype(np.float32)
    same_bits(relu, planepack.decompress(planepack.compress(relu, codec=codec)))
    half = rng.standard_normal((300, 40)).astype(np.float16)
    same_bits(half, planepack.decompress(planepack.compress(half, codec=codec)))


def test_auto_compresses_sparse_activations():
    rng = np.random.default_rng(4)
    relu = np.maximum(rng.standard_normal((1024, 256)), 0).astype(np.float32)
    assert len(planepack.compress(relu)) < relu.nbytes / 1.5
    linked = planepack.compress(relu, link=24.0, engine=64.0)
    same_bits(relu, planepack.decompress(linked))


def test_non_contiguous_input_is_refused():
    a = np.arange(100, dtype=np.float32).reshape(10, 10)
    with pytest.raises(ValueError, match="ascontiguousarray"):
        planepack.compress(a[:, ::2])
    with pytest.raises(ValueError, match="ascontiguousarray"):
        planepack.compress(np.asfortranarray(a))


@pytest.mark.parametrize("bad", [np.array(["ab", "c"]), np.array([1, "x"], dtype=object)])
def test_unsupported_dtypes_are_invalid_input(bad):
    with pytest.raises(planepack.InvalidInputError):
        planepack.compress(bad)


def test_bad_codec_names_and_links():
    a = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="unknown codec"):
        planepack.compress(a, codec="zst")
    with pytest.raises(ValueError, match="positive"):
        planepack.compress(a, link=-1.0)
    with pytest.raises(ValueError, match="auto"):
        planepack.compress(a, codec="zstd", link=24.0)


def test_every_damaged_byte_is_an_error_not_a_crash():
    a = np.random.default_rng(5).standard_normal(3000).astype(np.float32)
    blob = planepack.compress(a)
    rng = np.random.default_rng(6)
    for pos in list(range(0, len(blob), max(1, len(blob) // 400))):
        bad = bytearray(blob)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        with pytest.raises(planepack.CorruptError):
            planepack.decompress(bytes(bad))
    for cut in (0, 1, 47, len(blob) // 2, len(blob) - 1):
        with pytest.raises(planepack.CorruptError):
            planepack.decompress(blob[:cut])
    with pytest.raises(planepack.CorruptError):
        planepack.decompress(b"not a container at all")


def test_save_load_and_safe_open(tmp_path):
    rng = np.random.default_rng(7)
    tensors = {
        "w": rng.standard_normal((64, 32)).astype(np.float32),
        "h": rng.standard_normal(100).astype(np.float16),
        "mask": rng.integers(0, 2, 50).astype(bool),
        "ids": rng.integers(-5, 5, (3, 4)).astype(np.int64),
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.array(2.5, np.float64),
    }
    path = tmp_path / "t.ppk"
    planepack.save_file(tensors, path, metadata={"format": "np"})
    back = planepack.load_file(path)
    assert list(back) == list(tensors)
    for k in tensors:
        same_bits(tensors[k], back[k])
    with planepack.safe_open(path) as f:
        assert f.metadata() == {"format": "np"}
        same_bits(tensors["ids"], f.get_tensor("ids"))
        with pytest.raises(KeyError):
            f.get_tensor("missing")


def test_save_file_writes_the_safetensors_file_the_command_restores(tmp_path):
    """`planepack decompress` of a saved container gives a valid safetensors file: its header
    parses as JSON with the tensors at their offsets."""
    import json
    import subprocess
    import shutil

    from pathlib import Path

    target = Path(__file__).resolve().parents[3] / "target"
    built = [p for p in (target / "debug" / "planepack", target / "release" / "planepack") if p.exists()]
    exe = shutil.which("planepack") or (str(built[0]) if built else None)
    if exe is None:
        pytest.fail(f"the planepack command is not built under {target} (cargo build -p planepack-cli)")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = tmp_path / "t.ppk"
    planepack.save_file({"a": a}, path, codec="zstd")
    subprocess.run([exe, "decompress", str(path), "-q"], check=True)
    raw = (tmp_path / "t").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    assert header["a"] == {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}
    assert raw[8 + n :] == a.tobytes()


def test_damaged_container_file_is_corrupt(tmp_path):
    path = tmp_path / "t.ppk"
    planepack.save_file({"x": np.ones(1000, np.float32)}, path)
    b = bytearray(path.read_bytes())
    b[-3] ^= 4
    path.write_bytes(bytes(b))
    with pytest.raises(planepack.CorruptError):
        planepack.load_file(path)
    path.write_bytes(b"nope")
    with pytest.raises(planepack.CorruptError):
        planepack.safe_open(path)


def test_buffers_are_arrays_of_their_format():
    raw = bytes(range(256)) * 3
    same_bits(np.frombuffer(raw, np.uint8), planepack.decompress(planepack.compress(raw)))
    same_bits(np.frombuffer(raw, np.uint8), planepack.decompress(planepack.compress(bytearray(raw))))
    floats = np.arange(12, dtype=np.float32).reshape(3, 4)
    same_bits(floats, planepack.decompress(planepack.compress(memoryview(floats))))
    with pytest.raises(ValueError, match="C-contiguous"):
        planepack.compress(memoryview(floats[:, ::2]))


def test_input_is_read_in_place_not_kept():
    # The array is read where it lies; changing it after compress does not change the blob.
    a = np.random.default_rng(7).standard_normal(50000).astype(np.float32)
    blob = planepack.compress(a)
    expected = a.copy()
    a[:] = 0
    same_bits(expected, planepack.decompress(blob))


def test_subclasses_and_readonly_arrays():
    m = np.ma.masked_array(np.arange(10, dtype=np.float32))
    same_bits(np.arange(10, dtype=np.float32), planepack.decompress(planepack.compress(m)))
    ro = np.arange(100, dtype=np.int16)
    ro.flags.writeable = False
    same_bits(ro, planepack.decompress(planepack.compress(ro)))


def test_native_input_checks():
    from planepack import _planepack

    with pytest.raises(TypeError, match="bytes or numpy.ndarray"):
        _planepack.compress_file(b"", [memoryview(b"abc")])
    with pytest.raises(ValueError, match="C-contiguous"):
        _planepack.compress_file(b"", [np.zeros((4, 4))[:, ::2]])


def test_multi_tensor_container_is_not_one_array(tmp_path):
    planepack.save_file({"a": np.zeros(3, np.float32), "b": np.ones(2, np.int8)}, tmp_path / "x.ppk")
    with pytest.raises(planepack.InvalidInputError, match="load_file"):
        planepack.decompress((tmp_path / "x.ppk").read_bytes())


def test_bench_gives_the_command_records(tmp_path):
    relu = np.maximum(np.random.default_rng(8).standard_normal((256, 256)), 0).astype(np.float32)
    results = planepack.bench({"relu": relu}, codecs="bitplane,zstd-3", quick=True)
    assert [r["codec"] for r in results] == ["bitplane", "zstd-3"]
    for r in results:
        assert r["dataset"] == "relu" and r["dtype"] == "f32" and r["raw_bytes"] == relu.nbytes
        assert r["ratio"] == pytest.approx(r["raw_bytes"] / r["compressed_bytes"])
        assert r["ratio"] > 1.5 and r["decode_gbps"] > 0 and r["memcpy_gbps"] > 0
    assert "bitplane" in str(results) and results.machine
    np.save(tmp_path / "relu.npy", relu)
    from_file = planepack.bench(tmp_path / "relu.npy", codecs=["bitplane"], quick=True)
    assert from_file[0]["compressed_bytes"] == results[0]["compressed_bytes"]
    with pytest.raises(ValueError, match="codec"):
        planepack.bench({"relu": relu}, codecs="nonesuch", quick=True)
    with pytest.raises(OSError):
        planepack.bench(tmp_path / "missing.npy")
    with pytest.raises(planepack.InvalidInputError):
        planepack.bench({"s": np.array(["x"])}, quick=True)


def test_decompress_into_out():
    a = np.random.default_rng(9).standard_normal((300, 70)).astype(np.float32)
    blob = planepack.compress(a)
    out = np.empty_like(a)
    assert planepack.decompress(blob, out=out) is out
    same_bits(a, out)
    for bad in (np.full((70, 300), 7, np.float32), np.full_like(a, 7, dtype=np.int32), np.full((300, 70), 7, np.float32)[:, ::1].T):
        with pytest.raises(ValueError):
            planepack.decompress(blob, out=bad)
        assert (bad == 7).all()  # refused before anything was written
    ro = np.empty_like(a)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        planepack.decompress(blob, out=ro)
    with pytest.raises(planepack.CorruptError):
        planepack.decompress(blob[:-1], out=out)
    empty = np.empty((0, 3), np.float64)
    assert planepack.decompress(planepack.compress(empty), out=np.empty((0, 3))).shape == (0, 3)


def test_file_conversion_both_ways(tmp_path):
    a = np.maximum(np.random.default_rng(10).standard_normal((200, 300)), 0).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    original = (tmp_path / "a.npy").read_bytes()
    ppk = planepack.compress_file(tmp_path / "a.npy", codec="bitplane")
    assert ppk == str(tmp_path / "a.npy.ppk") and (tmp_path / "a.npy.ppk").stat().st_size < len(original)
    (tmp_path / "a.npy").unlink()
    assert planepack.decompress_file(ppk) == str(tmp_path / "a.npy")
    assert (tmp_path / "a.npy").read_bytes() == original
    same_bits(a, planepack.decompress((tmp_path / "a.npy.ppk").read_bytes()))
    # A safetensors file written by save_file's container comes back as a safetensors file.
    planepack.save_file({"x": a, "y": np.arange(5, dtype=np.int32)}, tmp_path / "m.ppk")
    st = planepack.decompress_file(tmp_path / "m.ppk", tmp_path / "m.safetensors")
    again = planepack.compress_file(st, tmp_path / "again.ppk")
    assert planepack.load_file(again)["y"].tolist() == list(range(5))
    with pytest.raises(OSError):
        planepack.compress_file(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match="name the output"):
        planepack.decompress_file(tmp_path / "a.npy")
    bad = bytearray((tmp_path / "m.ppk").read_bytes())
    bad[len(bad) // 2] ^= 0x10
    (tmp_path / "bad.ppk").write_bytes(bytes(bad))
    with pytest.raises(planepack.CorruptError):
        planepack.decompress_file(tmp_path / "bad.ppk")
    assert not (tmp_path / "bad").exists()  # nothing left behind on failure
    (tmp_path / "text.npy").write_bytes(b"not an npy file")
    with pytest.raises(planepack.InvalidInputError):
        planepack.compress_file(tmp_path / "text.npy")
    assert not (tmp_path / "text.npy.ppk").exists()
