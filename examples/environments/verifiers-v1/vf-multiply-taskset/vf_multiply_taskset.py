"""A verifiers 0.4 (`verifiers.v1`) Taskset: multiply two numbers, reply with the product only.

verifiers 0.4 removed the classic `load_environment()` API: a v1 package exports its Taskset subclass through
`__all__` (how verifiers' own loader finds it, and how nodus does). The tasks are generated here
(deterministic, nothing downloaded); each task's data keeps its answer, which stays in the grader. The task's
`@vf.reward` method scores a reply 1.0 when it is exactly the product (Correct), else 0.0 (Incorrect); nodus
grades an empty reply InvalidOutput. nodus holds out every fifth task (and at least 16): 64 train, 16 test.
"""

import random

import verifiers.v1 as vf

__all__ = ["MultiplyTaskset"]

SYSTEM = "Multiply the two numbers. Reply with the product only, digits and nothing else."


class MultiplyData(vf.TaskData):
    answer: str = ""


class MultiplyTask(vf.Task[MultiplyData]):
    @vf.reward(weight=1.0)
    async def exact_product(self, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == self.data.answer)


class MultiplyConfig(vf.TasksetConfig):
    count: int = 80
    seed: int = 14


class MultiplyTaskset(vf.Taskset[MultiplyTask, MultiplyConfig]):
    def load(self):
        rng = random.Random(self.config.seed)
        pairs: list[tuple[int, int]] = []
        while len(pairs) < self.config.count:  # distinct prompts: nodus keeps a repeated prompt once
            pair = (rng.randint(2, 19), rng.randint(2, 19))
            if pair not in pairs:
                pairs.append(pair)
        return [
            MultiplyTask(
                MultiplyData(prompt=f"What is {a} * {b}?", system_prompt=SYSTEM, answer=str(a * b), name=f"mul-{i}"),
                self.config.task,
            )
            for i, (a, b) in enumerate(pairs)
        ]
