"""Held-out measurements that need a model's scores, tokenized the way TRL's trainers tokenize their data.

Who calls it: the runtimes' `measure` hooks, before and after training, on the held-out part of the data:
`dpo`, `orpo` and `kto` (`preference_accuracy`: how often the policy gives the chosen reply a higher mean
log-probability per token than the rejected one), `reward_model` (`pairwise_accuracy`: how often the reward
model scores chosen above rejected) and `distill` (`teacher_replies` once, then `kl_to_teacher`: the student's
KL divergence from the teacher per token on the teacher's own greedy replies).

Tokenization follows TRL 1.16 (`trl.data_utils._tokenize`): a chat (a list of messages) through the chat
template, plain text through the tokenizer with an end-of-sequence token after the reply, and the reply starts
where the prompt alone and the prompt with the reply stop agreeing. Everything runs without gradients, in batches,
on the model's own device, and leaves the model in the mode it found it in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scored:
    """A reply's summed log-probability and its token count."""

    logprob: float
    tokens: int

    @property
    def mean(self) -> float:
        return self.logprob / self.tokens if self.tokens else float("-inf")


def tokenize(tokenizer: Any, text: Any, *, generation_prompt: bool = False) -> list[int]:
    if isinstance(text, list):
        encoded = tokenizer.apply_chat_template(
            text, tokenize=True, return_dict=True, add_generation_prompt=generation_prompt
        )
        return list(encoded["input_ids"])
    return list(tokenizer(text=text)["input_ids"])


def split_pair(tokenizer: Any, prompt: Any, reply: Any) -> tuple[list[int], list[int]]:
    """(prompt ids, reply ids) of one prompt and reply."""
    if isinstance(prompt, list):
        prompt_ids = tokenize(tokenizer, prompt, generation_prompt=True)
        full = tokenize(tokenizer, prompt + reply)
    else:
        end = tokenizer.eos_token or ""
        prompt_ids = tokenize(tokenizer, prompt)
        full = tokenize(tokenizer, prompt + (reply if reply.endswith(end) else reply + end))
    common = 0
    for a, b in zip(prompt_ids, full, strict=False):
        if a != b:
            break
        common += 1
    return full[:common], full[common:]


@contextlib.contextmanager
def evaluating(model: Any) -> Iterator[None]:
    """No gradients and eval mode (no dropout) for the duration, then the mode the model was in."""
    import torch

    was_training = bool(model.training)
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + max(1, size)]


def _padded(sequences: Sequence[list[int]], pad: int, device: Any) -> tuple[Any, Any]:
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in sequences], device=device)
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences], device=device)
    return ids, mask


def reply_logprobs(
    model: Any, tokenizer: Any, pairs: Sequence[tuple[Any, Any]], *, batch_size: int = 8, max_length: int = 1024
) -> list[Scored]:
    """Each reply's log-probability under `model` given its prompt (truncated to `max_length` tokens, as the
    trainers keep the start)."""
    import torch

    split = [split_pair(tokenizer, prompt, reply) for prompt, reply in pairs]
    sequences = [(p + r)[:max_length] for p, r in split]
    starts = [min(len(p), max_length) for p, _ in split]
    device = next(model.parameters()).device
    scores: list[Scored] = []
    with evaluating(model):
        for batch_index, batch in enumerate(_batches(sequences, batch_size)):
            ids, mask = _padded(batch, tokenizer.pad_token_id, device)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
            targets = ids[:, 1:]
            picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
            for row, sequence in enumerate(batch):
                start = starts[batch_index * max(1, batch_size) + row]
                # Position t predicts token t+1: the reply's tokens are predicted from start-1 to the end.
                values = picked[row, max(0, start - 1) : len(sequence) - 1]
                scores.append(Scored(float(values.sum()), int(values.numel())))
    return scores


def preference_accuracy(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], *, batch_size: int = 8, max_length: int = 1024
) -> dict[str, float]:
    """Share of pairs whose chosen reply has the higher mean log-probability per token, and the mean margin.
    Per token, so that a longer reply is not worse for being longer (the trainers' losses differ in this; the
    measurement is the same for all three). A row's `rejected_prompt`, when it has one, is the rejected reply's
    own prompt (KTO's pairs across prompts)."""
    chosen = reply_logprobs(
        model, tokenizer, [(r["prompt"], r["chosen"]) for r in rows], batch_size=batch_size, max_length=max_length
    )
    rejected = reply_logprobs(
        model,
        tokenizer,
        [(r.get("rejected_prompt", r["prompt"]), r["rejected"]) for r in rows],
        batch_size=batch_size,
        max_length=max_length,
    )
    pairs = [(c.mean, r.mean) for c, r in zip(chosen, rejected, strict=True) if c.tokens and r.tokens]
    if not pairs:
        return {"accuracy": float("nan"), "margin": float("nan"), "pairs": 0}
    return {
        "accuracy": sum(c > r for c, r in pairs) / len(pairs),
        "margin": sum(c - r for c, r in pairs) / len(pairs),
        "pairs": len(pairs),
    }


def reward_scores(
    model: Any, tokenizer: Any, pairs: Sequence[tuple[Any, Any]], *, batch_size: int = 8, max_length: int = 1024
) -> list[float]:
    """A reward model's score of each prompt and reply (rendered as TRL's RewardTrainer renders them)."""
    sequences = []
    for prompt, reply in pairs:
        p, r = split_pair(tokenizer, prompt, reply)
        sequences.append((p + r)[:max_length])
    device = next(model.parameters()).device
    scores: list[float] = []
    with evaluating(model):
        for batch in _batches(sequences, batch_size):
            ids, mask = _padded(batch, tokenizer.pad_token_id, device)
            logits = model(input_ids=ids, attention_mask=mask).logits
            scores += [float(value) for value in logits[:, 0].float()]
    return scores


def pairwise_accuracy(
    model: Any, tokenizer: Any, rows: Sequence[dict[str, Any]], *, batch_size: int = 8, max_length: int = 1024
) -> dict[str, float]:
    """Share of pairs the reward model scores chosen above rejected (0.5 is chance), and the mean margin."""
    chosen = reward_scores(
        model, tokenizer, [(r["prompt"], r["chosen"]) for r in rows], batch_size=batch_size, max_length=max_length
    )
    rejected = reward_scores(
        model, tokenizer, [(r["prompt"], r["rejected"]) for r in rows], batch_size=batch_size, max_length=max_length
    )
    margins = [c - r for c, r in zip(chosen, rejected, strict=True)]
    return {
        "accuracy": sum(m > 0 for m in margins) / len(margins),
        "margin": sum(margins) / len(margins),
        "pairs": len(margins),
    }


def teacher_replies(
    teacher: Any, tokenizer: Any, prompts: Sequence[Any], *, max_new_tokens: int, batch_size: int = 8
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reply ids) of the teacher's greedy reply to each prompt: the fixed sequences the student's
    divergence is measured on, before and after training."""
    import torch

    encoded = [tokenize(tokenizer, prompt, generation_prompt=True) for prompt in prompts]
    device = next(teacher.parameters()).device
    stops = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    out: list[tuple[list[int], list[int]]] = []
    with evaluating(teacher):
        for batch in _batches(encoded, batch_size):
            width = max(len(s) for s in batch)
            pad = tokenizer.pad_token_id
            ids = torch.tensor([[pad] * (width - len(s)) + s for s in batch], device=device)
            mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in batch], device=device)
            generated = teacher.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
                eos_token_id=tokenizer.eos_token_id,
            )
            for prompt_ids, row in zip(batch, generated[:, width:].tolist(), strict=True):
                reply: list[int] = []
                for token in row:
                    reply.append(token)
                    if token in stops:
                        break
                out.append((list(prompt_ids), reply))
    return out


def kl_to_teacher(
    student: Any,
    teacher: Any,
    tokenizer: Any,
    sequences: Sequence[tuple[list[int], list[int]]],
    *,
    temperature: float = 1.0,
    batch_size: int = 8,
) -> dict[str, float]:
    """KL(teacher || student) per reply token, both distributions at `temperature`, on fixed sequences."""
    import torch

    device = next(student.parameters()).device
    total, tokens = 0.0, 0
    with evaluating(student), evaluating(teacher):
        for batch in _batches([s for s in sequences if s[1]], batch_size):
            joined = [p + r for p, r in batch]
            ids, mask = _padded(joined, tokenizer.pad_token_id, device)
            s_logp = torch.log_softmax(student(input_ids=ids, attention_mask=mask).logits.float() / temperature, -1)
            t_logp = torch.log_softmax(teacher(input_ids=ids, attention_mask=mask).logits.float() / temperature, -1)
            for row, (prompt, reply) in enumerate(batch):
                start, end = len(prompt) - 1, len(prompt) + len(reply) - 1
                t = t_logp[row, start:end]
                s = s_logp[row, start:end]
                total += float((t.exp() * (t - s)).sum())
                tokens += end - start
    return {"kl": total / tokens if tokens else float("nan"), "tokens": tokens}
