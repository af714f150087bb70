"""Dropping from root to the grader uid, keeping a spawner that can start runners as another uid.

Who uses it: `nodus.env.cli` calls `drop_privileges()` first thing, before the environment is loaded.
The grading service starts graders as root with only SETUID, SETGID and KILL capabilities and sets
`NODUS_GRADER_UID`; without that variable (development, third-party callers) nothing changes.
"""

from __future__ import annotations

import importlib
import os

from nodus.env import execute


def drop_privileges(*, spawner: bool) -> str:
    """Become `NODUS_GRADER_UID` when asked and root; return the isolation the runners will have."""
    wanted = os.environ.get("NODUS_GRADER_UID")
    if not wanted or os.geteuid() != 0:
        return "uid" if os.geteuid() == 0 else "same-uid"
    grader = int(wanted)
    runner = int(os.environ.get("NODUS_RUNNER_UID", execute.DEFAULT_RUNNER_UID))
    if runner == grader:
        raise SystemExit("NODUS_RUNNER_UID must differ from NODUS_GRADER_UID")
    if spawner:
        execute.start_spawner(runner)  # before any answer is in memory, while uids can still change
    os.setgroups([])
    os.setresgid(grader, grader, grader)
    os.setresuid(grader, grader, grader)
    # Folders only the grader uid may read (the image's /opt/nodus/site-packages, 0700) were listed as empty
    # while we were root without DAC rights: forget those listings, or nothing would import from them.
    importlib.invalidate_caches()
    return "uid" if spawner else "none"
