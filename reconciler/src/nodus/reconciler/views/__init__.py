"""How resources are shown: `nodus get` columns per kind, `describe` text, JSONPath (`views.jsonpath`).

Who calls it: `nodus.cli.resources`. Pure functions of `ResourceRecord`s, so tests need no store.
"""
