"""InferenceEndpoints on the controller's side: which model an endpoint serves (`model_table`, `served`) and the
service that serves it. Who calls it: `nodus.reconciler.controllers.endpoint` and the CLI's inference commands; the
gateway that enforces keys, limits and holds is `nodus.reconciler.inference`."""
