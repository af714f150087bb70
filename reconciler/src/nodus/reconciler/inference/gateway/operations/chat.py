"""`POST /v1/chat/completions`: forwarded as it is, after the refusals of what per-token billing cannot count.

Who uses it: the gateway's app, through `operations.OPERATIONS`. Refused with 400 Unsupported (the seeds' list):
built-in or server-side tools (any tool that is not `type: function`, `web_search_options`), file parts, image
and audio URLs (inline `data:` images go to the model server, which serves them or refuses), `store`,
`background`, a non-default `service_tier`, more than one choice. The input bound counts the messages and tools
(`bounds.chat_input_bound`); the output limit is `max_completion_tokens`, else `max_tokens`.
"""

from __future__ import annotations

from typing import Any

from nodus.reconciler.inference.endpoints import Operation as OperationName
from nodus.reconciler.inference.errors import invalid, unsupported
from nodus.reconciler.inference.gateway import bounds
from nodus.reconciler.inference.gateway.operations.base import (
    Payload,
    Prepared,
    Translator,
    forwarded,
    model_name,
    optional_positive,
    refuse_unbilled,
    stream_flag,
)
from nodus.reconciler.inference.gateway.operations.passthrough import (
    UPSTREAM_STREAM_OPTIONS,
    PassthroughTranslator,
    client_stream_options,
    with_model,
)

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def check_messages(messages: Any) -> list[Payload]:
    """Chat messages as OpenAI defines them; 400 for a malformed one or a part outside per-token billing."""
    if not isinstance(messages, list) or not messages:
        raise invalid("messages: a non-empty list of messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise invalid(f"{where}.role: one of {', '.join(ROLES)}")
        content = message.get("content")
        if isinstance(content, list):
            for part_index, part in enumerate(content):
                check_part(part, f"{where}.content[{part_index}]")
        elif content is not None and not isinstance(content, str):
            raise invalid(f"{where}.content: a string or a list of content parts")
    return messages


def check_part(part: Any, where: str) -> None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise invalid(f"{where}.text: a string")
        return
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if not isinstance(url, str) or not url.startswith("data:"):
            raise unsupported(f"{where}: image URLs are not served; send the image inline as a data: URL")
        return
    if kind in ("input_audio", "audio_url"):
        raise unsupported(f"{where}: audio inputs are not served")
    if kind == "file":
        raise unsupported(f"{where}: file parts are not served")
    raise unsupported(f"{where}: content parts of type {kind!r} are not served")


def check_tools(tools: Any, where: str = "tools") -> list[Payload]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid(f"{where}: a list of tools")
    for index, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise unsupported(
                f"{where}[{index}]: built-in or server-side tools ({kind!r}) are not served; only client function tools"
            )
    return tools


class ChatCompletions:
    name = OperationName.CHAT_COMPLETIONS
    route = "/v1/chat/completions"

    def prepare(self, body: Payload) -> Prepared:
        refuse_unbilled(body)
        if body.get("web_search_options") is not None:
            raise unsupported("web_search_options: built-in tools are not served")
        messages = check_messages(body.get("messages"))
        tools = check_tools(body.get("tools"))
        stream = stream_flag(body)
        limit = optional_positive(body, "max_completion_tokens") or optional_positive(body, "max_tokens")
        upstream = forwarded(body)
        include_usage, continuous = client_stream_options(body)
        if stream:
            upstream["stream_options"] = dict(UPSTREAM_STREAM_OPTIONS)
        elif body.get("stream_options") is not None:
            raise invalid("stream_options: only with stream: true")
        return Prepared(
            operation=self.name,
            upstream_path=self.route,
            upstream_body=upstream,
            stream=stream,
            input_bound=bounds.chat_input_bound(messages, tools),
            max_output=limit,
            client_model=model_name(body),
            options={"include_usage": include_usage, "continuous_usage": continuous},
        )

    def answer(self, upstream: Payload, prepared: Prepared, request_id: str) -> Payload:
        return with_model(upstream, prepared.client_model)

    def translator(self, prepared: Prepared, request_id: str) -> Translator:
        return PassthroughTranslator(prepared)
