"""Issue 16's first acceptance point: the quickstart's trained adapter served by an InferenceEndpoint, and the OpenAI
Python client, given only the gateway's base URL and a key, getting completions from it, streamed and not.

The quickstart TrainingJob runs a few GRPO steps (its Environment built into podman), an endpoint serves its
`outputs/adapter` over the base model (`model: {trainingJob: quickstart}`), `nodus keys create` makes a key, and the
client calls the project's gateway (nodus.yaml `inference.gateway`, a free loopback port here): the shared base URL
with `model: "endpoint/NAME"`, and the endpoint's own base URL. Then what the seeds promise around it: the receipt
of each request, `nodus inference chat`, 401 without a key, 503 while the endpoint is stopped, and the delete of the
last endpoint stopping the model server and the gateway.

Needs podman and the base image (the Environment), and the training stack.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: quickstart}}
spec:
  runtime: nodus/grpo-lora
  model: {{uri: "hf://nodus/tiny-qwen3@{revision}"}}
  environment: {{name: reverse-words@1.0.0, trainTasks: 600, heldOutTasks: 16, seed: 0}}
  evaluation: {{baseline: false, final: false}}
  parameters: {{steps: 2, groupsPerStep: 2, groupSize: 4, maxTokens: 16, saveSteps: 1}}
"""
ENDPOINT = """apiVersion: nodus.dev/v1
kind: InferenceEndpoint
metadata: {name: reverser}
spec: {model: {trainingJob: quickstart}, rpm: 100, maxConcurrent: 4, maxCostUSD: "1.00"}
"""


EVALUATION = """apiVersion: nodus.dev/v1
kind: Secret
metadata: {name: eval-key}
spec: {keys: [NODUS_API_KEY], provider: File, path: eval.env}
---
apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {name: measured}
spec:
  runtime: nodus/evaluate
  mode: Evaluate
  environment: {name: reverse-words@1.0.0, heldOutTasks: 16, seed: 0}
  evaluation: {endpoint: {name: reverser, keySecret: eval-key}}
  parameters: {maxTokens: 16}
"""


def endpoint_spend(project: Path) -> int:
    """Nano-dollars the endpoint has charged, from the gateway's ledger in the project's store."""
    from nodus.reconciler.inference.ledger import Ledger
    from nodus.reconciler.project import Project

    store = Project.find(project).open_state()
    try:
        settled, _ = Ledger(store).spend("default", "reverser")  # type: ignore[arg-type]
    finally:
        store.close()
    return settled


def nodus(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def status_of(kind: str, name: str) -> dict[str, Any]:
    code, out, err = nodus("get", kind, name, "-o", "json")
    assert code == 0, err
    found: dict[str, Any] = json.loads(out)["status"]
    return found


def test_the_quickstart_adapter_served_to_the_openai_client_through_the_gateway(
    built_quickstart: Callable[[str], Path], tiny_model: tuple[str, str]
) -> None:
    from openai import APIStatusError, AuthenticationError, OpenAI

    project = built_quickstart("")
    port = free_port()
    (project / "nodus.yaml").write_text(f"inference: {{gateway: {{port: {port}}}}}\n")
    (project / "job.yaml").write_text(JOB.format(revision=tiny_model[1]))
    code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "8m")
    assert code == 0 and "TrainingJob/quickstart: Succeeded" in err + out, out + err

    (project / "endpoint.yaml").write_text(ENDPOINT)
    try:
        code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "5m")
        assert code == 0 and "InferenceEndpoint/reverser: Running" in err + out, out + err
        status = status_of("ep", "reverser")
        assert status["servedModel"] == "quickstart" and status["model"] == "nodus/tiny-qwen3", status
        assert status["weights"].startswith("TrainingJob/quickstart over hf://nodus/tiny-qwen3@"), status
        assert status["url"] == f"http://127.0.0.1:{port}/endpoints/default/reverser/v1"

        code, secret, err = nodus("keys", "create", "app")
        assert code == 0 and secret.strip().startswith("nds_"), err
        key = secret.strip()

        shared = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key)
        raw = shared.chat.completions.with_raw_response.create(
            model="endpoint/reverser",
            messages=[{"role": "user", "content": "reverse the words: red green"}],
            max_tokens=8,
            temperature=0,
        )
        reply = raw.parse()
        request_id = raw.headers["Nodus-Request-Id"]
        assert request_id.startswith("ireq_") and reply.choices[0].message.role == "assistant"
        assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 8

        own = OpenAI(base_url=status["url"], api_key=key)
        stream = own.chat.completions.create(
            model="reverser",
            messages=[{"role": "user", "content": "reverse the words: red green"}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text == reply.choices[0].message.content  # greedy: the same answer, streamed

        code, out, err = nodus("inference", "receipt", request_id, "-o", "json")
        assert code == 0, err
        receipt = json.loads(out)
        assert receipt["state"] == "Settled" and receipt["endpoint"] == "reverser", receipt
        assert receipt["usage"]["outputTokens"] == reply.usage.completion_tokens or receipt["usage"], receipt
        assert float(receipt["amountUSD"]) > 0 and receipt["pricebookVersion"]

        code, out, err = nodus("inference", "chat", "--endpoint", "reverser", "--max-tokens", "4", "a b",
                               env={"NODUS_API_KEY": key})  # fmt: skip
        assert code == 0 and out.strip() != "", err
        assert err.startswith("request ireq_") and " output tokens · $" in err, err

        # A trained adapter measured through the path users call: nodus/evaluate answers the held-out tasks through
        # the endpoint (its key from a Secret), graded by the platform; every answer is a request of the endpoint's.
        (project / "eval.env").write_text(f"NODUS_API_KEY={key}\n")
        (project / "eval.yaml").write_text(EVALUATION)
        spent_before = endpoint_spend(project)
        code, out, err = nodus("apply", ".", "--yes", "--wait", "--timeout", "5m")
        assert code == 0 and "TrainingJob/measured: Succeeded" in err + out, out + err
        results = json.loads((project / ".nodus/jobs/default/measured/outputs/results.json").read_text())
        assert results["backend"] == "endpoint" and results["tasks"] == 16, results
        assert sum(results["verdicts"].values()) == 16 and results["passRate"] is not None, results
        assert endpoint_spend(project) > spent_before  # charged as any caller's requests are

        with pytest.raises(AuthenticationError):
            OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="nds_wrong").chat.completions.create(
                model="endpoint/reverser", messages=[{"role": "user", "content": "x"}], max_tokens=2
            )
        assert nodus("stop", "ep/reverser")[0] == 0
        with pytest.raises(APIStatusError) as stopped:
            shared.chat.completions.create(
                model="endpoint/reverser", messages=[{"role": "user", "content": "x"}], max_tokens=2
            )
        assert stopped.value.status_code == 503
    finally:
        nodus("delete", "ep/reverser")
    assert status_of("tj", "quickstart")["phase"] == "Succeeded"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # the gateway went with the last endpoint
