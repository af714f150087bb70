"""Reading YAML with the position of every key and value, so errors can name `file:line:column`.

Who uses it: `nodus.specs.parse` calls `load_documents` for each resource file. It composes nodes with
libyaml where available (fast) and builds plain Python data while recording where each field path starts.
Duplicate keys, which YAML libraries usually let the last one win, are reported: in a spec they are
almost always a mistake that would silently drop a value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path_ = tuple[str | int, ...]
Position = tuple[int, int]  # 1-based line and column

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_constructor = yaml.constructor.SafeConstructor()


@dataclass
class Document:
    """One YAML document of a file: its data and where each field path starts."""

    index: int
    """0-based position of the document in its file."""
    position: Position
    """Where the document starts."""
    data: Any
    """Plain Python data (dicts, lists, scalars)."""
    values: dict[Path_, Position] = field(default_factory=dict)
    """Field path -> where its value starts."""
    keys: dict[Path_, Position] = field(default_factory=dict)
    """Field path -> where its key starts (for 'unknown field' errors)."""
    problems: list[tuple[Path_, Position, str]] = field(default_factory=list)
    """Problems found while reading (duplicate keys), with their path and position."""

    def locate(self, path: Path_, *, key: bool = False) -> Position:
        """The best position for a field path: its key or value, else its nearest enclosing field."""
        table = self.keys if key else self.values
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in table:
                return table[prefix]
            if prefix in self.values:
                return self.values[prefix]
        return self.position


class YamlSyntaxError(Exception):
    """A file that is not valid YAML; carries the position of the problem."""

    def __init__(self, message: str, position: Position) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


def _mark(node: yaml.Node) -> Position:
    return node.start_mark.line + 1, node.start_mark.column + 1


MAX_VALUES = 100_000
"""Values one document may hold once aliases are expanded (stops 'billion laughs' documents)."""


class _TooLargeError(Exception):
    pass


_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _build(node: yaml.Node, path: Path_, doc: Document) -> Any:
    doc.values[path] = _mark(node)
    if len(doc.values) > MAX_VALUES:
        raise _TooLargeError
    if isinstance(node, yaml.ScalarNode):
        # Most values are plain strings: skip the constructor's dispatch for them (the hot path).
        return node.value if node.tag == _STR_TAG else _constructor.construct_object(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), doc) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        if any(key.tag == _MERGE_TAG for key, _ in node.value):
            _constructor.flatten_mapping(node)  # resolves `<<` merge keys as SafeLoader would
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = key_node.value if key_node.tag == _STR_TAG else _constructor.construct_object(key_node)
            else:
                doc.problems.append((path, _mark(key_node), "a mapping key must be a plain value"))
                continue
            if not isinstance(key, str | int):
                key = str(key)
            child = (*path, key)
            if key in out:
                doc.problems.append((child, _mark(key_node), f"duplicate key {key!r} (YAML would keep the last one)"))
            doc.keys[child] = _mark(key_node)
            out[key] = _build(value_node, child, doc)
        return out
    return _constructor.construct_object(node, deep=True)


def load_documents(text: str) -> list[Document]:
    """Every document in `text` with positions; raises YamlSyntaxError for text that is not YAML."""
    docs: list[Document] = []
    try:
        for index, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if node is None:
                continue
            doc = Document(index=index, position=_mark(node), data=None)
            try:
                doc.data = _build(node, (), doc)
            except _TooLargeError:
                raise YamlSyntaxError(
                    f"document has more than {MAX_VALUES} values once aliases are expanded", doc.position
                ) from None
            finally:
                # The shared constructor caches every node it built; drop them between documents.
                _constructor.constructed_objects.clear()
                _constructor.recursive_objects.clear()
            docs.append(doc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        position = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = " ".join(str(x) for x in (exc.context, exc.problem) if x) or "invalid YAML"
        raise YamlSyntaxError(f"invalid YAML: {reason}", position) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"invalid YAML: {exc}", (1, 1)) from None
    except RecursionError:
        raise YamlSyntaxError("invalid YAML: nested too deeply", (1, 1)) from None
    return docs
