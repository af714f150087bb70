"""Is a gateway process still alive? Its host identity and its start time, so a dead one's requests are found.

Who uses it: the ledger (a gateway registers its host identity, pid and start time; `Ledger.reap` asks
`process_alive` about the gateways that hold Running requests). A pid alone is not an identity: pids are reused.
So a process is named by (host, pid, start time), where the host is the hostname, the kernel's boot id and the
pid namespace (two containers of one machine share the boot id, not the pid namespace). Another host's process
cannot be checked here: its heartbeat tells instead (`Ledger.reap`'s `stale_after_s`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def host_identity() -> str:
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{_read('/proc/sys/kernel/random/boot_id')}/{namespace}"


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat from field 3 (the state) on; the command name before it may hold spaces and parentheses."""
    return _read(f"/proc/{pid}/stat").rpartition(")")[2].split()


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), "" when unreadable."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def process_alive(host: str, pid: int, started: str) -> bool | None:
    """True or False for a process of this host (the same pid still runs the same process); None for another
    host's, which cannot be seen from here."""
    if host != host_identity():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    fields = _stat_fields(pid)
    if fields and fields[0] in ("Z", "X"):  # ended, not yet waited for by its parent
        return False
    now = fields[19] if len(fields) > 19 else ""
    return not started or not now or now == started
