"""`nodus pr-comment`: post a file as one pull-request comment, and update that same comment on every later run.

Who calls it: the pull-request workflow (`.github/workflows/nodus-plan.yml`) after `nodus plan -o markdown`, and
people by hand with a token. The comment is found by a marker its body starts with (an HTML comment, invisible
on GitHub), so a pull request keeps one plan comment however often it is pushed to: the first run creates it
(POST), later runs edit it (PATCH).

GitHub REST API through the standard library only: `GITHUB_API_URL` (default https://api.github.com), the
token from `GITHUB_TOKEN`, the repository from `--repo` or `GITHUB_REPOSITORY`, and the pull request from
`--pr` or the event file Actions writes (`GITHUB_EVENT_PATH`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from nodus.cli.console import line
from nodus.errors import ConfigError

DEFAULT_MARKER = "<!-- nodus-plan -->"
DEFAULT_API_URL = "https://api.github.com"
# GitHub refuses comment bodies over 65,536 characters; `nodus plan -o markdown` stays under it already.
MAX_BODY = 65536
PER_PAGE = 100
MAX_PAGES = 100  # 10,000 comments: past that something is wrong, and we would rather stop than loop
TIMEOUT_S = 30
JSONObject = dict[str, Any]


@click.command("pr-comment")
@click.option(
    "--body-file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The comment's text (markdown), e.g. the output of `nodus plan -o markdown`.",
)
@click.option("--repo", metavar="OWNER/NAME", help="The repository (default: $GITHUB_REPOSITORY).")
@click.option("--pr", "number", type=click.IntRange(min=1), help="The pull request (default: from $GITHUB_EVENT_PATH).")
@click.option(
    "--marker", default=DEFAULT_MARKER, show_default=True, help="What the comment starts with; one comment per marker."
)
def pr_comment(body_file: Path, repo: str | None, number: int | None, marker: str) -> None:
    """Post BODY_FILE as the pull request's one comment for MARKER, or update it if it is already there."""
    if not marker.strip():
        raise ConfigError("--marker is empty", hint="the default is " + DEFAULT_MARKER)
    repository = _repository(repo)
    pull = number if number is not None else _event_pull_request()
    client = GitHub(os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL, _token())
    body = compose(marker, body_file.read_text(encoding="utf-8"))
    found = find_comment(client, repository, pull, marker)
    if found is None:
        made = client.request("POST", f"/repos/{repository}/issues/{pull}/comments", {"body": body})
        line(_said("created", made, f"{repository}#{pull}"))
    else:
        made = client.request("PATCH", f"/repos/{repository}/issues/comments/{found['id']}", {"body": body})
        line(_said("updated", made, f"{repository}#{pull}"))


def _said(verb: str, comment: Any, where: str) -> str:
    """`created comment 12 on owner/name#7 (https://...)`: the id is what a later run updates."""
    known = comment if isinstance(comment, dict) else {}
    url = known.get("html_url")
    return f"{verb} comment {known.get('id')} on {where}" + (f" ({url})" if url else "")


def compose(marker: str, text: str) -> str:
    """The marker first (unless the text has it already), then the text, cut to GitHub's size limit."""
    body = text if text.lstrip().startswith(marker) else f"{marker}\n{text}"
    if len(body) <= MAX_BODY:
        return body
    note = f"\n\n_… cut at GitHub's {MAX_BODY}-character comment limit._\n"
    return body[: MAX_BODY - len(note)] + note


def find_comment(client: GitHub, repository: str, number: int, marker: str) -> JSONObject | None:
    """The first comment of the pull request whose body starts with the marker, or None."""
    for page in range(1, MAX_PAGES + 1):
        path = f"/repos/{repository}/issues/{number}/comments?per_page={PER_PAGE}&page={page}"
        comments = client.request("GET", path)
        if not isinstance(comments, list):
            raise ConfigError(f"GitHub API GET {path}: expected a list of comments")
        for comment in comments:
            if isinstance(comment, dict) and str(comment.get("body") or "").lstrip().startswith(marker):
                return comment
        if len(comments) < PER_PAGE:
            return None
    return None


class GitHub:
    """The few REST calls the command makes, with the token; a failure is one ConfigError line."""

    def __init__(self, api_url: str, token: str) -> None:
        parts = urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"GITHUB_API_URL {api_url!r} is not an http(s) URL", hint=f"unset it for {DEFAULT_API_URL}"
            )
        self.api_url = api_url.rstrip("/")
        self.token = token
        # A loopback API (a test's stand-in, a local proxy) is never reached through a configured HTTP proxy.
        handlers = [urllib.request.ProxyHandler({})] if _loopback(parts.hostname or "") else []
        self.opener = urllib.request.build_opener(*handlers)

    def request(self, method: str, path: str, payload: JSONObject | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(self.api_url + path, data=data, method=method)
        request.add_header("Accept", "application/vnd.github+json")
        request.add_header("X-GitHub-Api-Version", "2022-11-28")
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("User-Agent", "nodus-pr-comment")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        what = f"GitHub API {method} {path.split('?', 1)[0]}"
        try:
            with self.opener.open(request, timeout=TIMEOUT_S) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ConfigError(f"{what}: HTTP {exc.code} {_message(exc)}", hint=_hint(exc.code)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConfigError(f"{what}: {self.api_url} did not answer ({reason})") from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise ConfigError(f"{what}: the answer is not JSON") from None


def _message(error: urllib.error.HTTPError) -> str:
    try:
        answer = json.loads(error.read(64 << 10) or b"{}")
    except (ValueError, OSError):
        return str(error.reason)
    return str(answer.get("message") or error.reason) if isinstance(answer, dict) else str(error.reason)


def _hint(code: int) -> str | None:
    if code == 401:
        return "GITHUB_TOKEN was refused: pass the workflow's secrets.GITHUB_TOKEN, or a token that has not expired"
    if code in (403, 404):
        return "the token needs `permissions: pull-requests: write` (and the repository and pull request must exist)"
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token() -> str:
    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token:
        raise ConfigError(
            "GITHUB_TOKEN is not set",
            hint="in a workflow: env GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }} with permissions: pull-requests: write",
        )
    return token


def _repository(given: str | None) -> str:
    repository = (given or os.environ.get("GITHUB_REPOSITORY") or "").strip()
    if not repository:
        raise ConfigError("no repository: pass --repo OWNER/NAME", hint="GitHub Actions sets GITHUB_REPOSITORY")
    owner, slash, name = repository.partition("/")
    if not slash or not owner or not name or "/" in name:
        raise ConfigError(f"--repo {repository!r} is not OWNER/NAME")
    return repository


def _event_pull_request() -> int:
    """The pull request number of the event that started the workflow (pull_request, or a comment on one)."""
    path = os.environ.get("GITHUB_EVENT_PATH", "").strip()
    if not path:
        raise ConfigError("no pull request: pass --pr N", hint="GitHub Actions sets GITHUB_EVENT_PATH on pull_request")
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"GITHUB_EVENT_PATH {path}: cannot read the event ({exc})") from None
    found = None
    if isinstance(event, dict):
        pull = event.get("pull_request")
        issue = event.get("issue")
        if isinstance(pull, dict):
            found = pull.get("number")
        elif isinstance(issue, dict) and issue.get("pull_request"):
            found = issue.get("number")
    if not isinstance(found, int) or isinstance(found, bool) or found < 1:
        raise ConfigError(
            f"GITHUB_EVENT_PATH {path}: no pull_request.number in the event",
            hint="run it on pull_request events, or pass --pr N",
        )
    return found
