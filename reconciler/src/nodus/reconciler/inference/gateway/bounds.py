"""Upper bounds of a request's input tokens, known before the request runs: what its hold is taken for.

Who uses it: the gateway's operations (`operations/`), on the chat body each one forwards (Responses and Messages
are turned into chat requests first) and on completion prompts and embedding inputs.

Why these are true bounds for byte-level BPE tokenizers (GPT-2's scheme, used by Qwen, Llama 3, gpt-oss and the
project's tiny model): every token of such a tokenizer stands for at least one byte of UTF-8 text, so a text
never has more tokens than bytes. The only tokens that stand for no text of the request are the special tokens a
chat template adds (role markers, the generation prompt, a BOS token), counted by `MESSAGE_OVERHEAD` per message
and `PROMPT_OVERHEAD` per prompt, and the fixed prose some templates wrap tool lists in (`TOOLS_OVERHEAD`). A
message is counted as its JSON text (`json_bytes`: keys, quotes and escapes included, with room for the HTML
escapes of Jinja's `tojson`), which holds every string of it at least once in full. The model server's context
window bounds any prompt as well (a longer one is refused, and not charged), so the gateway takes the smaller of
the two. A tokenizer that is not byte-level (SentencePiece with byte fallback off) can need more tokens than bytes
only for text it cannot encode, which it maps to one unknown token per character: still at most one per byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

MESSAGE_OVERHEAD = 16
"""Template tokens around one message: role markers and separators (ChatML uses 5)."""
PROMPT_OVERHEAD = 64
"""Template tokens of a whole prompt: BOS, the generation prompt, a default system line."""
TOOLS_OVERHEAD = 512
"""The fixed prose templates put around a tool list (Qwen3's is under 100 tokens)."""
EMBEDDING_INPUT_OVERHEAD = 8
"""BOS/EOS/CLS/SEP tokens an embedding model adds to each input."""
_HTML_ESCAPED = "<>&'"


def json_bytes(value: Any) -> int:
    """Bytes of `value`'s JSON text with non-ASCII escaped (6 bytes for each character, at least its UTF-8
    bytes), plus 5 for each character Jinja's `tojson` would escape as \\u00XX."""
    text = json.dumps(value, ensure_ascii=True)
    return len(text) + 5 * sum(text.count(character) for character in _HTML_ESCAPED)


def text_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def chat_input_bound(messages: Iterable[Any], tools: Any = None) -> int:
    """The most input tokens a chat prompt of `messages` (and `tools`) can have after any chat template."""
    total = PROMPT_OVERHEAD + sum(MESSAGE_OVERHEAD + json_bytes(message) for message in messages)
    if tools:
        total += TOOLS_OVERHEAD + json_bytes(tools)
    return total


def prompt_input_bound(prompt: str) -> int:
    return PROMPT_OVERHEAD + text_bytes(prompt)


def embedding_input_bound(inputs: list[Any]) -> int:
    """Texts count their bytes; inputs given as token ids count their ids."""
    total = 0
    for item in inputs:
        if isinstance(item, str):
            total += text_bytes(item)
        elif isinstance(item, list):
            total += len(item)
        else:
            total += 1
        total += EMBEDDING_INPUT_OVERHEAD
    return total
