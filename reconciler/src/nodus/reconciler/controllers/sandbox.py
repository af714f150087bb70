"""Which sandbox a job's graders get, decided once at launch and said out loud when it is not a container.

Who calls it: the TrainingJob controller (`controllers/trainingjob.py`) when it compiles a job, from the project's
`grading.sandbox` setting (`nodus.yaml`, see `nodus.specs.settings`) and what the Environment controller found on
this host (`graderImage`, or `sandbox` saying why there is none). The result goes into the job's `status.sandbox`,
from which `controllers/status.py` derives the `ContainerSandbox` condition (and its one Warning event), and
`nodus apply` prints its message once, when it launches the job.

- container: the grader image under podman (no network, read-only, uid 10001, no capabilities);
- process: namespaces, a dropped uid and rlimits around the host's Python, with exactly the files the image holds;
  chosen by the setting (`ProcessModeRequested`) or, in `auto`, because this host cannot run the image
  (`NoContainerRuntime`, `ImageNotLoaded`), never silently;
- refused: the setting asks for a container and this host cannot (`SandboxUnavailable`): the job fails before it
  starts rather than run in a weaker sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodus.reconciler.state.records import JSONObject
from nodus.specs.status_names import Phase, Reason

CONTAINER = "container"
PROCESS = "process"
REQUESTED = Reason.PROCESS_MODE_REQUESTED
UNAVAILABLE = Reason.SANDBOX_UNAVAILABLE
SETTING = "nodus.yaml grading.sandbox"


@dataclass(frozen=True)
class Sandbox:
    mode: str
    """container or process."""
    reason: str = ""
    message: str = ""
    refused: bool = False
    """The project requires a container, and this host cannot run one for this Environment."""

    @property
    def container(self) -> bool:
        return self.mode == CONTAINER

    def to_status(self) -> JSONObject:
        status: JSONObject = {"mode": self.mode}
        if self.reason:
            status["reason"] = self.reason
        if self.message:
            status["message"] = self.message
        return status

    def refusal(self) -> JSONObject:
        """The job's status when refused."""
        return {"phase": Phase.FAILED, "reason": UNAVAILABLE, "message": self.message, "sandbox": self.to_status()}


def choose(setting: str, environment_status: JSONObject) -> Sandbox:
    """The sandbox for a job on an Environment whose (Ready) status is `environment_status`."""
    if setting == PROCESS:
        return Sandbox(PROCESS, REQUESTED, f"graders run in process mode: the project asks for it ({SETTING}: process)")
    if environment_status.get("graderImage"):
        return Sandbox(CONTAINER)
    found = environment_status.get("sandbox")
    found = found if isinstance(found, dict) else {}
    reason = str(found.get("reason") or Reason.NO_GRADER_IMAGE)
    why = str(found.get("message") or "the Environment's image is not in podman's storage on this host")
    if setting == CONTAINER:
        message = f"the project requires container grading ({SETTING}: container), but {why}"
        return Sandbox(CONTAINER, reason, message, refused=True)
    return Sandbox(PROCESS, reason, f"graders run in process mode, not in the Environment's image: {why}")


def from_status(status: JSONObject) -> Sandbox | None:
    """The sandbox a launched generation recorded."""
    found = status.get("sandbox")
    if not isinstance(found, dict) or found.get("mode") not in (CONTAINER, PROCESS):
        return None
    return Sandbox(str(found["mode"]), str(found.get("reason") or ""), str(found.get("message") or ""))
