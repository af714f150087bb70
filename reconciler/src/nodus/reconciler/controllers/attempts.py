"""`status.attempts` of a TrainingJob or Job: each rank's attempts, from what its executor reported.

Who calls it: `controllers.trainingjob.job_status` (TrainingJobs and Jobs alike), at every look at a launched job;
`nodus get attempts` reads what it wrote (`views.attempts`). Rows: a gang's coordinator's, or a Ray executor's one per
run (`Observation.raw["attempts"]`, made there), else the local supervisor's sessions (`status.sessions`), rank 0 on
`local`, and the session running now.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from nodus.specs.status_names import Phase

LOCAL_NODE: Final = "local"


def attempts_of(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`status.attempts` of a job from what its executor reported (`Observation.raw`): the executor's own list
    where it made one (Ray), else the local supervisor's sessions, plus the one running now."""
    found = raw.get("attempts")
    if isinstance(found, list):
        return [dict(row) for row in found if isinstance(row, Mapping)]
    rows: list[dict[str, Any]] = []
    for session in raw.get("sessions") or []:
        if not isinstance(session, Mapping):
            continue
        row: dict[str, Any] = {"rank": 0, "attempt": session.get("attempt"), "node": LOCAL_NODE}
        for field in ("startedAt", "endedAt", "costUSD", "reason"):
            if session.get(field) is not None:
                row[field] = session[field]
        rows.append(row)
    if raw.get("phase") == Phase.RUNNING and raw.get("sessionStartedAt"):
        rows.append(
            {
                "rank": 0,
                "attempt": raw.get("attempt"),
                "node": LOCAL_NODE,
                "startedAt": raw["sessionStartedAt"],
                "phase": Phase.RUNNING,
            }
        )
    return rows
