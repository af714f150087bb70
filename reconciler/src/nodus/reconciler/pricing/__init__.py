"""Prices and estimates: the price table, what a TrainingJob will cost and priced plans.

Who calls it: `nodus plan` (each TrainingJob action's estimate, the pull-request comment's cost headline),
`nodus apply --dry-run` (the compiled Job with `status.estimate` and `status.blockingReasons`) and the
TrainingJob controller (the price in force when a run launches, stored with it).

- `prices`: the price table (`catalog/prices.yaml` with its overrides) and the local host's price;
- `model_size`: a model's parameter count, from an annotation, its files or its name;
- `estimate`: the estimator itself, pure: documents and facts in, an `Estimate` out;
- `facts`: what the estimator needs to know about this host and state store (model cached, jobs running);
- `costs`: priced plans (`PlanCosts`), rendered by `nodus.reconciler.planning.render`;
- `plan_prices`: `price_plan`, which prices a plan's changes with the estimator.

`nodus apply --dry-run` (`nodus.reconciler.dry_run`) sits above this package: it asks admission, apply's
refusals and the TrainingJob controller's `compile_job`, which pricing must not import. Pricing is pure (an
import-linter contract in pyproject.toml): it imports no state store implementation, executor, controller,
apply, refresh, CLI or view, and `nodus.reconciler.planning` only for type checking (`Plan`), so the plan
renderers import the cost types without a cycle.
"""
