"""The model server's pure parts: incremental text with stop strings, sampling, request checks, response shapes."""

from __future__ import annotations

import base64
import struct

import pytest
import torch

from nodus.runtimes.serving.engine import SamplingParams
from nodus.runtimes.serving.openai_api import (
    APIError,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    SamplingBody,
    embedding_list,
    parse,
)
from nodus.runtimes.serving.sampling import filtered_probabilities, generator_for, next_tokens
from nodus.runtimes.serving.text_stream import TextStream

# A toy "tokenizer": token i decodes to PIECES[i]; 9 is half of a two-byte character, 10 completes it.
PIECES = {1: "Hel", 2: "lo", 3: " wor", 4: "ld", 5: "<", 6: "/", 7: "end", 8: ">", 11: "x"}


def decode(ids: list[int]) -> str:
    raw = b"".join("é".encode()[:1] if i == 9 else "é".encode()[1:] if i == 10 else PIECES[i].encode() for i in ids)
    return raw.decode("utf-8", errors="replace")


def run(stream: TextStream, ids: list[int]) -> list[str]:
    return [stream.push(i) for i in ids]


def test_text_stream_sends_everything_once_and_joins_to_the_text() -> None:
    stream = TextStream(decode)
    sent = run(stream, [1, 2, 3, 4])
    assert sent == ["Hel", "lo", " wor", "ld"]
    assert "".join(sent) + stream.rest() == stream.text == "Hello world"


def test_text_stream_holds_half_a_character_until_it_is_whole() -> None:
    stream = TextStream(decode)
    assert run(stream, [1, 9]) == ["Hel", ""]
    assert stream.push(10) == "é"
    assert stream.text == "Helé"


def test_text_stream_cuts_at_a_stop_string_and_never_sends_part_of_it() -> None:
    stream = TextStream(decode, stop=("</end>",))
    sent = run(stream, [1, 5, 6, 7])
    assert sent == ["Hel", "", "", ""]  # "<", "</", "</end" could each begin the stop string
    assert not stream.stopped
    assert stream.push(8) == ""
    assert stream.stopped
    assert stream.text == "Hel"
    assert stream.rest() == ""


def test_text_stream_releases_held_text_that_turned_out_not_to_stop() -> None:
    stream = TextStream(decode, stop=("</end>",))
    sent = run(stream, [1, 5, 11])
    assert sent == ["Hel", "", "<x"]
    assert stream.rest() == ""
    assert stream.text == "Hel<x"


def test_held_back_text_comes_out_at_the_end() -> None:
    stream = TextStream(decode, stop=("</end>",))
    sent = run(stream, [1, 5, 6])
    assert "".join(sent) == "Hel"
    assert stream.rest() == "</"


def test_greedy_rows_take_the_arg_max_and_seeded_rows_repeat() -> None:
    torch.manual_seed(1)
    logits = torch.randn(3, 50)
    greedy = SamplingParams(max_tokens=1, temperature=0)
    seeded = SamplingParams(max_tokens=1, temperature=1.0, seed=42)
    params = [greedy, seeded, seeded]

    def draw() -> list[int]:
        generators = [generator_for(p, torch.device("cpu")) for p in params]
        return [next_tokens(logits, params, generators) for _ in range(5)][-1]

    first, second = draw(), draw()
    assert first[0] == int(logits[0].argmax())
    assert first == second  # same seeds, same draws
    assert generator_for(greedy, torch.device("cpu")) is None


def test_top_p_keeps_the_nucleus_and_top_k_the_k_best() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    nucleus = filtered_probabilities(logits, SamplingParams(max_tokens=1, top_p=0.7))
    assert (nucleus > 0).tolist() == [True, True, False, False]
    tiny = filtered_probabilities(logits, SamplingParams(max_tokens=1, top_p=0.01))
    assert (tiny > 0).tolist() == [True, False, False, False]  # the best token always stays
    two = filtered_probabilities(logits, SamplingParams(max_tokens=1, top_k=2))
    assert (two > 0).tolist() == [True, True, False, False]


def check(kind: type[SamplingBody], body: object) -> None:
    """What the server does with a body before anything reaches the engine."""
    request = parse(kind, body)
    request.refuse_unserved()
    if isinstance(request, ChatRequest):
        request.template_messages()


def refused(kind: type[SamplingBody], body: object) -> APIError:
    with pytest.raises(APIError) as caught:
        check(kind, body)
    return caught.value


def test_malformed_bodies_name_the_field() -> None:
    error = refused(ChatRequest, {"model": "m", "messages": [{"role": "robot", "content": "hi"}]})
    assert (error.status, error.code) == (400, "Invalid")
    assert error.message.startswith("messages[0].role:")
    assert refused(ChatRequest, {"model": "m", "messages": []}).message.startswith("messages:")
    assert refused(ChatRequest, {"messages": [{"role": "user", "content": "x"}]}).message.startswith("model:")
    assert refused(ChatRequest, ["not", "an", "object"]).message == "the request body must be a JSON object"
    assert refused(CompletionRequest, {"model": "m", "prompt": "x", "max_tokens": 0}).message.startswith("max_tokens:")
    assert (
        refused(CompletionRequest, {"model": "m", "prompt": "x", "stream_options": {"include_usage": True}}).code
        == "Invalid"
    )


def test_unserved_features_are_refused_as_unsupported() -> None:
    user = {"role": "user", "content": "x"}
    bodies: list[dict[str, object]] = [
        {"model": "m", "messages": [user], "n": 2},
        {"model": "m", "messages": [user], "logprobs": True},
        {"model": "m", "messages": [user], "tool_choice": "required"},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    ]
    for body in bodies:
        error = refused(ChatRequest, body)
        assert (error.status, error.code) == (400, "Unsupported"), body
    for prompt in ({"model": "m", "prompt": ["a", "b"]}, {"model": "m", "prompt": "a", "echo": True}):
        assert refused(CompletionRequest, prompt).code == "Unsupported"


def test_text_parts_are_joined_and_developer_is_a_system_turn() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    request = parse(ChatRequest, {"model": "m", "messages": [{"role": "developer", "content": parts}]})
    assert request.template_messages() == [{"role": "system", "content": "ab"}]


def test_max_tokens_defaults_to_the_room_the_prompt_leaves_and_is_bounded_by_it() -> None:
    request = parse(CompletionRequest, {"model": "m", "prompt": "x", "stop": "\n", "temperature": 0})
    params = request.sampling(prompt_tokens=12, max_model_len=512, defaults={"temperature": 0.7})
    assert (params.max_tokens, params.temperature, params.stop) == (500, 0.0, ("\n",))
    defaults = parse(CompletionRequest, {"model": "m", "prompt": "x"}).sampling(
        12, 512, {"temperature": 0.7, "top_k": 20}
    )
    assert (defaults.temperature, defaults.top_k) == (0.7, 20)  # the model's generation_config, as vLLM reads it
    with pytest.raises(APIError, match="over the model's context"):
        parse(CompletionRequest, {"model": "m", "prompt": "x", "max_tokens": 501}).sampling(12, 512, {})
    chat = parse(
        ChatRequest, {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 7}
    )
    assert chat.sampling(10, 512, {}).max_tokens == 7


def test_embeddings_come_as_floats_or_as_little_endian_float32_base64() -> None:
    vectors = [[0.6, 0.8], [1.0, 0.0]]
    as_floats = embedding_list("m", vectors, 3, "float")
    assert as_floats["data"][1] == {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]}
    assert as_floats["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    packed = embedding_list("m", vectors, 3, "base64")["data"][0]["embedding"]
    assert struct.unpack("<2f", base64.b64decode(packed)) == pytest.approx((0.6, 0.8))
    request = parse(EmbeddingRequest, {"model": "m", "input": "one"})
    assert request.texts() == ["one"]
    with pytest.raises(APIError, match="at most 2048"):
        parse(EmbeddingRequest, {"model": "m", "input": ["x"] * 2049}).texts()
