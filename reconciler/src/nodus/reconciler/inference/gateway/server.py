"""The gateway process: the app on uvicorn, bound to a loopback port or a Unix socket, with its housekeeping.

Who uses it: `python -m nodus.reconciler.inference.gateway` (`__main__.py`), which the InferenceEndpoint
controller's executor starts once per host (through `nodus.reconciler.inference.api.gateway_command`), and the
tests. What the process does:
- registers itself in the ledger (host, pid, start time), so its requests can be found if it dies;
- prints one JSON line on stdout once it answers: `{"event": "ready", "url", "uds", "gateway", "pid"}`;
- every few seconds writes its heartbeat and reaps the requests of gateway processes that are gone (they become
  `Unknown`, never charged); every ten minutes forgets receipts older than 30 days;
- every few seconds asks whether its project is gone (`gone`: its folder or its SQLite file deleted) and then stops
  as on SIGTERM: a gateway does not outlive its project;
- on SIGTERM or SIGINT: refuses new requests, cuts the streams in flight (each settled for what it produced),
  lets other requests finish for `grace_s`, then marks what is still Running `Unknown`, removes its socket and
  exits 0 with one line on stderr. No traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import anyio.to_thread
import uvicorn

from nodus.errors import ConfigError
from nodus.reconciler.inference.endpoints import StoreDirectory
from nodus.reconciler.inference.gateway.app import Gateway
from nodus.reconciler.inference.gateway.upstream import Upstreams
from nodus.reconciler.inference.ledger import HEARTBEAT_S, Ledger
from nodus.reconciler.pricing.prices import PriceTable
from nodus.reconciler.state.sql import SqlStore

log = logging.getLogger("nodus.gateway")
PRUNE_EVERY_S = 600.0
GRACE_S = 10.0
STOPPING = "the gateway is stopping"
LEFT_UNKNOWN = "the gateway stopped before the request ended"


@dataclass(frozen=True)
class Listen:
    """Where the gateway listens: a Unix socket, or a TCP port of a loopback address (put a TLS proxy in front
    of it for other hosts: API keys travel in its requests)."""

    uds: Path | None = None
    host: str = "127.0.0.1"
    port: int | None = None

    def __post_init__(self) -> None:
        if (self.uds is None) == (self.port is None):
            raise ConfigError("gateway: give exactly one of --uds SOCKET or --port N")
        if self.uds is None and self.host != "localhost":
            try:
                loopback = ipaddress.ip_address(self.host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ConfigError(
                    f"--host {self.host}: the gateway binds a loopback address or a Unix socket",
                    hint="put a TLS reverse proxy in front of it for other hosts (API keys travel in the requests)",
                )

    def describe(self, port: int | None = None) -> str:
        if self.uds is not None:
            return f"unix:{self.uds}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port or self.port}"


def bind(listen: Listen) -> socket.socket:
    """The listening socket, made before anything else so a taken address fails at once. A Unix socket's path is
    replaced only when it is a stale socket (nothing answers there)."""
    if listen.uds is not None:
        path = listen.uds
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise ConfigError(f"--uds {path}: exists and is not a socket; not replaced")
            if _answers(path):
                raise ConfigError(f"--uds {path}: another process is listening there")
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
        except OSError as error:
            sock.close()
            raise ConfigError(f"--uds {path}: cannot bind: {error.strerror}") from None
        # API keys, not file modes, decide who may call the gateway.
        os.chmod(path, 0o666)
    else:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listen.host, listen.port or 0))
        except OSError as error:
            sock.close()
            raise ConfigError(f"--port {listen.port}: cannot bind {listen.host}: {error.strerror}") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def release(listen: Listen, sock: socket.socket) -> None:
    sock.close()
    if listen.uds is not None:
        with contextlib.suppress(FileNotFoundError):
            listen.uds.unlink()


class GatewayServer(uvicorn.Server):
    """uvicorn's server, cutting the gateway's streams first on SIGTERM/SIGINT (uvicorn alone would wait for them)
    and not re-raising the signal after shutdown (that would end the process before it marks what it leaves)."""

    def __init__(self, config: uvicorn.Config, gateway: Gateway, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(config)
        self.gateway = gateway
        self.loop = loop
        self.signal_name: str | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(sig).name
        self.loop.call_soon_threadsafe(self.gateway.cut_streams, STOPPING)
        super().handle_exit(sig, frame)


async def housekeeping(ledger: Ledger, gateway_id: str, every_s: float) -> None:
    """Heartbeat, reap and prune until cancelled; a failure (the store briefly unreachable) is logged and retried."""
    loop = asyncio.get_running_loop()
    pruned_at = loop.time()
    while True:
        await asyncio.sleep(every_s)
        try:
            await anyio.to_thread.run_sync(ledger.heartbeat, gateway_id)
            reaped = await anyio.to_thread.run_sync(ledger.reap)
            if reaped:
                log.warning("requests of gateway processes that are gone, now Unknown: %s", ", ".join(reaped))
            if loop.time() - pruned_at > PRUNE_EVERY_S:
                pruned_at = loop.time()
                await anyio.to_thread.run_sync(ledger.prune)
        except Exception as error:
            log.warning("gateway housekeeping failed (will retry): %s", error)


async def watch(server: GatewayServer, gone: Callable[[], str | None], every_s: float) -> None:
    """Stop the server as a SIGTERM would once `gone` names why its project is no more."""
    while True:
        await asyncio.sleep(every_s)
        why = gone()
        if why is not None:
            server.signal_name = why
            server.gateway.cut_streams(STOPPING)
            server.should_exit = True
            return


def store_gone(store: SqlStore, project_root: Path | None) -> Callable[[], str | None]:
    """Why the gateway's project is gone (its folder, or its SQLite state file, deleted), or None while it is there.
    A PostgreSQL store without a project folder is never gone from here."""
    state_file: Path | None = getattr(store, "path", None)

    def gone() -> str | None:
        if project_root is not None and not project_root.is_dir():
            return f"its project folder {project_root} is gone"
        if state_file is not None and not state_file.exists():
            return f"its state store {state_file} is gone"
        return None

    return gone


async def run(
    gateway: Gateway,
    listen: Listen,
    sock: socket.socket,
    *,
    grace_s: float,
    every_s: float,
    gone: Callable[[], str | None] | None = None,
) -> str | None:
    """Serve until a signal, or until `gone` says the project is no more; the ready line once it answers. Returns
    the signal's name (or why it stopped), if something ended it."""
    config = uvicorn.Config(
        gateway.app(),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=max(1, int(grace_s)),
    )
    server = GatewayServer(config, gateway, asyncio.get_running_loop())
    chores = asyncio.ensure_future(housekeeping(gateway.ledger, gateway.gateway_id, every_s))
    watcher = asyncio.ensure_future(watch(server, gone, every_s)) if gone is not None else None
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            port = sock.getsockname()[1] if listen.uds is None else None
            ready = {
                "event": "ready",
                "url": listen.describe(port),
                "uds": str(listen.uds) if listen.uds is not None else None,
                "gateway": gateway.gateway_id,
                "pid": os.getpid(),
            }
            print(json.dumps(ready), flush=True)
        await serving
    finally:
        for task in (chores, watcher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return server.signal_name


def serve(
    store: SqlStore,
    prices: PriceTable,
    listen: Listen,
    *,
    directory_ttl_s: float = 1.0,
    grace_s: float = GRACE_S,
    every_s: float = HEARTBEAT_S,
    keys_folder: Path | None = None,
    identity: dict[str, object] | None = None,
    gone: Callable[[], str | None] | None = None,
) -> int:
    """Run a gateway process on `store` until a signal: the process's exit code. ConfigError (before anything
    is bound or recorded) for an address it cannot use."""
    sock = bind(listen)
    ledger = Ledger(store)
    try:
        gateway_id = ledger.register_gateway(listen.describe(), pid=os.getpid())
    except BaseException:
        release(listen, sock)
        raise
    left: list[str] = []
    stopped_by: str | None = None
    try:
        ledger.reap()
        gateway = Gateway(
            ledger=ledger,
            directory=StoreDirectory(store, ttl_s=directory_ttl_s),
            prices=prices,
            upstreams=Upstreams(),
            gateway_id=gateway_id,
            keys_folder=keys_folder,
            identity={**(identity or {}), "pid": os.getpid()},
        )
        stopped_by = asyncio.run(run(gateway, listen, sock, grace_s=grace_s, every_s=every_s, gone=gone))
    finally:
        release(listen, sock)
        try:
            left = ledger.retire(gateway_id, LEFT_UNKNOWN)
        except Exception as error:  # the store is gone: the reaper of another gateway will find them
            print(f"nodus gateway: could not mark its requests Unknown: {error}", file=sys.stderr)
    why = "" if not stopped_by else f" by {stopped_by}" if stopped_by.startswith("SIG") else f": {stopped_by}"
    unknown = f"; {len(left)} request(s) left Unknown: {', '.join(left)}" if left else ""
    print(f"nodus gateway: stopped{why}{unknown}", file=sys.stderr, flush=True)
    return 0
