"""`python -m nodus.reconciler.inference.gateway`: run an inference gateway process.

Who runs it: the InferenceEndpoint controller's executor (one per host; the argv comes from
`nodus.reconciler.inference.api.gateway_command`), the tests and the benchmark, and people by hand:

    python -m nodus.reconciler.inference.gateway --state URL_OR_PATH (--uds SOCKET | --port N [--host 127.0.0.1])
        [--prices FILE] [--project-root DIR] [--grace SECONDS]

It prints one JSON line on stdout when it answers (`{"event": "ready", "url": ..., "gateway": ...}`) and ends cleanly on
SIGTERM (exit 0), or once its project is gone (the --project-root folder or the SQLite --state file deleted). `GET
/health` names its project (the store's id, the folder, the pid). Bad input (no such state store, a taken port, a public
--host, a bad price table) exits 2 with one line on stderr naming the flag or file.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from nodus.errors import ConfigError, NodusError
from nodus.reconciler.inference.gateway.server import GRACE_S, Listen, serve, store_gone
from nodus.reconciler.inference.gateway_address import project_id
from nodus.reconciler.pricing.prices import load_prices
from nodus.reconciler.project import Project
from nodus.reconciler.state import open_store
from nodus.reconciler.state.sql import SqlStore


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nodus.reconciler.inference.gateway", description=__doc__.split("\n")[0])
    p.add_argument(
        "--state", required=True, help="the state store: a SQLite file path, sqlite:///PATH or postgresql://"
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--uds", type=Path, help="listen on this Unix socket")
    where.add_argument("--port", type=int, help="listen on this TCP port of --host (0: a free one, named when ready)")
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--prices", type=Path, help="a price table merged over the catalog's (per-token prices)")
    p.add_argument("--project-root", type=Path, help="a project whose prices.yaml is merged in")
    p.add_argument("--grace", type=float, default=GRACE_S, help="seconds requests in flight get to finish on SIGTERM")
    p.add_argument("--endpoints-ttl", type=float, default=1.0, help="seconds an endpoint's spec and status are reused")
    return p


def one_line(error: NodusError) -> str:
    return " ".join(error.lines()).replace(" hint: ", " (hint: ", 1) + (")" if error.hint else "")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="nodus gateway: %(message)s")
    try:
        listen = Listen(uds=args.uds, host=args.host, port=args.port)
        if args.port is not None and not 0 <= args.port < 65536:
            raise ConfigError(f"--port {args.port}: not a TCP port (0 to 65535)")
        prices = load_prices(project_root=args.project_root, prices_file=args.prices)
        store = open_store(args.state, project_state_dir=Path.cwd() / ".nodus")
        keys_folder = Project.find(args.project_root).files.root if args.project_root is not None else None
    except NodusError as error:
        print(f"nodus gateway: {one_line(error)}", file=sys.stderr)
        return 2
    try:
        if not isinstance(store, SqlStore):
            print(f"nodus gateway: --state {store.url}: not a SQL state store", file=sys.stderr)
            return 2
        root = args.project_root.resolve() if args.project_root is not None else None
        identity: dict[str, object] = {"project": project_id(store), "root": str(root) if root else None}
        return serve(
            store,
            prices,
            listen,
            directory_ttl_s=args.endpoints_ttl,
            grace_s=args.grace,
            keys_folder=keys_folder,
            identity=identity,
            gone=store_gone(store, root),
        )
    except NodusError as error:
        print(f"nodus gateway: {one_line(error)}", file=sys.stderr)
        return 2
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
