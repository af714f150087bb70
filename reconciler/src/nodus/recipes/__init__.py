"""The Python SDK users import (`from nodus.recipes import rl`); it drives the same functions as the CLI.

`TrainingJob.from_example("nodus/graph-coloring@1.0.0")` returns a catalog Environment's ready template
(`nodus.recipes.examples`).
"""

from nodus.recipes.examples import TrainingJob

__all__ = ["TrainingJob"]
