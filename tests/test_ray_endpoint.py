"""An InferenceEndpoint on a Ray cluster (issue 16, "an endpoint becomes a service on the project's executor: local
here, Ray on GPU hosts"): the model table's `nodus/tiny-qwen3` served by nodus's model server as a Ray job on a worker
of the root conftest's `ray_cluster` (in a network namespace of its own, token auth), behind the project's gateway on
this host.

The server listens on the node's address with the endpoint's key (`executors/ray/services.py`,
`service_session.py`): a call without the key gets 401 from it; the gateway derives the key from the project's state
folder and forwards a keyed client's chat completion; `nodus stop ep/NAME` ends its Ray job, `nodus start` submits a
new start, and the delete stops it.

Needs Ray (the `nodus[ray]` extra), root for the namespace, and the training stack (the server runs transformers).
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from nodus.testing.module_project import nodus
from nodus.testing.ray_cluster import RayTestCluster
from nodus.testing.registry_server import free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ENDPOINT = """apiVersion: nodus.dev/v1
kind: InferenceEndpoint
metadata: {name: chat}
spec: {model: nodus/tiny-qwen3, rpm: 60, maxCostUSD: "1.00"}
"""
CHAT = {"messages": [{"role": "user", "content": "reverse the words: red green"}], "max_tokens": 4, "temperature": 0}


def call(base: str, route: str, body: dict[str, Any], key: str | None = None) -> tuple[int, dict[str, Any]]:
    """POST `body` to `base` (`http://HOST:PORT`, reached from the calling thread's namespace): (status, JSON)."""
    host, _, port = base.removeprefix("http://").rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        connection.request("POST", route, json.dumps(body), headers)
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        connection.close()


def status_of(name: str) -> dict[str, Any]:
    code, output = nodus("get", "ep", name, "-o", "json")
    assert code == 0, output
    found: dict[str, Any] = json.loads(output)["status"]
    return found


def test_an_endpoint_is_served_from_a_ray_node_behind_the_gateway_with_its_key(
    tmp_path: Path, tiny_model: tuple[str, str], ray_cluster: RayTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", tiny_model[0])
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster.token)
    project = tmp_path / "serving"
    project.mkdir()
    (project / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    (project / "endpoint.yaml").write_text(ENDPOINT)
    monkeypatch.chdir(project)
    with ray_cluster.inside():
        port = free_port()  # in the cluster's namespace, where the gateway runs
        (project / "nodus.yaml").write_text(
            f"executor: {{ray: {{address: {ray_cluster.dashboard_url}, sharedFilesystem: true}}}}\n"
            f"inference: {{gateway: {{port: {port}}}}}\n"
        )
        try:
            code, output = nodus("apply", ".", "--yes", "--wait", "--timeout", "5m")
            assert code == 0 and "InferenceEndpoint/chat: Running" in output, output
            status = status_of("chat")
            upstream = status["upstream"]
            assert upstream.startswith("http://") and status["upstreamAuth"] == "Bearer", status
            assert "key" not in json.dumps(status).lower(), status  # no key in any status

            # The server on the node answers nobody without the endpoint's key ...
            denied, answer = call(upstream, "/v1/chat/completions", {"model": "nodus/tiny-qwen3", **CHAT})
            assert denied == 401 and answer["error"]["code"] == "Unauthorized", answer
            # ... and the gateway, which derives it, forwards a keyed client's request there.
            code, key = nodus("keys", "create", "app")
            assert code == 0, key
            (secret,) = [line for line in key.split() if line.startswith("nds_")]  # printed once
            ok, reply = call(
                f"http://127.0.0.1:{port}", "/v1/chat/completions", {"model": "endpoint/chat", **CHAT}, secret
            )
            assert ok == 200, reply
            assert reply["choices"][0]["message"]["role"] == "assistant" and reply["usage"]["completion_tokens"] >= 1
            print(f"\nendpoint on a Ray node at {upstream}: {reply['choices'][0]['message']['content']!r}")

            code, output = nodus("stop", "ep/chat")
            assert code == 0, output
            assert status_of("chat")["phase"] == "Stopped"
            stopped, _ = call(
                f"http://127.0.0.1:{port}", "/v1/chat/completions", {"model": "endpoint/chat", **CHAT}, secret
            )
            assert stopped == 503
            code, output = nodus("start", "ep/chat")
            assert code == 0, output
            code, output = nodus("wait", "ep/chat", "--for=jsonpath={.status.phase}=Running", "--timeout", "3m")
            assert code == 0, output
            again, reply = call(
                f"http://127.0.0.1:{port}", "/v1/chat/completions", {"model": "endpoint/chat", **CHAT}, secret
            )
            assert again == 200, reply
        finally:
            code, output = nodus("delete", "ep/chat")
        assert code == 0, output
    # The server on the node went with its Ray job: its supervisor was told to stop it before Ray ended the session.
    node = json.loads((project / ".nodus/ray-node-jobs/.services/default/chat/status.json").read_text())
    assert node["phase"] == "Stopped", node
    cmdline = Path(f"/proc/{node['pid']}/cmdline")
    assert not cmdline.exists() or b"nodus.runtimes.serving" not in cmdline.read_bytes(), node
