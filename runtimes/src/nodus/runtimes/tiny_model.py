"""A tiny Qwen3-architecture model and its tokenizer, made on this machine (no hub), for tests and the quickstart.

Who runs it: `make quickstart` and the training tests (`python -m nodus.runtimes.tiny_model`), before a
TrainingJob names `hf://nodus/tiny-qwen3@<revision>`. It writes a model folder that loads like a real one
(`config.json`, `model.safetensors`, `tokenizer.json` with a ChatML chat template, `generation_config.json`)
into the local Hugging Face cache (`models--nodus--tiny-qwen3/snapshots/<revision>`, `refs/main`), where the
TrainingJob controller imports pinned revisions from.

Three steps, all deterministic for a given recipe:
1. A byte-level BPE tokenizer trained by `tokenizers` on the warm-up tasks' chats as the chat template
   renders them. Letters and digits are kept one token each (the pre-tokenizer isolates them), so spelling
   tasks and copying numbers into a tool call stay learnable for a model this small.
2. A Qwen3 config (2 layers, hidden size 64 by default: about 100k parameters) with random weights.
3. A short supervised warm-up on the train split of an environment module (`tasks(split)`, and
   `gold_completion(answer)` when it has one, or `gold_turns(task)`: the model's turns of a gold episode,
   such as a tool call and then the answer), stopped when greedy decoding is right on about
   `--target` of a dev slice of the train split. A random model scores 0 and RL learns nothing from
   all-zero groups; a model right about half the time gives GRPO a signal. The held-out split is never
   used.

The revision is the sha1 of the recipe (this module's version, the settings and the warm-up module's bytes),
so the same recipe always has the same name; the weights' own sha256 are recorded when nodus imports them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

RECIPE_VERSION = "3"  # 3: tools as one signature line each, and Qwen's four tool tags as added tokens
REPO = "nodus/tiny-qwen3"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen's tokenizer has these four as added tokens that are not special (so decoding with
# skip_special_tokens keeps them); the tiny tokenizer adds them when the warm-up offers tools, so a call's
# tags are one token each rather than eleven letters and signs.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# ChatML as Qwen uses it, without the thinking block: system, user and assistant turns, then the assistant's
# reply. With `tools` it offers them as Qwen's template does but shorter, since the tiny model has 512
# positions and one token per letter (Qwen's JSON schemas took 350 of them for one tool): a system turn with
# one line per tool, `name(argument: type, ...): description`, and how to call one; a tool message is a user
# turn holding <tool_response>...</tool_response> (consecutive ones share the turn), and an assistant
# message's `tool_calls` are <tool_call> blocks.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(start=0) %}"
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] + '\\n\\n' }}{%- set ns.start = 1 %}"
    "{%- endif %}"
    "{{- 'Tools:' }}"
    "{%- for tool in tools %}"
    "{%- set fn = tool.function if tool.function is defined else tool %}"
    "{%- set schema = fn.parameters if fn.parameters is defined and fn.parameters is mapping else {} %}"
    "{%- set properties = schema.properties if schema.properties is defined else {} %}"
    "{{- '\\n' + fn.name + '(' }}"
    "{%- for key, value in properties.items() %}"
    "{{- (', ' if not loop.first else '') + key + ': ' + ((value.type | string) if value.type is defined else 'any') }}"
    "{%- endfor %}"
    "{{- ')' }}{%- if fn.description %}{{- ': ' + fn.description }}{%- endif %}"
    "{%- endfor %}"
    '{{- \'\\nCall one with <tool_call>{"name": ..., "arguments": {...}}</tool_call>\' }}'
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages[ns.start:] %}"
    "{%- if message['role'] == 'tool' %}"
    "{%- if loop.first or loop.previtem['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set call = call.function if call.function is defined else call %}"
    "{%- set arguments = call.arguments if call.arguments is string else (call.arguments | tojson) %}"
    "{{- '<tool_call>{\"name\": \"' + call.name + '\", \"arguments\": ' + arguments + '}</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the model; its digest is the revision."""

    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 256
    vocab_size: int = 400
    max_positions: int = 512
    seed: int = 0
    warmup_max_steps: int = 3000
    warmup_batch: int = 32
    warmup_learning_rate: float = 3e-3
    target: float = 0.35
    """Stop the warm-up once greedy accuracy on the dev slice reaches this."""


def revision(recipe: Recipe, warmup_module: Path | None) -> str:
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(f"tiny-qwen3/{RECIPE_VERSION}\n".encode())
    digest.update(json.dumps(asdict(recipe), sort_keys=True).encode())
    if warmup_module is not None:
        digest.update(warmup_module.read_bytes())
    return digest.hexdigest()


def hub_cache() -> Path:
    """Where the Hugging Face cache is (the same rule as huggingface_hub and nodus's model import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_nodus_warmup_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"tiny_model: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Example:
    """One warm-up target: the chat so far (with the task's tools, if any) and the model's gold reply."""

    messages: list[dict[str, str]]
    tools: list[dict[str, Any]] | None
    completion: str


def warmup_pairs(module: ModuleType) -> list[Example]:
    """The gold replies of the module's train split: `gold_turns(task)` (every model turn of a gold episode,
    replayed through the module's `step` to get the environment's messages between them) where the module has
    it, else `gold_completion(answer)` (default `<answer>answer</answer>`) as a one-turn reply."""
    gold = getattr(module, "gold_completion", lambda answer: f"<answer>{answer}</answer>")
    episode = getattr(module, "gold_turns", None)
    examples = []
    for task in module.tasks("train"):
        if not isinstance(task, dict):
            task = {"prompt": task[0], "answer": task[1]}
        prompt = task["prompt"]
        messages = [{"role": "user", "content": str(prompt)}] if isinstance(prompt, str) else list(prompt)
        tools = (task.get("metadata") or {}).get("tools") or None
        turns = [str(turn) for turn in episode(task)] if callable(episode) else [str(gold(task["answer"]))]
        for number, turn in enumerate(turns, start=1):
            examples.append(Example(list(messages), tools, turn))
            if number == len(turns):
                break
            # The environment's answer to this turn, as the trainer shows it (a tool result or the user's turn).
            result = module.step(turns[:number], task["answer"])
            message, role = result[0], (result[2] if len(result) == 3 else "user")
            messages += [{"role": "assistant", "content": turn}, {"role": role, "content": str(message)}]
    return examples


def train_tokenizer(texts: list[str], recipe: Recipe, *, tools: bool = False) -> Any:
    """A byte-level BPE tokenizer learnt from `texts`, with Qwen's tool tags as added tokens when `tools`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("[A-Za-z0-9]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=recipe.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if tools:
        tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TOOL_TOKENS])
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        model_max_length=recipe.max_positions,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def chat_prompt(tokenizer: Any, example: Example) -> str:
    text = tokenizer.apply_chat_template(
        example.messages, tools=example.tools, tokenize=False, add_generation_prompt=True
    )
    return str(text)


def corpus_text(example: Example) -> str:
    """The text the tokenizer learns its merges from: the chat and reply, with the tools' schemas."""
    chat = "\n".join(message["content"] for message in example.messages)
    tools = "\n".join(json.dumps(tool) for tool in example.tools or [])
    return f"{tools}\n{chat}\n{example.completion}" if tools else f"{chat}\n{example.completion}"


def build_model(tokenizer: Any, recipe: Recipe) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(recipe.seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    # transformers 5.20 (what vLLM 0.33 pins, so what a lock with the cuda extra resolves) leaves the model's
    # __init__ untyped; 5.24 types it.
    model: Any = Qwen3ForCausalLM(config)  # type: ignore[no-untyped-call, unused-ignore]
    return model


def greedy_accuracy(model: Any, tokenizer: Any, pairs: list[Example], max_new_tokens: int = 24) -> float:
    """Share of `pairs` whose greedy completion equals the gold completion (batched, left-padded)."""
    import torch

    model.eval()
    tokenizer.padding_side = "left"
    right = 0
    with torch.no_grad():
        for start in range(0, len(pairs), 64):
            batch = pairs[start : start + 64]
            encoded = tokenizer([chat_prompt(tokenizer, e) for e in batch], return_tensors="pt", padding=True)
            out = model.generate(
                **encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
            texts = tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            right += sum(text.strip() == e.completion for text, e in zip(texts, batch, strict=True))
    model.train()
    return right / max(1, len(pairs))


def warm_up(model: Any, tokenizer: Any, pairs: list[Example], recipe: Recipe, progress: Any) -> float:
    """Supervised steps on the completions only until greedy accuracy on a dev slice reaches the target."""
    import torch

    rng = random.Random(recipe.seed)
    shuffled = pairs[:]
    rng.shuffle(shuffled)
    dev, train = shuffled[:64], shuffled[64:]
    end = tokenizer.eos_token
    rows = []
    reply_tokens = 24  # room for the longest gold reply: a tool call is longer than a short answer
    for example in train:
        head = tokenizer(chat_prompt(tokenizer, example))["input_ids"]
        tail = tokenizer(example.completion + end)["input_ids"]
        rows.append((head + tail, [-100] * len(head) + tail))
        reply_tokens = max(reply_tokens, len(tail) + 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.warmup_learning_rate, weight_decay=0.0)
    pad = tokenizer.pad_token_id
    accuracy = 0.0
    task = progress.add_task("warm-up", total=recipe.warmup_max_steps)
    model.train()
    for step in range(recipe.warmup_max_steps):
        batch = [rows[rng.randrange(len(rows))] for _ in range(recipe.warmup_batch)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch])
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        progress.update(task, advance=1, description=f"warm-up loss {loss.item():.3f} dev {accuracy:.0%}")
        if step % 20 == 19:
            accuracy = greedy_accuracy(model, tokenizer, dev, reply_tokens)
            if accuracy >= recipe.target:
                break
    progress.update(task, completed=recipe.warmup_max_steps, description=f"warm-up done: dev {accuracy:.0%}")
    return accuracy


def build(out: Path, recipe: Recipe, warmup_module: Path | None) -> dict[str, Any]:
    """Write the model folder to `out`; returns what was made (accuracy, parameters, seconds)."""
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    started = time.monotonic()
    torch.manual_seed(recipe.seed)
    random.seed(recipe.seed)
    module = load_module(warmup_module) if warmup_module is not None else None
    pairs = warmup_pairs(module) if module is not None else []
    corpus = [corpus_text(example) for example in pairs] or ["hello world"]
    offers_tools = any(example.tools for example in pairs)
    tokenizer = train_tokenizer(corpus + SPECIAL_TOKENS, recipe, tools=offers_tools)
    model = build_model(tokenizer, recipe)
    accuracy = None
    if pairs:
        columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, transient=not sys.stderr.isatty()) as progress:
            accuracy = warm_up(model, tokenizer, pairs, recipe, progress)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    made = {
        "repo": REPO,
        "recipe": asdict(recipe),
        "warmupModule": warmup_module.name if warmup_module else None,
        "warmupDevAccuracy": accuracy,
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(time.monotonic() - started, 1),
    }
    (partial / "nodus-recipe.json").write_text(json.dumps(made, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return made


def install(recipe: Recipe, warmup_module: Path | None, cache: Path, *, force: bool = False) -> tuple[str, Path, bool]:
    """Build into the HF cache as REPO at its recipe revision unless it is there; (revision, folder, built)."""
    rev = revision(recipe, warmup_module)
    repo_dir = cache / f"models--{REPO.replace('/', '--')}"
    folder = repo_dir / "snapshots" / rev
    built = False
    if force or not (folder / "config.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        build(folder, recipe, warmup_module)
        built = True
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(rev)
    return rev, folder, built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodus.runtimes.tiny_model", description=__doc__.split("\n")[0])
    parser.add_argument("--warmup", type=Path, help="an environment module whose train split warms the model up")
    parser.add_argument("--target", type=float, default=Recipe.target, help="warm-up stops at this dev accuracy")
    parser.add_argument("--cache", type=Path, default=None, help="the Hugging Face cache (default: HF_HUB_CACHE...)")
    parser.add_argument("--out", type=Path, default=None, help="write the folder here instead of the cache")
    parser.add_argument("--force", action="store_true", help="build again even when the revision is cached")
    parser.add_argument("--print-revision", action="store_true", help="print the revision of the recipe and exit")
    args = parser.parse_args(argv)
    warmup = args.warmup.resolve() if args.warmup else None
    if warmup is not None and not warmup.is_file():
        print(f"tiny_model: --warmup {args.warmup}: no such file", file=sys.stderr)
        return 2
    recipe = Recipe(target=args.target)
    if args.print_revision:
        print(revision(recipe, warmup))
        return 0
    if args.out is not None:
        made = build(args.out, recipe, warmup)
        print(json.dumps(made))
        return 0
    rev, folder, built = install(recipe, warmup, args.cache or hub_cache(), force=args.force)
    state = "built" if built else "already built"
    print(f"tiny model {state}: hf://{REPO}@{rev} ({folder})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
