"""What completion code can see: the one function that decides the runner's view, and the code that enters it.

Who uses it: `nodus.env.execute.launch`, in the spawner of a grader in either sandbox (container or process
mode) and in-process in development; the hostile-completion tests read `runner_view` to know what is allowed.

The runner gets a root file system built from nothing: an empty tmpfs holding, read-only and at the same
paths as outside, only the interpreter, its standard library (without site-packages), the shared libraries
they link, `/etc/ld.so.cache`, `/dev/null`, `/dev/zero` and `/dev/urandom`; and a private, empty, writable
`/tmp` (its home and working folder). It has no `/proc`, `/sys` or `/dev/shm`, no host file, no package,
no data or manifest folder, and its own PID, network, IPC and UTS namespaces, so it sees no other process
and no network. The root is `pivot_root`ed to and the old one detached, so nothing of the host stays
reachable, even through `..` or open descriptors (all are closed before `exec`).

Why a user namespace: building a root needs mount rights, which the spawner does not hold (it keeps only
SETUID, SETGID and KILL, and a container runs without SYS_ADMIN). An unprivileged user namespace that maps
only the runner's own uid grants them over the new mount namespace alone; the runner's uid outside stays
what the spawner chose, and `exec` as a non-zero uid drops every capability again. The folders it binds
are opened first, while the spawner's uid can still reach them (`/root` is 0700), and bound by descriptor.
A host where user namespaces are refused gets no weaker runner: `ViewUnavailableError` is raised, and the
grader reports an InfrastructureFailure rather than run completion code in the open.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import stat
import struct
import subprocess
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
# statvfs f_flag bits -> the mount flags a bind remount must repeat (a user namespace may not clear them).
_LOCKED_FLAGS = ((0x2, MS_NOSUID), (0x4, MS_NODEV), (0x8, MS_NOEXEC), (0x400, MS_NOATIME), (0x800, MS_NODIRATIME))
_ST_RELATIME = 0x1000
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
ROOT_MOUNT = "/tmp"
"""Where the new root's tmpfs is mounted before `pivot_root` (in the runner's own mount namespace only)."""
HIDDEN_IN_STDLIB = ("site-packages", "dist-packages")
TMP_MB = 64

# Asks the runner's interpreter where it keeps its standard library (`-I -S` gives exactly the path it uses in the
# runner: no site folders, no user folder, no environment variables) and which shared libraries it maps once every
# extension module of that library is loaded (dlopen'd, not imported: no module code runs). No `ldd` needed: images
# made by hand hold none.
_PROBE = """
import json, os, sys
try:
    from ctypes import CDLL
    def load(path):
        CDLL(path, mode=os.RTLD_LAZY)
except ImportError:  # no _ctypes here: import each module by name instead
    import importlib
    def load(path):
        importlib.import_module(os.path.basename(path).split(".")[0])
for folder in [p for p in sys.path if p and os.path.isdir(p)]:
    for name in sorted(os.listdir(folder)):
        if name.endswith(".so"):
            try:
                load(os.path.join(folder, name))
            except Exception:
                pass
mapped = set()
with open("/proc/self/maps") as maps:
    for line in maps:
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            mapped.add(fields[5].rstrip("\\n"))
print(json.dumps({"path": sys.path, "mapped": sorted(mapped)}))
"""


class ViewUnavailableError(RuntimeError):
    """The runner's view could not be built on this host: completion code must not run."""


@dataclass(frozen=True)
class RunnerView:
    """What a runner sees: host paths bound read-only at the same path, and folders inside them covered."""

    python: str
    binds: tuple[str, ...]
    """Real paths (no link on the way), bound read-only at the same path."""
    links: tuple[tuple[str, str], ...]
    """(path, target) of the links on the way to the bound paths, re-made as they are (`/lib64 -> usr/lib64`)."""
    hidden: tuple[str, ...]
    devices: tuple[str, ...] = DEVICES
    tmp_mb: int = TMP_MB

    def to_json(self) -> dict[str, object]:
        return {
            "python": self.python,
            "binds": list(self.binds),
            "links": [list(link) for link in self.links],
            "hidden": list(self.hidden),
            "devices": list(self.devices),
            "tmpMb": self.tmp_mb,
        }


_views: dict[str, RunnerView] = {}


def runner_view(python: str) -> RunnerView:
    """The view of a runner that executes `python`: the one place that decides what completion code sees.

    Computed once per interpreter and process: one run of the interpreter."""
    python = os.path.realpath(python)
    known = _views.get(python)
    if known is not None:
        return known
    try:
        probe = subprocess.run(
            [python, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True, env={}
        )
        found = json.loads(probe.stdout)
        paths, mapped = list(found["path"]), list(found["mapped"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        raise ViewUnavailableError(f"cannot ask the runner interpreter {python} for its library: {exc}") from exc
    stdlib = [os.path.realpath(p) for p in paths if p and os.path.exists(p)]
    libraries = [path for path in mapped if os.path.isfile(path) and ".so" in os.path.basename(path)]
    libraries += _loader(python) + _soname_links(libraries)
    extra = ["/etc/ld.so.cache"] if os.path.isfile("/etc/ld.so.cache") else []
    hidden = [os.path.join(folder, name) for folder in stdlib for name in HIDDEN_IN_STDLIB]
    links: dict[str, str] = {}
    binds = list(dict.fromkeys(_resolve(path, links) for path in [python, *stdlib, *libraries, *extra]))
    view = RunnerView(
        python=python,
        binds=tuple(path for path in binds if not any(path.startswith(other + "/") for other in binds)),
        links=tuple(sorted(links.items())),
        hidden=tuple(path for path in hidden if os.path.isdir(path)),
    )
    _views[python] = view
    return view


def _loader(python: str) -> list[str]:
    """The dynamic loader as the interpreter names it (its PT_INTERP path, often a link: `/lib64/ld-linux...`)."""
    try:
        with open(python, "rb") as binary:
            header = binary.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return []  # only 64-bit little-endian ELF is read here; the loader's real file is mapped anyway
            (phoff,) = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            binary.seek(phoff)
            table = binary.read(phentsize * phnum)
            for index in range(phnum):
                kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", table, index * phentsize)
                if kind == 3:  # PT_INTERP
                    binary.seek(offset)
                    return [binary.read(size).rstrip(b"\0").decode()]
    except (OSError, struct.error, UnicodeDecodeError):
        return []
    return []


def _soname_links(libraries: list[str]) -> list[str]:
    """The links beside each library that point at it (`libz.so.1 -> libz.so.1.2.13`): the loader opens those."""
    wanted = {os.path.realpath(path) for path in libraries}
    links: list[str] = []
    for folder in sorted({os.path.dirname(path) for path in libraries}):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink() and os.path.realpath(entry.path) in wanted:
                links.append(entry.path)
    return links


# --- entering the view: runs in the forked child, between fork and exec ---------------------------------


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _open_sources(view: RunnerView) -> dict[str, int]:
    """O_PATH descriptors of everything the view binds, opened before the root's tmpfs covers any of them.

    Opened in the new mount namespace: a bind mount's source must be a mount of the caller's namespace."""
    sources: dict[str, int] = {}
    for path in (*view.binds, *view.devices):
        sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    return sources


def unshare(uid: int, gid: int) -> None:
    """New user, mount, PID, network, IPC and UTS namespaces, mapping only `uid` and `gid` to themselves.

    Call as the final uid: the next forked child is PID 1 of the new PID namespace."""
    # A uid change leaves the process non-dumpable, which makes /proc/self/*_map root's to write.
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    if _libc.unshare(NAMESPACES) != 0:
        code = ctypes.get_errno()
        raise ViewUnavailableError(
            f"this host refuses user namespaces to uid {uid} ({os.strerror(code)}): the runner's private view "
            "cannot be built (enable unprivileged user namespaces, e.g. sysctl user.max_user_namespaces)"
        )
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def enter(view: RunnerView) -> None:
    """Build the view's root on a fresh tmpfs, `pivot_root` into it and leave the old root behind.

    Runs as PID 1 of the namespaces `unshare` made; afterwards the working folder is the private /tmp."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")  # the parent dies: so do we
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    try:
        sources = _open_sources(view)
    except PermissionError as exc:
        raise ViewUnavailableError(
            f"the runner's uid cannot reach {exc.filename} to bind it into its view (set NODUS_RUNNER_PYTHON to an "
            "interpreter every user can read)"
        ) from exc
    root = ROOT_MOUNT
    _mount("nodus-runner", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, target in view.links:
        os.makedirs(root + os.path.dirname(path), exist_ok=True)
        os.symlink(target, root + path)
    for path in view.binds:
        _bind(root, path, sources[path])
    for path in view.hidden:  # site-packages inside the standard library: empty and read-only
        _mount("nodus-runner", root + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    os.makedirs(root + "/dev", exist_ok=True)
    for device in view.devices:
        _bind(root, device, sources[device], read_only=False)
    os.mkdir(root + "/tmp", 0o755)
    os.mkdir(root + "/.old", 0o700)
    _pivot_root(root, root + "/.old")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount2(/.old)")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount("nodus-runner-tmp", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={view.tmp_mb}m,mode=0700")
    os.chdir("/tmp")
    for fd in sources.values():
        os.close(fd)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _bind(root: str, path: str, source: int, *, read_only: bool = True) -> None:
    """Bind the file or folder open as `source` at `path` inside `root` (read-only unless told otherwise)."""
    target = root + path
    if stat.S_ISDIR(os.fstat(source).st_mode):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
    _mount(f"/proc/self/fd/{source}", target, None, MS_BIND | MS_REC)
    if read_only:
        flags = os.fstatvfs(source).f_flag
        keep = sum(ms for st, ms in _LOCKED_FLAGS if flags & st) | (MS_RELATIME if flags & _ST_RELATIME else 0)
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def _resolve(path: str, links: dict[str, str], hops: int = 0) -> str:
    """The real path of `path`, noting in `links` each link met on the way (the view re-makes them)."""
    if hops > 32:
        raise ViewUnavailableError(f"too many links on the way to {path}")
    parts = [part for part in path.split("/") if part]
    current = "/"
    for index, part in enumerate(parts):
        here = os.path.join(current, part)
        if os.path.islink(here):
            target = os.readlink(here)
            links[here] = target
            rest = "/".join(parts[index + 1 :])
            resolved = os.path.normpath(os.path.join(current, target))
            return _resolve(os.path.join(resolved, rest) if rest else resolved, links, hops + 1)
        current = here
    return current


def _pivot_root(new_root: str, put_old: str) -> None:
    number = _PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise ViewUnavailableError(f"pivot_root's system call number on {platform.machine()} is not known to nodus-env")
    _check(_libc.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    result = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        kind.encode() if kind else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(result, f"mount {source or ''} on {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
