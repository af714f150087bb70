"""Taking a reward function along: the lines of its own file that it uses, found from the file's syntax tree.

Who calls it: `nodus.recipes.environment` (for `rl.train(tasks, reward)`), before anything is written or built.
The reward goes into the grader alone, so it must bring what it uses: from the module-level statements of
`inspect.getsourcefile(reward)`, the ones that bind a name the reward uses (imports, constants, helper
functions and classes), then the ones those use, and so on. `symtable` decides which names a statement reads
from the module (a local variable or a comprehension's loop variable never counts), so nothing is guessed.

A name that cannot be taken along is refused with one line naming it and the line that uses it: a variable of
an enclosing function (a closure), a name defined only under `if __name__ == "__main__":`, a name defined
nowhere in the file, a lambda, or a function typed into the interpreter (it has no file).
"""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import symtable
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodus.errors import ConfigError

MODULE_ATTRIBUTES = frozenset(
    {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__", "__dict__"}
)
"""Names every module has: the packaged module has its own, so using them is no error."""
_HINT = "rl.train packages the reward with the top-level statements of its file it uses"


@dataclass(frozen=True)
class Segment:
    """Lines of the original file copied into the package: where they start in each."""

    packaged_line: int
    original_line: int
    count: int


@dataclass(frozen=True)
class ImportLine:
    """A module the packaged lines import, and the line of the original file that imports it."""

    module: str
    line: int
    level: int = 0
    """Dots of a relative import (`from . import x` is 1)."""


@dataclass(frozen=True)
class Extracted:
    """The reward and what it uses, as the text of one module."""

    function: str
    """The reward's name in its file (what the loader hands nodus-env)."""
    file: Path
    line: int
    """The line of the reward's def in its file."""
    body: str
    """The future imports, then the statements the reward uses, in the order of the file."""
    segments: tuple[Segment, ...]
    imports: tuple[ImportLine, ...]

    def original_line(self, packaged_line: int, offset: int = 0) -> int | None:
        """The line of the original file that line `packaged_line` of the packaged module came from, where the
        body starts after `offset` lines of the module (its docstring)."""
        line = packaged_line - offset
        for segment in self.segments:
            if segment.packaged_line <= line < segment.packaged_line + segment.count:
                return segment.original_line + line - segment.packaged_line
        return None


@dataclass
class _Statement:
    node: ast.stmt
    binds: frozenset[str]
    uses: frozenset[str]


def extract(reward: Callable[..., Any]) -> Extracted:
    """The reward with the lines of its file it uses; ConfigError (one line) for anything it cannot take."""
    function = _function_of(reward)
    code = function.__code__
    file = _source_file(function)
    where = f"{file}:{code.co_firstlineno}"
    if function.__name__ == "<lambda>":
        raise ConfigError(f"{where}: the reward is a lambda; define it with def at the top level of its file")
    if inspect.iscoroutinefunction(function):
        raise ConfigError(f"{where}: {function.__name__}() is async; the grader calls the reward as a plain function")
    text = file.read_text(encoding="utf-8")
    try:
        tree = ast.parse(text, filename=str(file))
    except SyntaxError as exc:
        raise ConfigError(f"{file}:{exc.lineno}: cannot read the reward's file: {exc.msg}") from None
    if code.co_freevars:
        node = _find_def(tree, function.__name__, code.co_firstlineno, top_level=False)
        name = code.co_freevars[0]
        line = _first_use(node, name) if node is not None else code.co_firstlineno
        raise ConfigError(
            f"{file}:{line}: {function.__name__}() uses {name}, a variable of the function that made it (a closure); "
            "only names defined at the top level of the file can go with it",
            hint=_HINT,
        )
    if "<locals>" in function.__qualname__:
        outer = function.__qualname__.split(".<locals>")[0]
        raise ConfigError(f"{where}: {function.__name__}() is defined inside {outer}(); define it at the top level")
    if "." in function.__qualname__:
        owner = function.__qualname__.rsplit(".", 1)[0]
        raise ConfigError(f"{where}: {function.__name__}() is a method of {owner}; define it at the top level")
    reward_node = _find_def(tree, function.__name__, code.co_firstlineno, top_level=True)
    if reward_node is None:
        raise ConfigError(
            f"{where}: no top-level def {function.__name__} there: the file changed since it was imported",
            hint="run your script again",
        )
    return _take_along(function.__name__, file, text, tree, reward_node)


def _function_of(reward: Callable[..., Any]) -> Any:
    function = inspect.unwrap(reward)
    if not inspect.isfunction(function):
        raise ConfigError(
            f"the reward must be a function defined with def, not a {type(function).__name__}",
            hint="def reward(completion, answer): ... at the top level of your file",
        )
    return function


def _source_file(function: Any) -> Path:
    code = function.__code__
    found = inspect.getsourcefile(function)
    if found is None or not Path(found).is_file():
        raise ConfigError(
            f"{function.__name__}() was typed into the interpreter or a notebook (line {code.co_firstlineno} of "
            f"{code.co_filename}), so there is no file to package it from",
            hint="write the reward in a .py file and run or import that file",
        )
    return Path(found).resolve()


def _find_def(tree: ast.Module, name: str, first_line: int, *, top_level: bool) -> ast.stmt | None:
    """The def of `name` whose first line (its first decorator's, if any) is `first_line`."""
    nodes: Iterator[ast.AST] = iter(tree.body) if top_level else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            if first_line in (start, node.lineno):
                return node
    return None


def _first_use(node: ast.AST, name: str) -> int:
    """The first line in `node` that names `name` (where an error points)."""
    lines = [n.lineno for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name]
    return min(lines) if lines else getattr(node, "lineno", 0)


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either way round)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare) or len(node.test.ops) != 1:
        return False
    if not isinstance(node.test.ops[0], ast.Eq):
        return False
    sides = [node.test.left, *node.test.comparators]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


def _is_future(node: ast.stmt | None) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


class _NoAnnotations(ast.NodeTransformer):
    """Drop annotations: under `from __future__ import annotations` they are never evaluated, so the names
    they mention are not used."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AsyncFunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AnnAssign:
        node.annotation = ast.Constant(value="")
        self.generic_visit(node)
        return node


def _analyse(node: ast.stmt, *, lazy_annotations: bool) -> _Statement:
    """Which module names a top-level statement binds and which it reads (its nested scopes' globals too)."""
    subject = _NoAnnotations().visit(copy.deepcopy(node)) if lazy_annotations else node
    table = symtable.symtable(ast.unparse(subject), "<statement>", "exec")
    symbols = table.get_symbols()
    binds = {s.get_name() for s in symbols if s.is_assigned() or s.is_imported()}
    uses = {s.get_name() for s in symbols if s.is_referenced()}
    for child in table.get_children():
        uses |= _globals_read(child)
    return _Statement(node, frozenset(binds), frozenset(uses))


def _globals_read(table: symtable.SymbolTable) -> set[str]:
    names = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():
        names |= _globals_read(child)
    return names


def _take_along(function: str, file: Path, text: str, tree: ast.Module, reward_node: ast.stmt) -> Extracted:
    lazy = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    futures: list[ast.stmt] = []
    statements: list[_Statement] = []
    main_only: dict[str, int] = {}
    for index, node in enumerate(tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the file's docstring
        if _is_future(node):
            futures.append(node)
        elif _is_main_guard(node):
            for name in _analyse(node, lazy_annotations=lazy).binds:
                main_only.setdefault(name, node.lineno)
        else:
            statements.append(_analyse(node, lazy_annotations=lazy))
    chosen = _resolve(function, file, statements, reward_node, main_only)
    return _render(function, file, reward_node.lineno, text, tree, [*futures, *chosen])


def _resolve(
    function: str, file: Path, statements: list[_Statement], reward_node: ast.stmt, main_only: dict[str, int]
) -> list[ast.stmt]:
    """The statements the reward needs, transitively, in the order of the file."""
    by_node = {id(s.node): s for s in statements}
    reward = by_node[id(reward_node)]
    chosen = {id(reward_node)}
    pending = [(name, reward) for name in sorted(reward.uses)]
    done: set[str] = set()
    stars = [s for s in statements if isinstance(s.node, ast.ImportFrom) and any(a.name == "*" for a in s.node.names)]
    while pending:
        name, user = pending.pop()
        if name in done:
            continue
        done.add(name)
        binders = [s for s in statements if name in s.binds]
        if not binders and (name in MODULE_ATTRIBUTES or hasattr(builtins, name)):
            continue
        if not binders and name in main_only:
            raise ConfigError(
                f"{file}:{_first_use(user.node, name)}: {function}() needs {name}, which is defined only under "
                f'`if __name__ == "__main__":` (line {main_only[name]}); move it to the top level of the file',
                hint=_HINT,
            )
        if not binders and stars:
            binders = stars  # a star import may bind it; it cannot be known without importing
        if not binders:
            raise ConfigError(
                f"{file}:{_first_use(user.node, name)}: {function}() needs {name}, which is not defined at the "
                "top level of the file",
                hint=_HINT,
            )
        for statement in binders:
            if id(statement.node) not in chosen:
                chosen.add(id(statement.node))
                pending.extend((used, statement) for used in sorted(statement.uses))
    return [s.node for s in statements if id(s.node) in chosen]


def _span(node: ast.stmt) -> tuple[int, int]:
    decorators = getattr(node, "decorator_list", None) or []
    start = min([node.lineno, *(d.lineno for d in decorators)])
    return start, node.end_lineno or node.lineno


def _render(function: str, file: Path, line: int, text: str, tree: ast.Module, chosen: list[ast.stmt]) -> Extracted:
    lines = text.splitlines()
    spans = [_span(node) for node in tree.body]
    out: list[str] = []
    segments: list[Segment] = []
    imports: list[ImportLine] = []
    previous: ast.stmt | None = None
    for node in chosen:
        start, end = _span(node)
        shared = sum(1 for other in spans if other[0] <= end and start <= other[1]) > 1
        # Statements that share a line (`a = 1; b = 2`) are written out one by one, so the other is not taken.
        piece = ast.unparse(node).splitlines() if shared else lines[start - 1 : end]
        if out and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.extend(["", ""])
        elif out and _is_future(previous) and not _is_future(node):
            out.append("")
        previous = node
        segments.append(Segment(len(out) + 1, start, len(piece) if not shared else 0))
        out.extend(piece)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                imports.extend(ImportLine(alias.name, inner.lineno) for alias in inner.names)
            elif isinstance(inner, ast.ImportFrom) and inner.module != "__future__":
                imports.append(ImportLine(inner.module or "", inner.lineno, inner.level))
    return Extracted(function, file, line, "\n".join(out) + "\n", tuple(segments), tuple(imports))
