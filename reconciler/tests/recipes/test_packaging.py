"""What goes with a reward (`nodus.recipes.packaging` and `nodus.recipes.imports`): the statements of its file it
uses, found transitively, and one-line refusals for what cannot go, naming the name and the line."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from nodus.errors import ConfigError
from nodus.recipes.imports import check_imports
from nodus.recipes.packaging import extract

Load = Callable[[str], ModuleType]


def test_takes_imports_constants_and_helpers_transitively_and_nothing_else(reward_file: Load) -> None:
    module = reward_file(
        '''
        """A reward file with more in it than the reward needs."""
        from __future__ import annotations

        import json
        import re
        import math as m
        from typing import Any

        ANSWER = re.compile(r"<answer>(.*?)</answer>")
        UNUSED = json.dumps({"not": "taken"})
        SCALE = 2; NOT_THIS = 3
        print("a side effect the grader must not repeat")


        def _clean(text: str) -> str:
            return text.strip().lower()


        def _last(text: str) -> str | None:
            found = [_clean(x) for x in ANSWER.findall(text)]
            return found[-1] if found else None


        class Scorer:
            weight = SCALE

            def score(self, a: Any, b: Any) -> float:
                return float(a == b) * m.sqrt(1)


        tasks = [("2+2", "4")]


        def reward(completion, answer):
            found = _last(completion)
            return None if found is None else Scorer().score(found, answer)


        run = print(tasks)

        if __name__ == "__main__":
            print(reward("<answer>4</answer>", "4"))
        '''
    )
    extracted = extract(module.reward)
    body = extracted.body
    for taken in ("from __future__ import annotations", "import re", "import math as m", "ANSWER = re.compile"):
        assert taken in body
    for taken in ("SCALE = 2", "def _clean(", "def _last(", "class Scorer:", "def reward("):
        assert taken in body
    for left in ("import json", "UNUSED", "NOT_THIS", "side effect", "tasks =", "run =", "__main__", "from typing"):
        assert left not in body, left
    # The taken lines run on their own, and the reward works from them.
    namespace: dict[str, object] = {}
    exec(compile(body, "packaged", "exec"), namespace)
    reward = namespace["reward"]
    assert callable(reward)
    assert reward("<answer> 4 </answer>", "4") == 1.0
    assert reward("nothing", "4") is None
    assert extracted.function == "reward" and extracted.line == module.reward.__code__.co_firstlineno
    assert {found.module for found in extracted.imports} == {"re", "math"}


def test_lines_map_back_to_the_original_file(reward_file: Load) -> None:
    module = reward_file(
        """
        import re

        PATTERN = re.compile("x")


        def reward(completion, answer):
            return float(bool(PATTERN.search(completion)))
        """
    )
    extracted = extract(module.reward)
    lines = extracted.body.splitlines()
    packaged = next(i for i, line in enumerate(lines, 1) if "PATTERN.search" in line)
    assert extracted.original_line(packaged) == 7
    assert extracted.original_line(packaged + 10, offset=10) == 7


def test_names_of_local_scopes_are_not_taken_for_module_names(reward_file: Load) -> None:
    module = reward_file(
        """
        answer_words = "module level, never used by the reward"


        def reward(completion, answer):
            answer_words = answer.split()
            hits = [word for word in answer_words if word in completion]
            return len(hits) / len(answer_words)
        """
    )
    assert "module level" not in extract(module.reward).body


def test_a_closure_variable_is_refused_naming_it_and_its_line(reward_file: Load) -> None:
    module = reward_file(
        """
        def make(threshold):
            def reward(completion, answer):
                return float(len(completion) > threshold)
            return reward


        reward = make(3)
        """
    )
    with pytest.raises(ConfigError) as refused:
        extract(module.reward)
    message = refused.value.message
    assert "threshold" in message and ".py:3:" in message and "closure" in message and "\n" not in message


def test_a_name_defined_only_under_main_is_refused(reward_file: Load) -> None:
    module = reward_file(
        """
        def reward(completion, answer):
            return float(completion == answer) * WEIGHT


        if __name__ == "__main__":
            WEIGHT = 2
        """
    )
    with pytest.raises(ConfigError) as refused:
        extract(module.reward)
    message = refused.value.message
    assert "WEIGHT" in message and ".py:2:" in message and "__main__" in message and "(line 5)" in message


def test_a_name_defined_nowhere_is_refused_at_the_helper_that_uses_it(reward_file: Load) -> None:
    module = reward_file(
        """
        def helper(text):
            return text in KNOWN


        def reward(completion, answer):
            return float(helper(completion))
        """
    )
    with pytest.raises(ConfigError) as refused:
        extract(module.reward)
    assert "KNOWN" in refused.value.message and ".py:2:" in refused.value.message
    assert "not defined at the top level" in refused.value.message


def test_a_lambda_a_nested_def_and_a_callable_object_are_refused(reward_file: Load) -> None:
    module = reward_file(
        """
        reward = lambda completion, answer: 1.0


        def outer():
            def inner(completion, answer):
                return 1.0
            return inner


        class Scorer:
            def __call__(self, completion, answer):
                return 1.0

            @staticmethod
            def reward(completion, answer):
                return 1.0
        """
    )
    with pytest.raises(ConfigError, match="lambda"):
        extract(module.reward)
    with pytest.raises(ConfigError, match=r"inner\(\) is defined inside outer\(\)"):
        extract(module.outer())
    with pytest.raises(ConfigError, match="function defined with def"):
        extract(module.Scorer())
    with pytest.raises(ConfigError, match=r"reward\(\) is a method of Scorer"):
        extract(module.Scorer.reward)


def test_a_function_typed_into_the_interpreter_is_refused_naming_it_and_its_line() -> None:
    namespace: dict[str, object] = {}
    exec(compile("\ndef score(completion, answer):\n    return 1.0\n", "<stdin>", "exec"), namespace)
    function = namespace["score"]
    assert callable(function)
    with pytest.raises(ConfigError) as refused:
        extract(function)
    message = refused.value.message
    assert "score()" in message and "line 2 of <stdin>" in message and "interpreter" in message


def test_a_star_import_is_taken_when_a_name_may_come_from_it(reward_file: Load) -> None:
    module = reward_file(
        """
        from math import *


        def reward(completion, answer):
            return float(sqrt(4) == 2)
        """
    )
    assert "from math import *" in extract(module.reward).body


def test_statements_sharing_a_line_are_taken_one_by_one(reward_file: Load) -> None:
    module = reward_file(
        """
        A = 1; B = 2


        def reward(completion, answer):
            return float(A)
        """
    )
    body = extract(module.reward).body
    assert "A = 1" in body and "B = 2" not in body


# --- imports the grader could not satisfy ---------------------------------------------------------------


def test_a_third_party_import_needs_pip(reward_file: Load) -> None:
    module = reward_file(
        """
        import yaml


        def reward(completion, answer):
            return float(yaml.safe_load(completion) == answer)
        """
    )
    extracted = extract(module.reward)
    with pytest.raises(ConfigError) as refused:
        check_imports(extracted, ())
    assert "yaml" in refused.value.message and ".py:1:" in refused.value.message
    version = importlib.metadata.version("PyYAML")
    assert refused.value.hint is not None and f"=={version}" in refused.value.hint
    check_imports(extracted, [f"PyYAML=={version}"])  # declared: accepted
    check_imports(extracted, [f"pyyaml=={version}"])  # names compare as pip compares them


def test_relative_local_and_nodus_imports_are_refused(
    reward_file: Load, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rewards").mkdir(exist_ok=True)
    (tmp_path / "rewards" / "my_helpers.py").write_text("LIMIT = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path / "rewards"))
    module = reward_file(
        """
        import nodus.env.answers


        def relative(completion, answer):
            from . import sibling
            return 1.0


        def local(completion, answer):
            import my_helpers
            return float(len(completion) < my_helpers.LIMIT)


        def sdk(completion, answer):
            from nodus.recipes import rl
            return 1.0


        def allowed(completion, answer):
            return float(nodus.env.answers is not None)
        """
    )
    with pytest.raises(ConfigError, match=r"\.py:5: a relative import"):
        check_imports(extract(module.relative), ())
    with pytest.raises(ConfigError, match=r"\.py:10: local\(\) needs my_helpers, a module of your own .*my_helpers"):
        check_imports(extract(module.local), ())
    with pytest.raises(ConfigError, match=r"\.py:15: sdk\(\) needs nodus.recipes"):
        check_imports(extract(module.sdk), ())
    check_imports(extract(module.allowed), ())  # the grader has nodus.env


def test_pip_must_be_a_list_of_requirements(reward_file: Load) -> None:
    module = reward_file("def reward(completion, answer):\n    return 1.0\n")
    with pytest.raises(ConfigError, match="not a string"):
        check_imports(extract(module.reward), "sympy==1.13.3")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="is not a requirement"):
        check_imports(extract(module.reward), ["==1.0"])
