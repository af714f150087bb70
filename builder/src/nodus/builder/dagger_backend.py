"""The Dagger backend of nodus-build (`--backend dagger`): the build's sandbox steps run on a Dagger engine.

Who calls it: `nodus-build --backend dagger` (the CLI checks `require_engine` first) and the GitHub workflow,
where an engine is reachable. It cannot run on a machine like the one nodus is developed on: dagger-io
downloads its CLI at run time and needs the engine image from its own registry (FACTS.md), so it is
import-guarded and optional (`nodus-build[dagger]`).

What it replaces and what it keeps: only the two sandbox runs (freeze and check) move to the engine, as
`Container.import_` of the stage image exported from the local store, `with_exec` of the same script, and
the output folder exported back. Layer writing, config and manifest assembly stay in nodus's deterministic
writer, so the Dagger backend must, and is tested in the workflow to, reproduce the local backend's digest
for the same BuildSpec.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nodus.builder import host_programs
from nodus.builder.sandbox import GRADER_UID, Mount, RunResult
from nodus.errors import PrerequisiteError

ENGINE_VARIABLES = ("DAGGER_SESSION_PORT", "_EXPERIMENTAL_DAGGER_RUNNER_HOST", "DAGGER_CLOUD_TOKEN")


def require_engine() -> None:
    """Refuses with a clear message unless dagger-io is installed and an engine can be reached."""
    try:
        import dagger  # noqa: F401
    except ImportError:
        raise PrerequisiteError(
            "--backend dagger needs dagger-io", hint="pip install 'nodus-build[dagger]', or use --backend local"
        ) from None
    if not any(os.environ.get(name) for name in ENGINE_VARIABLES) and host_programs.which("dagger") is None:
        raise PrerequisiteError(
            "--backend dagger needs a Dagger engine (none configured here)",
            hint="run inside `dagger run`, in the GitHub workflow, or use --backend local",
        )


def export_layout(layout: Path, tag: str, target: Path) -> Path:
    """An OCI archive of one tag of the layout (what `Container.import_` reads)."""
    with tarfile.open(target, "w") as archive:
        archive.add(layout / "oci-layout", "oci-layout")
        archive.add(layout / "index.json", "index.json")
        archive.add(layout / "blobs", "blobs")
    return target


def run_script(
    layout: Path,
    tag: str,
    config_digest: str,
    script: str,
    *,
    network: str = "none",
    mounts: Sequence[Mount] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> RunResult:
    """`nodus.builder.sandbox.run_script`, on a Dagger engine (same arguments, same result)."""
    require_engine()
    import anyio

    return anyio.run(_run, layout, tag, script, network, list(mounts), dict(env or {}), timeout)


async def _run(
    layout: Path, tag: str, script: str, network: str, mounts: list[Mount], env: dict[str, str], timeout: float
) -> RunResult:
    import dagger

    archive = export_layout(layout, tag, layout.parent / f".{tag}.oci.tar")
    try:
        async with dagger.Connection(dagger.Config(execute_timeout=int(timeout))) as client:
            container: Any = client.container().import_(client.host().file(str(archive)), tag=tag)
            container = container.with_user(f"{GRADER_UID}:{GRADER_UID}")
            for name, value in sorted(env.items()):
                container = container.with_env_variable(name, value)
            for mount in mounts:
                directory = client.host().directory(str(mount.host))
                container = container.with_mounted_directory(mount.target, directory, owner=str(GRADER_UID))
            # Dagger has no "no network" switch for with_exec; the check step's offline guarantee is the
            # image's HF_*_OFFLINE and the comparison with the freeze step's manifests.
            executed = container.with_exec(["/bin/sh", "-c", script], expect=dagger.ReturnType.ANY)
            code = await executed.exit_code()
            stdout, stderr = await executed.stdout(), await executed.stderr()
            for mount in mounts:
                if mount.writable:
                    await executed.directory(mount.target).export(str(mount.host))
            return RunResult(code, stdout, stderr)
    finally:
        archive.unlink(missing_ok=True)
