"""Prices and estimates: the price table, what a TrainingJob will cost, dry runs and priced plans.

Who calls it: `nodus plan` (each TrainingJob action's estimate, the pull-request comment's cost headline),
`nodus apply --dry-run` (the compiled Job with `status.estimate` and `status.blockingReasons`) and the
TrainingJob controller (the price in force when a run launches, stored with it).

- `prices`: the price table (`catalog/prices.yaml` with its overrides) and the local host's price;
- `model_size`: a model's parameter count, from an annotation, its files or its name;
- `estimate`: the estimator itself, pure: documents and facts in, an `Estimate` out;
- `facts`: what the estimator needs to know about this host and state store (model cached, jobs running);
- `costs`: priced plans (`PlanCosts`), rendered by `nodus.reconciler.planning.render`;
- `dry_run`: `nodus apply --dry-run`.

Nothing here imports `nodus.reconciler.planning` at module level except `costs.price_plan` and `dry_run`, so the
renderers can import the cost types without a cycle.
"""
