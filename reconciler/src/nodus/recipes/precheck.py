"""The check `rl.train` makes on this machine before anything is built: the packaged reward runs and answers.

Who calls it: `nodus.recipes.rl.train`, right after `nodus.recipes.environment.package`. It imports the
*packaged* module (not the user's file), so a line the packaging left out shows here, and grades one task's
answer and an empty reply with it. A reward that raises, or returns something other than a number, a bool or
None, would be an InfrastructureFailure on every grading in the grader; here it is one line naming the line
of the user's file, before a GPU is asked for.
"""

from __future__ import annotations

import sys
import traceback
import types
from typing import Any

from nodus.env.contract import INFRASTRUCTURE_FAILURE, classify
from nodus.errors import ConfigError
from nodus.recipes.environment import PackagedEnvironment

_RAISED_HINT = (
    "in the grader a reward that raises is an InfrastructureFailure, never a 0: return None or 0 when a reply "
    "holds no answer"
)


def precheck(packaged: PackagedEnvironment) -> None:
    """Import the packaged module, read its tasks back and grade a task's answer and an empty reply."""
    module = _load(packaged)
    environment = module._nodus_environment()
    for name in ("train", "test"):
        found = environment.tasks(name)
        expected = len(getattr(packaged.split, name))
        if len(found) != expected:  # the package itself is wrong: a bug of the SDK, said plainly
            raise ConfigError(f"{packaged.folder}: tasks.json has {len(found)} {name} tasks, not {expected}")
    answer = environment.tasks("train")[0]["answer"]
    for completion in (answer if isinstance(answer, str) else str(answer), ""):
        _grade(packaged, environment.reward, completion, answer)


def _load(packaged: PackagedEnvironment) -> Any:
    """The packaged module, executed from its file under a name of its own (removed again afterwards)."""
    path = packaged.module_file
    name = f"_nodus_rl_check_{packaged.name.replace('-', '_')}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    # Registered while it runs: dataclasses and typing look a class's module up in sys.modules.
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except Exception as exc:
        raise ConfigError(
            f"{_where(packaged, exc)}: the packaged reward does not import: {type(exc).__name__}: {exc}",
            hint="rl.train takes along only the top-level statements the reward uses",
        ) from None
    finally:
        sys.modules.pop(name, None)
    return module


def _grade(packaged: PackagedEnvironment, reward: Any, completion: str, answer: Any) -> None:
    function = packaged.extracted.function
    shown = completion if len(completion) <= 40 else completion[:37] + "..."
    try:
        value = reward(completion, answer)
    except Exception as exc:
        raise ConfigError(
            f"{_where(packaged, exc)}: {function}({shown!r}, answer) raised {type(exc).__name__}: {exc}",
            hint=_RAISED_HINT,
        ) from None
    outcome = classify(value)
    if outcome.verdict == INFRASTRUCTURE_FAILURE:
        raise ConfigError(
            f"{packaged.extracted.file}:{packaged.extracted.line}: {function}({shown!r}, answer): {outcome.message}",
            hint="a reward returns a number (1 is Correct), a bool, or None when the reply holds no answer",
        )


def _where(packaged: PackagedEnvironment, exc: BaseException) -> str:
    """`file:line` of the user's file where `exc` was raised (the deepest frame of the packaged module)."""
    frames = traceback.extract_tb(exc.__traceback__)
    module_file = str(packaged.module_file)
    for frame in reversed(frames):
        if frame.filename == module_file and frame.lineno is not None:
            line = packaged.extracted.original_line(frame.lineno, packaged.header_lines)
            if line is not None:
                return f"{packaged.extracted.file}:{line}"
            return f"{module_file}:{frame.lineno}"
    if isinstance(exc, SyntaxError) and exc.filename == module_file and exc.lineno:
        return f"{module_file}:{exc.lineno}"
    last = frames[-1] if frames else None
    return f"{last.filename}:{last.lineno}" if last is not None else str(packaged.extracted.file)
