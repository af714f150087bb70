"""The price table: GPU $/hour by type and host kind, this host's $/hour, per-token inference prices.

Who calls it: the estimator's callers (`nodus plan`, `nodus apply --dry-run`) load one with `load_prices`, and
the TrainingJob controller asks `launch_price` what the local executor charges a run it launches.

The table is `catalog/prices.yaml` (a YAML file people edit, not a nodus resource), with overrides merged over
it key by key, later ones winning: `$NODUS_PRICES` (an organisation's table), `prices.yaml` at the project root,
`--prices FILE`, and `$NODUS_LOCAL_PRICE_PER_HOUR` for `cpu.local` alone. An override may hold any subset of the
keys. Every problem is one line naming the file and the key. Amounts are decimal strings, read as `Decimal`.

Where the catalog table is: beside this package in an installed wheel (`nodus/reconciler/pricing/prices.yaml`,
when packaging copies it there), else `catalog/prices.yaml` of the source checkout this module runs from. With
neither, the table is empty and every estimate says so (unpriced), rather than counting anything as $0.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus.errors import ConfigError
from nodus.reconciler.references import merge
from nodus.specs.types import GPU_TYPE_RE, USD_RE, format_usd

PRICES_VARIABLE = "NODUS_PRICES"
"""An organisation's price table, merged over the catalog's."""
LOCAL_PRICE_VARIABLE = "NODUS_LOCAL_PRICE_PER_HOUR"
"""US dollars per hour this machine costs; wins over the table's `cpu.local`."""
PROJECT_FILE = "prices.yaml"
LOCAL_HOST = "local"
TOP_LEVEL = ("version", "currency", "hostKind", "gpu", "cpu", "inference", "sources")
TOKEN_SIDES = ("input", "output")


@dataclass(frozen=True)
class TokenPrice:
    """US dollars per million tokens."""

    input_usd: Decimal
    output_usd: Decimal

    def blended(self) -> Decimal:
        """Per million tokens at three input tokens to one output token (how the seeds blend prices)."""
        return (3 * self.input_usd + self.output_usd) / 4


@dataclass(frozen=True)
class PriceTable:
    """A merged price table and where it came from."""

    version: str
    file: str
    """The catalog table's path (or the first file read when there is none); "" when no table was found."""
    overrides: tuple[str, ...] = ()
    """What was merged over it, in order: file paths and `$NODUS_LOCAL_PRICE_PER_HOUR`."""
    currency: str = "USD"
    host_kind: str = "cloud"
    gpu: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    cpu: Mapping[str, Decimal] = field(default_factory=dict)
    inference: Mapping[str, TokenPrice] = field(default_factory=dict)
    local_source: str = ""
    """The layer that set `cpu.local` (a file, or `$NODUS_LOCAL_PRICE_PER_HOUR`)."""

    def gpu_rate(self, gpu_type: str, host_kind: str | None = None) -> Decimal | None:
        """$/hour for one GPU of `gpu_type` on `host_kind` (the table's default kind), or None: unpriced."""
        return (self.gpu.get(gpu_type) or {}).get(host_kind or self.host_kind)

    def local_rate(self) -> Decimal | None:
        """$/hour for this machine (`cpu.local`), or None when the table has no such price."""
        return self.cpu.get(LOCAL_HOST)

    def token_price(self, model: str) -> TokenPrice | None:
        """The per-token price of a model id (`org/name`): by the whole id, else by its family (`name`)."""
        return self.inference.get(model) or self.inference.get(model.rpartition("/")[2].lower())

    def ref(self) -> dict[str, Any]:
        """`{version, file, overrides}`: what every estimate names as the table it used."""
        out: dict[str, Any] = {"version": self.version, "file": self.file}
        if self.overrides:
            out["overrides"] = list(self.overrides)
        return out


def catalog_table() -> Path | None:
    """The catalog's price table: a wheel's packaged copy, else the source checkout's `catalog/prices.yaml`."""
    here = Path(__file__).resolve()
    for candidate in (here.parent / PROJECT_FILE, here.parents[5] / "catalog" / PROJECT_FILE):
        if candidate.is_file():
            return candidate
    return None


def load_prices(
    *,
    project_root: Path | None = None,
    prices_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    catalog: Path | None = None,
) -> PriceTable:
    """The table in force: the catalog's, then `$NODUS_PRICES`, `<project_root>/prices.yaml`, `prices_file`
    and `$NODUS_LOCAL_PRICE_PER_HOUR`, merged key by key. ConfigError naming the file and key of a bad one."""
    env = os.environ if environ is None else environ
    files: list[Path] = []
    base = catalog if catalog is not None else catalog_table()
    if base is not None:
        files.append(base)
    if env.get(PRICES_VARIABLE):
        organisation = Path(env[PRICES_VARIABLE])
        if not organisation.is_file():
            hint = "unset it, or name an organisation's prices.yaml"
            raise ConfigError(f"${PRICES_VARIABLE}: {organisation} is not a file", hint=hint)
        files.append(organisation)
    if project_root is not None and (project_root / PROJECT_FILE).is_file():
        files.append(project_root / PROJECT_FILE)
    if prices_file is not None:
        if not prices_file.is_file():
            raise ConfigError(f"--prices {prices_file}: no such file")
        files.append(prices_file)
    layers = [(str(path), read_layer(path)) for path in dict.fromkeys(files)]
    local = env.get(LOCAL_PRICE_VARIABLE)
    if local is not None and local.strip():
        rate = _usd(local.strip(), LOCAL_PRICE_VARIABLE, "")
        layers.append((f"${LOCAL_PRICE_VARIABLE}", {"cpu": {LOCAL_HOST: rate}}))
    return table_from_layers(layers)


def read_layer(path: Path) -> dict[str, Any]:
    """One price file, checked (any subset of the keys); ConfigError naming the file and the key."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the price table: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML", hint="a price table is a YAML mapping") from None
    if data is None:
        return {}
    return check_layer(data, str(path))


def check_layer(data: Any, origin: str) -> dict[str, Any]:
    """`data` as a checked price layer: known keys, GPU type names, decimal-string amounts."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: a price table is a mapping with version, gpu, cpu and inference")
    for key in data:
        if key not in TOP_LEVEL:
            raise ConfigError(f"{origin}: {key}: unknown key (a price table has {', '.join(TOP_LEVEL)})")
    out: dict[str, Any] = {}
    for name in ("version", "currency", "hostKind"):
        if name in data:
            value = data[name]
            if not isinstance(value, str | int) or isinstance(value, bool) or not str(value).strip():
                raise ConfigError(f'{origin}: {name}: must be a string such as "2026-11-29" (got {value!r})')
            out[name] = str(value)
    if out.get("currency", "USD") != "USD":
        raise ConfigError(f"{origin}: currency: only USD is supported (got {out['currency']!r})")
    if "gpu" in data:
        out["gpu"] = {
            gpu_type: {
                kind: _usd(amount, origin, f"gpu.{gpu_type}.{kind}")
                for kind, amount in _mapping(rates, origin, f"gpu.{gpu_type}").items()
            }
            for gpu_type, rates in _mapping(data["gpu"], origin, "gpu").items()
            if _gpu_type(gpu_type, origin)
        }
    if "cpu" in data:
        out["cpu"] = {
            host: _usd(amount, origin, f"cpu.{host}") for host, amount in _mapping(data["cpu"], origin, "cpu").items()
        }
    if "inference" in data:
        out["inference"] = {
            model: _token_sides(sides, origin, f"inference.{model}")
            for model, sides in _mapping(data["inference"], origin, "inference").items()
        }
    return out


def table_from_layers(layers: list[tuple[str, dict[str, Any]]]) -> PriceTable:
    """Merge checked layers, first to last; the table names its first file and what was merged over it."""
    merged: dict[str, Any] = {}
    for _, layer in layers:
        merged = merge(merged, layer)
    names = [name for name, _ in layers]
    return PriceTable(
        version=str(merged.get("version", "none")),
        file=names[0] if names else "",
        overrides=tuple(names[1:]),
        currency=str(merged.get("currency", "USD")),
        host_kind=str(merged.get("hostKind", "cloud")),
        gpu={gpu_type: dict(rates) for gpu_type, rates in (merged.get("gpu") or {}).items()},
        cpu=dict(merged.get("cpu") or {}),
        inference={
            model: TokenPrice(sides.get("input", Decimal(0)), sides.get("output", Decimal(0)))
            for model, sides in (merged.get("inference") or {}).items()
        },
        local_source=next((name for name, layer in reversed(layers) if LOCAL_HOST in (layer.get("cpu") or {})), ""),
    )


@dataclass(frozen=True)
class LaunchPrice:
    """What the local executor charges a run, as stored with it at launch (`status.price`)."""

    per_hour_usd: Decimal
    version: str
    source: str
    """`cpu.local of FILE`, `$NODUS_LOCAL_PRICE_PER_HOUR`, or why it is 0."""

    def to_status(self) -> dict[str, Any]:
        return {"version": self.version, "perHourUSD": format_usd(self.per_hour_usd), "source": self.source}


def launch_price(table: PriceTable) -> LaunchPrice:
    """This host's price for a run launched now: `$NODUS_LOCAL_PRICE_PER_HOUR` when set (it is the last layer of
    the table), else the table's `cpu.local`, else 0 (your own machine, and no table says otherwise)."""
    rate = table.local_rate()
    if rate is None:
        return LaunchPrice(Decimal(0), table.version, "no cpu.local price in the table: 0")
    source = table.local_source
    return LaunchPrice(rate, table.version, source if source.startswith("$") else f"cpu.local of {source}")


def _mapping(value: Any, origin: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{origin}: {where}: must be a mapping (got {type(value).__name__})")
    for key in value:
        if not isinstance(key, str):
            raise ConfigError(f"{origin}: {where}: keys must be strings (got {key!r})")
    return value


def _gpu_type(name: str, origin: str) -> bool:
    if not GPU_TYPE_RE.match(name):
        raise ConfigError(f"{origin}: gpu.{name}: not a GPU type id such as h100-sxm-80g or rtx4090-24g")
    return True


def _usd(value: Any, origin: str, where: str) -> Decimal:
    text = value if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        text = str(value)
    if text is None or not USD_RE.match(text.strip()):
        at = f"{origin}: {where}" if where else f"${origin}"
        raise ConfigError(f'{at}: must be a decimal amount in US dollars such as "2.99" (got {value!r})')
    return Decimal(text.strip())


def _token_sides(value: Any, origin: str, where: str) -> dict[str, Decimal]:
    sides = _mapping(value, origin, where)
    for side in sides:
        if side not in TOKEN_SIDES:
            raise ConfigError(f"{origin}: {where}.{side}: unknown key (input and output, $ per million tokens)")
    return {side: _usd(amount, origin, f"{where}.{side}") for side, amount in sides.items()}
