"""The git side of `nodus controller`: one checkout of the repository's branch, kept at the branch's head.

Who calls it: `nodus.reconciler.gitops.sync` at every interval (and the CLI once at start, so a wrong --repo
or --branch fails at once). The first call clones into a temporary folder that is then renamed into place, so a
controller killed mid-clone leaves no half checkout behind; later calls fetch the branch, reset the checkout
hard to it and remove untracked files, so what is planned is exactly the commit, never a leftover. `--repo`
is a local folder or any URL git understands; git never asks for anything (GIT_TERMINAL_PROMPT=0), and
credentials in a URL never reach messages or folder names.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nodus.builder import host_programs
from nodus.errors import ConfigError, PrerequisiteError, TemporaryError
from nodus.reconciler.state.sql import redact_url

GIT_TIMEOUT_S = 300.0
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://|^[\w.-]+@[\w.-]+:")
"""`scheme://...` or scp-like `user@host:path`: anything else is a local folder."""


@dataclass(frozen=True)
class Revision:
    """The commit the checkout is at."""

    sha: str
    subject: str
    folder: Path
    """The checkout (the repository's root)."""

    @property
    def short(self) -> str:
        return self.sha[:7]


def is_url(repo: str) -> bool:
    return _URL.match(repo) is not None


class GitSource:
    """The branch `branch` of `repo`, checked out under `checkouts/` (a folder of its own per repo and branch)."""

    def __init__(self, repo: str, branch: str, checkouts: Path) -> None:
        if not branch or branch.startswith("-") or re.search(r"\s|\.\.|[~^:?*\[\\]", branch):
            raise ConfigError(f"--branch {branch!r} is not a branch name")
        if is_url(repo):
            self.repo = repo
        else:
            folder = Path(repo).expanduser().resolve()  # a clone's origin must not depend on the current folder
            if not folder.is_dir():
                raise ConfigError(f"--repo {repo}: no such folder", hint="give a git repository's folder or URL")
            self.repo = str(folder)
        self.branch = branch
        self.shown = redact_url(self.repo)
        """The repository as messages show it (without a password)."""
        digest = hashlib.sha256(f"{self.repo}\n{branch}".encode()).hexdigest()[:12]
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", self.repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
        self.folder = checkouts / f"{stem[:40] or 'repo'}-{digest}"

    def update(self) -> Revision:
        """Bring the checkout to the branch's head (clone it the first time); the commit it is at.

        ConfigError when the repository or the branch does not exist; TemporaryError when a fetch fails."""
        if not (self.folder / ".git").is_dir():
            self._clone()
        else:
            refspec = f"+refs/heads/{self.branch}:refs/remotes/origin/{self.branch}"
            self._git(["fetch", "--quiet", "--no-tags", "origin", refspec], failure=TemporaryError)
        self._git(["reset", "--quiet", "--hard", f"refs/remotes/origin/{self.branch}"])
        self._git(["clean", "-q", "-ffdx"])
        sha = self._git(["rev-parse", "HEAD"]).strip()
        subject = self._git(["log", "-1", "--format=%s"]).strip()
        return Revision(sha, subject, self.folder)

    def _clone(self) -> None:
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        if self.folder.exists():
            shutil.rmtree(self.folder)  # not a checkout (no .git): what a crash left, never anything of the user's
        scratch = Path(tempfile.mkdtemp(prefix=f".{self.folder.name}-", dir=self.folder.parent))
        try:
            clone = ["clone", "--quiet", "--no-tags", "--single-branch", "--branch", self.branch, "--", self.repo]
            self._git([*clone, str(scratch / "checkout")], cwd=scratch, failure=ConfigError)
            (scratch / "checkout").rename(self.folder)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _git(
        self,
        args: list[str],
        *,
        cwd: Path | None = None,
        failure: type[ConfigError] | type[TemporaryError] = ConfigError,
    ) -> str:
        git = host_programs.which("git")
        if git is None:
            raise PrerequisiteError("nodus controller needs git, which is not on PATH", hint="apt-get install git")
        environment = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
        try:
            done = subprocess.run(
                [git, "-c", "advice.detachedHead=false", *args],
                cwd=cwd or self.folder,
                env=environment,
                capture_output=True,
                text=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TemporaryError(f"git {args[0]} of {self.shown} took over {GIT_TIMEOUT_S:g}s", delay=60) from None
        if done.returncode != 0:
            said = [row for row in done.stderr.strip().splitlines() if row.strip()]
            why = said[-1].removeprefix("fatal: ") if said else f"exit status {done.returncode}"
            why = why.replace(self.repo, self.shown)
            if args[0] == "clone" and "not found in upstream" in why:
                raise ConfigError(f"--repo {self.shown}: there is no branch {self.branch}", hint="check --branch")
            raise failure(f"git {args[0]} of {self.shown} ({self.branch}) failed: {why}")
        return done.stdout
