"""The `nodus/evaluate` runtime: score a model, with a LoRA adapter or without, on held-out tasks.

Who runs it: the job supervisor, as the command of `runtimes/evaluate.yaml` (`python -m
nodus.runtimes.evaluate`), for a TrainingJob with `mode: Evaluate`. It fetches the Environment's held-out tasks
through the attempt API, generates a reply to each (greedy unless `temperature` is above 0) with the
generation backend (transformers here, vLLM on GPU hosts; or an InferenceEndpoint, called through the project's
gateway, when the job names one: `endpoint_generation.py`), and submits them in phase Evaluation; the platform
grades them and keeps the record. Outputs: results.json (pass rate and counts by verdict), provenance.json,
manifest.json.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from nodus.runtimes.contract import RunContext
from nodus.runtimes.endpoint_generation import EndpointGenerator
from nodus.runtimes.evaluation import run_episodes
from nodus.runtimes.generation import Generator, Sampling, make_generator
from nodus.runtimes.grpo_lora import load_model, token_counter
from nodus.runtimes.outputs import export


def main() -> int:
    started = time.monotonic()
    through = EndpointGenerator.from_environment()
    context = RunContext.from_environment(model_required=through is None)
    parameters = context.parameters
    benchmarks = (context.params.get("evaluation") or {}).get("tasks") or []
    if benchmarks and not context.params.get("environment"):
        print(
            f"evaluate: benchmark tasks {benchmarks} need their data sets, which this host cannot download; "
            "evaluate on an Environment instead",
            flush=True,
        )
        return 2
    test = context.api.tasks().get("test", [])
    if not test:
        print("evaluate: the environment served no held-out tasks", flush=True)
        return 2
    generator: Generator
    if through is not None:
        generator = through  # the endpoint's model and adapter, called as users call it
    else:
        model, tokenizer = load_model(context)
        if parameters.get("adapter"):
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(Path(parameters["adapter"])))
        backend = str(parameters.get("generationBackend", "auto"))
        generator = make_generator(backend, model, tokenizer, str(context.model))
    temperature = float(parameters.get("temperature") or 0)
    sampling = Sampling(
        max_tokens=int(parameters.get("maxTokens", 256)), greedy=temperature == 0, temperature=temperature or 1.0
    )
    context.api.event(stage="Evaluating", step=0, totalSteps=len(test))
    result = run_episodes(
        generator,
        test,
        context.api,
        phase="Evaluation",
        sampling=sampling,
        max_turns=int(parameters.get("maxTurns", 1)),
        max_episode_tokens=int(parameters.get("maxEpisodeTokens", 2048)),
        count_tokens=token_counter(generator),
        batch=int(parameters.get("batchSize", 32)),
    )
    verdicts = Counter(v.get("verdict") for v in result.verdicts)
    context.api.event(stage="Exporting", metrics={"passRate": result.pass_rate})
    export(
        context,
        results={
            "runtime": "nodus/evaluate",
            "tasks": len(test),
            "passRate": result.pass_rate,
            "verdicts": dict(sorted(verdicts.items())),
            "backend": generator.name,
            "seconds": round(time.monotonic() - started, 1),
        },
    )
    print(f"evaluate: pass rate {result.pass_rate} on {len(test)} tasks ({dict(verdicts)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
