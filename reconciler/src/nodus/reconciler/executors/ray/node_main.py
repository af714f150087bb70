"""`python -m nodus.reconciler.executors.ray.node_main`: the entrypoint of every Ray job the Ray executor submits.

Who runs it: Ray, on the node it placed the job on (`RayExecutor.launch` names it). It only calls
`node_session.main`. It is a module of its own, which the package never imports, so runpy runs it once: run with
`-m`, node_session itself would be a second copy of a module the package had already imported (runpy warns).
"""

from __future__ import annotations

import sys

from .node_session import main

if __name__ == "__main__":
    sys.exit(main())
