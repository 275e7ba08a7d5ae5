from dataclasses import dataclass
from typing import Callable

import torch

@dataclass
class Stats:
    compressed: int
    kept: int
    raw_bytes: int
    stored_bytes: int
    kept_bytes: int
    pack_seconds: float
    unpack_seconds: float
    raw_by_dtype: dict[str, int]
    stored_by_dtype: dict[str, int]
    @property
    def ratio(self) -> float: ...

class compressed_saved_tensors(torch.autograd.graph.saved_tensors_hooks):
    stats: Stats
    def __init__(self, codec: str | Callable[[torch.Tensor], str] = "bitplane", min_bytes: int = 65536, link: float | None = None, engine: float | None = None) -> None: ...
    def __enter__(self) -> "compressed_saved_tensors": ...
