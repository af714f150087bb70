"""What the Ray executor asks of a Ray cluster: its Jobs API and its node list, behind a small protocol.

Who uses it: `RayExecutor` (`executor.py`) talks to a cluster only through `JobsClient`; `connect` gives the real
one, over `ray.job_submission.JobSubmissionClient` and the state API on the dashboard (HTTP, token auth). Tests
give `RayExecutor` an in-memory client instead (`reconciler/tests/executors/ray/fake_jobs.py`).

Ray is an optional extra: it is imported here on use (`connect`), and a host without it gets one line saying
what to install. Token auth: Ray 2.60's clients send `Authorization: Bearer TOKEN`, and leave a header the caller
gave alone (`ray._private.authentication.http_token_authentication.get_auth_headers_if_auth_enabled`), so the
token goes in as that header and no process-wide `RAY_AUTH_TOKEN` is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from nodus.errors import PrerequisiteError, TemporaryError

EXTRA: Final = "nodus[ray]"
RAY_MISSING: Final = f"the Ray executor needs Ray: pip install '{EXTRA}'"
NODE_LIMIT: Final = 10_000
"""The most nodes one listing reads (the state API truncates at its limit)."""

# Ray's job states (ray.job_submission.JobStatus), as the Jobs API spells them.
RAY_PENDING: Final = "PENDING"
RAY_RUNNING: Final = "RUNNING"
RAY_STOPPED: Final = "STOPPED"
RAY_SUCCEEDED: Final = "SUCCEEDED"
RAY_FAILED: Final = "FAILED"
RAY_ENDED: Final = frozenset({RAY_STOPPED, RAY_SUCCEEDED, RAY_FAILED})


@dataclass(frozen=True)
class RayJob:
    """One submitted Ray job as the Jobs API describes it."""

    submission_id: str
    status: str
    message: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    driver_node_id: str | None = None
    """The node its entrypoint runs on (the node session of a single-node job: where it is placed)."""

    @property
    def ended(self) -> bool:
        return self.status in RAY_ENDED


@dataclass(frozen=True)
class RayNode:
    """One node of the cluster: whether it is alive, its total resources and its labels."""

    node_id: str
    alive: bool
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Submission:
    """What one `submit` asks Ray for: the entrypoint, its environment, and the resources it reserves."""

    submission_id: str
    entrypoint: str
    env_vars: Mapping[str, str]
    metadata: Mapping[str, str]
    num_gpus: float | None = None
    num_cpus: float | None = None
    memory_bytes: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    label_selector: Mapping[str, str] = field(default_factory=dict)


class JobsClient(Protocol):
    """A Ray cluster's Jobs API and node list. Errors of the cluster (unreachable, refused) are TemporaryError."""

    def submit(self, submission: Submission) -> None:
        """Submit one job. Ray answers a submission id it has seen with an HTTP 500 (a RuntimeError), not a
        conflict: look it up with `info` first."""
        ...

    def info(self, submission_id: str) -> RayJob | None:
        """The job of that submission id, or None when the cluster has none."""
        ...

    def list(self) -> Sequence[RayJob]:
        """Every job the cluster knows (running and ended)."""
        ...

    def stop(self, submission_id: str) -> None:
        """Ask Ray to stop the job (SIGTERM to its entrypoint, SIGKILL after RAY_JOB_STOP_WAIT_TIME_S)."""
        ...

    def logs(self, submission_id: str) -> str:
        """The job's whole driver log so far (the entrypoint's stdout and stderr)."""
        ...

    def nodes(self) -> Sequence[RayNode]:
        """The cluster's nodes, alive and dead."""
        ...


class RayJobsClient:
    """`JobsClient` over Ray's own clients, for the dashboard at `address` (http://HOST:8265)."""

    def __init__(self, address: str, token: str) -> None:
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise PrerequisiteError(RAY_MISSING) from None
        self.address = address
        self._headers = {"Authorization": f"Bearer {token}"}
        try:
            self._client = JobSubmissionClient(address, headers=dict(self._headers))
        except (ConnectionError, RuntimeError) as exc:
            raise TemporaryError(f"Ray at {address}: {_first_line(exc)}", delay=15) from None

    def submit(self, submission: Submission) -> None:
        self._call(
            self._client.submit_job,
            entrypoint=submission.entrypoint,
            submission_id=submission.submission_id,
            runtime_env={"env_vars": dict(submission.env_vars)},
            metadata=dict(submission.metadata),
            entrypoint_num_gpus=submission.num_gpus,
            entrypoint_num_cpus=submission.num_cpus,
            entrypoint_memory=submission.memory_bytes,
            entrypoint_resources=dict(submission.resources) or None,
            entrypoint_label_selector=dict(submission.label_selector) or None,
        )

    def info(self, submission_id: str) -> RayJob | None:
        try:
            details = self._client.get_job_info(submission_id)
        except RuntimeError as exc:
            if "status code 404" in str(exc):
                return None
            raise TemporaryError(f"Ray at {self.address}: {_first_line(exc)}", delay=15) from None
        except ConnectionError as exc:
            raise TemporaryError(f"Ray at {self.address}: {_first_line(exc)}", delay=15) from None
        return _ray_job(details)

    def list(self) -> Sequence[RayJob]:
        return [_ray_job(details) for details in self._call(self._client.list_jobs) if details.submission_id]

    def stop(self, submission_id: str) -> None:
        self._call(self._client.stop_job, submission_id)

    def logs(self, submission_id: str) -> str:
        text: str = self._call(self._client.get_job_logs, submission_id)
        return text

    def nodes(self) -> Sequence[RayNode]:
        from ray.util.state.api import StateApiClient
        from ray.util.state.common import ListApiOptions, StateResource

        def listing() -> list[Any]:
            client = StateApiClient(self.address, headers=dict(self._headers))
            options = ListApiOptions(limit=NODE_LIMIT, detail=True)
            found: list[Any] = client.list(StateResource.NODES, options=options, raise_on_missing_output=False)
            return found

        return [
            RayNode(
                node_id=str(node.node_id),
                alive=node.state == "ALIVE",
                resources={str(k): float(v) for k, v in (node.resources_total or {}).items()},
                labels={str(k): str(v) for k, v in (node.labels or {}).items()},
            )
            for node in self._call(listing)
        ]

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (ConnectionError, RuntimeError) as exc:
            raise TemporaryError(f"Ray at {self.address}: {_first_line(exc)}", delay=15) from None


def _ray_job(details: Any) -> RayJob:
    status = details.status
    return RayJob(
        submission_id=str(details.submission_id),
        status=str(getattr(status, "value", status)),
        message=details.message,
        metadata=dict(details.metadata or {}),
        start_time_ms=details.start_time,
        end_time_ms=details.end_time,
        driver_node_id=getattr(details, "driver_node_id", None) or None,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
