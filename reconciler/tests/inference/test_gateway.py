"""The gateway in process (Starlette's test client) in front of a fake OpenAI model server (`fakes.FakeUpstream`,
served on a Unix socket from a thread): every route, its refusals, the seeds' error shape and codes, holds and
settlement of whole, cut and failed answers, idempotent replays, limits, receipts.

The store is SQLite here (the ledger's own tests run on both backends). Prices: $1 and $2 per million input and
output tokens (conftest), so N tokens cost N thousand (input) or 2N thousand (output) nano-dollars.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from nodus.reconciler.inference.endpoints import StoreDirectory
from nodus.reconciler.inference.gateway.app import Gateway
from nodus.reconciler.inference.gateway.body import MAX_JSON_DEPTH
from nodus.reconciler.inference.gateway.bounds import PROMPT_OVERHEAD
from nodus.reconciler.inference.gateway.upstream import Upstreams
from nodus.reconciler.inference.ids import REQUEST_ID_RE
from nodus.reconciler.inference.keys import create_key, revoke_key
from nodus.reconciler.inference.ledger import Ledger
from nodus.reconciler.inference.upstream_keys import upstream_key
from nodus.reconciler.state.sql import SqlStore
from nodus.specs.status_names import Phase

from .conftest import PutEndpoint, price_table
from .fakes import CONTEXT, FakeUpstream, serve_in_thread


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """SQLite only: the gateway's behaviour does not depend on the backend (the ledger's tests cover both)."""
    return f"sqlite://{tmp_path / 'state.db'}"


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeUpstream, Path]]:
    upstream = FakeUpstream()
    with serve_in_thread(upstream.app()) as path:
        yield upstream, path


@dataclass
class Harness:
    client: TestClient
    secret: str
    store: SqlStore
    ledger: Ledger
    fake: FakeUpstream
    upstream: str
    put_endpoint: PutEndpoint

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None, key: str | None = None) -> Any:
        auth = {"Authorization": f"Bearer {key or self.secret}"}
        return self.client.post(path, json=body, headers={**auth, **(headers or {})})

    def get(self, path: str, key: str | None = None) -> Any:
        return self.client.get(path, headers={"Authorization": f"Bearer {key or self.secret}"})

    def stream(self, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[Any, list[str]]:
        auth = {"Authorization": f"Bearer {self.secret}"}
        with self.client.stream("POST", path, json=body, headers={**auth, **(headers or {})}) as response:
            return response, [line for line in response.iter_lines() if line]

    def receipt(self, response: Any) -> dict[str, Any]:
        request_id = response.headers["nodus-request-id"]
        found = self.get(f"/v1/requests/{request_id}")
        assert found.status_code == 200, found.text
        receipt: dict[str, Any] = found.json()
        return receipt


@pytest.fixture
def gw(
    store: SqlStore, put_endpoint: PutEndpoint, fake: tuple[FakeUpstream, Path], tmp_path: Path
) -> Iterator[Harness]:
    upstream_fake, socket_path = fake
    upstream_fake.requests.clear()
    upstream = f"unix:{socket_path}"
    put_endpoint("ep", upstream=upstream)
    ledger = Ledger(store)
    gateway = Gateway(
        ledger=ledger,
        directory=StoreDirectory(store, ttl_s=0),
        prices=price_table(),
        upstreams=Upstreams(),
        gateway_id=ledger.register_gateway("test", pid=__import__("os").getpid()),
        keys_folder=tmp_path / "state",
    )
    secret = create_key(store, "app").secret
    with TestClient(gateway.app()) as client:
        yield Harness(client, secret, store, ledger, upstream_fake, upstream, put_endpoint)


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "endpoint/ep", "messages": [{"role": "user", "content": text}], **extra}


def error_of(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == code and error["code"] == code
    assert REQUEST_ID_RE.match(response.headers["nodus-request-id"])
    message: str = error["message"]
    return message


def data_lines(lines: list[str]) -> list[str]:
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


# ---- chat completions


def test_a_chat_completion_is_forwarded_settled_and_receipted(gw: Harness) -> None:
    response = gw.post("/v1/chat/completions", chat("say 4", max_tokens=10))
    assert response.status_code == 200, response.text
    request_id = response.headers["nodus-request-id"]
    assert REQUEST_ID_RE.match(request_id)
    answer = response.json()
    assert answer["model"] == "endpoint/ep" and answer["choices"][0]["message"]["content"] == "w1 w2 w3 w4"
    sent = gw.fake.requests[-1]
    assert sent["model"] == "tiny" and sent["max_tokens"] == 10
    assert gw.fake.headers[-1]["x-request-id"] == request_id
    receipt = gw.receipt(response)
    assert receipt["id"] == request_id and receipt["state"] == "Settled" and receipt["operation"] == "ChatCompletions"
    assert receipt["usage"] == {"inputTokens": 5, "cachedInputTokens": 0, "outputTokens": 4}
    assert receipt["amountUSD"] == "0.000013"  # 5 x $1/M + 4 x $2/M
    assert receipt["model"] == "endpoint/ep" and receipt["endpoint"] == "ep" and receipt["keyName"] == "app"
    assert receipt["pricebookVersion"] == "test-2026-12"


def test_the_hold_is_the_input_bound_and_max_tokens_or_the_context_window(gw: Harness) -> None:
    body = chat("say 1", max_tokens=10)
    response = gw.post("/v1/chat/completions", body)
    bound = PROMPT_OVERHEAD + 16 + len(json.dumps(body["messages"][0]))
    assert gw.receipt(response)["holdUSD"] == f"{(bound * 1000 + 10 * 2000) / 1e9:.6f}".rstrip("0")
    unlimited = gw.receipt(gw.post("/v1/chat/completions", chat("say 1")))
    assert unlimited["holdUSD"] == f"{(bound * 1000 + CONTEXT * 2000) / 1e9:.6f}".rstrip("0")


def test_a_stream_ends_with_done_and_is_settled(gw: Harness) -> None:
    response, lines = gw.stream("/v1/chat/completions", chat("say 3", stream=True))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = data_lines(lines)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["model"] == "endpoint/ep" and "usage" not in chunk for chunk in chunks)
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert text == "w1 w2 w3 "
    assert gw.fake.requests[-1]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    receipt = gw.receipt(response)
    assert receipt["state"] == "Settled" and receipt["usage"]["outputTokens"] == 3 and receipt["outcome"] == "completed"


def test_a_stream_gets_the_usage_the_client_asked_for(gw: Harness) -> None:
    _, lines = gw.stream("/v1/chat/completions", chat("say 2", stream=True, stream_options={"include_usage": True}))
    chunks = [json.loads(event) for event in data_lines(lines)[:-1]]
    assert [chunk.get("usage") is not None for chunk in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
    options = {"include_usage": True, "continuous_usage_stats": True}
    _, lines = gw.stream("/v1/chat/completions", chat("say 2", stream=True, stream_options=options))
    assert all("usage" in json.loads(event) for event in data_lines(lines)[:-1])


@pytest.mark.parametrize("command", ["cut", "drop"])
def test_a_stream_the_model_server_cuts_gets_no_marker_and_pays_what_it_produced(gw: Harness, command: str) -> None:
    response, lines = gw.stream("/v1/chat/completions", chat(f"{command} 2", stream=True))
    events = data_lines(lines)
    assert "[DONE]" not in events
    last = json.loads(events[-1])
    assert last["error"]["code"] == "Unavailable"
    receipt = gw.receipt(response)
    assert receipt["state"] == "Settled" and receipt["usage"]["outputTokens"] == 2
    assert receipt["outcome"].startswith("cut after 2 output tokens")


def test_a_stream_cut_before_any_output_is_released(gw: Harness) -> None:
    response, lines = gw.stream("/v1/chat/completions", chat("cut 0", stream=True))
    assert "[DONE]" not in data_lines(lines)
    receipt = gw.receipt(response)
    assert receipt["state"] == "Released" and receipt["amountUSD"] == "0.00"


@pytest.mark.parametrize(("command", "status"), [("fail 503", 502), ("fail 500", 502)])
def test_a_model_failure_is_unavailable_and_not_charged(gw: Harness, command: str, status: int) -> None:
    response = gw.post("/v1/chat/completions", chat(command))
    assert "the model failed" in error_of(response, status, "Unavailable")
    receipt = gw.receipt(response)
    assert receipt["state"] == "Released" and receipt["amountUSD"] == "0.00"
    assert gw.ledger.spend("default", "ep") == (0, 0)


def test_a_model_server_refusal_is_passed_on_and_not_charged(gw: Harness) -> None:
    response = gw.post("/v1/chat/completions", chat("refuse"))
    assert "too many for this model" in error_of(response, 400, "Invalid")
    assert gw.receipt(response)["state"] == "Released"


def test_an_unreachable_model_server_is_503_and_not_charged(gw: Harness, tmp_path: Path) -> None:
    gw.put_endpoint("gone", upstream=f"unix:{tmp_path / 'nothing.sock'}")
    error_of(gw.post("/v1/chat/completions", chat("say 1", model="endpoint/gone")), 503, "Unavailable")
    gw.put_endpoint("gone", upstream=f"unix:{tmp_path / 'nothing.sock'}", status={"maxModelLen": 128})
    response = gw.post("/v1/chat/completions", chat("say 1", model="endpoint/gone"))
    assert "does not answer" in error_of(response, 503, "Unavailable")
    assert gw.receipt(response)["state"] == "Released"


def test_a_model_server_on_another_machine_gets_the_endpoints_key(gw: Harness, tmp_path: Path) -> None:
    # A Ray node's server takes the key its executor derived from the project's state folder; nobody else's does.
    gw.put_endpoint("keyed", upstream=gw.upstream, status={"upstreamAuth": "Bearer"})
    assert gw.post("/v1/chat/completions", chat("say 1", model="endpoint/keyed")).status_code == 200
    expected = upstream_key(tmp_path / "state", "default", "keyed")
    assert gw.fake.headers[-1]["authorization"] == f"Bearer {expected}"
    assert gw.post("/v1/chat/completions", chat("say 1")).status_code == 200
    assert "authorization" not in gw.fake.headers[-1]  # a local server on its Unix socket takes none


def test_a_missing_usage_is_charged_at_the_hold(gw: Harness) -> None:
    response = gw.post("/v1/chat/completions", chat("say 2 nousage", max_tokens=5))
    receipt = gw.receipt(response)
    assert receipt["amountUSD"] == receipt["holdUSD"] and "reported no usage" in receipt["outcome"]


# ---- which endpoint


def test_endpoints_are_named_by_model_id_alias_or_path(gw: Harness) -> None:
    for model in ("nodus/tiny-qwen3", "someorg/tiny-qwen3"):
        response = gw.post("/v1/chat/completions", chat("say 1", model=model))
        assert response.status_code == 200, response.text
        assert response.json()["model"] == model and gw.receipt(response)["endpoint"] == "ep"
    pinned = gw.post("/endpoints/default/ep/v1/chat/completions", chat("say 1", model="anything"))
    assert pinned.status_code == 200 and gw.receipt(pinned)["endpoint"] == "ep"
    error_of(gw.post("/v1/chat/completions", chat("say 1", model="other/model")), 404, "NotFound")
    error_of(gw.post("/v1/chat/completions", chat("say 1", model="endpoint/nope")), 404, "NotFound")
    error_of(gw.post("/endpoints/default/nope/v1/chat/completions", chat("say 1")), 404, "NotFound")
    assert "belongs to project default" in error_of(
        gw.post("/endpoints/other/ep/v1/chat/completions", chat("say 1")), 401, "Unauthorized"
    )


def test_an_endpoint_that_is_not_running_answers_503(gw: Harness) -> None:
    gw.put_endpoint("new", upstream=None, phase=Phase.PENDING)
    assert "not Running yet" in error_of(
        gw.post("/v1/chat/completions", chat("say 1", model="endpoint/new")), 503, "Unavailable"
    )
    gw.put_endpoint("off", upstream=gw.upstream, state="Stopped")
    response = gw.post("/v1/chat/completions", chat("say 1", model="endpoint/off"))
    assert "is stopped" in error_of(response, 503, "Unavailable") and response.headers["retry-after"] == "5"


def test_models_lists_what_the_key_can_call(gw: Harness) -> None:
    gw.put_endpoint("new", upstream=None, phase=Phase.PENDING)
    answer = gw.get("/v1/models").json()
    ids = [entry["id"] for entry in answer["data"]]
    assert ids == ["endpoint/ep", "nodus/tiny-qwen3"]
    assert "ChatCompletions" in answer["data"][0]["operations"]
    pinned = gw.get("/endpoints/default/ep/v1/models").json()
    assert [entry["id"] for entry in pinned["data"]] == ["endpoint/ep", "nodus/tiny-qwen3"]


# ---- keys and refusals


def test_keys_are_required_and_checked(gw: Harness, store: SqlStore) -> None:
    response = gw.client.post("/v1/chat/completions", json=chat("say 1"))
    assert "missing API key" in error_of(response, 401, "Unauthorized")
    error_of(gw.post("/v1/chat/completions", chat("say 1"), key="nds_nope"), 401, "Unauthorized")
    other = create_key(store, "other").secret
    gw.put_endpoint("private", upstream=gw.upstream, allowedKeys=["app"])
    response = gw.post("/v1/chat/completions", chat("say 1", model="endpoint/private"), key=other)
    assert "allowedKeys" in error_of(response, 401, "Unauthorized")
    anthropic_style = gw.client.post("/v1/chat/completions", json=chat("say 1"), headers={"x-api-key": gw.secret})
    assert anthropic_style.status_code == 200


def test_malformed_and_oversized_bodies(gw: Harness) -> None:
    auth = {"Authorization": f"Bearer {gw.secret}", "Content-Type": "application/json"}
    big = json.dumps(chat("x" * (1024 * 1024)))
    error_of(gw.client.post("/v1/chat/completions", content=big, headers=auth), 413, "RequestEntityTooLarge")
    error_of(gw.client.post("/v1/chat/completions", content=b"{not json", headers=auth), 400, "Invalid")
    error_of(gw.client.post("/v1/chat/completions", content=b"[1, 2]", headers=auth), 400, "Invalid")
    repeated = b'{"model": "endpoint/ep", "max_tokens": 5, "max_tokens": 9000, "messages": []}'
    assert "repeated" in error_of(
        gw.client.post("/v1/chat/completions", content=repeated, headers=auth), 400, "Invalid"
    )
    cased = b'{"model": "endpoint/ep", "max_tokens": 5, "MAX_TOKENS": 9000, "messages": []}'
    assert "another letter case" in error_of(
        gw.client.post("/v1/chat/completions", content=cased, headers=auth), 400, "Unsupported"
    )
    error_of(gw.post("/v1/chat/completions", {"model": "endpoint/ep", "messages": []}), 400, "Invalid")
    error_of(gw.post("/v1/chat/completions", chat("say 1", max_tokens=0)), 400, "Invalid")
    error_of(gw.post("/v1/nothing-here", {}), 404, "NotFound")


@pytest.mark.parametrize(
    ("path", "body", "words"),
    [
        ("/v1/chat/completions", chat("hi", store=True), "store"),
        ("/v1/chat/completions", chat("hi", service_tier="flex"), "service_tier"),
        ("/v1/chat/completions", chat("hi", n=2), "one choice"),
        ("/v1/chat/completions", chat("hi", tools=[{"type": "web_search"}]), "server-side tools"),
        ("/v1/chat/completions", chat("hi", web_search_options={}), "built-in tools"),
        (
            "/v1/chat/completions",
            {
                "model": "endpoint/ep",
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
                ],
            },
            "image URLs",
        ),
        (
            "/v1/chat/completions",
            {"model": "endpoint/ep", "messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]},
            "file parts",
        ),
        ("/v1/completions", {"model": "endpoint/ep", "prompt": ["a", "b"]}, "one string prompt"),
        ("/v1/completions", {"model": "endpoint/ep", "prompt": "a", "echo": True}, "echo"),
        ("/v1/completions", {"model": "endpoint/ep", "prompt": "a", "suffix": "z"}, "suffix"),
        ("/v1/completions", {"model": "endpoint/ep", "prompt": "a", "logprobs": 2}, "logprobs"),
        ("/v1/completions", {"model": "endpoint/ep", "prompt": "a", "best_of": 3}, "best_of"),
        ("/v1/responses", {"model": "endpoint/ep", "input": "hi", "store": True}, "store"),
        ("/v1/responses", {"model": "endpoint/ep", "input": "hi", "background": True}, "background"),
        ("/v1/responses", {"model": "endpoint/ep", "input": "hi", "previous_response_id": "resp_1"}, "stateless"),
        ("/v1/responses", {"model": "endpoint/ep", "input": "hi", "tools": [{"type": "web_search"}]}, "hosted tools"),
        ("/v1/responses", {"model": "endpoint/ep", "input": "hi", "tools": [{"type": "file_search"}]}, "hosted tools"),
        (
            "/v1/messages",
            {
                "model": "endpoint/ep",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "web_search_20250305", "name": "w"}],
            },
            "server tools",
        ),
        (
            "/v1/messages",
            {
                "model": "endpoint/ep",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
                "thinking": {"type": "enabled"},
            },
            "thinking",
        ),
        ("/v1/messages/count_tokens", {"model": "endpoint/ep", "messages": []}, "token counting"),
    ],
)
def test_what_per_token_billing_cannot_count_is_unsupported(gw: Harness, path: str, body: Any, words: str) -> None:
    assert words in error_of(gw.post(path, body), 400, "Unsupported")
    assert gw.ledger.spend("default", "ep") == (0, 0)


# ---- idempotency, limits, caps


def test_an_idempotent_repeat_replays_the_answer_and_charges_once(gw: Harness) -> None:
    headers = {"Idempotency-Key": "order-42"}
    first = gw.post("/v1/chat/completions", chat("say 3"), headers)
    again = gw.post("/v1/chat/completions", chat("say 3"), headers)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json() and again.headers["nodus-request-id"] == first.headers["nodus-request-id"]
    assert "idempotent-replayed" not in first.headers
    assert len([r for r in gw.fake.requests if r.get("messages") == chat("say 3")["messages"]]) == 1
    settled, held = gw.ledger.spend("default", "ep")
    assert settled == gw.ledger.receipt(first.headers["nodus-request-id"]).amount_nanos and held == 0  # type: ignore[union-attr]
    reused = gw.post("/v1/chat/completions", chat("say 4"), headers)
    assert "different request" in error_of(reused, 409, "IdempotencyKeyReused")
    error_of(gw.post("/v1/chat/completions", chat("say 1"), {"Idempotency-Key": "bad key"}), 400, "Invalid")


def test_a_failed_request_frees_its_idempotency_key(gw: Harness) -> None:
    headers = {"Idempotency-Key": "retry-me"}
    error_of(gw.post("/v1/chat/completions", chat("fail 503"), headers), 502, "Unavailable")
    retried = gw.post("/v1/chat/completions", chat("fail 503"), headers)
    assert "idempotent-replayed" not in retried.headers and retried.status_code == 502


def test_an_idempotent_stream_replays_its_events(gw: Harness) -> None:
    headers = {"Idempotency-Key": "stream-1"}
    _, first = gw.stream("/v1/chat/completions", chat("say 2", stream=True), headers)
    response, again = gw.stream("/v1/chat/completions", chat("say 2", stream=True), headers)
    assert again == first and response.headers["idempotent-replayed"] == "true"
    assert response.headers["content-type"].startswith("text/event-stream")


def test_rpm_gives_429_with_retry_after(gw: Harness) -> None:
    gw.put_endpoint("limited", upstream=gw.upstream, rpm=1)
    assert gw.post("/v1/chat/completions", chat("say 1", model="endpoint/limited")).status_code == 200
    refused = gw.post("/v1/chat/completions", chat("say 1", model="endpoint/limited"))
    assert "rpm 1 reached" in error_of(refused, 429, "TooManyRequests")
    assert 1 <= int(refused.headers["retry-after"]) <= 60


def test_the_cap_gives_402_and_raising_it_lets_requests_through(gw: Harness) -> None:
    gw.put_endpoint("capped", upstream=gw.upstream, maxCostUSD="0.0003")
    assert gw.post("/v1/chat/completions", chat("say 1", model="endpoint/capped", max_tokens=20)).status_code == 200
    refused = gw.post("/v1/chat/completions", chat("say 1", model="endpoint/capped", max_tokens=100))
    assert "maxCostUSD" in error_of(refused, 402, "BudgetExceeded")
    gw.put_endpoint("capped", upstream=gw.upstream, maxCostUSD="1.00")
    assert gw.post("/v1/chat/completions", chat("say 1", model="endpoint/capped", max_tokens=100)).status_code == 200


def test_receipts_are_read_by_keys_of_their_project_only(gw: Harness, store: SqlStore) -> None:
    response = gw.post("/v1/chat/completions", chat("say 1"))
    outsider = create_key(store, "app", project="elsewhere").secret
    found = gw.get(f"/v1/requests/{response.headers['nodus-request-id']}", key=outsider)
    error_of(found, 404, "NotFound")
    error_of(gw.get("/v1/requests/ireq_00000000000000000000000000"), 404, "NotFound")


def test_a_receipt_is_read_only_with_the_key_that_made_the_request(gw: Harness, store: SqlStore) -> None:
    gw.put_endpoint("private", upstream=gw.upstream, allowedKeys=["app"])
    request_id = gw.post("/v1/chat/completions", chat("say 1", model="endpoint/private")).headers["nodus-request-id"]
    assert gw.get(f"/v1/requests/{request_id}").json()["keyName"] == "app"
    assert gw.get(f"/endpoints/default/private/v1/requests/{request_id}").status_code == 200
    nobody = "ireq_00000000000000000000000000"
    missing = error_of(gw.get(f"/v1/requests/{nobody}"), 404, "NotFound")

    def refused(path: str, key: str) -> None:
        """The answer a receipt that does not exist gets, word for word but the id: ids cannot be probed."""
        message = error_of(gw.get(path, key=key), 404, "NotFound")
        assert message.replace(request_id, nobody) == missing

    other = create_key(store, "other").secret  # the same project, a key the endpoint refuses
    refused(f"/v1/requests/{request_id}", other)
    refused(f"/endpoints/default/ep/v1/requests/{request_id}", gw.secret)  # not a request of that endpoint
    revoke_key(store, "other")
    again = create_key(store, "other").secret
    refused(f"/v1/requests/{request_id}", again)
    # A key given the name of a revoked key reads none of the revoked key's receipts.
    mine = gw.post("/v1/chat/completions", chat("say 1"), key=again).headers["nodus-request-id"]
    assert gw.get(f"/v1/requests/{mine}", key=again).status_code == 200
    revoke_key(store, "app")
    renamed = create_key(store, "app").secret
    refused(f"/v1/requests/{request_id}", renamed)


def test_authentication_and_allowed_keys_come_before_any_other_answer(gw: Harness, store: SqlStore) -> None:
    other = create_key(store, "other").secret
    gw.put_endpoint("pending", upstream=None, phase=Phase.PENDING, allowedKeys=["app"])
    gw.put_endpoint("stopped", upstream=gw.upstream, state="Stopped", allowedKeys=["app"])
    gw.put_endpoint("chat-only", upstream=gw.upstream, allowedKeys=["app"], status={"operations": ["ChatCompletions"]})
    for name in ("pending", "stopped"):
        response = gw.post("/v1/chat/completions", chat("say 1", model=f"endpoint/{name}"), key=other)
        assert "(allowedKeys)" in error_of(response, 401, "Unauthorized"), name
        # The key it takes gets the endpoint's own answer.
        error_of(gw.post("/v1/chat/completions", chat("say 1", model=f"endpoint/{name}")), 503, "Unavailable")
    embedding = {"model": "endpoint/chat-only", "input": "a"}
    error_of(gw.post("/v1/embeddings", embedding, key=other), 401, "Unauthorized")
    error_of(gw.post("/v1/embeddings", embedding), 400, "Unsupported")
    invalid = chat("say 1", model="endpoint/pending", max_tokens=0)
    error_of(gw.post("/v1/chat/completions", invalid, key=other), 401, "Unauthorized")
    auth = {"Authorization": f"Bearer {other}", "Content-Type": "application/json"}
    for body in (b"{not json", b"[" * 100_000, json.dumps(chat("x" * (1024 * 1024))).encode()):
        response = gw.client.post("/endpoints/default/pending/v1/chat/completions", content=body, headers=auth)
        error_of(response, 401, "Unauthorized")
    # No key, or a key nobody has: 401 before the body is looked at, oversized or malformed (401 before 400).
    error_of(gw.client.post("/v1/chat/completions", content=b"{not json"), 401, "Unauthorized")
    wrong = {"Authorization": "Bearer nds_nope", "Content-Type": "application/json"}
    error_of(gw.client.post("/v1/chat/completions", content=b"[" * 100_000, headers=wrong), 401, "Unauthorized")
    huge = json.dumps(chat("x" * (1024 * 1024)))
    error_of(gw.client.post("/v1/chat/completions", content=huge, headers=wrong), 401, "Unauthorized")
    error_of(gw.client.post("/v1/messages/count_tokens", json={}, headers=wrong), 401, "Unauthorized")
    # What a key may not call is not listed, nor reached through its path.
    assert "endpoint/stopped" not in [entry["id"] for entry in gw.get("/v1/models", key=other).json()["data"]]
    error_of(gw.get("/endpoints/default/chat-only/v1/models", key=other), 401, "Unauthorized")


def test_a_body_nested_deeper_than_the_limit_is_400_before_it_is_parsed(gw: Harness) -> None:
    auth = {"Authorization": f"Bearer {gw.secret}", "Content-Type": "application/json"}
    for deep in (
        b'{"model": "endpoint/ep", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"[" * 100_000,  # not even closed
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
        b'{"model": "endpoint/ep", "x": ' + b"[" * (MAX_JSON_DEPTH) + b"]" * (MAX_JSON_DEPTH) + b"}",
    ):
        response = gw.client.post("/v1/chat/completions", content=deep, headers=auth)
        assert f"deeper than {MAX_JSON_DEPTH}" in error_of(response, 400, "Invalid")
    # At the limit it is only JSON; brackets inside strings are text, however many.
    nested: Any = "[[[{{{" * 10_000 + '\\"]]]' * 10
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = [nested]
    body = {**chat("say 1", max_tokens=4), "metadata": {"deep": nested}}
    assert json_depth(body) == MAX_JSON_DEPTH + 1  # ... is one level too many
    error_of(gw.post("/v1/chat/completions", body), 400, "Invalid")
    body["metadata"] = {"deep": nested[0]}
    assert json_depth(body) == MAX_JSON_DEPTH
    response = gw.post("/v1/chat/completions", body)
    assert response.status_code == 200, response.text


def json_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((json_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((json_depth(item) for item in value), default=0)
    return 0


# ---- the other routes


def test_completions_forward_one_prompt(gw: Harness) -> None:
    response = gw.post("/v1/completions", {"model": "endpoint/ep", "prompt": "say 2", "max_tokens": 4})
    assert response.status_code == 200 and response.json()["choices"][0]["text"] == "w1 w2"
    assert gw.receipt(response)["operation"] == "Completions"
    _, lines = gw.stream("/v1/completions", {"model": "endpoint/ep", "prompt": "say 2", "stream": True})
    assert data_lines(lines)[-1] == "[DONE]"


def test_embeddings_charge_input_only(gw: Harness) -> None:
    response = gw.post("/v1/embeddings", {"model": "endpoint/ep", "input": ["first doc", "second doc"]})
    assert response.status_code == 200 and len(response.json()["data"]) == 2
    receipt = gw.receipt(response)
    assert receipt["operation"] == "Embeddings" and receipt["usage"]["outputTokens"] == 0
    assert receipt["amountUSD"] == "0.000008"  # 8 input tokens
    many = {"model": "endpoint/ep", "input": ["x"] * 2049}
    assert "at most 2048" in error_of(gw.post("/v1/embeddings", many), 400, "Invalid")


def test_responses_are_answered_as_responses(gw: Harness) -> None:
    body = {
        "model": "endpoint/ep",
        "input": "say 2",
        "instructions": "be brief",
        "max_output_tokens": 8,
        "store": False,
    }
    response = gw.post("/v1/responses", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["object"] == "response" and answer["status"] == "completed" and answer["model"] == "endpoint/ep"
    assert answer["output"][0]["content"][0] == {
        "type": "output_text",
        "text": "w1 w2",
        "annotations": [],
        "logprobs": [],
    }
    assert answer["usage"]["output_tokens"] == 2
    sent = gw.fake.requests[-1]
    assert sent["messages"][0] == {"role": "system", "content": "be brief"} and sent["max_tokens"] == 8
    assert gw.receipt(response)["operation"] == "Responses"


def test_responses_carry_client_function_tools(gw: Harness) -> None:
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    items = [
        {"role": "user", "content": "find it"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "tools"},
    ]
    answer = gw.post("/v1/responses", {"model": "endpoint/ep", "input": items, "tools": tools}).json()
    sent = gw.fake.requests[-1]
    assert sent["tools"] == [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    assert sent["messages"][1]["tool_calls"][0]["id"] == "c1" and sent["messages"][2]["role"] == "tool"
    calls = [item for item in answer["output"] if item["type"] == "function_call"]
    assert [(call["call_id"], call["arguments"]) for call in calls] == [
        ("call_a", '{"q": "a"}'),
        ("call_b", '{"q": "b"}'),
    ]


def test_a_responses_stream_sends_its_events_and_completes(gw: Harness) -> None:
    _, lines = gw.stream("/v1/responses", {"model": "endpoint/ep", "input": "say 2", "stream": True})
    kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 2
    final = json.loads(data_lines(lines)[-1])["response"]
    assert final["output"][0]["content"][0]["text"] == "w1 w2 " and final["usage"]["output_tokens"] == 2
    _, cut = gw.stream("/v1/responses", {"model": "endpoint/ep", "input": "cut 1", "stream": True})
    cut_kinds = [line.removeprefix("event: ") for line in cut if line.startswith("event: ")]
    assert cut_kinds[-1] == "error" and "response.completed" not in cut_kinds


def test_a_responses_stream_keeps_interleaved_tool_arguments_apart(gw: Harness) -> None:
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    _, lines = gw.stream("/v1/responses", {"model": "endpoint/ep", "input": "tools", "tools": tools, "stream": True})
    final = json.loads(data_lines(lines)[-1])["response"]
    assert [item["arguments"] for item in final["output"]] == ['{"q": "a"}', '{"q": "b"}']


def test_messages_are_answered_in_anthropics_shape(gw: Harness) -> None:
    body = {
        "model": "endpoint/ep",
        "max_tokens": 16,
        "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "say 2"}]}],
        "stop_sequences": ["END"],
    }
    response = gw.post("/v1/messages", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["type"] == "message" and answer["content"] == [{"type": "text", "text": "w1 w2"}]
    assert answer["stop_reason"] == "end_turn" and answer["usage"]["output_tokens"] == 2
    assert gw.fake.requests[-1]["stop"] == ["END"] and gw.fake.requests[-1]["max_tokens"] == 16
    assert "max_tokens: required" in error_of(
        gw.post("/v1/messages", {"model": "endpoint/ep", "messages": [{"role": "user", "content": "hi"}]}),
        400,
        "Invalid",
    )


def test_a_messages_stream_ends_with_message_stop_and_whole_tool_inputs(gw: Harness) -> None:
    body = {
        "model": "endpoint/ep",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "say 2"}],
        "stream": True,
    }
    _, lines = gw.stream("/v1/messages", body)
    kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    _, lines = gw.stream("/v1/messages", {**body, "messages": [{"role": "user", "content": "tools"}], "tools": tools})
    inputs = [
        json.loads(json.loads(line)["delta"]["partial_json"])
        for line in data_lines(lines)
        if json.loads(line).get("delta", {}).get("type") == "input_json_delta"
    ]
    assert inputs == [{"q": "a"}, {"q": "b"}]
    stop = json.loads(data_lines(lines)[-2])
    assert stop["delta"]["stop_reason"] == "tool_use"
    _, cut = gw.stream("/v1/messages", {**body, "messages": [{"role": "user", "content": "cut 1"}]})
    assert "message_stop" not in " ".join(cut) and cut[-2] == "event: error"
