"""The gateway's small parts on their own: the rpm/tpm window arithmetic, the input bounds (checked against the
tiny model's real tokenizer and chat template), what an endpoint record says, request ids and money."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodus.reconciler.inference.endpoints import endpoint_of
from nodus.reconciler.inference.errors import ErrorCode, InferenceError
from nodus.reconciler.inference.gateway.app import same_model
from nodus.reconciler.inference.gateway.body import MAX_JSON_DEPTH, nested_deeper_than, parse_json
from nodus.reconciler.inference.gateway.bounds import (
    chat_input_bound,
    embedding_input_bound,
    json_bytes,
    prompt_input_bound,
)
from nodus.reconciler.inference.ids import REQUEST_ID_RE, new_request_id
from nodus.reconciler.inference.money import Rates, usd_text, usd_to_nanos
from nodus.reconciler.inference.windows import rpm_retry_after, tpm_retry_after
from nodus.reconciler.state.records import ResourceKey, ResourceRecord
from nodus.specs.status_names import Phase

from .conftest import endpoint_document

TRICKY: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer <tags> & 'quotes' \"always\"."},
    {"role": "user", "content": "héllo wörld — 你好世界 🙂🙃 " * 5},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": "<&>"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "\n\t\\ " * 20},
    {"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "description": "finds <things>",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
]


def test_rpm_waits_for_the_oldest_request_that_must_leave() -> None:
    assert rpm_retry_after([], 1, now=100.0) is None
    assert rpm_retry_after([50.0, 60.0], 3, now=100.0) is None
    assert rpm_retry_after([50.0, 60.0, 70.0], 3, now=100.0) == 10  # 50 leaves at 110
    assert rpm_retry_after([50.0, 60.0, 70.0, 80.0], 3, now=100.0) == 20  # two must leave: 60 at 120
    assert rpm_retry_after([99.5], 1, now=100.0) == 60  # rounded up, never under 1 s
    assert rpm_retry_after([40.2], 1, now=100.0) == 1


def test_tpm_waits_until_enough_tokens_have_left() -> None:
    assert tpm_retry_after([(50.0, 100)], 100, 300, now=100.0) is None
    assert tpm_retry_after([(50.0, 100), (70.0, 150)], 100, 300, now=100.0) == 10
    assert tpm_retry_after([(50.0, 100), (70.0, 150)], 250, 300, now=100.0) == 30


def test_json_bytes_holds_every_string_in_full_and_jinja_escapes() -> None:
    for text in ("plain", "ünïcödé", "你好", "🙂", "<a & 'b'>", "\n\t"):
        assert json_bytes({"content": text}) >= len(text.encode())
    assert json_bytes("<>&'") == len(json.dumps("<>&'")) + 20


def test_bounds_of_prompts_and_embeddings() -> None:
    assert prompt_input_bound("abc") == 64 + 3
    assert embedding_input_bound(["ab", [1, 2, 3]]) == (2 + 8) + (3 + 8)
    assert chat_input_bound([{"role": "user", "content": "hi"}], TOOLS) > chat_input_bound(
        [{"role": "user", "content": "hi"}]
    )


@pytest.mark.slow
def test_the_chat_bound_holds_for_the_tiny_models_tokenizer_and_template(tiny_model: tuple[str, str]) -> None:
    """The claim of `bounds`: no prompt a chat template makes from these messages has more tokens than the bound."""
    transformers = pytest.importorskip("transformers")
    cache, revision = tiny_model
    folder = Path(cache) / "models--nodus--tiny-qwen3" / "snapshots" / revision
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    for count in range(1, len(TRICKY) + 1):
        messages = TRICKY[:count]
        # Text parts reach the template joined, as the model server joins them; the bound counts them as sent.
        joined = [
            {**m, "content": "".join(p["text"] for p in m["content"])} if isinstance(m.get("content"), list) else m
            for m in messages
        ]
        for tools in (None, TOOLS):
            ids = tokenizer.apply_chat_template(joined, tools=tools, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict):
                ids = ids["input_ids"]
            assert len(ids) <= chat_input_bound(messages, tools), (count, tools is not None)
    for prompt in ("", "plain words", "你好世界🙂 <&>" * 50):
        assert len(tokenizer(prompt)["input_ids"]) <= prompt_input_bound(prompt)


def record(status: dict[str, Any], **spec: Any) -> ResourceRecord:
    document = endpoint_document("ep", labels={"team": "a"}, **spec)
    return ResourceRecord(ResourceKey("InferenceEndpoint", "default", "ep"), document, "sha256:x", status=status)


def test_an_endpoint_record_reads_as_the_controller_leaves_it() -> None:
    running = endpoint_of(
        record({"phase": Phase.RUNNING, "upstream": "unix:/s", "servedModel": "tiny"}, rpm=5, maxCostUSD="2.50")
    )
    assert running.serving and running.rpm == 5 and running.max_cost_usd == Decimal("2.50")
    assert running.model == running.price_model == "nodus/tiny-qwen3" and running.labels == {"team": "a"}
    adapter = endpoint_of(
        record(
            {
                "phase": Phase.RUNNING,
                "upstream": "unix:/s",
                "servedModel": "rev",
                "model": "acme/tiny-rev",
                "priceModel": "nodus/tiny-qwen3",
                "operations": ["ChatCompletions"],
            },
            model={"trainingJob": "tj1"},
        )
    )
    assert adapter.model == "acme/tiny-rev" and adapter.price_model == "nodus/tiny-qwen3"
    assert adapter.operations == ("ChatCompletions",)
    assert "not Running yet (phase Pending)" in (endpoint_of(record({"phase": Phase.PENDING})).why_not_serving() or "")
    stopped = endpoint_of(record({"phase": Phase.RUNNING, "upstream": "unix:/s", "servedModel": "t"}, state="Stopped"))
    assert "is stopped" in (stopped.why_not_serving() or "")
    assert "names no upstream" in (endpoint_of(record({"phase": Phase.RUNNING})).why_not_serving() or "")


def test_model_ids_match_themselves_and_their_nodus_alias() -> None:
    assert same_model("nodus/gpt-oss-20b", "openai/gpt-oss-20b") and same_model(
        "openai/gpt-oss-20b", "nodus/gpt-oss-20b"
    )
    assert same_model("openai/gpt-oss-20b", "openai/gpt-oss-20b")
    assert not same_model("acme/gpt-oss-20b", "openai/gpt-oss-20b") and not same_model(
        "nodus/other", "openai/gpt-oss-20b"
    )


def test_request_ids_look_like_the_seeds_and_sort_by_time() -> None:
    ids = [new_request_id() for _ in range(50)]
    assert all(REQUEST_ID_RE.match(request_id) for request_id in ids)
    assert REQUEST_ID_RE.match("ireq_01k6d2x7q9fvjt3y8m0c4r5n2e")  # the seeds' example
    assert len(set(ids)) == 50


def test_money_rounds_holds_up_and_prints_as_the_specs_do() -> None:
    rates = Rates(Decimal("0.05"), Decimal("0.20"))
    assert rates.cost_nanos(84, 21) == 8400  # $0.0000084: 84 x 50 + 21 x 200 nano-dollars
    assert Rates(Decimal("0.000001"), Decimal(0)).cost_nanos(1, 0) == 1  # a thousandth of a nano-dollar rounds up
    assert usd_text(8400) == "0.0000084" and usd_text(0) == "0.00" and usd_text(5 * 10**9) == "5.00"
    assert usd_to_nanos(Decimal("50")) == 50 * 10**9


def reference_depth(text: str) -> int:
    """The nesting of arrays and objects in JSON text, character by character (brackets in strings are text)."""
    depth = deepest = 0
    in_string = escaped = False
    for character in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (character == "\\", character != '"')
        elif character == '"':
            in_string = True
        elif character in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif character in "]}":
            depth -= 1
    return deepest


def test_a_body_deeper_than_the_limit_is_refused_before_it_is_parsed() -> None:
    def body(inner: str) -> bytes:
        return ('{"model": "m", "x": ' + inner + "}").encode()

    at_limit = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
    assert parse_json(body(at_limit))["x"] is not None
    for refused in (
        body("[" + at_limit + "]"),
        b"[" * 1_000_000,
        b"{" * 500_000,
        body("[" * 70_000 + "1" + "]" * 69_000),  # unbalanced and deep
        ('{"a": ' * 200 + "1" + "}" * 200).encode(),
    ):
        with pytest.raises(InferenceError, match=f"deeper than {MAX_JSON_DEPTH}") as caught:
            parse_json(refused)
        assert caught.value.code == ErrorCode.INVALID and caught.value.status == 400
    # Brackets and escaped quotes inside strings are text, however many; UTF-16 is read as json reads it.
    text = '"' + '[{\\"' * 5_000 + "\\\\ " + "[" * 100 + '"'
    assert parse_json(body(f'[{text}, {{"k": {text}}}]'))["x"][1]["k"].startswith('[{"')
    assert parse_json(body(at_limit).decode().encode("utf-16"))["model"] == "m"
    # Malformed bodies shallower than the limit are still json's to describe.
    with pytest.raises(InferenceError, match="not JSON"):
        parse_json(body("[[[1]"))
    seed = random.Random(7)
    for _ in range(300):  # random arrays, objects and strings with brackets in them: as deep as json would go
        deepest = seed.choice([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1])
        closers: list[str] = []
        parts: list[str] = []
        for _ in range(seed.randrange(50, 600)):
            choice = seed.random()
            if choice < 0.45 and len(closers) < deepest:
                opened = seed.choice(["[", '{"k": '])
                parts.append(opened)
                closers.append("]" if opened == "[" else "}")
            elif choice < 0.7 or not closers:
                parts.append(seed.choice(['"[{"', '"\\\\"', '"\\"]}"', "1"]))
            else:
                parts.append(closers.pop())
            if parts[-1] not in ("[", '{"k": ') and closers:
                parts.append(", " if closers[-1] == "]" else "")  # keeps it JSON enough: depth is what counts
        whole = "".join(parts) + "".join(reversed(closers))
        assert nested_deeper_than(whole.encode(), MAX_JSON_DEPTH) == (reference_depth(whole) > MAX_JSON_DEPTH), whole
        cut = whole[: seed.randrange(len(whole))]  # unbalanced: a deep one is never missed
        if reference_depth(cut) > MAX_JSON_DEPTH:
            assert nested_deeper_than(cut.encode(), MAX_JSON_DEPTH), cut
