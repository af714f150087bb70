"""Controllers per kind: what `nodus apply` does to make observed state match each resource's spec.

Who calls them: `nodus.reconciler.apply` (in dependency waves: Environments and runtimes before the jobs
that name them) and the status refresh of `nodus get`/`describe`.
"""
