"""The Ray executor of a project, from its nodus.yaml (`executor: {ray: {address, tokenSecret}}`).

Who calls it: `executors/choose.py`, for `executor: ray`. Ray itself is imported only when the executor is made
(`jobs_client.RayJobsClient`), so a project on the local executor never needs the extra.

Where the settings come from: `executor.ray.address` (else RAY_ADDRESS, as Ray's own CLI reads it) and the token
from RAY_AUTH_TOKEN, or from the project's Secret that `executor.ray.tokenSecret` names (its RAY_AUTH_TOKEN key, or
its only key; read where the Secret says, `nodus.reconciler.secret_values`). A named Secret that cannot be read is
an error naming it and the key, never a fall back to RAY_AUTH_TOKEN.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from nodus.errors import ConfigError
from nodus.specs.settings import SETTINGS_FILE

from ...project import Project
from ...secret_values import stored_secret, value
from .channel import RegistryChannel
from .executor import RayExecutor
from .jobs_client import RayJobsClient
from .session_variables import JOBS_VARIABLE

ADDRESS_VARIABLE: Final = "RAY_ADDRESS"
TOKEN_VARIABLE: Final = "RAY_AUTH_TOKEN"
NODE_JOBS_FOLDER: Final = "ray-node-jobs"
"""Beside the project's own jobs folder: where the nodes' sessions keep their job folders on a shared filesystem."""


def secret_token(project: Project, name: str, where: str) -> str:
    """The cluster's token from the project's Secret `name`: its RAY_AUTH_TOKEN key, or its only key."""
    spec = stored_secret(project, name, where)
    key = TOKEN_VARIABLE if TOKEN_VARIABLE in spec.keys or len(spec.keys) != 1 else spec.keys[0]
    return value(spec, name, key, base=project.root, where=where)


def ray_executor(jobs_root: Path, project: Project | None) -> RayExecutor:
    """The RayExecutor for `project`'s settings, keeping its notes in `jobs_root`."""
    where = str(project.root / SETTINGS_FILE) if project is not None else SETTINGS_FILE
    settings = project.settings().ray if project is not None else None
    address = (settings.address if settings is not None else None) or os.environ.get(ADDRESS_VARIABLE)
    if not address:
        raise ConfigError(
            f"{where}: executor.ray.address is missing (and {ADDRESS_VARIABLE} is not set)",
            hint="executor: {ray: {address: http://HOST:8265}}",
        )
    if not address.startswith(("http://", "https://")):
        raise ConfigError(f"{where}: executor.ray.address must be the dashboard's http(s)://HOST:PORT, got {address!r}")
    if project is not None and settings is not None and settings.token_secret is not None:
        token: str | None = secret_token(project, settings.token_secret, f"{where}: executor.ray.tokenSecret")
    else:
        token = os.environ.get(TOKEN_VARIABLE)
    if not token:
        raise ConfigError(
            f"{where}: executor.ray: no token for the Ray cluster ({TOKEN_VARIABLE} is not set)",
            hint=f"set {TOKEN_VARIABLE} to the cluster's token (RAY_AUTH_MODE=token)",
        )
    node_jobs, node_project, shared = os.environ.get(JOBS_VARIABLE), None, False
    if project is not None and settings is not None and settings.shared_filesystem:
        # The nodes see this project's folder: their sessions read its store and keep their job folders in it.
        node_project, shared = str(project.root), True
        node_jobs = node_jobs or str(jobs_root.parent / NODE_JOBS_FOLDER)
    channel = None
    if project is not None and settings is not None and settings.registry is not None:
        try:
            channel = RegistryChannel.parse(settings.registry, insecure=settings.insecure_registry)
        except ConfigError as exc:
            raise ConfigError(f"{where}: executor.ray.registry: {exc.message}", hint=exc.hint) from None
    return RayExecutor(
        RayJobsClient(address, token),
        jobs_root,
        node_jobs=node_jobs,
        node_project=node_project,
        shared_filesystem=shared,
        channel=channel,
        project=project if channel is not None else None,
    )
