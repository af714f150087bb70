"""Constrained value types shared by every kind: names, references, versions, money, durations, sizes.

Who uses it: the kind modules (`environment.py`, `training.py`, `agent.py`, ...) annotate their fields
with these. Each type validates with a message a user can act on (it names the expected form and shows
what it got) and carries a JSON Schema fragment, so the generated schemas in `specs/schemas/` say the same.
The rules come from the seed documents: pinned 40-character model revisions, `[project/]name@semver`
environment references, DNS-label names, money as decimal strings, reserved environment variables.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, WithJsonSchema
from pydantic_core import PydanticCustomError

DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Semantic Versioning 2.0.0, the official regular expression.
SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
HF_URI_RE = re.compile(r"^hf://(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<rev>.*))?$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Variables nodus sets for every rank of a run; a spec that sets them would break the gang contract.
RESERVED_ENV_PREFIXES = ("NODUS_", "PET_", "MASTER_")
RESERVED_ENV_NAMES = frozenset({"NODE_RANK", "NNODES"})
PIP_NAME_RE = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")
# PEP 440 public versions plus a local part: an exact version, never a range.
PIP_VERSION_RE = re.compile(
    r"^v?(\d+!)?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?$", re.IGNORECASE
)
# An OCI reference: [registry[:port]/]path[:tag][@algorithm:digest]. The digest part is checked apart so a
# placeholder digest (`@sha256:...` in documentation) still parses and is reported as not pinned.
IMAGE_RE = re.compile(
    r"^(?P<name>(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:.+))?$"
)
PINNED_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
URL_RE = re.compile(r"^(https?|file)://[^\s]+$")
GPU_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?$")
QUANTITY_RE = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|K|M|G|T|P)?$")
QUANTITY_FACTORS = {
    None: 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}
USD_RE = re.compile(r"^\d{1,12}(\.\d{1,6})?$")


def _fail(code: str, message: str, value: Any) -> PydanticCustomError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return PydanticCustomError(code, message + " (got {value})", {"value": shown})


def _require_str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _fail("string_expected", f"must be a string: {what}", value)
    return value


def check_dns_label(value: Any) -> str:
    text = _require_str(value, "a DNS label")
    if not is_dns_label(text):
        raise _fail(
            "dns_label",
            "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter "
            "or digit, at most 63 characters",
            value,
        )
    return text


def check_semver(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise _fail("semver", 'must be a semantic version string such as "1.0.0" (quote it)', value)
    text = _require_str(value, "a semantic version such as 1.0.0")
    if not SEMVER_RE.match(text):
        raise _fail("semver", "must be a semantic version such as 1.0.0", value)
    return text


def is_dns_label(text: str) -> bool:
    return len(text) <= 63 and bool(DNS_LABEL_RE.match(text))


def is_name_ref(text: str) -> bool:
    """`name` or `project/name`, each part a DNS label."""
    project, sep, name = text.partition("/")
    return is_dns_label(name) and is_dns_label(project) if sep else is_dns_label(text)


def check_environment_ref(value: Any) -> str:
    text = _require_str(value, "an environment reference [project/]name@version")
    ref, sep, version = text.partition("@")
    form = "must be [project/]name@version, for example nodus/gsm8k@1.0.0"
    if not sep:
        raise _fail("environment_ref", form + ": the version is required", value)
    if not is_name_ref(ref):
        raise _fail("environment_ref", form + " with DNS-label names", value)
    if not SEMVER_RE.match(version):
        raise _fail("environment_ref", form + ": the version must be semantic (1.0.0)", value)
    return text


def check_project_name_ref(value: Any) -> str:
    text = _require_str(value, "a reference [project/]name")
    if not is_name_ref(text):
        raise _fail("name_ref", "must be [project/]name with DNS-label parts, for example nodus/grpo-lora", value)
    return text


def check_hf_uri(value: Any) -> str:
    text = _require_str(value, "a model URI hf://org/name@<commit>")
    match = HF_URI_RE.match(text)
    if not match:
        raise _fail("model_uri", "must be hf://org/name@<40-character commit>", value)
    rev = match.group("rev")
    if rev is None:
        raise PydanticCustomError(
            "model_revision",
            "must pin the revision to a 40-character commit, like hf://{repo}@<commit> (got {value})",
            {"repo": match.group("repo"), "value": repr(text)},
        )
    if not COMMIT_RE.match(rev):
        raise PydanticCustomError(
            "model_revision",
            "the revision must be a 40-character lowercase hex commit, not a branch or tag (got {rev})",
            {"rev": repr(rev)},
        )
    return text


def check_image_ref(value: Any) -> str:
    text = _require_str(value, "an OCI image reference")
    if not IMAGE_RE.match(text):
        raise _fail(
            "image_ref",
            "must be an OCI image reference such as registry.example.com/acme/env@sha256:<64 hex>",
            value,
        )
    return text


def image_is_pinned(ref: str) -> bool:
    """True when an image reference carries a full sha256 digest (what builds and runs need)."""
    match = IMAGE_RE.match(ref)
    return bool(match and match.group("digest") and PINNED_DIGEST_RE.match(match.group("digest")))


def check_pip_name(value: Any) -> str:
    text = _require_str(value, "a package name")
    if not PIP_NAME_RE.match(text):
        raise _fail("pip_name", "must be a Python package name (letters, digits, '.', '_', '-')", value)
    return text


def check_pip_version(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise _fail("pip_version", 'must be an exact version string such as "1.0.0" (quote it)', value)
    text = _require_str(value, "an exact package version")
    if not PIP_VERSION_RE.match(text):
        raise _fail("pip_version", "must be one exact version such as 1.0.0, not a range", value)
    return text


def check_url(value: Any) -> str:
    text = _require_str(value, "a URL")
    if not URL_RE.match(text):
        raise _fail("url", "must be an http(s):// or file:// URL", value)
    return text


def check_gpu_type(value: Any) -> str:
    text = _require_str(value, "a GPU type")
    if not GPU_TYPE_RE.match(text):
        raise _fail("gpu_type", "must be a GPU type id such as h100-sxm-80g or rtx4090-24g", value)
    return text


def parse_usd(value: Any) -> Decimal:
    """Money is a decimal string ("5.00"); integers are accepted, floats are not (they round)."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool | float):
        raise _fail("usd", 'must be a decimal string such as "5.00" (quote it: floats round)', value)
    if isinstance(value, int):
        if value < 0:
            raise _fail("usd", "must not be negative", value)
        return Decimal(value)
    text = _require_str(value, 'an amount in US dollars such as "5.00"')
    if not USD_RE.match(text.strip()):
        raise _fail("usd", 'must be a non-negative decimal amount in US dollars such as "5.00"', value)
    try:
        return Decimal(text.strip())
    except InvalidOperation as exc:  # pragma: no cover - the pattern above rules it out
        raise _fail("usd", "must be a decimal amount", value) from exc


def format_usd(value: Decimal) -> str:
    """One spelling per amount, so "20", "20.0" and "20.00" are the same spec (no phantom diff in a plan):
    at least two decimals, trailing zeros beyond them dropped ("5.00", "0.0015", "5.50")."""
    whole, _, fraction = format(value, "f").partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def parse_duration(value: Any) -> timedelta:
    """`30s`, `15m`, `1h30m`, `2d`, `500ms`; a bare integer is seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise _fail("duration", "must not be negative", value)
        return timedelta(seconds=value)
    text = _require_str(value, "a duration such as 15m")
    match = DURATION_RE.match(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise _fail("duration", "must be a duration such as 90s, 15m, 1h30m or 2d", value)
    days, hours, minutes, seconds, millis = (int(g) if g else 0 for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds, milliseconds=millis)


def format_duration(value: timedelta) -> str:
    """The canonical spelling of a duration (`1h30m`), so equal durations serialise equally."""
    total_ms = round(value.total_seconds() * 1000)
    if total_ms == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, total_ms = divmod(total_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def duration_between(low: str | None = None, high: str | None = None) -> Callable[[timedelta], timedelta]:
    """A check that a duration lies in [low, high], both written as durations."""
    lo = parse_duration(low) if low else None
    hi = parse_duration(high) if high else None

    def check(value: timedelta) -> timedelta:
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            bounds = f"between {low} and {high}" if lo and hi else (f"at least {low}" if lo else f"at most {high}")
            raise PydanticCustomError(
                "duration_range",
                "must be {bounds} (got {value})",
                {"bounds": bounds, "value": format_duration(value)},
            )
        return value

    return check


def parse_quantity(value: Any) -> int:
    """Sizes in bytes from `512Mi`, `10Gi`, `1T` or a bare integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise _fail("quantity", "must not be negative", value)
        return value
    text = _require_str(value, "a size such as 10Gi")
    match = QUANTITY_RE.match(text.strip())
    if not match:
        raise _fail("quantity", "must be a size such as 512Mi, 10Gi or 1Ti", value)
    return int(Decimal(match.group(1)) * QUANTITY_FACTORS[match.group(2)])


def format_quantity(value: int) -> str:
    for unit in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = QUANTITY_FACTORS[unit]
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def check_env(value: dict[str, str]) -> dict[str, str]:
    for name in value:
        if not ENV_NAME_RE.match(name):
            raise PydanticCustomError(
                "env_name", "{name} is not a valid environment variable name", {"name": repr(name)}
            )
        if name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV_NAMES:
            raise PydanticCustomError(
                "env_reserved",
                "{name} is set by nodus for every rank; NODUS_*, PET_*, MASTER_*, NODE_RANK and NNODES "
                "cannot be set in a spec",
                {"name": name},
            )
    return value


def _string_schema(pattern: str | None = None, **extra: Any) -> WithJsonSchema:
    schema: dict[str, Any] = {"type": "string", **extra}
    if pattern:
        schema["pattern"] = pattern
    return WithJsonSchema(schema)


DnsLabel = Annotated[str, BeforeValidator(check_dns_label), _string_schema(DNS_LABEL_RE.pattern, maxLength=63)]
SemVer = Annotated[
    str,
    BeforeValidator(check_semver),
    _string_schema(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"),
]
EnvironmentRef = Annotated[
    str,
    BeforeValidator(check_environment_ref),
    _string_schema(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?@\d+\.\d+\.\d+.*$"),
]
NameRef = Annotated[
    str,
    BeforeValidator(check_project_name_ref),
    _string_schema(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
]
HfModelUri = Annotated[str, BeforeValidator(check_hf_uri), _string_schema(r"^hf://[^/@]+/[^/@]+@[0-9a-f]{40}$")]
ImageRef = Annotated[str, BeforeValidator(check_image_ref), _string_schema(IMAGE_RE.pattern)]
PipName = Annotated[str, BeforeValidator(check_pip_name), _string_schema(PIP_NAME_RE.pattern)]
PipVersion = Annotated[str, BeforeValidator(check_pip_version), _string_schema()]
Url = Annotated[str, BeforeValidator(check_url), _string_schema(URL_RE.pattern, format="uri")]
GpuType = Annotated[str, BeforeValidator(check_gpu_type), _string_schema(GPU_TYPE_RE.pattern)]
USD = Annotated[
    Decimal,
    BeforeValidator(parse_usd),
    PlainSerializer(lambda d: format_usd(d), return_type=str),
    _string_schema(USD_RE.pattern, description='US dollars as a decimal string, e.g. "5.00"'),
]
Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    _string_schema(r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$"),
]


def DurationRange(low: str | None = None, high: str | None = None) -> AfterValidator:  # noqa: N802
    """Bounds for a `Duration` field: `Annotated[Duration, DurationRange("1m", "24h")]`."""
    return AfterValidator(duration_between(low, high))


Quantity = Annotated[
    int,
    BeforeValidator(parse_quantity),
    PlainSerializer(format_quantity, return_type=str),
    _string_schema(QUANTITY_RE.pattern),
]
EnvVars = Annotated[dict[str, str], AfterValidator(check_env)]
