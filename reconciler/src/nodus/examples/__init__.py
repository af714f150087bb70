"""Runnable examples of the Python SDK, each one file to copy: `python -m nodus.examples.rl` first."""
