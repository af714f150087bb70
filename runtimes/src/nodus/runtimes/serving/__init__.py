"""nodus's model server: one process per served base model (and its LoRA adapters), speaking OpenAI's HTTP API.

Who uses it: the InferenceEndpoint controller starts it through a backend (`backend.ServingBackend`: the
transformers server of this package, `transformers_backend`, on any host, or `vllm serve`, `vllm_backend`, on
CUDA hosts) and waits for it with `readiness.wait_ready`; the gateway forwards OpenAI requests to it on loopback
or a Unix socket. People start it by hand with `python -m nodus.runtimes.serving --model PATH --port N`.

Modules: `backend` (the launch seam and its specs), `model_folder` (checks of model and adapter folders),
`readiness`, `vllm_backend`, `transformers_backend` (model loading and the seam's transformers side), `engine`
(what the HTTP layer asks of a generation engine), `batching` (the request-batching scheduler), `kv_cache`,
`sampling`, `text_stream`, `openai_api` (request bodies and response shapes), `server` (Starlette app and the
process), `__main__` (its command line).
"""
