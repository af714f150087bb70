"""`POST /v1/responses`, stateless: turned into a chat request for the model server, its answer into a Response.

Who uses it: the gateway's app, through `operations.OPERATIONS`. What the seeds' Responses serves: text, inline
images and client function tools, streamed or not. Refused with 400 Unsupported: `store: true` (nothing is
stored; leaving `store` out is taken as false), `background`, `previous_response_id` and `conversation` (nothing
to continue from), stored `prompt`s, hosted tools (web search, file search, code interpreter, computer use, image
generation, MCP, shell...), file inputs and image URLs.

Input items become chat messages: a string is one user message; `message` items keep their role and text (input
and output text parts, inline images); consecutive `function_call` items become one assistant message with tool
calls; `function_call_output` items become tool messages; `reasoning` items are dropped (the model re-reasons).
`instructions` become the first system message. A stream sends OpenAI's events (`response.created` ...
`response.completed`, or `response.incomplete` when max_output_tokens cut it); a cut stream ends with an `error`
event and no completion event.
"""

from __future__ import annotations

import json
import time
from typing import Any

from nodus.reconciler.inference.endpoints import Operation as OperationName
from nodus.reconciler.inference.errors import invalid, unsupported
from nodus.reconciler.inference.gateway import bounds
from nodus.reconciler.inference.gateway.operations.base import (
    Payload,
    Prepared,
    ToolCalls,
    Translator,
    first_choice,
    model_name,
    obj,
    optional_positive,
    refuse_unbilled,
    stream_flag,
    usage_of,
)
from nodus.reconciler.inference.gateway.operations.passthrough import UPSTREAM_STREAM_OPTIONS
from nodus.reconciler.inference.ledger import Usage

STATELESS = ("previous_response_id", "conversation", "prompt")
SAMPLING = ("temperature", "top_p", "top_k", "seed", "stop", "user", "parallel_tool_calls")


def _suffix(request_id: str) -> str:
    return request_id.removeprefix("ireq_")


def _text_of_parts(content: Any, where: str) -> str | list[Payload]:
    """A message item's content as chat content: a string, or parts when it holds images."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where}.content: a string or a list of content parts")
    parts: list[Payload] = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        at = f"{where}.content[{index}]"
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url.startswith("data:"):
                raise unsupported(f"{at}: image URLs and file ids are not served; send the image inline (data: URL)")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "input_file":
            raise unsupported(f"{at}: file inputs are not served")
        elif kind == "input_audio":
            raise unsupported(f"{at}: audio inputs are not served")
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        else:
            raise unsupported(f"{at}: content parts of type {kind!r} are not served")
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def chat_messages(body: Payload) -> list[Payload]:
    messages: list[Payload] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise invalid("instructions: a string")
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise invalid("input: a string or a non-empty list of input items")
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise invalid(f"{where}: an input item (an object)")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise invalid(f"{where}.role: user, assistant, system or developer")
            messages.append({"role": role, "content": _text_of_parts(item.get("content"), where)})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id") or f"call_{index}",
                "type": "function",
                "function": {"name": item.get("name", ""), "arguments": item.get("arguments", "")},
            }
            previous = messages[-1] if messages else None
            if previous is not None and previous["role"] == "assistant" and "tool_calls" in previous:
                previous["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id", ""), "content": text})
        elif kind == "reasoning":
            continue
        else:
            raise unsupported(f"{where}: input items of type {kind!r} are not served (stateless, no hosted tools)")
    return messages


def chat_tools(body: Payload) -> list[Payload]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise invalid("tools: a list of tools")
    converted = []
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise unsupported(f"tools[{index}]: hosted tools ({kind!r}) are not served; only client function tools")
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        converted.append({"type": "function", "function": function})
    return converted


def chat_tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name", "")}}
    kind = choice.get("type") if isinstance(choice, dict) else choice
    raise unsupported(f"tool_choice: {kind!r}: hosted tools are not served")


def response_format(body: Payload) -> Payload | None:
    text = body.get("text")
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict) or form.get("type", "text") == "text":
        return None
    if form.get("type") == "json_schema":
        schema = {key: form[key] for key in ("name", "schema", "strict", "description") if key in form}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": str(form.get("type"))}


class Responses:
    name = OperationName.RESPONSES
    route = "/v1/responses"

    def prepare(self, body: Payload) -> Prepared:
        refuse_unbilled(body)
        for field in STATELESS:
            if body.get(field) is not None:
                raise unsupported(f"{field}: Responses are stateless here; send the whole input")
        messages = chat_messages(body)
        tools = chat_tools(body)
        stream = stream_flag(body)
        limit = optional_positive(body, "max_output_tokens")
        upstream: Payload = {"messages": messages, "stream": stream}
        upstream.update({key: body[key] for key in SAMPLING if body.get(key) is not None})
        if tools:
            upstream["tools"] = tools
        choice = chat_tool_choice(body.get("tool_choice"))
        if choice is not None:
            upstream["tool_choice"] = choice
        form = response_format(body)
        if form is not None:
            upstream["response_format"] = form
        if limit is not None:
            upstream["max_tokens"] = limit
        if stream:
            upstream["stream_options"] = dict(UPSTREAM_STREAM_OPTIONS)
        shown = {key: body.get(key) for key in ("instructions", "temperature", "top_p", "tool_choice", "metadata")}
        shown.update(tools=body.get("tools") or [], max_output_tokens=limit, text=body.get("text"))
        return Prepared(
            operation=self.name,
            upstream_path="/v1/chat/completions",
            upstream_body=upstream,
            stream=stream,
            input_bound=bounds.chat_input_bound(messages, tools),
            max_output=limit,
            client_model=model_name(body),
            options=shown,
        )

    def answer(self, upstream: Payload, prepared: Prepared, request_id: str) -> Payload:
        choice = first_choice(upstream)
        message = obj(choice.get("message"))
        calls = ToolCalls()
        for index, call in enumerate(message.get("tool_calls") or []):
            calls.add({**call, "index": index})
        items = output_items(request_id, message.get("content") or "", calls, "completed")
        return response_object(
            request_id,
            prepared,
            status_of(choice.get("finish_reason")),
            items,
            usage_of(upstream) or Usage(),
            int(upstream.get("created") or time.time()),
        )

    def translator(self, prepared: Prepared, request_id: str) -> Translator:
        return ResponsesStream(prepared, request_id)


def status_of(finish_reason: Any) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def message_item(request_id: str, text: str, status: str) -> Payload:
    return {
        "type": "message",
        "id": f"msg_{_suffix(request_id)}",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status else [],
    }


def call_item(request_id: str, index: int, call: Payload, status: str) -> Payload:
    return {
        "type": "function_call",
        "id": f"fc_{_suffix(request_id)}_{index}",
        "call_id": call["id"] or f"call_{_suffix(request_id)}_{index}",
        "name": call["name"],
        "arguments": call["arguments"],
        "status": status,
    }


def output_items(request_id: str, text: str, calls: ToolCalls, status: str) -> list[Payload]:
    items = [message_item(request_id, text, status)] if text or not calls.calls else []
    items += [call_item(request_id, index, call, status) for index, call in sorted(calls.calls.items())]
    return items


def usage_json(usage: Usage) -> Payload:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total,
    }


def response_object(
    request_id: str, prepared: Prepared, status: str, output: list[Payload], usage: Usage | None, created: int
) -> Payload:
    shown = prepared.options
    return {
        "id": f"resp_{_suffix(request_id)}",
        "object": "response",
        "created_at": created,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": shown.get("instructions"),
        "max_output_tokens": shown.get("max_output_tokens"),
        "metadata": shown.get("metadata") or {},
        "model": prepared.client_model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": False,
        "temperature": shown.get("temperature"),
        "text": shown.get("text") or {"format": {"type": "text"}},
        "tool_choice": shown.get("tool_choice") or "auto",
        "tools": shown.get("tools") or [],
        "top_p": shown.get("top_p"),
        "truncation": "disabled",
        "usage": usage_json(usage) if usage is not None else None,
        "user": None,
    }


class ResponsesStream:
    """A chat stream as Responses events: items open as their first delta arrives and close at the end."""

    def __init__(self, prepared: Prepared, request_id: str) -> None:
        self.prepared = prepared
        self.request_id = request_id
        self.created = int(time.time())
        self.sequence = 0
        self.started = False
        self.text: str | None = None
        """The message item's text so far; None until the message item is open."""
        self.calls = ToolCalls()
        self.finish_reason: Any = None

    def event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    def response(self, status: str, usage: Usage | None = None) -> Payload:
        items = output_items(self.request_id, self.text or "", self.calls, "completed") if usage else []
        return response_object(self.request_id, self.prepared, status, items, usage, self.created)

    def opening(self) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        created = self.response("in_progress")
        return [self.event("response.created", response=created), self.event("response.in_progress", response=created)]

    def call_index(self, index: int) -> int:
        """Output index of tool call `index`: after the message item when there is one."""
        return index + (1 if self.text is not None else 0)

    def chunk(self, chunk: Payload) -> list[bytes]:
        events = self.opening()
        choice = first_choice(chunk)
        delta = obj(choice.get("delta"))
        item_id = f"msg_{_suffix(self.request_id)}"
        content = delta.get("content")
        if isinstance(content, str) and content:
            if self.text is None:
                self.text = ""
                events.append(
                    self.event(
                        "response.output_item.added",
                        output_index=0,
                        item=message_item(self.request_id, "", "in_progress") | {"content": []},
                    )
                )
                events.append(
                    self.event(
                        "response.content_part.added",
                        item_id=item_id,
                        output_index=0,
                        content_index=0,
                        part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                    )
                )
            self.text += content
            events.append(
                self.event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    delta=content,
                    logprobs=[],
                )
            )
        for call_delta in delta.get("tool_calls") or []:
            if not isinstance(call_delta, dict):
                continue
            index, new, added = self.calls.add(call_delta)
            call = self.calls.calls[index]
            if new:
                events.append(
                    self.event(
                        "response.output_item.added",
                        output_index=self.call_index(index),
                        item=call_item(self.request_id, index, call, "in_progress") | {"arguments": ""},
                    )
                )
            if added:
                events.append(
                    self.event(
                        "response.function_call_arguments.delta",
                        item_id=f"fc_{_suffix(self.request_id)}_{index}",
                        output_index=self.call_index(index),
                        delta=added,
                    )
                )
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        return events

    def finished(self, usage: Usage) -> list[bytes]:
        events = self.opening()
        item_id = f"msg_{_suffix(self.request_id)}"
        if self.text is not None:
            part = {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}
            events.append(
                self.event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    text=self.text,
                    logprobs=[],
                )
            )
            events.append(
                self.event("response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=part)
            )
            events.append(
                self.event(
                    "response.output_item.done",
                    output_index=0,
                    item=message_item(self.request_id, self.text, "completed"),
                )
            )
        for index, call in sorted(self.calls.calls.items()):
            item = call_item(self.request_id, index, call, "completed")
            events.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=self.call_index(index),
                    arguments=call["arguments"],
                )
            )
            events.append(self.event("response.output_item.done", output_index=self.call_index(index), item=item))
        status = status_of(self.finish_reason)
        final = self.response(status, usage)
        events.append(self.event(f"response.{status}", response=final))
        return events

    def failed(self, error: Payload) -> list[bytes]:
        detail = obj(error.get("error"))
        return [
            *self.opening(),
            self.event(
                "error",
                code=detail.get("code", "Unavailable"),
                message=detail.get("message", "the stream was cut"),
                param=None,
            ),
        ]
