"""Request batching in the transformers engine, in process, on the tiny model and a LoRA adapter made here.

Batched rows must answer exactly what they answer alone (left padding, positions and the joined KV cache are
right), requests arriving while a batch runs must join it, a cancelled request must leave it at the next step,
and base and adapter requests must share forward passes while each keeps its own answer.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodus.runtimes.serving.backend import AdapterSpec, Listen, ServeSpec
from nodus.runtimes.serving.engine import Delta, Finished, GenerationRequest, SamplingParams, Ticket
from nodus.runtimes.serving.transformers_engine import EngineOptions, TransformersEngine

pytestmark = pytest.mark.slow
QUESTIONS = ["Reverse the words: apple banana cherry", "hi", "Reverse the words: one two"]
ids = itertools.count()


@pytest.fixture(scope="module")
def engine(model_dir: Path, adapter_dir: Path) -> Iterator[TransformersEngine]:
    spec = ServeSpec(
        model=model_dir, served_name="tiny", listen=Listen(port=0), adapters=(AdapterSpec("rev", adapter_dir),)
    )
    engine = TransformersEngine(spec, EngineOptions(device="cpu", max_batch_size=8, batch_window=0.05))
    yield engine
    engine.shutdown()
    engine.close()


def request(engine: TransformersEngine, question: str, model: str = "tiny", **sampling: object) -> GenerationRequest:
    prompt = engine.chat_prompt([{"role": "user", "content": question}], None, {})
    params = SamplingParams(**{"max_tokens": 24, "temperature": 0.0, **sampling})  # type: ignore[arg-type]
    return GenerationRequest(f"t{next(ids)}", model, tuple(prompt), params)


async def finish(ticket: Ticket, deltas: list[Delta] | None = None) -> Finished:
    async for event in ticket.events():
        if isinstance(event, Finished):
            return event
        if deltas is not None:
            deltas.append(event)
    raise AssertionError("no Finished event")


def solo(engine: TransformersEngine, req: GenerationRequest) -> Finished:
    async def go() -> Finished:
        return await finish(engine.submit(req, asyncio.get_running_loop()))

    return asyncio.run(go())


def together(engine: TransformersEngine, reqs: list[GenerationRequest]) -> list[Finished]:
    async def go() -> list[Finished]:
        loop = asyncio.get_running_loop()
        return list(await asyncio.gather(*(finish(engine.submit(r, loop)) for r in reqs)))

    return asyncio.run(go())


def test_batched_rows_answer_what_they_answer_alone(engine: TransformersEngine) -> None:
    alone = [solo(engine, request(engine, q)) for q in QUESTIONS]
    reqs = [request(engine, q) for q in QUESTIONS]
    batched = together(engine, reqs)
    assert [f.token_ids for f in batched] == [f.token_ids for f in alone]
    assert [f.text for f in batched] == [f.text for f in alone]
    record = engine.request_record(reqs[0].request_id)
    assert record is not None
    assert set(record["shared_with"]) >= {reqs[1].request_id}  # prompts of different lengths, one prefill


def test_a_request_arriving_mid_batch_joins_it(engine: TransformersEngine) -> None:
    long = request(engine, QUESTIONS[0], max_tokens=60, ignore_eos=True)
    late = request(engine, QUESTIONS[1], max_tokens=20, ignore_eos=True)
    expected_late = solo(engine, request(engine, QUESTIONS[1], max_tokens=20, ignore_eos=True))

    async def go() -> tuple[Finished, Finished]:
        loop = asyncio.get_running_loop()
        first = engine.submit(long, loop)
        deltas: list[Delta] = []
        events = first.events()
        while len(deltas) < 5:  # the long request is well under way
            event = await anext(events)
            assert isinstance(event, Delta)
            deltas.append(event)
        second = engine.submit(late, loop)
        rest, joined = await asyncio.gather(finish_from(events), finish(second))
        return rest, joined

    async def finish_from(events) -> Finished:  # type: ignore[no-untyped-def]
        async for event in events:
            if isinstance(event, Finished):
                return event
        raise AssertionError("no Finished event")

    first, second = asyncio.run(go())
    assert (first.reason, first.completion_tokens) == ("length", 60)
    assert second.token_ids == expected_late.token_ids
    record = engine.request_record(late.request_id)
    assert record is not None
    assert long.request_id in record["shared_with"]
    assert record["forward_passes"] == 20  # one prefill and 19 decode steps, all in the running batch's passes


def test_a_cancelled_request_leaves_the_batch_at_the_next_step(engine: TransformersEngine) -> None:
    doomed = request(engine, QUESTIONS[0], max_tokens=400, ignore_eos=True)
    other = request(engine, QUESTIONS[2], max_tokens=40, ignore_eos=True)

    async def go() -> tuple[Finished, Finished, int]:
        loop = asyncio.get_running_loop()
        ticket = engine.submit(doomed, loop)
        kept = engine.submit(other, loop)
        seen = 0
        async for event in ticket.events():
            assert isinstance(event, Delta)
            seen = event.completion_tokens
            if seen >= 3:
                ticket.cancel()
                break
        return await finish(ticket), await finish(kept), seen

    cancelled, kept, seen = asyncio.run(go())
    assert cancelled.reason == "cancelled"
    assert seen <= cancelled.completion_tokens <= seen + 2  # at most the step under way when it was cancelled
    assert (kept.reason, kept.completion_tokens) == ("length", 40)
    record = engine.request_record(doomed.request_id)
    assert record is not None
    assert (record["state"], record["completion_tokens"]) == ("cancelled", cancelled.completion_tokens)


def test_base_and_adapter_share_passes_and_keep_their_answers(engine: TransformersEngine) -> None:
    base_alone = solo(engine, request(engine, QUESTIONS[0]))
    adapter_alone = solo(engine, request(engine, QUESTIONS[0], model="rev"))
    assert adapter_alone.text != base_alone.text  # the adapter changes the answer
    reqs = [request(engine, QUESTIONS[0]), request(engine, QUESTIONS[0], model="rev")]
    base, adapter = together(engine, reqs)
    assert base.token_ids == base_alone.token_ids
    assert adapter.token_ids == adapter_alone.token_ids
    record = engine.request_record(reqs[1].request_id)
    assert record is not None
    assert reqs[0].request_id in record["shared_with"]


def test_seeded_sampling_repeats_and_stop_strings_cut(engine: TransformersEngine) -> None:
    first = solo(engine, request(engine, QUESTIONS[0], temperature=1.0, seed=11, max_tokens=30))
    again = solo(engine, request(engine, QUESTIONS[0], temperature=1.0, seed=11, max_tokens=30))
    assert first.token_ids == again.token_ids
    greedy = solo(engine, request(engine, QUESTIONS[0], max_tokens=30, ignore_eos=True))
    stop = greedy.text[5:8]
    cut = solo(engine, request(engine, QUESTIONS[0], max_tokens=30, ignore_eos=True, stop=(stop,)))
    assert cut.reason == "stop"
    assert cut.text == greedy.text[: greedy.text.index(stop)]
