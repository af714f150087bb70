"""`parse_resources(paths)`: resource files in, validated resources and located one-line problems out.

Who uses it: `nodus validate`, and later `nodus plan`/`apply` and `nodus-build`, call `parse_resources`;
tests and the SDK call `parse_text`. Nothing here raises for bad input: every problem becomes a `Problem`
naming `file:line:column`, `Kind/name` and the field path, with "did you mean" for misspelt fields, kinds
and enum values. `ParseResult.raise_for_errors()` turns them into one `SpecError` for callers that stop.

Folders are read recursively (`*.yaml`, `*.yml`, hidden folders skipped). A document found in a folder
whose apiVersion is not nodus.dev's is skipped, so specs can live beside other YAML (CI configs); a file
named explicitly must hold only nodus resources.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from nodus.errors import SpecError
from nodus.specs.agent import AgentGroup, AgentRun, name_in_group
from nodus.specs.base import Loc, Resource
from nodus.specs.registry import API_GROUP, API_VERSIONS, BY_KIND, KINDS
from nodus.specs.yaml_source import Document, YamlSyntaxError, load_documents

YAML_SUFFIXES = (".yaml", ".yml")
STDIN = "-"
DRY_RUN_ANNOTATION = "nodus.dev/dry-run"
"""Set (`"true"`) on every document `nodus apply --dry-run` prints, so a saved one is never applied."""
Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One located problem: prints as `file:line:col: Kind/name: field.path: message`."""

    file: str
    line: int
    column: int
    message: str
    resource: str | None = None
    field: str | None = None
    severity: Severity = "error"

    def __str__(self) -> str:
        parts = [f"{self.file}:{self.line}:{self.column}"]
        if self.resource:
            parts.append(self.resource)
        if self.field:
            parts.append(self.field)
        return ": ".join(parts) + ": " + self.message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Source:
    """Where a resource was read from."""

    file: str
    line: int
    column: int
    document: int


@dataclass(frozen=True)
class Parsed:
    """A valid resource and where it came from."""

    resource: Resource
    source: Source


@dataclass
class ParseResult:
    """Everything read from a set of paths."""

    resources: list[Parsed] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: int = 0
    """Documents found in folders that are not nodus resources (other YAML beside the specs)."""

    def without_dry_runs(
        self, explicit: Iterable[str | Path] = ()
    ) -> tuple[list[Parsed], list[Problem], list[Problem]]:
        """The resources less the documents a dry run printed (`nodus apply --dry-run -o yaml > dry.yaml` beside
        the specs: what a run would be, never a resource to apply, as its Job has the TrainingJob's name), a note
        for each left out of a folder, and an error for each in a file named on its own (`explicit`)."""
        named = {str(path) for path in explicit}
        kept: list[Parsed] = []
        notes: list[Problem] = []
        refused: list[Problem] = []
        for parsed in self.resources:
            if parsed.resource.metadata.annotations.get(DRY_RUN_ANNOTATION, "").lower() != "true":
                kept.append(parsed)
                continue
            where, ref = parsed.source, parsed.resource.ref
            text = f"the output of a dry run (annotation {DRY_RUN_ANNOTATION}), left out"
            if where.file in named:
                text = f"{text}: a dry run is never applied; apply the file it was made from"
                refused.append(Problem(where.file, where.line, where.column, text, ref))
            else:
                notes.append(Problem(where.file, where.line, where.column, text, ref, None, "warning"))
        return kept, notes, refused

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        if self.errors:
            raise SpecError([str(p) for p in self.errors], hint="run `nodus validate` on these files")

    def extend(self, other: ParseResult) -> None:
        self.resources += other.resources
        self.errors += other.errors
        self.warnings += other.warnings
        self.files += other.files
        self.skipped += other.skipped


def parse_resources(paths: Iterable[str | Path]) -> ParseResult:
    """Read every resource under `paths` (files, folders read recursively, `-` for stdin)."""
    result = ParseResult()
    for path, explicit in _discover(paths, result):
        try:
            text = sys.stdin.read() if path == STDIN else Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            result.errors.append(Problem(path, 1, 1, "not UTF-8 text"))
            continue
        except OSError as exc:
            result.errors.append(Problem(path, 1, 1, f"cannot read: {exc.strerror or exc}"))
            continue
        result.extend(_parse_file(text, path, explicit=explicit))
    _check_duplicates(result)
    _check_groups(result)
    return result


def parse_text(text: str, file: str = "<string>", *, explicit: bool = True) -> ParseResult:
    """Parse resources from a string (for tests and the SDK); same checks as `parse_resources`."""
    result = _parse_file(text, file, explicit=explicit)
    _check_duplicates(result)
    _check_groups(result)
    return result


def _discover(paths: Iterable[str | Path], result: ParseResult) -> Iterator[tuple[str, bool]]:
    """(path, named explicitly) for each file to read, each once, in a stable order."""
    seen: set[str] = set()
    for raw in paths:
        text = str(raw)
        if text == STDIN:
            found: list[tuple[str, bool]] = [(STDIN, True)]
        else:
            path = Path(text)
            if path.is_dir():
                found = [
                    (str(f), False)
                    for f in sorted(path.rglob("*"))
                    if f.suffix in YAML_SUFFIXES
                    and f.is_file()
                    and not any(part.startswith(".") for part in f.relative_to(path).parts)
                ]
            elif path.is_file():
                found = [(text, True)]
            else:
                result.errors.append(Problem(text, 1, 1, "no such file or folder"))
                continue
        for item in found:
            if item[0] not in seen:
                seen.add(item[0])
                result.files.append(item[0])
                yield item


def _parse_file(text: str, file: str, *, explicit: bool) -> ParseResult:
    result = ParseResult()
    try:
        documents = load_documents(text)
    except YamlSyntaxError as exc:
        result.errors.append(Problem(file, *exc.position, exc.message))
        return result
    for doc in documents:
        _parse_document(doc, file, explicit, result)
    # Within a file, problems read top to bottom like the file does.
    result.errors.sort(key=lambda p: (p.line, p.column))
    result.warnings.sort(key=lambda p: (p.line, p.column))
    return result


def _name_of(data: dict[Any, Any]) -> str:
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(name, str) and name:
        return name
    derived = name_in_group(data.get("spec")) if data.get("kind") == "AgentRun" else None
    return derived or "<unnamed>"


def _parse_document(doc: Document, file: str, explicit: bool, result: ParseResult) -> None:
    data = doc.data

    def error(path: Loc, message: str, resource: str | None = None, *, key: bool = False) -> None:
        line, column = doc.locate(path, key=key)
        result.errors.append(Problem(file, line, column, message, resource, _dotted(path) or None))

    if not isinstance(data, dict):
        if explicit:
            error(
                (),
                f"a resource is a mapping with apiVersion, kind, metadata and spec (got {_describe(data)})",
            )
        else:
            result.skipped += 1
        return
    api, kind = data.get("apiVersion"), data.get("kind")
    if api is None and kind is None and not explicit:
        result.skipped += 1
        return
    label = _printable(f"{kind}/{_name_of(data)}") if isinstance(kind, str) else None
    envelope = ["apiVersion", "kind", "metadata", "spec", "status"]
    misspelt = [
        key
        for key in data
        if isinstance(key, str) and key not in envelope and suggest(key, envelope) in ("apiVersion", "kind")
    ]
    if misspelt and (api is None or kind is None):
        # Without apiVersion and kind the document cannot be checked further: point at the typo itself.
        for key in misspelt:
            error((key,), f"unknown field (did you mean {suggest(key, envelope)}?)", label, key=True)
        return
    if not isinstance(api, str):
        message = "required field is missing" if api is None else f"must be a string (got {_describe(api)})"
        error(("apiVersion",), message + f"; nodus reads {' and '.join(API_VERSIONS)}", label, key=True)
        return
    group = api.partition("/")[0]
    if group != API_GROUP:
        near = difflib.SequenceMatcher(None, group.lower(), API_GROUP).ratio() >= 0.75
        if not explicit and not near:
            result.skipped += 1
            return
        hint = f" (did you mean {_closest_api(api)}?)" if near else f"; nodus reads {' and '.join(API_VERSIONS)}"
        error(("apiVersion",), f"{api!r} is not a nodus API{hint}", label)
        return
    if not isinstance(kind, str):
        message = "required field is missing" if kind is None else f"must be a string (got {_describe(kind)})"
        error(("kind",), message + f"; one of {', '.join(BY_KIND)}", None, key=kind is None)
        return
    cls = BY_KIND.get(kind)
    if cls is None:
        suggestion = suggest(kind, list(BY_KIND))
        tail = f" (did you mean {suggestion}?)" if suggestion else f"; one of {', '.join(BY_KIND)}"
        error(("kind",), f"unknown kind {kind!r}{tail}", label)
        return
    if api != cls.API_VERSION:
        error(("apiVersion",), f"{kind} is served at {cls.API_VERSION} (got {api})", label)
        return
    if "status" in data:
        line, column = doc.locate(("status",), key=True)
        result.warnings.append(
            Problem(file, line, column, "status is never read from git; it is ignored", label, "status", "warning")
        )
        data = {k: v for k, v in data.items() if k != "status"}
    for path, (line, column), message in doc.problems:
        result.errors.append(Problem(file, line, column, message, label, _dotted(path) or None))
    try:
        resource = cls.model_validate(data)
    except ValidationError as exc:
        for err in _one_branch(exc.errors(include_url=False), cls):
            loc = tuple(err["loc"])
            message, at_key = _message(err, cls)
            position_path = loc[:-1] if err["type"] == "missing" else loc
            line, column = doc.locate(position_path, key=at_key)
            result.errors.append(Problem(file, line, column, message, label, _dotted(loc) or None))
        return
    if doc.problems:
        return
    for path, message in resource.lint():
        line, column = doc.locate(path)
        result.warnings.append(Problem(file, line, column, message, resource.ref, _dotted(path), "warning"))
    result.resources.append(Parsed(resource, Source(file, *doc.position, doc.index)))


def _check_duplicates(result: ParseResult) -> None:
    """Two resources with the same kind, project and name: one error naming both places."""
    first: dict[tuple[str, str, str], Parsed] = {}
    kept: list[Parsed] = []
    for parsed in result.resources:
        res = parsed.resource
        key = (res.KIND, res.metadata.project or "", res.metadata.name)
        earlier = first.get(key)
        if earlier is None:
            first[key] = parsed
            kept.append(parsed)
            continue
        src, old = parsed.source, earlier.source
        result.errors.append(
            Problem(
                src.file,
                src.line,
                src.column,
                f"defined twice: here and at {old.file}:{old.line}:{old.column}",
                res.ref,
            )
        )
    result.resources = kept


def _check_groups(result: ParseResult) -> None:
    """A run in a group uses the group's agent (checked when both are in the files read)."""
    groups = {
        (p.resource.metadata.project, p.resource.metadata.name): p.resource
        for p in result.resources
        if isinstance(p.resource, AgentGroup)
    }
    for parsed in result.resources:
        run = parsed.resource
        if not isinstance(run, AgentRun) or run.spec.group is None:
            continue
        group = groups.get((run.metadata.project, run.spec.group))
        if isinstance(group, AgentGroup) and group.spec.agent != run.spec.agent:
            src = parsed.source
            result.errors.append(
                Problem(
                    src.file,
                    src.line,
                    src.column,
                    f"must be {group.spec.agent!r}, the agent of group {run.spec.group} (got {run.spec.agent!r})",
                    run.ref,
                    "spec.agent",
                )
            )


# --- turning pydantic's errors into one-line messages ------------------------------------------------

_TYPE_WORDS = {
    "dict_type": "a mapping of fields",
    "model_type": "a mapping of fields",
    "model_attributes_type": "a mapping of fields",
    "list_type": "a list",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "decimal_type": "a decimal number",
    "decimal_parsing": "a decimal number",
}


def _message(err: Any, cls: type[Resource]) -> tuple[str, bool]:
    """(message, whether the error sits on the key rather than the value)."""
    kind, loc, value = err["type"], tuple(err["loc"]), err.get("input")
    if kind == "missing":
        return "required field is missing", False
    if kind == "extra_forbidden":
        allowed = _fields_at(cls, loc[:-1])
        suggestion = suggest(str(loc[-1]), allowed)
        if suggestion:
            return f"unknown field (did you mean {suggestion}?)", True
        return ("unknown field" + (f"; expected one of: {', '.join(allowed)}" if allowed else "")), True
    if kind in ("literal_error", "enum"):
        options = re.findall(r"'([^']*)'|\b(\d+)\b", str((err.get("ctx") or {}).get("expected", "")))
        choices = [a or b for a, b in options]
        suggestion = suggest(str(value), choices)
        message = f"must be one of {', '.join(choices)} (got {_short(value)})"
        return message + (f"; did you mean {suggestion}?" if suggestion else ""), False
    if kind in _TYPE_WORDS:
        return f"must be {_TYPE_WORDS[kind]} (got {_describe(value)})", False
    message = str(err["msg"])
    if kind == "value_error":
        return message.removeprefix("Value error, "), False
    if kind == "assertion_error":
        return message.removeprefix("Assertion failed, "), False
    for prefix in ("Input should", "String should", "List should", "Dictionary should", "Value should"):
        if message.startswith(prefix):
            message = "must" + message[len(prefix) :]
            message = message.replace("must be must", "must")
            if not isinstance(value, dict | list):
                message += f" (got {_short(value)})"
            break
    return message, False


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and Optional from a type annotation."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
                return models[0] if len(models) == 1 else tp
            tp = args[0]
        else:
            return tp


def _annotation_at(cls: type[BaseModel], path: Loc) -> Any:
    """The annotation of the value at `path` inside `cls` as declared (None where the path leaves the model)."""
    tp: Any = cls
    for part in path:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            by_alias = {(f.alias or name): f for name, f in tp.model_fields.items()}
            if not isinstance(part, str) or part not in by_alias:
                return None
            tp = by_alias[part].annotation
        elif typing.get_origin(tp) in (list, tuple, set) and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return tp


def _is_union(tp: Any) -> bool:
    """Whether `tp` is a union of two or more types besides None (`str | EndpointModel`)."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return len([a for a in typing.get_args(tp) if a is not type(None)]) > 1


def _fields_at(cls: type[BaseModel], path: Loc) -> list[str]:
    """The YAML field names allowed at `path` inside `cls` (empty where free-form)."""
    tp = _unwrap(_annotation_at(cls, path))
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [(f.alias or name) for name, f in tp.model_fields.items()]
    return []


def _normal(text: str) -> str:
    return text.replace("_", "").replace("-", "").lower()


def suggest(word: str, options: list[str]) -> str | None:
    """The option a typo most likely meant: same letters ignoring case and separators, else the closest."""
    for option in options:
        if _normal(option) == _normal(word):
            return option
    lowered = {o.lower(): o for o in options}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def _closest_api(api: str) -> str:
    version = api.partition("/")[2]
    return f"{API_GROUP}/{version}" if f"{API_GROUP}/{version}" in API_VERSIONS else API_VERSIONS[0]


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_./-]+$")


_PRIMITIVE_BRANCHES = frozenset({"str", "int", "float", "bool", "none"})


def _branch(part: object) -> str | None:
    """`str`, or `model` for a model branch, when `part` of an error's location names the branch of a union pydantic
    tried (`str`, `function-after[_one_source(), EndpointModel]`, `EndpointModel`); None for a field or an index."""
    if not isinstance(part, str):
        return None
    if part in _PRIMITIVE_BRANCHES:
        return "str"
    if "[" in part or part[:1].isupper():
        return "model"
    return None


def _one_branch(errors: list[Any], cls: type[BaseModel]) -> list[Any]:
    """The errors of a value given for a union (`model: str | EndpointModel`) as one field has them: only the branch
    the value's shape chose (a mapping: the model; anything else: the plain value), without the branch's name in the
    location, so `spec.model: set exactly one of ...` is said, not `spec.model.str: must be a string`."""
    kept = []
    for err in errors:
        loc = list(err["loc"])
        for index, part in enumerate(loc):
            # Only a part right after a union field names a branch: a user's key (`A:`, `str:`) never does.
            branch = _branch(part) if index and _is_union(_annotation_at(cls, tuple(loc[:index]))) else None
            if branch is None:
                continue
            # The value given for the union: the str branch's input is it; a model branch's error is about it too.
            given_mapping = err["type"] == "string_type" and isinstance(err.get("input"), dict)
            if branch == "str" and given_mapping:
                break
            if branch == "model" and err["type"] in ("model_type", "dict_type"):
                break
            del loc[index]
            kept.append({**err, "loc": tuple(loc)})
            break
        else:
            kept.append(err)
    return kept or errors


def _dotted(loc: Loc) -> str:
    """`spec.modes[1]`; a key that is not a plain word is quoted, so the path stays one line."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):  # not match: `$` would let a key end in a newline
            out += ("." if out else "") + str(part)
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out


def _printable(text: str) -> str:
    """Text as it may appear inside a one-line message (control characters escaped)."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {_short(value)}"
    if isinstance(value, str):
        return f"string {_short(value)}"
    return f"{type(value).__name__} {_short(value)}"


__all__ = ["KINDS", "ParseResult", "Parsed", "Problem", "Source", "parse_resources", "parse_text"]
