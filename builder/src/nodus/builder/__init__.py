"""nodus-build: turns Environment packages into digest-pinned OCI grader images (see DESIGN.md section 5).

Who uses it: the reconciler (build on apply) and the `nodus-build` CLI once the builder lands; it sits
between the reconciler and `nodus.specs` in the layering.
"""
