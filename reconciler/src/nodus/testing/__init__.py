"""Test support shipped with nodus: things tests and benchmarks need that production code does not.

Who uses it: the workspace's tests and `bench/`. Nothing in `nodus.reconciler` or `nodus.cli` imports it.
"""
