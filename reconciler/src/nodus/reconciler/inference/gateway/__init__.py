"""The inference gateway: one process per host in front of the endpoints' model servers.

Who uses it: the InferenceEndpoint controller starts it as a service (`python -m nodus.reconciler.inference.gateway
--state URL (--uds SOCKET | --port N)`, built by `nodus.reconciler.inference.api.gateway_command`); clients call it
with OpenAI's (or Anthropic's) SDK: base URL and API key only. Every gateway process enforces keys, limits, holds
and settlement against the state store through the ledger, so several gateways share one limit.

Modules: `app` (routes and the request pipeline), `operations/` (one module per route), `bounds` (input token
bounds), `body` (body, key and Idempotency-Key), `upstream` (the model servers' client), `relay` (streams),
`group_commit` (the ledger's writes, many per transaction), `server` (the process), `__main__` (its command line).
"""
