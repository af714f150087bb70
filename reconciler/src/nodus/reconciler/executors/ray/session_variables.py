"""The environment a node session reads: what the executor and a session gang set for `node_session.main`.

Who uses it: `executor.py` (every Ray job it submits), `gang_sessions.py` (each member of a TrainingJob gang) and
`node_session.py`, which reads them. A module of its own because the gang's kinds sit below the node session
(`node_session` runs the gang coordinator, which starts the members), so neither can import the other for these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from .channel import INPUTS_VARIABLE, INSECURE_VARIABLE, REGISTRY_VARIABLE

WORKLOAD_VARIABLE: Final = "NODUS_WORKLOAD"
"""The workload, as JSON; the session drops it from its environment (which it hands on only filtered: `process_env`)."""
RUN_VARIABLE: Final = "NODUS_RUN"
"""What to do with it: LAUNCH, or RESUME after a suspension."""
JOBS_VARIABLE: Final = "NODUS_NODE_JOBS"
"""The node's jobs folder (default `~/.nodus/node-jobs`)."""
PROJECT_VARIABLE: Final = "NODUS_NODE_PROJECT"
"""The project on the node's shared filesystem, for the artifacts a workload names (unset: none)."""
MEMBER_VARIABLE: Final = "NODUS_GANG_MEMBER"
"""Set for a gang member's session (its rank): it launches a later attempt than its node holds."""
LAUNCH: Final = "launch"
RESUME: Final = "resume"
PASSED_TO_MEMBERS: Final = (PROJECT_VARIABLE, REGISTRY_VARIABLE, INSECURE_VARIABLE, INPUTS_VARIABLE)
"""What rank 0's session hands on to every member's: where the inputs come from."""


def default_jobs_root() -> Path:
    """The node's jobs folder where `NODUS_NODE_JOBS` names none."""
    return Path.home() / ".nodus" / "node-jobs"
