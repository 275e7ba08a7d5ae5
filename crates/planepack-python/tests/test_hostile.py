"""Hostile containers from Python: each must raise a planepack error class, never a
PanicException, and never abort the interpreter (one hostile blob must not kill a training
job). The files are the container crate's committed fixtures (crates/planepack-container/
tests/hostile/), which the command's tests read too."""

import pathlib

import pytest

import planepack

HOSTILE = pathlib.Path(__file__).resolve().parents[2] / "planepack-container" / "tests" / "hostile"
FILES = ["ibp-columns-2e60-v1.ppk", "ibp-columns-2e60-v2.ppk", "rans-claims-256mib.ppk"]


@pytest.mark.parametrize("name", FILES)
def test_hostile_container_bytes_are_corrupt(name):
    blob = (HOSTILE / name).read_bytes()
    with pytest.raises(planepack.CorruptError, match='tensor "t"'):
        planepack.decompress(blob)


@pytest.mark.parametrize("name", FILES)
def test_hostile_container_files_are_corrupt(name, tmp_path):
    with pytest.raises(planepack.CorruptError):
        planepack.decompress_file(HOSTILE / name, tmp_path / "out.safetensors")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(planepack.CorruptError):
        with planepack.safe_open(HOSTILE / name) as f:
            f.get_tensor("t")


def test_error_classes():
    assert issubclass(planepack.CorruptError, ValueError)
    assert issubclass(planepack.InvalidInputError, ValueError)
    assert issubclass(planepack.InternalError, RuntimeError)
