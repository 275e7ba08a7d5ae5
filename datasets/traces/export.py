"""Export one training step of a model as a planepack trace (JSON, `planepack-trace/1`).

Spec of the format: docs/format-trace.md. Usage:

    python export.py                 # every model, fp32 and bf16, into this folder
    python export.py resnet50 gpt2   # some of them

How a trace is made:

* The model is built from its configuration (torchvision / transformers), randomly
  initialised: no weights are downloaded, none are needed for shapes, FLOPs and lifetimes.
* One forward and backward pass runs on the CPU at a small batch (`RUN_BATCH`) under a
  `TorchDispatchMode`, which logs every aten op (forward and backward) with its FLOPs (PyTorch's
  own `torch.utils.flop_counter` formulas) and the bytes it reads and writes. View ops (outputs
  aliasing an input) and bare allocations (`empty`, filled by the next op) cost nothing and are
  not logged.
* A storage's producer is the op that created it as a fresh output; an in-place op (or an
  `out=` variant) writing into it later does not change it, so an in-place ReLU is folded into
  the op before it. (A storage freed and reallocated at the same address gets the producer of
  its new tensor, also when the new tensor is a bare allocation filled in place.)
* Every forward op lists its inputs: the producers of the storages it reads (parameters,
  buffers and the model input have none and are left out). With them the simulator can charge
  a recomputation the whole chain of ops back to tensors that are still resident, as Checkmate
  and DTR do, instead of only the producer.
* Every forward op records the bytes of the fresh tensors it returns (`output_bytes`; an
  in-place op returns none): what a recomputation of it holds while the chain runs, even
  where the output is not saved for backward.
* `saved_tensors_hooks` report every tensor autograd saves for the backward pass. A saved
  tensor's identity is its storage: the producer is the forward op that wrote that storage, the
  saving op the op being dispatched when autograd saved it (the name our activation datasets
  use, e.g. `convolution`, `nativebatchnorm`), the last forward use the last forward op that
  read it, and the first and last backward uses the backward ops running when autograd unpacked
  it. Parameters and the model input are not activations and are left out.
* Bytes and FLOPs are scaled linearly from `RUN_BATCH` to the traced batch (`BATCH`); every
  quantity here is linear in the batch for these models. The bf16 trace is the fp32 run with
  floating-point tensors at half the bytes (integer tensors, such as max-pool indices and
  dropout masks, keep their size).
* Op durations are not in the trace: the Rust side estimates them from FLOPs and bytes for a
  platform preset (crates/planepack-trace/src/platform.rs), so one trace serves every GPU.
"""
import json
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

OUT = Path(__file__).resolve().parent

# model -> (traced batch, run batch, builder)
def _vision(name):
    import torchvision

    def build():
        return getattr(torchvision.models, name)(weights=None), torch.randn(RUN_BATCH[name], 3, 224, 224), None
    return build


def _vit():
    import torchvision

    return torchvision.models.vit_b_16(weights=None), torch.randn(RUN_BATCH["vit_b_16"], 3, 224, 224), None


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(attn_implementation="eager")  # GPT2-124M: 12 layers, 768 wide, 1024 context
    model = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, cfg.vocab_size, (RUN_BATCH["gpt2"], cfg.n_positions))
    return model, ids, ids


BATCH = {"resnet50": 64, "vgg16": 64, "mobilenet_v2": 64, "vit_b_16": 64, "gpt2": 8}
RUN_BATCH = {"resnet50": 2, "vgg16": 1, "mobilenet_v2": 2, "vit_b_16": 2, "gpt2": 1}
BUILD = {
    "resnet50": _vision("resnet50"),
    "vgg16": _vision("vgg16"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "vit_b_16": _vit,
    "gpt2": _gpt2,
}
DESC = {
    "resnet50": "torchvision resnet50, 224x224 images",
    "vgg16": "torchvision vgg16, 224x224 images",
    "mobilenet_v2": "torchvision mobilenet_v2, 224x224 images",
    "vit_b_16": "torchvision vit_b_16, 224x224 images",
    "gpt2": "transformers GPT2LMHeadModel(GPT2Config()), 1024 tokens, eager attention",
}


ALLOCATIONS = {"empty", "emptystrided", "emptylike", "newempty", "newemptystrided"}


def _norm(name):
    # aten.native_batch_norm.default -> nativebatchnorm (the naming of datasets/activations)
    parts = str(name).split(".")
    base = parts[1] if len(parts) > 1 and parts[0] == "aten" else parts[0]
    return base.replace("_", "").lower()


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


def _key(t):
    s = t.untyped_storage()
    return (s.data_ptr(), s.nbytes())


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []  # dicts
        self.phase = "forward"
        self.producer = {}  # storage key -> op index
        self.exclude = set()  # parameters, buffers, the model input: never an op's input edge
        self.last_read = {}  # storage key -> last forward op index reading it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        schema = func._schema
        if schema.returns and schema.returns[0].alias_info is not None and not schema.returns[0].alias_info.is_write:
            return out  # a view: no work
        if _norm(func) in ALLOCATIONS:
            # An allocation the next op fills: not work, and not the producer. Its storage is
            # new, whatever an earlier tensor at the same address was: forget that producer, so
            # an in-place op filling it (dropout's `bernoulli_`) becomes the producer.
            for t in _tensors(out):
                self.producer.pop(_key(t), None)
            return out
        ins = list(_tensors((args, kwargs)))
        outs = list(_tensors(out))
        flops = 0
        f = flop_registry.get(func._overloadpacket)
        if f is not None:
            try:
                flops = int(f(*args, **kwargs, out_val=out))
            except TypeError:
                flops = int(f(*args, **kwargs))
        nbytes = sum(t.numel() * t.element_size() for t in ins + outs)
        i = len(self.ops)
        inputs = []
        if self.phase == "forward":
            inputs = sorted({self.producer[_key(t)] for t in ins
                             if _key(t) in self.producer and _key(t) not in self.exclude})
        in_place = any(r.alias_info is not None and r.alias_info.is_write for r in schema.returns)
        fresh = [] if in_place else outs
        self.ops.append({"name": _norm(func), "phase": self.phase, "flops": flops, "bytes": nbytes,
                         "float_bytes": sum(t.numel() * t.element_size() for t in ins + outs if t.is_floating_point()),
                         "out_bytes": sum(t.numel() * t.element_size() for t in fresh),
                         "out_float_bytes": sum(t.numel() * t.element_size() for t in fresh if t.is_floating_point()),
                         "inputs": inputs})
        if self.phase == "forward":
            for t in ins:
                self.last_read[_key(t)] = i
            for t in outs:
                if in_place:
                    self.producer.setdefault(_key(t), i)
                else:
                    self.producer[_key(t)] = i
        return out


def trace(model_name):
    torch.manual_seed(0)
    model, x, labels = BUILD[model_name]()
    model.train()
    params = {_key(p) for p in model.parameters()}
    params |= {_key(b) for b in model.buffers()}
    rec = Recorder()
    saved = {}  # storage key -> record

    def pack(t):
        k = _key(t)
        if k in params or k == _key(x):
            return (k, t)
        r = saved.get(k)
        if r is None:
            r = saved[k] = {"key": k, "bytes": k[1], "float": t.is_floating_point(), "dtype": str(t.dtype),
                            "saved_by": rec.ops[-1]["name"] if rec.ops else "input", "first_bw": None, "last_bw": None}
        return (k, t)

    def unpack(packed):
        k, t = packed
        r = saved.get(k)
        if r is not None:
            i = len(rec.ops)  # the backward op about to run
            r["first_bw"] = i if r["first_bw"] is None else min(r["first_bw"], i)
            r["last_bw"] = i if r["last_bw"] is None else max(r["last_bw"], i)
        return t

    rec.exclude = params | {_key(x)}
    with rec, torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        if labels is not None:
            loss = model(x, labels=labels).loss
        else:
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long))
        rec.phase = "backward"
        loss.backward()
    return model, rec, saved


def write(model_name, rec, saved, dtype):
    scale = BATCH[model_name] / RUN_BATCH[model_name]
    n_ops = len(rec.ops)
    ops = []
    for i, o in enumerate(rec.ops):
        b = o["bytes"] - (o["float_bytes"] // 2 if dtype == "bf16" else 0)
        op = {"id": i, "name": o["name"], "phase": o["phase"], "flops": int(o["flops"] * scale), "bytes": int(b * scale)}
        if o["inputs"]:
            op["inputs"] = o["inputs"]
        out = o["out_bytes"] - (o["out_float_bytes"] // 2 if dtype == "bf16" else 0)
        if o["phase"] == "forward" and out > 0:
            op["output_bytes"] = int(out * scale)
        ops.append(op)
    acts = []
    for r in saved.values():
        k = r["key"]
        prod = rec.producer.get(k)
        if prod is None or r["first_bw"] is None:
            continue  # not produced by a forward op (inputs, constants) or never used in backward
        first = min(r["first_bw"], n_ops - 1)
        last = min(max(r["last_bw"], first), n_ops - 1)
        size = r["bytes"] // 2 if (dtype == "bf16" and r["float"]) else r["bytes"]
        acts.append({
            "id": len(acts),
            "bytes": int(size * scale),
            "dtype": (dtype if r["float"] else r["dtype"].removeprefix("torch.")),
            "producer": prod,
            "last_forward_use": max(prod, rec.last_read.get(k, prod)),
            "first_backward_use": first,
            "last_backward_use": last,
            "saved_by": r["saved_by"],
        })
    acts.sort(key=lambda a: (a["producer"], a["first_backward_use"]))
    for i, a in enumerate(acts):
        a["id"] = i
    doc = {
        "format": "planepack-trace/1",
        "model": model_name,
        "description": DESC[model_name],
        "dtype": dtype,
        "batch": BATCH[model_name],
        "recorded_batch": RUN_BATCH[model_name],
        "torch": torch.__version__,
        "ops": ops,
        "activations": acts,
    }
    path = OUT / f"{model_name}-{dtype}.json"
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    total = sum(a["bytes"] for a in acts)
    print(f"{path.name}: {len(ops)} ops, {len(acts)} activations, {total / 2**30:.2f} GiB saved", flush=True)


def main(names):
    torch.set_num_threads(2)
    for name in names or list(BUILD):
        _, rec, saved = trace(name)
        for dtype in ("fp32", "bf16"):
            write(name, rec, saved, dtype)


if __name__ == "__main__":
    main(sys.argv[1:])
