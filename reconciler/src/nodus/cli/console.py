"""The rich consoles every command prints through (stdout for results, stderr for messages).

Who uses it: every module of `nodus.cli`. Colour follows the terminal (off when piped, NO_COLOR honoured);
output for machines (`-o json`) goes through `print_json` and is never coloured or wrapped.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Machine-readable output: plain JSON on stdout, sorted keys, one trailing newline."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
