"""`python -m nodus.reconciler.executors.ray.service_main`: the entrypoint of every model server start on Ray.

Who runs it: Ray, on the node it placed the start on (`RayServices.launch_service` names it). It only calls
`service_session.main`; a module of its own so that runpy runs it once (as `node_main` for jobs).
"""

from __future__ import annotations

import sys

from .service_session import main

if __name__ == "__main__":
    sys.exit(main())
