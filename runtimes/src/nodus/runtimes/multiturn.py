"""Multi-turn episodes for GRPO: the model replies, the Environment answers, until the episode is done.

Who uses it: `grpo_lora.train` passes `make_rollout(...)` to TRL's GRPOTrainer as its `rollout_func` when
`maxTurns` is above 1. For each prompt of the batch (TRL repeats each task `groupSize` times) it plays one
episode with the policy being trained: after each
reply the episode so far goes to the platform's grader (`{taskId, turns}`, phase Training), which replays it in
the Environment and answers the next message and whether the episode is done. An episode ends when it is done,
after `maxTurns` replies, or before it would pass `maxEpisodeTokens`.

A task whose metadata offers `tools` has its prompt rendered with them (the chat template's `tools=`), and a
`next` the grader marks `nextRole: tool` (the result of the model's tool call) is rendered as a tool message,
where any other is the user's turn.

The model learns only from its own tokens: the completion TRL trains on is every reply with the Environment's
messages between them, and `env_mask` is 1 on the model's tokens and 0 on the Environment's (TRL multiplies its
loss mask by it). The episode's last verdict is its reward (`episode_reward`, passed on to the reward
function); an InfrastructureFailure is None, which leaves the episode out of its group.

TRL hands the rollout prompts only, and tasks may share a prompt (every seed of an OpenEnv environment opens
with the same rules): `rollout_rows` puts each row's taskId on its prompt's first message (`TASK_MARK`), the
rollout plays and grades the episode as that task, and the mark is dropped before the chat template renders it.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from nodus.runtimes.attempt import reward_of
from nodus.runtimes.contract import RunContext
from nodus.runtimes.generation import Tools, as_messages, next_message, tools_of


def prompt_key(prompt: Any) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


TASK_MARK = "nodusTaskId"
"""The key on a rollout row's first message that names its task (never rendered)."""


def rollout_rows(tasks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, Tools]]:
    """TRL's dataset rows for the rollout, each prompt marked with its taskId, and the `task_ids` and `tools`
    maps `make_rollout` takes, keyed by that taskId (`episode_key` of the marked prompt)."""
    rows, task_ids, offered = [], {}, {}
    for task in tasks:
        task_id = str(task["taskId"])
        messages = [dict(m) for m in as_messages(task["prompt"])]
        messages[0][TASK_MARK] = task_id
        rows.append({"prompt": messages, "task_id": task_id})
        task_ids[task_id] = task_id
        offered[task_id] = tools_of(task)
    return rows, task_ids, offered


def episode_key(prompt: Any) -> str:
    """The taskId a marked prompt carries; else the prompt itself (`prompt_key`)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) and prompt[0].get(TASK_MARK):
        return str(prompt[0][TASK_MARK])
    return prompt_key(prompt)


def unmarked(prompt: list[Any]) -> list[Any]:
    """The prompt as the model sees it: without the mark (which TRL's dataset adds, as None, to every message)."""
    return [{k: v for k, v in m.items() if k != TASK_MARK} if isinstance(m, dict) else m for m in prompt]


def make_rollout(context: RunContext, p: Any, task_ids: dict[str, str], tools: dict[str, Tools] | None = None) -> Any:
    """`task_ids` maps each prompt (as `episode_key` names it) to its taskId, `tools` to the tools it offers."""
    offered = tools or {}
    batches = itertools.count()

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        import torch

        # Each turn is graded in a request of its own, so the platform cannot see GRPO's groups: every item
        # names its group (the step, this process's batch, the task) and its episode in it, for the
        # reward-signal diagnostic. The step keeps a restarted trainer's groups apart from the last one's.
        step = getattr(getattr(trainer, "state", None), "global_step", 0)
        batch = f"s{step}.b{next(batches)}"
        played: dict[str, int] = {}

        tokenizer = trainer.processing_class
        model = trainer.model
        # TRL 1.16 passes the batch's prompts as its sampler repeated them (each `groupSize` times, beside its
        # inputs): one episode per entry keeps the rollout aligned with the inputs the rewards are matched to.
        episodes = [(prompt, 0) for prompt in prompts]
        out: dict[str, list[Any]] = {
            "prompt_ids": [],
            "completion_ids": [],
            "logprobs": [],
            "env_mask": [],
            "episode_reward": [],
        }
        for prompt, _ in episodes:
            key = episode_key(prompt)
            task_id = task_ids[key]
            episode = played[task_id] = played.get(task_id, -1) + 1
            tags = {"group": f"{batch}/{task_id}", "episode": episode}
            messages = unmarked(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            rendered = tokenizer.apply_chat_template(
                messages,
                tools=offered.get(key),
                tokenize=False,
                add_generation_prompt=True,
                enable_thinking=False,
            )
            prompt_ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
            completion: list[int] = []
            logprobs: list[float] = []
            mask: list[int] = []
            turns: list[str] = []
            verdict: dict[str, Any] = {"verdict": "InfrastructureFailure"}
            budget = p.completion_tokens
            for turn in range(p.max_turns):
                room = min(p.max_tokens, budget - sum(mask), p.max_episode_tokens - len(prompt_ids) - len(completion))
                if room <= 0:
                    break
                ids = torch.tensor([prompt_ids + completion])
                with torch.no_grad():
                    generated = model.generate(
                        input_ids=ids.to(model.device),
                        attention_mask=torch.ones_like(ids).to(model.device),
                        max_new_tokens=room,
                        do_sample=True,
                        temperature=p.temperature,
                        top_p=p.top_p,
                        top_k=p.top_k,
                        output_scores=True,
                        return_dict_in_generate=True,
                        pad_token_id=tokenizer.pad_token_id,
                    )
                new = generated.sequences[0, ids.shape[1] :].tolist()
                for position, token in enumerate(new):
                    scores = torch.log_softmax(generated.scores[position][0].float(), dim=-1)
                    logprobs.append(float(scores[token]))
                completion += new
                mask += [1] * len(new)
                turns.append(tokenizer.decode(new, skip_special_tokens=True))
                verdict = context.api.grade([{"taskId": task_id, "turns": turns, **tags}], "Training")[0]
                message = next_message(verdict)
                if verdict.get("done", True) or message is None or turn + 1 >= p.max_turns:
                    break
                # The environment's message as the chat template renders a user turn (or a tool's result)
                # after the reply, and the assistant's turn that follows it.
                follow = tokenizer.apply_chat_template(
                    [message],
                    tokenize=False,
                    add_generation_prompt=True,
                    enable_thinking=False,
                )
                env_ids = tokenizer(str(follow), add_special_tokens=False)["input_ids"]
                if tokenizer.eos_token_id is not None and (not new or new[-1] != tokenizer.eos_token_id):
                    env_ids = [tokenizer.eos_token_id, *env_ids]
                completion += env_ids
                logprobs += [0.0] * len(env_ids)
                mask += [0] * len(env_ids)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            out["episode_reward"].append(reward_of(verdict))
        return out

    return rollout
