"""The Python API of inference that the CLI and the InferenceEndpoint controller call.

Who uses it: `nodus keys create/revoke/list`, `nodus inference receipt ID` (the CLI, which opens the store with
`--state` as for every command), and the InferenceEndpoint controller (the gateway's command line for its executor,
and `reap_lost_requests` where the reconcile loop runs). Every function takes the state store the command opened;
a store that is not one of nodus's SQL stores is a ConfigError.

    made = create_key(store, "support-app", project="default")      # made.secret: print it once, it is not kept
    revoke_key(store, "support-app", project="default")
    list_keys(store, project="default")                             # ApiKey(name, scopes, secret_hint, ...)
    receipt = read_receipt(store, "ireq_01k6d2x7q9fvjt3y8m0c4r5n2e")  # Receipt | None; receipt.to_json()
    argv = gateway_command("postgresql://nodus@db/nodus", uds=Path("/run/nodus/gateway.sock"))
    reap_lost_requests(store)                                       # ids now Unknown
    budget_spend(store, "default", budget_record, time.time())      # USD charged and held under a Budget
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from nodus.errors import ConfigError
from nodus.reconciler.inference import budgets, keys
from nodus.reconciler.inference.keys import SCOPE_INVOKE, ApiKey, NewKey
from nodus.reconciler.inference.ledger import Ledger, Receipt
from nodus.reconciler.state.records import DEFAULT_PROJECT, ResourceRecord, StateStore
from nodus.reconciler.state.sql import SqlStore

GATEWAY_MODULE = "nodus.reconciler.inference.gateway"


def sql_store(store: StateStore) -> SqlStore:
    if not isinstance(store, SqlStore):
        raise ConfigError(f"the state store {store.url} keeps no inference ledger (a SQLite or PostgreSQL store does)")
    return store


def create_key(
    store: StateStore, name: str, *, project: str = DEFAULT_PROJECT, scopes: Sequence[str] = (SCOPE_INVOKE,)
) -> NewKey:
    """A new API key; `NewKey.secret` is shown to the person once and never stored (only its sha256 is)."""
    return keys.create_key(sql_store(store), name, project=project, scopes=scopes)


def revoke_key(store: StateStore, name: str, *, project: str = DEFAULT_PROJECT) -> ApiKey:
    return keys.revoke_key(sql_store(store), name, project=project)


def list_keys(store: StateStore, *, project: str | None = None) -> list[ApiKey]:
    return keys.list_keys(sql_store(store), project=project)


def read_receipt(store: StateStore, request_id: str) -> Receipt | None:
    """A request's receipt (30 days), or None."""
    return Ledger(sql_store(store)).receipt(request_id)


def reap_lost_requests(store: StateStore) -> list[str]:
    """Requests held by gateway processes that are gone become Unknown (never charged); their ids."""
    return Ledger(sql_store(store)).reap()


def budget_spend(store: StateStore, project: str, budget: ResourceRecord, now: float) -> Decimal:
    """What `project`'s endpoints covered by `budget` (a Budget record) charged in its period and hold now, in USD: the
    inference share a TrainingJob's launch counts against the same Budget (`controllers/budgets.py`)."""
    if not isinstance(store, SqlStore):
        return Decimal(0)
    rules = budgets.budget_rules([budget])
    if not rules:
        return Decimal(0)
    settled, held = Ledger(store)._budget_spend(project, rules[0], now)
    return Decimal(settled + held) / Decimal(1_000_000_000)


def gateway_command(
    state: str,
    *,
    uds: Path | None = None,
    port: int | None = None,
    host: str = "127.0.0.1",
    prices_file: Path | None = None,
    project_root: Path | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The argv of a gateway process for an executor to start (it prints a JSON ready line on stdout, ends on
    SIGTERM). `state` is the store's URL or path as `--state` takes it (a password belongs in ~/.pgpass or
    PGPASSWORD, never in an argv)."""
    if (uds is None) == (port is None):
        raise ConfigError("gateway: give exactly one of uds or port")
    argv = [python, "-m", GATEWAY_MODULE, "--state", state]
    argv += ["--uds", str(uds)] if uds is not None else ["--port", str(port), "--host", host]
    if prices_file is not None:
        argv += ["--prices", str(prices_file)]
    if project_root is not None:
        argv += ["--project-root", str(project_root)]
    return argv
