"""The kubectl JSONPath subset of `nodus get -o jsonpath=` and `nodus wait --for=jsonpath=`."""

from __future__ import annotations

import pytest

from nodus.errors import ConfigError
from nodus.reconciler.views.jsonpath import evaluate, select

DOC = {"status": {"phase": "Running", "step": 3, "outputs": [{"name": "results.json"}, {"name": "adapter"}]}}


def test_paths_indexes_and_wildcards() -> None:
    assert evaluate("{.status.phase}", DOC) == "Running"
    assert evaluate(".status.phase", DOC) == "Running"
    assert evaluate("{.status.outputs[*].name}", DOC) == "results.json adapter"
    assert evaluate("{.status.outputs[-1].name}", DOC) == "adapter"
    assert evaluate("step={.status.step}", DOC) == "step=3"
    assert evaluate("{.status.missing}", DOC) == ""
    assert select(".", DOC) == [DOC]


def test_a_path_it_cannot_read_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        evaluate("{.status..phase}", DOC)
