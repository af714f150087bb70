"""The Python SDK users import (`from nodus.recipes import rl`); it drives the same functions as the CLI."""
