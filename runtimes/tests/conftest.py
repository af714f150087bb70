"""Test support of the runtimes: `fake_platform` (a stand-in attempt API) imports as a plain module.

pytest runs with `--import-mode=importlib`, which puts no test folder on sys.path; this one is added here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
