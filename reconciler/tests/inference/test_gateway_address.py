"""Each project's gateway has a port of its own (`inference/gateway_address.py`): chosen free at the first start and
kept; nodus.yaml's port taken by another project's gateway is said in one line naming that project and its pid; and
`nodus inference chat` asks `/health` whose gateway answers before it sends a key.

Other gateways are stood in for by a small HTTP server on 127.0.0.1 answering `/health` as a gateway does.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.errors import ConfigError
from nodus.reconciler.inference import gateway_address
from nodus.reconciler.inference.gateway_address import PORT_VALUE, check_gateway, choose_address, project_id
from nodus.reconciler.project import Project

OTHER = {"status": "ok", "gateway": "gw_other", "project": "prj_other", "root": "/srv/other-project", "pid": 4242}


@contextmanager
def other_gateway(answer: dict[str, object]) -> Iterator[tuple[int, list[dict[str, str]]]]:
    """A server on a free loopback port answering `/health` with `answer`; the headers of each request it got."""
    seen: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self._answer()

        def _answer(self) -> None:
            seen.append(dict(self.headers.items()))
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    (root / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    return Project.find(root)


def test_a_port_is_chosen_free_kept_and_chosen_again_only_when_another_process_took_it(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = free_port()
    monkeypatch.setattr(gateway_address, "DEFAULT_PORT", first)
    store = project.open_state()
    try:
        with socket.socket() as taken:  # another process holds the first candidate
            taken.bind(("127.0.0.1", first))
            chosen = choose_address(project, store)
            assert chosen.port != first and chosen.port > first
            assert store.get_value(PORT_VALUE) == str(chosen.port) and project_id(store) is not None
            assert choose_address(project, store) == chosen  # kept
            assert gateway_address.address(project, store) == chosen  # what the CLI reads
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", chosen.port))
            again = choose_address(project, store)
            assert again.port != chosen.port and store.get_value(PORT_VALUE) == str(again.port)
            assert choose_address(project, store, running=f"127.0.0.1:{chosen.port}").port == chosen.port
    finally:
        store.close()


def test_a_configured_port_another_projects_gateway_holds_is_refused_naming_that_project(project: Project) -> None:
    with other_gateway(OTHER) as (port, _):
        (project.root / "nodus.yaml").write_text(f"inference:\n  gateway: {{port: {port}}}\n")
        store = project.open_state()
        try:
            with pytest.raises(ConfigError) as refused:
                choose_address(Project.find(project.root), store)
        finally:
            store.close()
    assert refused.value.message == (
        f"nodus.yaml: inference.gateway.port {port}: 127.0.0.1:{port} is taken by the gateway of project "
        "/srv/other-project (pid 4242)"
    )
    assert refused.value.hint is not None and "leave it out to have a free one chosen" in refused.value.hint


def test_a_configured_port_its_own_gateway_holds_is_kept(project: Project) -> None:
    store = project.open_state()
    try:
        own = project_id(store, create=True)
        with other_gateway({**OTHER, "project": own, "root": str(project.root)}) as (port, _):
            (project.root / "nodus.yaml").write_text(f"inference:\n  gateway: {{port: {port}}}\n")
            assert choose_address(Project.find(project.root), store).port == port
    finally:
        store.close()


def test_chat_sends_no_key_to_another_projects_gateway(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    store = project.open_state()
    try:
        project_id(store, create=True)
        with other_gateway(OTHER) as (port, seen):
            store.set_value(PORT_VALUE, str(port))
            with pytest.raises(ConfigError, match=r"the gateway of project /srv/other-project \(pid 4242\) answers"):
                check_gateway(project, store)
            monkeypatch.chdir(project.root)
            monkeypatch.setenv("NODUS_API_KEY", "nds_secret")
            result = CliRunner().invoke(cli, ["inference", "chat", "--endpoint", "chat", "hi"])
    finally:
        store.close()
    assert result.exit_code == 1, result.output
    assert f"http://127.0.0.1:{port}: the gateway of project /srv/other-project (pid 4242) answers there" in (
        result.output
    )
    assert "no key was sent" in result.output and "Traceback" not in result.output
    assert seen and all("Authorization" not in headers for headers in seen)  # only /health was asked
