"""`nodus controller`: the GitOps loop for teams that run nodus as a service (poll git, plan, apply, refresh).

Who calls it: the `nodus controller` command (`nodus.cli.controller`) runs `loop.run`; `nodus get` reads the sync
and health columns through `sync_status`. The modules: `source` (the git checkout), `sync` (one pass: plan,
apply under the lease, record), `sync_status` (health per kind, Synced/OutOfSync, the sync bookkeeping) and
`loop` (the interval and the signals that stop it).
"""
