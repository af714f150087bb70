"""The `nodus` command line: one click group whose commands call the same functions the SDK calls.

Who uses it: people and CI, through the `nodus` script (`nodus.cli.main:main`). `main.py` holds the group
and decides how errors reach users; each command lives in a module named after it.
"""
