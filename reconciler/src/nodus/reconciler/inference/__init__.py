"""Inference behind an OpenAI-compatible gateway: API keys, limits, holds, settlement, idempotency and receipts.

Who uses it: the CLI and the InferenceEndpoint controller through `api` (keys, receipts, reaping, the gateway's
command line); the gateway process (`gateway`, `python -m nodus.reconciler.inference.gateway`), one per host,
which forwards requests to the endpoints' model servers. Every gateway enforces keys, limits, holds and settlement
against the state store (`ledger`), so several gateways share one limit.

Modules: `errors` (the seeds' error codes), `ids`, `money`, `keys`, `endpoints` (where endpoints and their
model servers are: the status fields the controller writes), `windows` (rpm/tpm arithmetic), `budgets`,
`processes` (is a gateway alive), `ledger`, `api`, and the `gateway` package.
"""
