"""Tool calls in a model's reply: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, and tool schemas.

Who uses it: `adapters.verifiers_classic` (a ToolEnv's episodes). The trainer generates plain text; the chat
templates of Qwen and most open models teach this block for a call, so the grader parses it back into the
structured call an OpenAI-compatible server would have returned. A block whose body is not a JSON object with a
string `name` stays in the reply's text, as vLLM's hermes parser leaves it: the reply then makes no call.
Two `str.find` scans per block keep this linear on a reply full of opening tags (a non-greedy regex is not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"


@dataclass(frozen=True)
class ParsedCall:
    """One call the model made: the tool's name and its arguments as a JSON object string."""

    name: str
    arguments: str


def split_tool_calls(reply: str) -> tuple[str, list[ParsedCall]]:
    """(the reply's text without its well-formed call blocks, the calls in order)."""
    kept: list[str] = []
    calls: list[ParsedCall] = []
    position = 0
    while (start := reply.find(OPEN_TAG, position)) != -1:
        end = reply.find(CLOSE_TAG, start + len(OPEN_TAG))
        if end == -1:
            break
        call = _parse_call(reply[start + len(OPEN_TAG) : end])
        if call is None:
            kept.append(reply[position : end + len(CLOSE_TAG)])
        else:
            kept.append(reply[position:start])
            calls.append(call)
        position = end + len(CLOSE_TAG)
    kept.append(reply[position:])
    return "".join(kept).strip(), calls


def _parse_call(body: str) -> ParsedCall | None:
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("name"), str):
        return None
    arguments = decoded.get("arguments", {})
    if isinstance(arguments, str):
        # Some templates write the arguments as a JSON string; the tool gets the object either way.
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedCall(decoded["name"], json.dumps(arguments, ensure_ascii=False))


def openai_tool_schema(tool: Any) -> dict[str, Any]:
    """A verifiers tool definition (vf.Tool, its dict, or already OpenAI's form) -> OpenAI's function format,
    which chat templates take as `tools=`."""
    if hasattr(tool, "model_dump"):
        tool = tool.model_dump(exclude_none=True)
    if not isinstance(tool, dict):
        raise TypeError(f"a tool definition must be a dict or vf.Tool, not {type(tool).__name__}")
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return tool
    function = {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("parameters", {"type": "object", "properties": {}}),
    }
    return {"type": "function", "function": function}
