"""The reconciler: plans desired (YAML + nodus.lock) against observed state and applies it.

Who uses it: `nodus.cli` and `nodus.recipes`. Controllers per kind, executors, the state store and the job
supervisor live here (DESIGN.md section 6).
"""
