"""nodus's model server: one process per served base model (and its LoRA adapters), speaking OpenAI's HTTP API.

Who uses it: the InferenceEndpoint controller starts it through a backend (`backend.ServingBackend`: this package's
server, `transformers_backend`, on any host, or `vllm serve`, `vllm_backend`, on CUDA hosts) and waits for it with
`readiness.wait_ready`; the gateway forwards OpenAI requests to it on loopback or a Unix socket. People start it by
hand with `python -m nodus.runtimes.serving --model PATH --port N`.

Modules. The launch seam, free of torch (the controller and the CLI import it): `backend` (specs and the
protocol), `transformers_backend`, `vllm_backend`, `model_folder` (checks of model and adapter folders),
`readiness`, `client` (a plain HTTP client over TCP or a Unix socket). The server process: `__main__` (its
command line), `server` (Starlette app, socket, signals), `openai_api` (request bodies and response shapes),
`streaming` (Server-Sent Events), `engine` (what the HTTP layer asks of an engine), `transformers_engine` (model and
adapters loaded), `batching` (the request-batching scheduler), `kv_cache`, `sampling`, `text_stream`.
"""
