"""Where the gateway finds InferenceEndpoints: the `EndpointDirectory` seam and its state-store implementation.

Who uses it: the gateway (which endpoint a request names, whether it serves now, where its model server listens,
its limits) and the ledger (an endpoint's limits and labels when it admits a request). The InferenceEndpoint
controller writes the status fields read here; this module only reads.

An endpoint comes from its `InferenceEndpoint` record (`store.list("InferenceEndpoint", project)`):
- spec (from git): `model`, `rpm`, `tpm`, `maxConcurrent`, `allowedKeys`, `maxCostUSD`, `state` (Running or
  Stopped), and `metadata.labels` (Budget selectors match them);
- status, written by the InferenceEndpoint controller:
  - `phase`: `Running` once the model server answers and the gateway may forward to it (anything else, or
    `spec.state: Stopped`, makes the gateway answer 503 Unavailable);
  - `upstream`: where the model server listens, `unix:/path/to.sock` or `http://HOST:PORT`;
  - optional `upstreamAuth`: `Bearer` when that server takes the endpoint's key (a Ray node's: the gateway derives
    the key from the project's key file, `executors.service.upstream_key`);
  - `servedModel`: the model name that server knows (`--name` of nodus's server, `--served-model-name` of
    `vllm serve`, or an adapter's name under `--lora-modules`); the gateway sends it as `model`;
  - `model`: the model id requests may name and `/v1/models` lists (default: `spec.model` when it is an id
    string; the controller writes it for a Volume or a TrainingJob's adapter);
  - optional `priceModel`: the model id whose per-token price applies (default: `model`); for an adapter, its
    base model's id when the price table names only the base;
  - optional `maxModelLen`: the context window in tokens; when left out the gateway asks the model server's
    `/v1/models` (nodus's server and vLLM both report `max_model_len`);
  - optional `operations`: the routes the model serves (`ChatCompletions`, `Completions`, `Responses`,
    `Messages`, `Embeddings`); when left out every route is forwarded and the model server refuses what it
    does not serve.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol

from nodus.reconciler.state.records import ResourceRecord, StateStore, canonical
from nodus.specs.status_names import Phase

KIND = "InferenceEndpoint"


class Operation(StrEnum):
    """The operations a model may serve, as receipts and `status.operations` name them."""

    CHAT_COMPLETIONS = "ChatCompletions"
    COMPLETIONS = "Completions"
    RESPONSES = "Responses"
    MESSAGES = "Messages"
    EMBEDDINGS = "Embeddings"


@dataclass(frozen=True)
class Endpoint:
    """One endpoint as the gateway and the ledger see it: spec and the controller's status together."""

    project: str
    name: str
    model: str
    """`spec.model` as a model id (`nodus/gpt-oss-20b`): what `/v1/models` lists and requests may name."""
    labels: Mapping[str, str] = field(default_factory=dict)
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    allowed_keys: tuple[str, ...] = ()
    max_cost_usd: Decimal | None = None
    desired_state: str = Phase.RUNNING
    """`spec.state`: Running or Stopped."""
    phase: str = ""
    upstream: str | None = None
    upstream_auth: str | None = None
    served_model: str | None = None
    price_model: str = ""
    max_model_len: int | None = None
    operations: tuple[str, ...] | None = None

    @property
    def serving(self) -> bool:
        return self.why_not_serving() is None

    def why_not_serving(self) -> str | None:
        """None when requests may be forwarded; else the reason, one line."""
        if self.desired_state == Phase.STOPPED:
            return f"endpoint {self.name} is stopped (nodus start ep/{self.name})"
        if self.phase != Phase.RUNNING:
            return f"endpoint {self.name} is not Running yet (phase {self.phase or 'Pending'})"
        if not self.upstream or not self.served_model:
            return f"endpoint {self.name}: its status names no upstream model server yet"
        return None

    def labels_json(self) -> str:
        return canonical(dict(self.labels))


def _model_id(value: Any) -> str:
    """spec.model as an id: a string as it is; another form (a TrainingJob's adapter) as its canonical JSON."""
    return value if isinstance(value, str) else canonical(value)


def _optional_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def endpoint_of(record: ResourceRecord) -> Endpoint:
    """The Endpoint of an InferenceEndpoint record (fields the controller has not written yet are empty)."""
    document = record.spec
    spec: Mapping[str, Any] = document.get("spec") or {}
    metadata: Mapping[str, Any] = document.get("metadata") or {}
    status = record.status
    resolved = status.get("model")
    model = resolved if isinstance(resolved, str) and resolved else _model_id(spec.get("model", ""))
    cap = spec.get("maxCostUSD")
    operations = status.get("operations")
    price_model = status.get("priceModel")
    return Endpoint(
        project=record.key.project,
        name=record.key.name,
        model=model,
        labels=dict(metadata.get("labels") or {}),
        rpm=_optional_int(spec.get("rpm")),
        tpm=_optional_int(spec.get("tpm")),
        max_concurrent=_optional_int(spec.get("maxConcurrent")),
        allowed_keys=tuple(spec.get("allowedKeys") or ()),
        max_cost_usd=Decimal(str(cap)) if cap is not None else None,
        desired_state=str(spec.get("state") or Phase.RUNNING),
        phase=str(status.get("phase") or ""),
        upstream=status.get("upstream") or None,
        upstream_auth=status.get("upstreamAuth") or None,
        served_model=status.get("servedModel") or None,
        price_model=price_model if isinstance(price_model, str) and price_model else model,
        max_model_len=_optional_int(status.get("maxModelLen")),
        operations=tuple(operations) if isinstance(operations, list) else None,
    )


class EndpointDirectory(Protocol):
    """The endpoints of a project, as fresh as the implementation promises."""

    def endpoints(self, project: str) -> list[Endpoint]:
        """Sorted by name."""
        ...

    def is_fresh(self, project: str) -> bool:
        """True when `endpoints(project)` would answer without reading anything (the gateway then calls it on its
        event loop instead of a worker thread)."""
        ...


class StoreDirectory:
    """Endpoints read from the state store, each project's list kept for `ttl_s` (0: read on every request).

    A short ttl saves a read per request; a spec or status change (a Stopped endpoint, a raised maxCostUSD) is
    seen within ttl_s. The ledger re-reads nothing of it: the limits in force are those read here."""

    def __init__(self, store: StateStore, *, ttl_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.ttl_s = ttl_s
        self._clock = clock
        self._cache: dict[str, tuple[float, list[Endpoint]]] = {}
        self._lock = threading.Lock()

    def is_fresh(self, project: str) -> bool:
        with self._lock:
            cached = self._cache.get(project)
        return cached is not None and self._clock() - cached[0] < self.ttl_s

    def endpoints(self, project: str) -> list[Endpoint]:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(project)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        found = [endpoint_of(record) for record in self.store.list(KIND, project) if not record.deleting]
        with self._lock:
            self._cache[project] = (now, found)
        return found


def find_endpoint(directory: EndpointDirectory, project: str, name: str) -> Endpoint | None:
    return next((endpoint for endpoint in directory.endpoints(project) if endpoint.name == name), None)
