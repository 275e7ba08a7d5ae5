"""OpenZL on given pieces of a tensor file, each with the best of the graphs peers.py measures.

Usage: python openzl_pieces.py PIECES.json OUT.json

PIECES.json (written by `cargo xtask vs-openzl`): {"file": path, "pieces": [{"dtype": "BF16",
"offset": absolute byte offset, "len": bytes}, ...]}. OUT.json: per piece, in order, the
smallest output of the graphs that take its dtype and that graph's name, as peers.py's
`OpenZLBest` (the bench's `openzl-best`, imported so that both measure the same thing) chooses
it. The chosen output is decompressed and compared with its input.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import OpenZLBest  # noqa: E402

# peers.py's dtype names are the harness's; the file's are safetensors'.
DTYPES = {"BF16": "bf16", "F16": "f16", "F32": "f32"}


def main():
    spec = json.load(open(sys.argv[1]))
    best = OpenZLBest()
    coders = {}
    out = []
    with open(spec["file"], "rb") as f:
        for p in spec["pieces"]:
            dtype = DTYPES[p["dtype"]]
            f.seek(p["offset"])
            data = f.read(p["len"])
            if dtype not in coders:
                coders[dtype] = best.make(dtype, 1)
            graph, coder = best.choose(coders[dtype], data)
            blob = graph.compress(coder, data)
            if bytes(graph.decompress(coder, blob)) != data:
                raise SystemExit("openzl %s does not round-trip a piece" % graph.graph)
            out.append({"bytes": len(blob), "graph": graph.graph})
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
