"""Authoring Environments: `nodus env init` (scaffold) and `nodus env package`/`check` (package).

Who uses it: `nodus.cli.env` only; the reconcile path never imports it.
"""
