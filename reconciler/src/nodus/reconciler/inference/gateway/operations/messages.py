"""`POST /v1/messages` in Anthropic's shape: turned into a chat request for the model server, its answer into a
Message.

Who uses it: the gateway's app, through `operations.OPERATIONS`. `max_tokens` is required (as Anthropic's API has
it); `system`, text and inline (base64) image blocks, client tools (`tool_use` / `tool_result` blocks, tools with
an `input_schema`), `tool_choice`, `stop_sequences`, `temperature`, `top_p`, `top_k` and `stream: true` are served.
Refused with 400 Unsupported: server tools (a tool with a `type` other than `custom`), MCP servers, containers,
extended thinking, document blocks and image URLs. Errors keep the gateway's OpenAI shape (the seeds' rule for
every route). A stream sends Anthropic's events (`message_start` ... `message_stop`); text streams as it comes,
while each tool call's input is sent whole when the stream ends, so arguments of calls that interleave upstream
arrive intact. A cut stream ends with an `error` event and no `message_stop`. Token counting
(`/v1/messages/count_tokens`) is not served.
"""

from __future__ import annotations

import json
from typing import Any

from nodus.reconciler.inference.endpoints import Operation as OperationName
from nodus.reconciler.inference.errors import invalid, unsupported
from nodus.reconciler.inference.gateway import bounds
from nodus.reconciler.inference.gateway.body import MAX_JSON_DEPTH, nested_deeper_than
from nodus.reconciler.inference.gateway.operations.base import (
    Payload,
    Prepared,
    ToolCalls,
    Translator,
    first_choice,
    model_name,
    named_event,
    obj,
    optional_positive,
    refuse_unbilled,
    stream_flag,
    usage_of,
)
from nodus.reconciler.inference.gateway.operations.passthrough import UPSTREAM_STREAM_OPTIONS
from nodus.reconciler.inference.ledger import Usage

REFUSED_FIELDS = {
    "mcp_servers": "MCP servers are server-side tools",
    "container": "containers are server-side tools",
}


def _suffix(request_id: str) -> str:
    return request_id.removeprefix("ireq_")


def _system(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(block, dict) and block.get("type") == "text" for block in value):
        return "".join(str(block.get("text", "")) for block in value)
    raise invalid("system: a string or a list of text blocks")


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return "" if content is None else json.dumps(content)


def _message(index: int, message: Any) -> list[Payload]:
    """One Anthropic message as chat messages (a user turn with tool results gives tool messages first)."""
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise invalid(f"{where}.role: user or assistant")
    role = message["role"]
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise invalid(f"{where}.content: a string or a list of content blocks")
    parts: list[Payload] = []
    calls: list[Payload] = []
    results: list[Payload] = []
    for block_index, block in enumerate(content):
        at = f"{where}.content[{block_index}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            source = obj(block.get("source"))
            if source.get("type") != "base64":
                raise unsupported(f"{at}: image URLs are not served; send the image as base64")
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": arguments},
                }
            )
        elif kind == "tool_result":
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id", ""),
                    "content": _tool_result_text(block.get("content")),
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue  # earlier reasoning: the model reasons again
        elif kind == "document":
            raise unsupported(f"{at}: document (file) blocks are not served")
        else:
            raise unsupported(f"{at}: content blocks of type {kind!r} are not served")
    out: list[Payload] = list(results)
    if parts or calls:
        text_only = all(part["type"] == "text" for part in parts)
        body: Any = "".join(part["text"] for part in parts) if text_only else parts
        chat: Payload = {"role": role, "content": body if (parts or not calls) else None}
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return out


def _tools(value: Any) -> list[Payload]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid("tools: a list of tools")
    tools = []
    for index, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise unsupported(f"tools[{index}]: server tools ({kind!r}) are not served; only client tools")
        function = {"name": tool.get("name", ""), "parameters": tool.get("input_schema") or {"type": "object"}}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: Any) -> Any:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    choices = {"auto": "auto", "any": "required", "none": "none"}
    if kind in choices:
        return choices[kind]
    if kind == "tool":
        return {"type": "function", "function": {"name": value.get("name", "")}}
    raise invalid(f"tool_choice: auto, any, tool or none (got {kind!r})")


def stop_reason(finish_reason: Any, stop_sequence: Any, stop_sequences: list[str]) -> tuple[str, str | None]:
    """(Anthropic's stop_reason, the stop sequence met) from a chat finish_reason (and vLLM's `stop_reason`)."""
    if finish_reason == "length":
        return "max_tokens", None
    if finish_reason == "tool_calls":
        return "tool_use", None
    if isinstance(stop_sequence, str) and stop_sequence in stop_sequences:
        return "stop_sequence", stop_sequence
    return "end_turn", None


def usage_json(usage: Usage) -> Payload:
    return {
        "input_tokens": usage.input_tokens - usage.cached_input_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "cache_creation_input_tokens": 0,
        "output_tokens": usage.output_tokens,
    }


def tool_input(arguments: str) -> Any:
    try:
        if nested_deeper_than(arguments.encode("utf-8", "surrogatepass"), MAX_JSON_DEPTH):
            raise ValueError("nested too deep")  # json would recurse once per level
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return {"arguments": arguments}  # the model wrote arguments that are not JSON: keep them whole
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


class Messages:
    name = OperationName.MESSAGES
    route = "/v1/messages"

    def prepare(self, body: Payload) -> Prepared:
        refuse_unbilled(body)
        for field, why in REFUSED_FIELDS.items():
            if body.get(field):
                raise unsupported(f"{field}: {why}, which are not served")
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
            raise unsupported("thinking: extended thinking is not served")
        limit = optional_positive(body, "max_tokens")
        if limit is None:
            raise invalid("max_tokens: required")
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise invalid("messages: a non-empty list of messages")
        messages: list[Payload] = []
        system = _system(body.get("system"))
        if system is not None:
            messages.append({"role": "system", "content": system})
        for index, message in enumerate(raw):
            messages += _message(index, message)
        tools = _tools(body.get("tools"))
        stop_sequences = body.get("stop_sequences") or []
        if not isinstance(stop_sequences, list) or not all(isinstance(item, str) for item in stop_sequences):
            raise invalid("stop_sequences: a list of strings")
        stream = stream_flag(body)
        upstream: Payload = {"messages": messages, "max_tokens": limit, "stream": stream}
        upstream.update({key: body[key] for key in ("temperature", "top_p", "top_k") if body.get(key) is not None})
        if stop_sequences:
            upstream["stop"] = stop_sequences
        if tools:
            upstream["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            upstream["tool_choice"] = choice
        if stream:
            upstream["stream_options"] = dict(UPSTREAM_STREAM_OPTIONS)
        return Prepared(
            operation=self.name,
            upstream_path="/v1/chat/completions",
            upstream_body=upstream,
            stream=stream,
            input_bound=bounds.chat_input_bound(messages, tools),
            max_output=limit,
            client_model=model_name(body),
            options={"stop_sequences": stop_sequences},
        )

    def answer(self, upstream: Payload, prepared: Prepared, request_id: str) -> Payload:
        choice = first_choice(upstream)
        message = obj(choice.get("message"))
        content: list[Payload] = []
        if message.get("content") or not message.get("tool_calls"):
            content.append({"type": "text", "text": message.get("content") or ""})
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id", ""),
                    "name": function.get("name", ""),
                    "input": tool_input(function.get("arguments", "")),
                }
            )
        reason, sequence = stop_reason(
            choice.get("finish_reason"), choice.get("stop_reason"), prepared.options["stop_sequences"]
        )
        return {
            "id": f"msg_{_suffix(request_id)}",
            "type": "message",
            "role": "assistant",
            "model": prepared.client_model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage_json(usage_of(upstream) or Usage()),
        }

    def translator(self, prepared: Prepared, request_id: str) -> Translator:
        return MessagesStream(prepared, request_id)


class MessagesStream:
    def __init__(self, prepared: Prepared, request_id: str) -> None:
        self.prepared = prepared
        self.request_id = request_id
        self.started = False
        self.text_open = False
        self.blocks = 0
        self.calls = ToolCalls()
        self.finish_reason: Any = None
        self.stop_sequence: Any = None

    def start(self, usage: Usage | None) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        message: Payload = {
            "id": f"msg_{_suffix(self.request_id)}",
            "type": "message",
            "role": "assistant",
            "model": self.prepared.client_model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_json(usage or Usage()),
        }
        return [
            named_event("message_start", {"type": "message_start", "message": message}),
            named_event("ping", {"type": "ping"}),
        ]

    def chunk(self, chunk: Payload) -> list[bytes]:
        events = self.start(usage_of(chunk))
        choice = first_choice(chunk)
        delta = obj(choice.get("delta"))
        content = delta.get("content")
        if isinstance(content, str) and content:
            if not self.text_open:
                self.text_open = True
                block = {
                    "type": "content_block_start",
                    "index": self.blocks,
                    "content_block": {"type": "text", "text": ""},
                }
                events.append(named_event("content_block_start", block))
            text = {
                "type": "content_block_delta",
                "index": self.blocks,
                "delta": {"type": "text_delta", "text": content},
            }
            events.append(named_event("content_block_delta", text))
        for call_delta in delta.get("tool_calls") or []:
            if isinstance(call_delta, dict):
                self.calls.add(call_delta)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
            self.stop_sequence = choice.get("stop_reason")
        return events

    def close_text(self) -> list[bytes]:
        if not self.text_open:
            return []
        self.text_open = False
        self.blocks += 1
        return [named_event("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1})]

    def finished(self, usage: Usage) -> list[bytes]:
        events = [*self.start(usage), *self.close_text()]
        for call in self.calls.ordered():
            index = self.blocks
            self.blocks += 1
            start = {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}},
            }
            arguments = json.dumps(tool_input(call["arguments"]), ensure_ascii=False)
            events += [
                named_event("content_block_start", start),
                named_event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": arguments},
                    },
                ),
                named_event("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]
        reason, sequence = stop_reason(self.finish_reason, self.stop_sequence, self.prepared.options["stop_sequences"])
        events.append(
            named_event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reason, "stop_sequence": sequence},
                    "usage": {"output_tokens": usage.output_tokens},
                },
            )
        )
        events.append(named_event("message_stop", {"type": "message_stop"}))
        return events

    def failed(self, error: Payload) -> list[bytes]:
        detail = obj(error.get("error"))
        code = detail.get("code", "Unavailable")
        message = detail.get("message", "the stream was cut")
        payload = {"type": "error", "error": {"type": code, "code": code, "message": message}}
        return [*self.start(None), named_event("error", payload)]
