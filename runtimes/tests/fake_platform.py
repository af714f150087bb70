"""A stand-in for the job supervisor's attempt API, for the runtimes' own tests (no podman, no reconciler).

Who uses it: `runtimes/tests/test_*.py`. It serves `tasks`, `gradings` and `events` on a Unix socket for one
module environment loaded in process (`tasks(split)` + `reward(completion, answer)` or `step(turns, answer)`,
whose third value, when it returns one, is the next message's role), answers the way the
real API does (no answers in tasks; verdicts Correct / Incorrect / InvalidOutput / InfrastructureFailure),
and records every request so tests can check what the trainer sent and received. The real path (supervisor,
sandboxed graders) is tested end to end in `tests/test_train_grpo.py`.
"""

from __future__ import annotations

import importlib.util
import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any


class FakePlatform:
    def __init__(self, socket_path: Path, module_path: Path, *, train: int, test: int, fail_every: int = 0) -> None:
        spec = importlib.util.spec_from_file_location("fake_env", module_path)
        assert spec is not None and spec.loader is not None
        self.env = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.env)
        self.tasks = {
            split: {f"{split}-{i}": t for i, t in enumerate(self.env.tasks(split)[:count])}
            for split, count in (("train", train), ("test", test))
        }
        self.answers = {tid: t["answer"] for split in self.tasks.values() for tid, t in split.items()}
        self.fail_every = fail_every
        self.requests: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.gradings: list[dict[str, Any]] = []
        self._graded = 0
        self._lock = threading.Lock()
        platform = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                reply = platform.handle(self.path.rsplit("/", 1)[-1], body)
                data = json.dumps(reply).encode()
                with platform._lock:
                    platform.requests.append({"path": self.path, "request": body, "response": reply})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

            def address_string(self) -> str:
                return "unix"

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(str(socket_path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakePlatform:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        if endpoint == "tasks":
            files = {}
            for split, tasks in self.tasks.items():
                lines = [
                    json.dumps({"taskId": tid, "prompt": t["prompt"], "metadata": t.get("metadata", {})})
                    for tid, t in tasks.items()
                ]
                files[f"{split}.jsonl"] = "".join(line + "\n" for line in lines)
            return {"files": files}
        if endpoint == "events":
            with self._lock:
                self.events.append(body)
            return {"accepted": True}
        verdicts = []
        for item in body["items"]:
            with self._lock:
                self._graded += 1
                failing = self.fail_every and self._graded % self.fail_every == 0
            extra: dict[str, Any] = {}
            if failing:
                verdict, reward = "InfrastructureFailure", None
            elif "turns" in item:
                # Multi-turn: replay the episode as the grader does; a single-turn module ends after one reply.
                answer = self.answers[item["taskId"]]
                role = "user"
                if hasattr(self.env, "step"):
                    message, value, *said = self.env.step(list(item["turns"]), answer)
                    role = said[0] if said else role
                else:
                    message, value = None, self.env.reward(item["turns"][-1], answer)
                extra = {"next": message, "done": message is None}
                if role != "user" and message is not None:
                    extra["nextRole"] = role  # as nodus-env writes it: only a tool result says who speaks
                verdict = "InvalidOutput" if value is None else ("Correct" if value >= 1 else "Incorrect")
                reward = None if value is None else float(value)
            else:
                value = self.env.reward(item.get("completion", ""), self.answers[item["taskId"]])
                verdict = "InvalidOutput" if value is None else ("Correct" if value >= 1 else "Incorrect")
                reward = None if value is None else float(value)
            record = {"taskId": item["taskId"], "verdict": verdict, "reward": reward, "evidence": {}, **extra}
            verdicts.append(record)
            with self._lock:
                self.gradings.append({**record, "phase": body.get("phase", "Training")})
        return {"verdicts": verdicts}
