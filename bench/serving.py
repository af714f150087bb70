"""Benchmark: the transformers model server with request batching against the same server with batching off.

Run: `.venv/bin/python bench/serving.py [--requests 16] [--max-tokens 64] [--rounds 3]`. Both sides are real
`python -m nodus.runtimes.serving` processes on the tiny model (`nodus.runtimes.tiny_model`, warmed up on the
quickstart task), on a free 127.0.0.1 port, measured in the same run one after the other:

- batching on: the default scheduler (up to 32 requests per forward pass, a 10 ms window when idle, requests
  arriving later join the running batch);
- batching off: `--max-batch-size 1` (one request per forward pass, the others wait in line).

Both servers run at once and the rounds alternate between them. Each round sends `--requests` chat completions at once (one thread each, greedy, `ignore_eos` so every reply is
exactly `--max-tokens` tokens: both sides do the same work) and times from the first send to the last answer.
Requests per second and generated tokens per second are the median round's; the ratio is batching on over off.
The server's own counters (/stats) are printed too: forward passes, how many were shared, the largest batch.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from nodus.runtimes.serving.backend import Listen, ServeSpec
from nodus.runtimes.serving.client import ServingClient
from nodus.runtimes.serving.transformers_backend import TransformersBackend
from nodus.runtimes.tiny_model import Recipe, install

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "Reverse the words: apple banana cherry",
    "Reverse the words: red green",
    "Reverse the words: one two three",
]
console = Console(width=140)


@dataclass
class Result:
    label: str
    requests_per_s: float
    tokens_per_s: float
    mean_latency_s: float
    stats: dict[str, Any]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_round(client: ServingClient, count: int, max_tokens: int) -> tuple[float, int, list[float]]:
    """(wall seconds, tokens generated, per-request latencies) of `count` requests sent at once."""
    answers: list[tuple[int, Any, float]] = []
    lock = threading.Lock()
    start_line = threading.Barrier(count + 1)

    def call(index: int) -> None:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}],
            "temperature": 0,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        start_line.wait()
        sent = time.perf_counter()
        status, answer = client.post("/v1/chat/completions", body)
        with lock:
            answers.append((status, answer, time.perf_counter() - sent))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    start_line.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    failed = [answer for status, answer, _ in answers if status != 200]
    if failed:
        raise RuntimeError(f"bench/serving.py: {len(failed)} requests failed: {failed[0]}")
    tokens = sum(answer["usage"]["completion_tokens"] for _, answer, _ in answers)
    return wall, tokens, [latency for _, _, latency in answers]


class Side:
    """One server process of the comparison, started with `max_batch_size` and stopped by its pid."""

    def __init__(self, label: str, model: Path, max_batch_size: int, log: Path) -> None:
        self.label = label
        self.spec = ServeSpec(model=model, served_name="tiny", listen=Listen(host="127.0.0.1", port=free_port()))
        self.backend = TransformersBackend(max_batch_size=max_batch_size)
        command = self.backend.command(self.spec)
        with log.open("wb") as stderr:
            self.process = subprocess.Popen(
                command.argv, env={**os.environ, **command.env}, stdout=subprocess.DEVNULL, stderr=stderr
            )
        self.client = ServingClient(self.spec.listen, timeout=600)
        self.rounds: list[tuple[float, int, list[float]]] = []

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=60)

    def result(self, requests: int) -> Result:
        wall, tokens, latencies = sorted(self.rounds, key=lambda r: r[0])[len(self.rounds) // 2]
        _, stats = self.client.get("/stats")
        return Result(self.label, requests / wall, tokens / wall, statistics.mean(latencies), stats)


def compare(model: Path, args: argparse.Namespace, logs: Path) -> list[Result]:
    """Both servers up at once; rounds alternate between them, so a busy moment of a shared machine falls on both
    sides alike rather than on whichever ran second."""
    sides = [
        Side("batching on (max batch 32)", model, 32, logs / "on.log"),
        Side("batching off (max batch 1)", model, 1, logs / "off.log"),
    ]
    try:
        for side in sides:
            side.backend.wait_ready(side.spec, timeout=300, process=side.process)
            one_round(side.client, 2, 4)  # warm-up: first forward passes, allocator
        for _ in range(args.rounds):
            for side in sides:
                side.rounds.append(one_round(side.client, args.requests, args.max_tokens))
        return [side.result(args.requests) for side in sides]
    finally:
        for side in sides:
            side.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=16, help="concurrent requests per round")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side (the median is reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nodus-bench-serving-") as temporary:
        workdir = Path(temporary)
        cache = Path(os.environ.get("HF_HUB_CACHE") or workdir / "hub")
        revision, model, built = install(Recipe(), REPO / "examples" / "quickstart" / "env" / "reverse_words.py", cache)
        console.print(f"tiny model {'built' if built else 'cached'}: {revision}")
        results = compare(model, args, workdir)
    on, off = results
    table = Table(
        title=f"transformers model server, tiny model: {args.requests} concurrent chat requests x {args.max_tokens} tokens (median of {args.rounds} rounds)"
    )
    for column in (
        "server",
        "requests/s",
        "tokens/s",
        "mean latency s",
        "forward passes",
        "shared passes",
        "largest batch",
    ):
        table.add_column(column, justify="left" if column == "server" else "right")
    for result in results:
        table.add_row(
            result.label,
            f"{result.requests_per_s:.2f}",
            f"{result.tokens_per_s:.0f}",
            f"{result.mean_latency_s:.2f}",
            str(result.stats["forward_passes"]),
            str(result.stats["shared_forward_passes"]),
            str(result.stats["largest_batch"]),
        )
    console.print(table)
    console.print(
        f"batching on / off: {on.requests_per_s / off.requests_per_s:.2f}x requests/s, "
        f"{on.tokens_per_s / off.tokens_per_s:.2f}x tokens/s"
    )
    console.print(json.dumps({"on": on.stats, "off": off.stats}), style="dim", soft_wrap=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
