"""A stand-in for the GitHub REST API's issue comments, served on 127.0.0.1 for tests: never a real address.

Who uses it: `reconciler/tests/test_pr_comment.py` (the `nodus pr-comment` command) and `tests/test_workflows.py`
(the pull-request workflow run locally). It answers exactly the calls `nodus pr-comment` makes:

    GET   /repos/OWNER/NAME/issues/N/comments?per_page=&page=   list a pull request's comments, a page at a time
    POST  /repos/OWNER/NAME/issues/N/comments                   create one ({"body"})
    PATCH /repos/OWNER/NAME/issues/comments/ID                  edit one ({"body"})

and refuses a request without `Authorization: Bearer TOKEN` (401) as GitHub does. Every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

JSONObject = dict[str, Any]
_LIST = re.compile(r"^/repos/([^/]+/[^/]+)/issues/(\d+)/comments$")
_ONE = re.compile(r"^/repos/([^/]+/[^/]+)/issues/comments/(\d+)$")


@dataclass
class FakeGitHub:
    """`with FakeGitHub(token) as api:` serves on `api.url`; `api.comments[(repo, number)]` is what was posted."""

    token: str = "test-token"
    bot: str = "github-actions[bot]"
    comments: dict[tuple[str, int], list[JSONObject]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request, in order."""
    _next_id: int = 1000
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "use FakeGitHub as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add_comment(self, repo: str, number: int, body: str, *, user: str = "someone") -> JSONObject:
        """A comment someone else wrote (the command must leave it alone)."""
        with self._lock:
            return self._create(repo, number, body, user)

    def __enter__(self) -> FakeGitHub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-github", daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- the API ----------------------------------------------------------------------------------------

    def _create(self, repo: str, number: int, body: str, user: str) -> JSONObject:
        self._next_id += 1
        comment = {
            "id": self._next_id,
            "body": body,
            "user": {"login": user},
            "html_url": f"https://github.invalid/{repo}/pull/{number}#issuecomment-{self._next_id}",
        }
        self.comments.setdefault((repo, number), []).append(comment)
        return comment

    def answer(self, method: str, target: str, headers: dict[str, str], payload: Any) -> tuple[int, Any]:
        """(HTTP status, JSON answer) for one request."""
        parts = urlsplit(target)
        with self._lock:
            self.requests.append((method, target))
            if headers.get("authorization") != f"Bearer {self.token}":
                return 401, {"message": "Bad credentials"}
            listed, one = _LIST.match(parts.path), _ONE.match(parts.path)
            if listed and method == "GET":
                query = parse_qs(parts.query)
                per_page = int(query.get("per_page", ["30"])[0])
                page = int(query.get("page", ["1"])[0])
                found = self.comments.get((listed.group(1), int(listed.group(2))), [])
                return 200, found[(page - 1) * per_page : page * per_page]
            if listed and method == "POST" and isinstance(payload, dict) and isinstance(payload.get("body"), str):
                return 201, self._create(listed.group(1), int(listed.group(2)), payload["body"], self.bot)
            if one and method == "PATCH" and isinstance(payload, dict) and isinstance(payload.get("body"), str):
                for comment in _all(self.comments, one.group(1)):
                    if comment["id"] == int(one.group(2)):
                        comment["body"] = payload["body"]
                        return 200, comment
                return 404, {"message": "Not Found"}
            return 404, {"message": "Not Found"}


def _all(comments: dict[tuple[str, int], list[JSONObject]], repo: str) -> list[JSONObject]:
    return [comment for (name, _), listed in comments.items() if name == repo for comment in listed]


def _handler(api: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = None
            headers = {key.lower(): value for key, value in self.headers.items()}
            status, answer = api.answer(self.command, self.path, headers, payload)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # http.server calls do_<METHOD>.
        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_PATCH(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `api.requests`
            return None

    return Handler
