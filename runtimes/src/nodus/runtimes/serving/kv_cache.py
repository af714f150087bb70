"""The running batch's key/value cache: left-padded rows that can be joined, dropped and trimmed between steps.

Who uses it: `batching.Scheduler`. Every row of the batch is left-padded to one length; `mask` (rows x length, 1
where a position holds a real token) is the attention mask the model gets. New requests are prefilled as their own
small batch and then joined to the running one (`join`: both padded on the left to the longer length, stacked);
finished or abandoned requests leave at the next step (`keep`), and columns that are padding in every row left
are cut (`trim`), so a long-lived batch does not keep attending over padding.

It works on transformers' `DynamicCache` of full-attention layers (`DynamicLayer`: keys and values of shape
[rows, heads, length, head_dim]), the cache the scheduler creates itself for every prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.functional import pad
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class PaddedCache:
    cache: DynamicCache
    mask: torch.Tensor

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def extend_mask(self) -> torch.Tensor:
        """The mask for the next decode step (one more real position in every row); kept as the new mask."""
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.rows, 1))], dim=1)
        return self.mask

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (in that order), then trim."""
        if len(rows) == self.rows:
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        self.mask = self.mask.index_select(0, index)
        for layer in full_layers(self.cache):
            if layer.keys is not None and layer.values is not None and layer.keys.numel():
                layer.keys = layer.keys.index_select(0, index.to(layer.keys.device))
                layer.values = layer.values.index_select(0, index.to(layer.values.device))
        self.trim()

    def trim(self) -> None:
        """Cut leading columns that are padding in every row."""
        if self.rows == 0:
            return
        leading = int((self.mask.cumsum(dim=1) == 0).sum(dim=1).min().item())
        if leading == 0:
            return
        self.mask = self.mask[:, leading:]
        for layer in full_layers(self.cache):
            if layer.keys is not None and layer.values is not None and layer.keys.numel():
                layer.keys = layer.keys[:, :, leading:, :]
                layer.values = layer.values[:, :, leading:, :]

    def join(self, other: PaddedCache) -> None:
        """Append `other`'s rows after this batch's rows."""
        length = max(self.mask.shape[1], other.mask.shape[1])
        self.mask = torch.cat([left_pad(self.mask, length), left_pad(other.mask, length)], dim=0)
        for mine, theirs in zip(full_layers(self.cache), full_layers(other.cache), strict=True):
            (my_keys, my_values), (their_keys, their_values) = filled(mine), filled(theirs)
            mine.keys = torch.cat([left_pad(my_keys, length), left_pad(their_keys, length)], dim=0)
            mine.values = torch.cat([left_pad(my_values, length), left_pad(their_values, length)], dim=0)


def full_layers(cache: DynamicCache) -> list[DynamicLayer]:
    """The cache's layers, each a full-attention `DynamicLayer` (the only kind these operations are right for)."""
    layers = list(cache.layers)
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise TypeError(f"the batch's KV cache has a {type(layer).__name__}; only DynamicLayer can be joined")
    return layers  # type: ignore[return-value]  # checked above: every layer is a DynamicLayer


def filled(layer: DynamicLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """A layer's keys and values; both caches being joined went through a forward pass, so both are there."""
    if layer.keys is None or layer.values is None:
        raise ValueError("joining a KV cache layer that holds nothing")
    return layer.keys, layer.values


def left_pad(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """Zeros on the left of the sequence axis: the last axis of a mask, the third of a key/value tensor."""
    if tensor.dim() == 2:
        missing = length - tensor.shape[1]
        return pad(tensor, (missing, 0)) if missing else tensor
    missing = length - tensor.shape[2]
    return pad(tensor, (0, 0, missing, 0)) if missing else tensor
