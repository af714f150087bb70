"""Benchmark: what the inference gateway adds to a request, against calling its model server directly.

Run: `.venv/bin/python bench/inference.py [--requests 300] [--concurrency 16] [--rounds 3] [--state URL]
[--model-server]`. In one run, one after the other and alternating round by round, the same chat completions go:
- direct: to the model server on its Unix socket;
- gateway: to a real gateway process (`python -m nodus.reconciler.inference.gateway`, Unix socket) in front of
  the same model server, which checks the key, admits the request in the state store (limits, the hold against
  `maxCostUSD`), forwards it and settles its receipt: two write transactions per request.
The model server is, by default, an OpenAI-compatible server that answers at once with a fixed reply and usage
(started here as its own process), so what is measured is the gateway, not a model; `--model-server` puts nodus's
transformers server on the tiny model behind both instead (`max_tokens` 1). The state store is SQLite in a temp
folder unless `--state` names another (a PostgreSQL URL).

Two measures, each the median of `--rounds` rounds:
- latency: `--requests` requests one at a time; p50 and p99 milliseconds, and the gateway's added p50;
- throughput: `--requests` requests from `--concurrency` clients at once; requests per second, and the ratio
  gateway / direct.
Loopback Unix sockets only. The client is aiohttp in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.table import Table

from nodus.reconciler.inference.keys import create_key
from nodus.reconciler.state import open_store
from nodus.reconciler.state.records import ResourceKey
from nodus.reconciler.state.sql import SqlStore
from nodus.specs.status_names import Phase

REPO = Path(__file__).resolve().parents[1]
console = Console(width=120)
PRICES = 'version: bench\ninference:\n  tiny-qwen3: {input: "1.00", output: "2.00"}\n'
BODY = {
    "model": "endpoint/bench",
    "messages": [{"role": "user", "content": "Reverse the words: red green"}],
    "max_tokens": 1,
}

UPSTREAM_SOURCE = """
import json, sys, time
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

ANSWER = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "tiny",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "green red"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}}
RAW = json.dumps(ANSWER).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 512}]}).encode()

async def chat(request):
    await request.body()
    return Response(RAW, media_type="application/json")

async def models(request):
    return Response(MODELS, media_type="application/json")

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
print(json.dumps({"event": "ready"}), flush=True)
uvicorn.run(app, uds=sys.argv[1], log_level="warning", access_log=False)
"""


@dataclass
class Side:
    label: str
    socket: Path
    headers: dict[str, str]
    model: str
    """What the side is asked for: the model server's own name direct, the endpoint through the gateway."""


def start(argv: list[str], timeout: float = 180) -> subprocess.Popen[str]:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    line = ""
    while not line and time.monotonic() < deadline and process.poll() is None:
        line = process.stdout.readline()
    if not line:
        stop(process)
        raise SystemExit(
            f"bench/inference.py: {argv[2] if len(argv) > 2 else argv[0]} did not start: {process.stderr.read() if process.stderr else ''}"
        )
    return process


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def tiny_model_folder() -> Path:
    # Only with --model-server: it loads the training stack (torch, transformers) to build the tiny model once.
    from nodus.runtimes.tiny_model import Recipe, install

    cache = Path(tempfile.gettempdir()) / "nodus-bench-tiny-model"
    revision, _, _ = install(Recipe(), REPO / "examples" / "quickstart" / "env" / "reverse_words.py", cache / "hub")
    return cache / "hub" / "models--nodus--tiny-qwen3" / "snapshots" / revision


def prepare_store(url: str, upstream: Path) -> str:
    """The endpoint `bench` (Running, before the model server, a cap it never reaches) and a key: its secret."""
    store = open_store(url, project_state_dir=Path(tempfile.gettempdir()))
    assert isinstance(store, SqlStore)
    try:
        key = ResourceKey("InferenceEndpoint", "default", "bench")
        document = {
            "apiVersion": "nodus.dev/v1",
            "kind": "InferenceEndpoint",
            "metadata": {"name": "bench", "project": "default"},
            "spec": {"model": "nodus/tiny-qwen3", "maxCostUSD": "1000000.00", "state": "Running"},
        }
        store.put(key, document)
        store.set_status(key, {"phase": Phase.RUNNING, "upstream": f"unix:{upstream}", "servedModel": "tiny"})
        return create_key(store, f"bench-{os.getpid()}").secret
    finally:
        store.close()


async def one(session: aiohttp.ClientSession, side: Side) -> float:
    started = time.perf_counter()
    body = {**BODY, "model": side.model}
    async with session.post("http://localhost/v1/chat/completions", json=body, headers=side.headers) as response:
        await response.read()
        if response.status != 200:
            raise SystemExit(f"bench/inference.py: {side.label} answered {response.status}: {await response.text()}")
    return time.perf_counter() - started


async def latency(side: Side, count: int) -> list[float]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(side.socket))) as session:
        return [await one(session, side) for _ in range(count)]


async def throughput(side: Side, count: int, concurrency: int) -> float:
    connector = aiohttp.UnixConnector(path=str(side.socket), limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        remaining = count

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await one(session, side)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--state", help="the state store (default: SQLite in a temp folder)")
    parser.add_argument("--model-server", action="store_true", help="the tiny model behind both, not a fixed reply")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="nodus-bench-gw-"))
    upstream_socket, gateway_socket = folder / "model.sock", folder / "gw.sock"
    (folder / "prices.yaml").write_text(PRICES)
    state = args.state or f"sqlite://{folder / 'state.db'}"
    if args.model_server:
        model = tiny_model_folder()
        upstream_argv = [sys.executable, "-m", "nodus.runtimes.serving", "--model", str(model), "--name", "tiny"]
        upstream_argv += ["--uds", str(upstream_socket)]
        backend = "nodus's transformers server, tiny model, max_tokens 1"
    else:
        upstream_argv = [sys.executable, "-c", UPSTREAM_SOURCE, str(upstream_socket)]
        backend = "a fixed-reply OpenAI server (uvicorn)"
    upstream = start(upstream_argv)
    gateway = None
    try:
        secret = prepare_store(state, upstream_socket)
        gateway_argv = [sys.executable, "-m", "nodus.reconciler.inference.gateway", "--state", state]
        gateway_argv += ["--uds", str(gateway_socket), "--prices", str(folder / "prices.yaml")]
        gateway = start(gateway_argv)
        sides = [
            Side("direct", upstream_socket, {}, "tiny"),
            Side("gateway", gateway_socket, {"Authorization": f"Bearer {secret}"}, "endpoint/bench"),
        ]
        for side in sides:  # warm up: connections, caches, the first SQLite pages
            asyncio.run(latency(side, 20))
        latencies: dict[str, list[list[float]]] = {side.label: [] for side in sides}
        rates: dict[str, list[float]] = {side.label: [] for side in sides}
        for _ in range(args.rounds):
            for side in sides:
                latencies[side.label].append(asyncio.run(latency(side, args.requests)))
                rates[side.label].append(asyncio.run(throughput(side, args.requests, args.concurrency)))
    finally:
        if gateway is not None:
            stop(gateway)
        stop(upstream)
    table = Table(title=f"gateway vs direct: {args.requests} chat completions x {args.rounds} rounds, medians")
    for column in ("path", "p50 ms", "p99 ms", f"req/s ({args.concurrency} clients)"):
        table.add_column(column, justify="right" if column != "path" else "left")
    summary: dict[str, tuple[float, float, float]] = {}
    for side in sides:
        p50 = statistics.median(percentile(run, 0.5) for run in latencies[side.label]) * 1000
        p99 = statistics.median(percentile(run, 0.99) for run in latencies[side.label]) * 1000
        rps = statistics.median(rates[side.label])
        summary[side.label] = (p50, p99, rps)
        table.add_row(side.label, f"{p50:.2f}", f"{p99:.2f}", f"{rps:.0f}")
    console.print(table)
    added = summary["gateway"][0] - summary["direct"][0]
    ratio = summary["gateway"][2] / summary["direct"][2]
    console.print(f"backend: {backend}; state store: {state.split('://')[0]}; cores: {os.cpu_count()}")
    console.print(f"added at p50: {added:.2f} ms per request; throughput ratio gateway/direct: {ratio:.2f}")
    print(json.dumps({"added_p50_ms": round(added, 3), "throughput_ratio": round(ratio, 3), "sides": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
