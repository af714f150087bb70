"""The Ray executor: jobs on a Ray cluster, each with its session on the node that runs its trainer.

Who uses it: `nodus.reconciler.executors.choose` (`executor: ray` in nodus.yaml, through `settings`); Ray runs
`node_session` on a node for every submission. Ray is an optional extra (`nodus[ray]`), imported by
`jobs_client` on use only. Modules, from the bottom up:

    submission      submission ids from the workload key, generation, attempt and run
    jobs_client     JobsClient (the Jobs API and the node list) and its implementation over Ray's clients
    placement       the workload's resources as the Ray resources its entrypoint reserves; Unschedulable
    status_stream   the marker lines of a Ray job's log: written by node_session, parsed by the executor
    node_session    the Ray job's entrypoint: the local executor's supervisor on the node, followed onto stdout
    executor        RayExecutor: the Executor protocol over the Jobs API
    settings        the RayExecutor of a project's nodus.yaml (address, token)
    cluster         (`nodus cluster up/down/status`: a local Ray head and workers)
"""

from __future__ import annotations

from .executor import RayExecutor

__all__ = ["RayExecutor"]
