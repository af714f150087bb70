"""Next-token choice for a batch: greedy rows take the arg-max, the others sample with their own generator.

Who uses it: `batching.Scheduler`, once per forward pass, with one row of last-position logits per request. Each
request keeps its own `torch.Generator` (seeded from its `seed`, or at random), so a seeded request draws the same
tokens whatever else shares its batch, and two requests never draw from one stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from nodus.runtimes.serving.engine import SamplingParams


def generator_for(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A request's own random stream; None for greedy requests (nothing to draw)."""
    if params.temperature == 0:
        return None
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


def filtered_probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Softmax of one row after temperature, top-k and top-p (nucleus) filtering. The most likely token always
    stays, so a tiny top_p never leaves nothing to draw."""
    scaled = logits.float() / params.temperature
    if 0 < params.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probabilities = torch.softmax(scaled, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probabilities, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(before >= params.top_p, 0.0)
        probabilities = torch.zeros_like(probabilities).scatter(-1, order, sorted_probs)
    return probabilities


def next_tokens(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator | None]
) -> list[int]:
    """One token per row of `logits` ([rows, vocab])."""
    greedy = logits.argmax(dim=-1).tolist()
    chosen: list[int] = []
    for row, (row_params, generator) in enumerate(zip(params, generators, strict=True)):
        if row_params.temperature == 0 or generator is None:
            chosen.append(int(greedy[row]))
            continue
        probabilities = filtered_probabilities(logits[row], row_params)
        chosen.append(int(torch.multinomial(probabilities, 1, generator=generator).item()))
    return chosen
