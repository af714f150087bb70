"""The `nodus-build` command: build, check, push, sign and verify Environment images.

Who calls it: people and CI (the GitHub workflow runs `nodus-build --changed --push ... --sign` on every
push of spec files). It parses flags, picks the environments, and hands them to `nodus.builder.build`;
results are a table (or `--json` for machines), progress is one line per step on standard error.

    nodus-build [PATH...] [--check] [--json] [--push REGISTRY/REPO] [--changed [--since REF]]
                [--env [NAME:]VAR=VALUE] [--network host|none] [--base REF] [--sign]
    nodus-build base [--update-base]              build (or refresh) the base image and pin it
    nodus-build verify IMAGE --bundle B --identity ID --issuer URL

Exit status: 0 when everything built (or, with --check, every lock entry is current); 1 when an environment
failed, a lock entry is stale, or the input is wrong; 2 for bad flags (click's usage errors).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from nodus.builder.build import BuildOptions, BuildResult, build_paths, ensure_base, find_environments
from nodus.builder.lockfile import Lock
from nodus.builder.private import write_file
from nodus.builder.store import LOCK_NAME, Store, find_project
from nodus.errors import ConfigError, NodusError
from nodus.specs.parse import Parsed

SUBCOMMANDS = ("base", "verify")
# Wide when not a terminal (CI logs, pipes): digests and split sizes should not wrap.
_err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)
_out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


class BuildGroup(click.Group):
    """`nodus-build PATH...` builds; `nodus-build base|verify ...` are subcommands. Known errors are one line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Anything that is not a subcommand (paths, flags) goes to the default `build` command.
        if not args or args[0] not in (*SUBCOMMANDS, "build", "--help", "-h", "--version"):
            args = ["build", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NodusError as exc:
            lines = exc.lines()
            _err.print(f"[bold red]error:[/] {lines[0]}", soft_wrap=True)
            for text in lines[1:]:
                _err.print(text, style="dim" if text.startswith("hint:") else None, soft_wrap=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _err.print("interrupted")
            ctx.exit(130)


@click.group(cls=BuildGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="nodus-build", prog_name="nodus-build")
def cli() -> None:
    """Build Environment packages into digest-pinned, reproducible OCI grader images.

    `nodus-build [PATH...]` finds the Environment specs under each PATH (default: the current folder),
    builds each into the project's local image store (.nodus/images) and records it in nodus.lock.
    """


def _project_options(paths: Sequence[Path], lock: Path | None, state_dir: Path | None) -> tuple[Store, Path]:
    project = find_project(paths[0] if paths else Path.cwd())
    lock_path = lock or project / LOCK_NAME
    return Store.for_project(lock_path.parent.absolute(), state_dir), lock_path


def _parse_env(values: Sequence[str]) -> dict[str, dict[str, str]]:
    """`--env VAR=VALUE` (every environment) and `--env NAME:VAR=VALUE` (one) into {name or *: {var: value}}."""
    found: dict[str, dict[str, str]] = {}
    for value in values:
        assignment, scope = value, "*"
        head, sep, rest = value.partition(":")
        if sep and "=" not in head:
            scope, assignment = head, rest
        variable, equals, text = assignment.partition("=")
        if not equals or not variable:
            raise ConfigError(f"--env {value!r} is not [NAME:]VAR=VALUE")
        found.setdefault(scope, {})[variable] = text
    return found


@cli.command("build")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--check", is_flag=True, help="Only say whether nodus.lock is current for each environment.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable results (for CI).")
@click.option("--push", "push_to", metavar="REGISTRY/REPO", help="Push each image and its provenance there.")
@click.option("--changed", is_flag=True, help="Only environments whose spec or package changed (git).")
@click.option("--since", default="HEAD~1", show_default=True, help="With --changed: the git revision to compare with.")
@click.option("--env", "env_values", multiple=True, metavar="[NAME:]VAR=VALUE", help="Add a variable to images.")
@click.option(
    "--network",
    type=click.Choice(["host", "none"]),
    default="host",
    show_default=True,
    help="The freeze step's network (host: environments may fetch their datasets).",
)
@click.option("--base", "base_ref", metavar="REF", help="Base image: oci:LAYOUT:TAG or REGISTRY/REPO@sha256:...")
@click.option("--update-base", is_flag=True, help="Pin a rebuilt base image even if nodus.lock pins another.")
@click.option("--sign", is_flag=True, help="Sign each provenance statement with sigstore (ambient identity).")
@click.option("--backend", type=click.Choice(["local", "dagger"]), default="local", show_default=True)
@click.option(
    "--lock", "lock_file", type=click.Path(path_type=Path), help="The lock file (default: PROJECT/nodus.lock)."
)
@click.option("--state-dir", type=click.Path(path_type=Path), help="The state folder (default: PROJECT/.nodus).")
def build_command(
    paths: tuple[Path, ...],
    check: bool,
    as_json: bool,
    push_to: str | None,
    changed: bool,
    since: str,
    env_values: tuple[str, ...],
    network: str,
    base_ref: str | None,
    update_base: bool,
    sign: bool,
    backend: str,
    lock_file: Path | None,
    state_dir: Path | None,
) -> None:
    """Build the Environments under PATH... (default: the current folder)."""
    chosen = list(paths) or [Path.cwd()]
    store, lock_path = _project_options(chosen, lock_file, state_dir)
    if backend == "dagger":
        from nodus.builder.dagger_backend import require_engine

        require_engine()
    options = BuildOptions(
        network=network,
        env=_parse_env(env_values),
        check_only=check,
        base=base_ref,
        update_base=update_base,
        backend=backend,
    )
    only = None
    if changed:
        changed_files = git_changed_files(chosen[0], since)
        only = _changed_filter(changed_files)
    results = build_paths(
        chosen, store=store, lock_path=lock_path, options=options, reporter=None if as_json else _report, only=only
    )
    extra: dict[str, dict[str, Any]] = {}
    if not check:
        for result in results:
            if result.status in ("built", "cached", "verified") and (push_to or sign):
                extra[result.name] = _publish(result, store, push_to=push_to, sign=sign)
    _print_results(results, extra, as_json=as_json, check=check)
    bad = [r for r in results if r.status in ("failed", "stale")]
    if bad:
        sys.exit(1)


def _report(environment: str, step: str, detail: str) -> None:
    _err.print(f"[cyan]{environment:<28}[/] [bold]{step:<10}[/] {detail}", soft_wrap=True)


def _publish(result: BuildResult, store: Store, *, push_to: str | None, sign: bool) -> dict[str, Any]:
    """Signs the provenance and pushes the image and its attachments; returns what to print about it."""
    from nodus.builder import provenance

    done: dict[str, Any] = {}
    envelope = provenance.find(store.images, result.image)
    if sign:
        from nodus.builder import signing

        if envelope is None:
            raise ConfigError(f"{result.name}: no provenance beside {result.image} to sign")
        bundle = signing.sign(provenance.statement_of(envelope))
        path = store.root / "provenance" / f"{result.image.removeprefix('sha256:')}.sigstore.json"
        write_file(path, bundle.encode("utf-8"))
        done["bundle"] = str(path)
    if push_to:
        from nodus.builder import registry

        target = registry.RegistryRef.parse(push_to)
        pushed = registry.push(store.images, result.tag, target, tags=[result.tag])
        done["pushed"] = pushed.reference
        if envelope is not None:
            tag = provenance.attestation_tag(result.image)
            registry.push(store.images, tag, target, tags=[tag])
            done["provenance"] = f"{target}:{tag}"
    return done


def _print_results(results: list[BuildResult], extra: dict[str, dict[str, Any]], *, as_json: bool, check: bool) -> None:
    if as_json:
        rows = [{**result.to_json(), **extra.get(result.name, {})} for result in results]
        ok = not any(r.status in ("failed", "stale") for r in results)
        _out.print_json(json.dumps({"ok": ok, "results": rows}))
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ENVIRONMENT", "VERSION", "STATUS", "IMAGE", "SPLITS", "TIME"):
        table.add_column(column)
    styles = {"built": "green", "cached": "green", "verified": "green", "current": "green"}
    for result in results:
        splits = " ".join(f"{name}={count}" for name, count in sorted(result.splits.items()))
        table.add_row(
            result.name,
            result.version,
            f"[{styles.get(result.status, 'red')}]{result.status}[/]",
            result.image[:19] if result.image else "-",
            splits or "-",
            f"{result.seconds:.1f}s",
        )
    _out.print(table)
    for result in results:
        if result.error:
            _err.print(f"[bold red]error:[/] {result.name}: {result.error}", soft_wrap=True)
            if result.hint:
                _err.print(f"hint: {result.hint}", style="dim", soft_wrap=True)
        for key, value in extra.get(result.name, {}).items():
            _out.print(f"{result.name}: {key} {value}", soft_wrap=True)
    stale = [r.name for r in results if r.status == "stale"]
    if check and stale:
        _err.print(f"nodus.lock is not current for {', '.join(stale)}: run nodus-build", soft_wrap=True)


# --changed ----------------------------------------------------------------------------------------------


def git_changed_files(start: Path, since: str) -> set[Path]:
    """Files changed since `since` (committed, staged, unstaged, untracked), as absolute paths."""
    folder = start if start.is_dir() else start.parent
    top = _git(folder, "rev-parse", "--show-toplevel").strip()
    root = Path(top)
    names: set[str] = set()
    base = _git(folder, "rev-parse", "--verify", "--quiet", f"{since}^{{commit}}", check=False).strip()
    if base:
        names.update(_git(root, "diff", "--name-only", base).splitlines())
    else:
        # No such revision (the first commit, a shallow clone): everything tracked counts as changed.
        names.update(_git(root, "ls-files").splitlines())
    names.update(_git(root, "ls-files", "--others", "--exclude-standard").splitlines())
    return {(root / name).resolve() for name in names if name}


def _git(folder: Path, *args: str, check: bool = True) -> str:
    try:
        result = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ConfigError("--changed needs git", hint="apt-get install git") from None
    if check and result.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} failed in {folder}: {result.stderr.strip()}")
    return result.stdout


def _changed_filter(changed: set[Path]) -> Any:
    def inputs_changed(parsed: Parsed) -> bool:
        from nodus.builder.plan import package_folder
        from nodus.specs.environment import Environment

        environment = parsed.resource
        assert isinstance(environment, Environment)
        spec_file = Path(parsed.source.file).resolve()
        if spec_file in changed:
            return True
        folder = package_folder(environment, spec_file.parent)
        return folder is not None and any(path.is_relative_to(folder.resolve()) for path in changed)

    return inputs_changed


# Subcommands --------------------------------------------------------------------------------------------


@cli.command("base")
@click.option("--update-base", is_flag=True, help="Pin the rebuilt base even if nodus.lock pins another.")
@click.option("--base", "base_ref", metavar="REF", help="Take the base from oci:LAYOUT:TAG or REGISTRY/REPO@sha256:...")
@click.option("--lock", "lock_file", type=click.Path(path_type=Path))
@click.option("--state-dir", type=click.Path(path_type=Path))
def base_command(update_base: bool, base_ref: str | None, lock_file: Path | None, state_dir: Path | None) -> None:
    """Make the base image (Debian rootfs + nodus-env) available and pin it in nodus.lock."""
    store, lock_path = _project_options([Path.cwd()], lock_file, state_dir)
    store.ensure()
    lock = Lock.load(lock_path)
    choice = ensure_base(store, lock, BuildOptions(base=base_ref, update_base=update_base), _report)
    lock.save()
    _out.print(f"base {choice.pinned.reference} {choice.pinned.digest}")


@cli.command("verify")
@click.argument("image")
@click.option("--bundle", required=True, type=click.Path(path_type=Path), help="The sigstore bundle (JSON).")
@click.option("--identity", required=True, help="The signer identity the certificate must carry.")
@click.option("--issuer", required=True, help="The OIDC issuer of that identity.")
def verify_command(image: str, bundle: Path, identity: str, issuer: str) -> None:
    """Verify IMAGE's signed provenance offline: IMAGE is REF@sha256:... or a bare digest."""
    from nodus.builder import signing

    digest = image.rpartition("@")[2] if "@" in image else image
    statement = signing.verify(bundle, image_digest=digest, identity=identity, issuer=issuer)
    subject = statement["subject"][0]
    _out.print(f"verified: {subject['name']}@sha256:{subject['digest']['sha256']} signed by {identity}")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `nodus-build` script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="nodus-build", standalone_mode=True)


__all__ = ["cli", "find_environments", "main"]
