"""`nodus pr-comment` against a stand-in GitHub API on 127.0.0.1 (`nodus.testing.fake_github`): the first run
creates the comment, later runs edit the same one, other comments are left alone, and mistakes are one line."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli
from nodus.cli.pr_comment import DEFAULT_MARKER, MAX_BODY, compose
from nodus.testing.fake_github import FakeGitHub

REPO = "acme/models"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t0ken") as fake:
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
        monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
        monkeypatch.delenv("GITHUB_EVENT_PATH", raising=False)
        yield fake


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def body(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.md"
    path.write_text(text)
    return str(path)


def test_the_first_run_creates_and_the_next_updates_the_same_comment(api: FakeGitHub, tmp_path: Path) -> None:
    api.add_comment(REPO, 7, "LGTM")
    code, output = nodus(
        "pr-comment", "--body-file", body(tmp_path, "## nodus plan\n\nfirst\n"), "--repo", REPO, "--pr", "7"
    )
    assert code == 0, output
    comments = api.comments[(REPO, 7)]
    assert len(comments) == 2 and comments[0]["body"] == "LGTM"
    made = comments[1]
    assert made["body"] == f"{DEFAULT_MARKER}\n## nodus plan\n\nfirst\n"
    assert f"created comment {made['id']} on {REPO}#7" in output

    code, output = nodus(
        "pr-comment", "--body-file", body(tmp_path, "## nodus plan\n\nsecond\n"), "--repo", REPO, "--pr", "7"
    )
    assert code == 0, output
    assert f"updated comment {made['id']} on {REPO}#7" in output
    assert [c["id"] for c in api.comments[(REPO, 7)]] == [comments[0]["id"], made["id"]]
    assert made["body"].endswith("second\n") and comments[0]["body"] == "LGTM"
    assert [method for method, _ in api.requests] == ["GET", "POST", "GET", "PATCH"]


def test_repository_and_pull_request_come_from_the_actions_environment(
    api: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": 12, "pull_request": {"number": 12}}))
    monkeypatch.setenv("GITHUB_REPOSITORY", REPO)
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    code, output = nodus("pr-comment", "--body-file", body(tmp_path, "plan"), "--marker", "<!-- other -->")
    assert code == 0, output
    assert api.comments[(REPO, 12)][0]["body"] == "<!-- other -->\nplan"
    # A different marker is a different comment; a body that starts with its marker keeps it once.
    code, output = nodus("pr-comment", "--body-file", body(tmp_path, f"{DEFAULT_MARKER}\nplan"))
    assert code == 0, output
    assert [c["body"] for c in api.comments[(REPO, 12)]] == ["<!-- other -->\nplan", f"{DEFAULT_MARKER}\nplan"]


def test_the_comment_is_found_on_a_later_page(api: FakeGitHub, tmp_path: Path) -> None:
    for index in range(150):
        api.add_comment(REPO, 3, f"comment {index}")
    first = nodus("pr-comment", "--body-file", body(tmp_path, "one"), "--repo", REPO, "--pr", "3")
    second = nodus("pr-comment", "--body-file", body(tmp_path, "two"), "--repo", REPO, "--pr", "3")
    assert first[0] == second[0] == 0, (first, second)
    ours = [c for c in api.comments[(REPO, 3)] if c["body"].startswith(DEFAULT_MARKER)]
    assert len(ours) == 1 and ours[0]["body"].endswith("two")


def test_a_body_over_the_limit_is_cut_with_a_note() -> None:
    made = compose(DEFAULT_MARKER, "x" * (MAX_BODY * 2))
    assert len(made) <= MAX_BODY and made.startswith(DEFAULT_MARKER) and "comment limit" in made


def test_mistakes_are_one_line_with_a_hint(api: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = body(tmp_path, "plan")
    code, output = nodus("pr-comment", "--body-file", plan, "--pr", "1")
    assert code == 1 and "error: no repository: pass --repo OWNER/NAME" in output
    code, output = nodus("pr-comment", "--body-file", plan, "--repo", "acme")
    assert code == 1 and "error: --repo 'acme' is not OWNER/NAME" in output
    code, output = nodus("pr-comment", "--body-file", plan, "--repo", REPO)
    assert code == 1 and "error: no pull request: pass --pr N" in output

    event = tmp_path / "push.json"
    event.write_text(json.dumps({"ref": "refs/heads/main"}))
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    code, output = nodus("pr-comment", "--body-file", plan, "--repo", REPO)
    assert code == 1 and f"GITHUB_EVENT_PATH {event}: no pull_request.number in the event" in output

    monkeypatch.setenv("GITHUB_TOKEN", "wrong")
    code, output = nodus("pr-comment", "--body-file", plan, "--repo", REPO, "--pr", "1")
    assert code == 1
    assert "error: GitHub API GET /repos/acme/models/issues/1/comments: HTTP 401 Bad credentials" in output
    assert "hint: GITHUB_TOKEN was refused" in output
    monkeypatch.delenv("GITHUB_TOKEN")
    code, output = nodus("pr-comment", "--body-file", plan, "--repo", REPO, "--pr", "1")
    assert code == 1 and "error: GITHUB_TOKEN is not set" in output and "pull-requests: write" in output
    assert "Traceback" not in output

    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    with socket.socket() as closed:  # a loopback port nothing listens on: bound, never listening
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
        code, output = nodus("pr-comment", "--body-file", plan, "--repo", REPO, "--pr", "1")
    assert code == 1 and "did not answer" in output and "Traceback" not in output
    monkeypatch.setenv("GITHUB_API_URL", "ftp://example.invalid")
    code, output = nodus("pr-comment", "--body-file", plan, "--repo", REPO, "--pr", "1")
    assert code == 1 and "GITHUB_API_URL 'ftp://example.invalid' is not an http(s) URL" in output
