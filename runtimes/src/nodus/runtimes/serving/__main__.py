"""`python -m nodus.runtimes.serving`: serve a model folder (and LoRA adapters over it) with OpenAI's HTTP API.

Who runs it: the transformers backend's command line (`transformers_backend.TransformersBackend.command`, started
by the InferenceEndpoint controller), the tests, the benchmark, and people trying a model by hand:

    python -m nodus.runtimes.serving --model PATH [--adapter NAME=PATH ...] [--name SERVED_NAME] [--embeddings]
        (--uds SOCKET | [--host 127.0.0.1] --port N)

Bad input (a missing folder, an adapter without adapter_config.json, a taken port, a public --host) exits 2 with
one line on stderr naming the flag and the file; a ready server prints one JSON line on stdout (see `server`).
The API key clients must send, if any, is read from NODUS_SERVING_API_KEY.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType

# Before torch loads OpenMP: its threads sleep when idle instead of spinning. A model server shares its host (the
# gateway, other servers, training), and spinning threads on a busy host made a batch of 16 requests 10 to 50 times
# slower here (0.17 s alone, 3 to 8 s beside a training run, on 2 cores); passive waiting kept it at 0.2 s.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from nodus.runtimes.serving.backend import API_KEY_ENV, Listen, ServeSpec, ServingError
from nodus.runtimes.serving.model_folder import parse_adapter
from nodus.runtimes.serving.server import bind, release, serve
from nodus.runtimes.serving.transformers_engine import EngineOptions, TransformersEngine


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nodus.runtimes.serving", description=__doc__.split("\n")[0])
    p.add_argument(
        "--model", type=Path, required=True, help="a Hugging Face model folder (config.json, weights, tokenizer)"
    )
    p.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a PEFT LoRA adapter folder served as NAME (repeatable)",
    )
    p.add_argument("--name", help="the name requests give as `model` for the base (default: --model as given)")
    p.add_argument("--embeddings", action="store_true", help="serve /v1/embeddings too (mean-pooled, L2-normalised)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--uds", type=Path, help="listen on this Unix socket")
    where.add_argument(
        "--port", type=int, help="listen on this TCP port of --host (0: a free one, named in the ready line)"
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"a loopback address (default 127.0.0.1); another only with a key in {API_KEY_ENV}",
    )
    p.add_argument("--max-model-len", type=int, help="the context window (default: the model config's)")
    p.add_argument("--max-batch-size", type=int, default=32, help="requests generated together (1: batching off)")
    p.add_argument(
        "--batch-window-ms", type=float, default=10.0, help="how long an idle server waits for more requests to batch"
    )
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cpu, cuda, cuda:N")
    return p


def spec_of(args: argparse.Namespace) -> ServeSpec:
    keyed = bool(os.environ.get(API_KEY_ENV))
    listen = Listen(uds=args.uds) if args.uds is not None else Listen(host=args.host, port=args.port, keyed=keyed)
    if args.max_batch_size < 1:
        raise ServingError(f"--max-batch-size {args.max_batch_size}: at least 1")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise ServingError(f"--max-model-len {args.max_model_len}: at least 2")
    return ServeSpec(
        model=args.model,
        served_name=args.name or str(args.model),
        listen=listen,
        adapters=tuple(parse_adapter(argument) for argument in args.adapter),
        embeddings=args.embeddings,
        max_model_len=args.max_model_len,
    )


class StoppedWhileLoading(BaseException):
    """SIGTERM or SIGINT before the server answers: the socket is released and the process exits 0. A
    BaseException, like KeyboardInterrupt, so that no `except Exception` around the model loading takes it for a
    loading failure."""


def stop_while_loading(sig: int, frame: FrameType | None) -> None:
    raise StoppedWhileLoading(signal.Signals(sig).name)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        spec = spec_of(args)
        options = EngineOptions(
            device=args.device, max_batch_size=args.max_batch_size, batch_window=args.batch_window_ms / 1000
        )
        # The address is claimed before the model loads: a taken port fails at once, not after a long load.
        sock = bind(spec.listen)
        previous = {sig: signal.signal(sig, stop_while_loading) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            engine = TransformersEngine(spec, options)
        except StoppedWhileLoading as stopped:
            release(spec.listen, sock)
            print(f"nodus serving: stopped by {stopped} while loading the model", file=sys.stderr)
            return 0
        except BaseException:
            release(spec.listen, sock)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return serve(engine, spec.listen, sock, os.environ.get(API_KEY_ENV) or None)
    except ServingError as error:
        print(f"nodus serving: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
