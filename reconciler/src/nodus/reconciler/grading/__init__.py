"""Grading on the host: `nodus-env` graders in sandboxes (containers, or namespaced processes), verdicts with
evidence recorded by the host (DESIGN.md section 6, "Grader sandboxes").

Who uses it: the job supervisor and the attempt API (`POST .../tasks`, `POST .../gradings`) through
`GradingService`. Modules, from the bottom up:

    models     EnvironmentRef, GradeRequest, Verdict; checking a grader's reply
    settings   GradingSettings, ProcessSettings
    sandbox    pure: the argv of a grader in container or process mode
    staging    process mode: environment files copied for the grader uid (0700), once per content
    launcher   host facts (runtime, root, user namespaces, image digests) -> sandbox commands
    process    one running sandbox: lines in and out through non-blocking pipes, no threads; kill of it all
    wire       the protocol's bytes: a request line out, a reply line in (hashed into the evidence)
    grader     one long-lived grader: a window of lines in flight, timeouts, crashes, restarts; exactly one
               verdict per line
    pool       the graders of one (environment, job), at most max_parallel, runner uids
    service    GradingService: tasks, grade, close, idle reaping
"""

from __future__ import annotations

from .models import (
    CORRECT,
    INCORRECT,
    INFRASTRUCTURE_FAILURE,
    INVALID_OUTPUT,
    VERDICTS,
    EnvironmentRef,
    GradeRequest,
    Verdict,
    VerdictName,
)
from .service import GradingService
from .settings import GradingSettings, Mode, ProcessSettings, Runtime

__all__ = [
    "CORRECT",
    "INCORRECT",
    "INFRASTRUCTURE_FAILURE",
    "INVALID_OUTPUT",
    "VERDICTS",
    "EnvironmentRef",
    "GradeRequest",
    "GradingService",
    "GradingSettings",
    "Mode",
    "ProcessSettings",
    "Runtime",
    "Verdict",
    "VerdictName",
]
