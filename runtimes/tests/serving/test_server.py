"""The model server as a process, over HTTP: what the gateway and OpenAI's SDK see.

One real `python -m nodus.runtimes.serving` process (fixture `server`: the base as `tiny`, a LoRA adapter as
`rev`, embeddings on, a free 127.0.0.1 port) answers every test here; counts are checked against the tokenizer.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from nodus.runtimes.serving.client import ServingClient

pytestmark = pytest.mark.slow
MESSAGES = [{"role": "user", "content": "Reverse the words: apple banana cherry"}]


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


def ok(server: ServingClient, path: str) -> Any:
    status, body = server.get(path)
    assert status == 200, (path, status, body)
    return body


def chat(server: ServingClient, **fields: Any) -> tuple[int, Any]:
    return server.post("/v1/chat/completions", {"model": "tiny", "messages": MESSAGES, "temperature": 0, **fields})


def test_models_health_and_the_ready_line(
    server: ServingClient, server_process: subprocess.Popen[bytes], model_dir: Path, adapter_dir: Path
) -> None:
    listed = ok(server, "/v1/models")["data"]
    assert [(m["id"], m["parent"], m["root"]) for m in listed] == [
        ("tiny", None, str(model_dir)),
        ("rev", "tiny", str(adapter_dir)),
    ]
    assert listed[0]["max_model_len"] == 512
    assert server.request("GET", "/health").status == 200
    assert server_process.stdout is not None
    ready = json.loads(server_process.stdout.readline())
    assert (ready["event"], ready["url"], ready["models"]) == ("ready", server.url, ["tiny", "rev"])


def test_chat_usage_is_exact_and_greedy_answers_repeat(server: ServingClient, tokenizer: Any) -> None:
    status, first = chat(server, max_tokens=40, return_token_ids=True)
    assert status == 200, first
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    choice, usage = first["choices"][0], first["usage"]
    assert first["prompt_token_ids"] == list(prompt)
    assert usage["prompt_tokens"] == len(prompt)
    assert usage["completion_tokens"] == len(choice["token_ids"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert tokenizer.decode(choice["token_ids"], skip_special_tokens=True) == choice["message"]["content"]
    if choice["finish_reason"] == "stop":  # ended by the model's EOS, which is counted
        assert choice["token_ids"][-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    else:
        assert usage["completion_tokens"] == 40
    _, second = chat(server, max_tokens=40)
    assert second["choices"][0]["message"]["content"] == choice["message"]["content"]
    assert first["id"].startswith("chatcmpl-")


def test_completions_usage_is_exact(server: ServingClient, tokenizer: Any) -> None:
    prompt = "apple banana"
    status, body = server.post(
        "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 17, "temperature": 0, "ignore_eos": True}
    )
    assert status == 200, body
    assert body["object"] == "text_completion"
    assert body["usage"] == {
        "prompt_tokens": len(tokenizer(prompt)["input_ids"]),
        "completion_tokens": 17,
        "total_tokens": body["usage"]["prompt_tokens"] + 17,
    }
    assert body["choices"][0]["finish_reason"] == "length"


def test_the_adapter_answers_differently(server: ServingClient) -> None:
    _, base = chat(server, max_tokens=30)
    _, adapted = chat(server, model="rev", max_tokens=30)
    assert adapted["model"] == "rev"
    assert adapted["choices"][0]["message"]["content"] != base["choices"][0]["message"]["content"]


def test_a_stream_joins_to_the_answer_with_usage_all_along(server: ServingClient) -> None:
    _, whole = chat(server, max_tokens=30)
    events = list(
        server.stream(
            "/v1/chat/completions",
            {
                "model": "tiny",
                "messages": MESSAGES,
                "temperature": 0,
                "max_tokens": 30,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
    )
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == whole["usage"]
    produced = [c["usage"]["completion_tokens"] for c in chunks]
    assert produced == sorted(produced)
    assert all(c["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"] for c in chunks)
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finishing] == [whole["choices"][0]["finish_reason"]]


def test_the_openai_sdk_talks_to_it(server: ServingClient) -> None:
    from openai import OpenAI
    from openai.types.chat import ChatCompletionUserMessageParam

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused-behind-the-gateway")
    messages = [ChatCompletionUserMessageParam(role="user", content=MESSAGES[0]["content"])]
    _, raw = chat(server, max_tokens=20)
    reply = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=20)
    assert reply.choices[0].message.content == raw["choices"][0]["message"]["content"]
    assert reply.usage is not None
    assert reply.usage.completion_tokens == raw["usage"]["completion_tokens"]
    stream = client.chat.completions.create(
        model="tiny",
        messages=messages,
        temperature=0,
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(pieces) == reply.choices[0].message.content
    assert usage is not None
    assert usage.completion_tokens == reply.usage.completion_tokens
    vectors = client.embeddings.create(model="tiny", input=["first document", "second document"])  # base64 on the wire
    assert len(vectors.data) == 2
    assert len(vectors.data[0].embedding) == 64


def test_two_concurrent_requests_share_forward_passes(server: ServingClient) -> None:
    results: dict[str, Any] = {}

    def call(rid: str) -> None:
        results[rid] = server.post(
            "/v1/chat/completions",
            {"model": "tiny", "messages": MESSAGES, "temperature": 0, "max_tokens": 48, "ignore_eos": True},
            headers={"X-Request-Id": rid},
        )

    names = [f"pair-a-{time.monotonic_ns()}", f"pair-b-{time.monotonic_ns()}"]
    threads = [threading.Thread(target=call, args=(rid,)) for rid in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(results[rid][0] == 200 for rid in names), results
    first = ok(server, f"/stats/requests/{names[0]}")
    assert names[1] in first["shared_with"]
    assert results[names[0]][1]["id"] == f"chatcmpl-{names[0]}"
    stats = ok(server, "/stats")
    assert stats["shared_forward_passes"] >= 1
    assert stats["largest_batch"] >= 2


def test_a_client_that_goes_away_stops_its_generation(server: ServingClient) -> None:
    rid = f"gone-{time.monotonic_ns()}"
    conn = server.connection()
    body = {"model": "tiny", "prompt": "apple", "max_tokens": 480, "temperature": 0, "ignore_eos": True, "stream": True}
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": rid},
    )
    response = conn.getresponse()
    assert response.status == 200
    for _ in range(3):  # three chunks read
        assert response.readline().startswith(b"data: ")
        assert response.readline() == b"\n"
    conn.sock.close()  # hang up mid-stream
    conn.close()
    deadline = time.monotonic() + 20
    record = ok(server, f"/stats/requests/{rid}")
    while record["state"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
        record = ok(server, f"/stats/requests/{rid}")
    assert record["state"] == "cancelled"
    produced = record["completion_tokens"]
    assert 3 <= produced < 240  # well before max_tokens
    time.sleep(0.5)
    assert ok(server, f"/stats/requests/{rid}")["completion_tokens"] == produced


def test_a_waiting_client_that_goes_away_stops_its_generation_too(server: ServingClient) -> None:
    rid = f"gone-whole-{time.monotonic_ns()}"
    conn = server.connection()
    body = {"model": "tiny", "prompt": "apple", "max_tokens": 480, "temperature": 0, "ignore_eos": True}
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": rid},
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # until the request is under way (404 before the server has read it)
        status, early = server.get(f"/stats/requests/{rid}")
        if status == 200 and early["completion_tokens"] >= 3:
            break
        time.sleep(0.01)
    conn.sock.close()  # hang up before the answer
    conn.close()
    record = ok(server, f"/stats/requests/{rid}")
    while record["state"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.05)
        record = ok(server, f"/stats/requests/{rid}")
    assert record["state"] == "cancelled"
    assert record["completion_tokens"] < 480


def test_embeddings_have_the_models_width_and_repeat(server: ServingClient, tokenizer: Any) -> None:
    texts = ["first document", "a second, longer document"]
    status, first = server.post("/v1/embeddings", {"model": "tiny", "input": texts})
    assert status == 200, first
    vectors = [item["embedding"] for item in first["data"]]
    assert [len(v) for v in vectors] == [64, 64]
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-4 for v in vectors)
    assert first["usage"]["prompt_tokens"] == sum(len(tokenizer(t)["input_ids"]) for t in texts)
    _, again = server.post("/v1/embeddings", {"model": "tiny", "input": texts[1]})
    assert again["data"][0]["embedding"] == pytest.approx(vectors[1], abs=1e-5)  # alone or padded in a batch
    _, adapted = server.post("/v1/embeddings", {"model": "rev", "input": texts[1]})
    assert adapted["data"][0]["embedding"] != pytest.approx(vectors[1], abs=1e-3)


def test_errors_have_openais_shape(server: ServingClient) -> None:
    status, body = chat(server, model="gpt-nonexistent")
    assert status == 404
    assert body["error"]["code"] == body["error"]["type"] == "NotFound"
    assert "gpt-nonexistent" in body["error"]["message"]
    status, body = server.post("/v1/chat/completions", b"{not json")
    assert (status, body["error"]["code"]) == (400, "Invalid")
    status, body = server.post("/v1/chat/completions", {"model": "tiny"})
    assert (status, body["error"]["code"]) == (400, "Invalid")
    assert body["error"]["message"].startswith("messages:")
    status, body = chat(server, max_tokens=100_000)
    assert (status, body["error"]["code"]) == (400, "Invalid")
    assert "context of 512 tokens" in body["error"]["message"]
    status, body = chat(server, n=3)
    assert (status, body["error"]["code"]) == (400, "Unsupported")
    answer = server.request("GET", "/v1/nothing")
    assert (answer.status, answer.body["error"]["code"]) == (404, "NotFound")
