"""The six data-driven runtimes end to end through `nodus apply`, on the tiny model, each shown to learn on held-out
data it never trained on (issue 17's acceptance).

Each test is what a user does: a Volume, its data uploaded with `nodus cp` (JSONL, CSV, Parquet or text), a
TrainingJob naming the managed runtime (`nodus/sft`, `nodus/dpo`, ...), `nodus apply --wait`, then the run's
`results.json` copied out with `nodus cp tj/NAME:outputs/results.json`. The trainer measured its method's metric on
the held-out part of the data before and after training; the figures are printed (run with `-s` to see them):

    SFT               held-out loss falls                      Pretrain (Scratch)  held-out loss falls
    DPO, ORPO, KTO    held-out preference accuracy rises       Reward model        held-out pairwise accuracy > 0.5
    Distillation      the student's held-out KL to the teacher falls

and the chain the seeds' Preference tuning describes: an SFT run exports its model to a Volume, a DPO run starts from
that Volume's revision, and the DPO run's provenance.json names both.

The data is the quickstart's reverse-words skill (made-up words, a fixed seed), which the tiny model was warmed up
on: every runtime has a skill it can learn in a few steps. Slow: about a dozen runs of seconds each, plus the tiny
model (built once per session).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodus.cli.main import cli

pytestmark = pytest.mark.slow

REVERSE_WORDS = Path(__file__).resolve().parents[1] / "examples" / "quickstart" / "env" / "reverse_words.py"
PROMPT = "Spell the word backwards inside <answer></answer>.\n\nWord: {word}"


# --- data: the quickstart's words, spelt backwards ----------------------------------------------------------------


@cache
def all_words() -> tuple[str, ...]:
    """The quickstart's made-up words (its train split, then its held-out split)."""
    spec = importlib.util.spec_from_file_location("reverse_words_for_runtimes", REVERSE_WORDS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(str(task["answer"])[::-1] for task in module.tasks("train") + module.tasks("test"))


def words(count: int) -> list[str]:
    return list(all_words()[:count])


def answer(text: str) -> str:
    return f"<answer>{text}</answer>"


def pairs(count: int) -> list[dict[str, str]]:
    """prompt, chosen (the word backwards: right), rejected (the word as it is: wrong)."""
    return [{"prompt": PROMPT.format(word=w), "chosen": answer(w[::-1]), "rejected": answer(w)} for w in words(count)]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# --- the CLI, as a user runs it ----------------------------------------------------------------------------------


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def volume(name: str) -> None:
    """A ReadWriteOnce Volume, applied."""
    (Path("volumes") / f"{name}.yaml").write_text(
        f"apiVersion: nodus.dev/v1\nkind: Volume\nmetadata: {{name: {name}}}\nspec: {{accessMode: ReadWriteOnce}}\n"
    )
    code, output = nodus("apply", "volumes", "--yes")
    assert code == 0, output


def upload(local: Path, name: str, path: str) -> None:
    """`nodus cp LOCAL vol/NAME:PATH` (a folder with -r) into the Volume NAME (applied first): its next revision."""
    if not (Path("volumes") / f"{name}.yaml").is_file():
        volume(name)
    code, output = nodus("cp", *(["-r"] if local.is_dir() else []), str(local), f"vol/{name}:{path}")
    assert code == 0, output


def status_of(name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(nodus("get", "tj", name, "-o", "json")[1])["status"]
    return found


def train(name: str, spec: str) -> dict[str, Any]:
    """Apply a TrainingJob of `spec` (YAML lines under `spec:`), wait for it, and return its results.json, copied
    out with `nodus cp` (checked against its sha256)."""
    Path("jobs").mkdir(exist_ok=True)
    (Path("jobs") / f"{name}.yaml").write_text(
        f"apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\nmetadata: {{name: {name}}}\nspec:\n{spec}"
    )
    code, output = nodus("apply", "-f", "volumes", "-f", "jobs", "--yes", "--wait", "--timeout", "5m")
    if code != 0 or f"TrainingJob/{name}: Succeeded" not in output:
        logs = nodus("logs", f"tj/{name}")[1]
        pytest.fail(
            f"TrainingJob/{name} did not succeed:\n{output}\n--- nodus logs tj/{name} (end) ---\n{logs[-4000:]}"
        )
    return output_json(name, "results.json")


def output_json(name: str, path: str) -> dict[str, Any]:
    local = Path("downloads") / name / path
    code, output = nodus("cp", f"tj/{name}:outputs/{path}", str(local))
    assert code == 0, output
    found: dict[str, Any] = json.loads(local.read_text())
    return found


def held_out(results: dict[str, Any], metric: str) -> tuple[float, float]:
    """(before, after) of the held-out metric, checked to be the one the runtime reports as its own."""
    held = results["heldOut"]
    assert held["metric"] == metric, held
    return float(held["before"][metric]), float(held["after"][metric])


@pytest.fixture
def model(tmp_path: Path, tiny_model: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh project in tmp_path (the current folder), the tiny model in the Hugging Face cache nodus imports
    from; the model's pinned URI."""
    cache_folder, revision = tiny_model
    monkeypatch.delenv("NODUS_HOME", raising=False)
    monkeypatch.delenv("NODUS_STATE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", cache_folder)
    (tmp_path / "nodus.lock").write_text("lockfileVersion: 1\n")
    (tmp_path / "volumes").mkdir()
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    return f"hf://nodus/tiny-qwen3@{revision}"


# --- each runtime learns --------------------------------------------------------------------------------------------


def test_sft_with_lora_lowers_the_held_out_loss(model: str) -> None:
    rows = [{"question": PROMPT.format(word=w), "answer": answer(w[::-1])} for w in words(240)]
    upload(jsonl(Path("data/chats.jsonl"), rows), "support-chats", "chats.jsonl")
    results = train(
        "support-sft",
        f'  runtime: nodus/sft\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: support-chats, path: chats.jsonl, format: JSONL, columns: {prompt: question, completion: "
        "answer}}\n"
        "  parameters: {steps: 12, learningRate: 1.0e-2, batchSize: 8, saveSteps: 12, lora: {r: 8, alpha: 16}}\n",
    )
    before, after = held_out(results, "heldOutLoss")
    print(f"\nnodus/sft (LoRA): held-out loss {before:.3f} -> {after:.3f} on {results['heldOutRows']} held-out rows")
    assert after < before and results["heldOut"]["improved"]
    assert (results["task"], results["method"], results["trainRows"], results["heldOutRows"]) == (
        "SFT",
        "LoRA",
        216,
        24,
    )


def test_pretraining_from_scratch_lowers_the_held_out_loss(model: str) -> None:
    lines = [f"The word {w} spelt backwards is {w[::-1]}." for w in words(400)]
    Path("data/corpus.txt").write_text("\n".join(lines) + "\n")
    upload(Path("data/corpus.txt"), "corpus", "corpus.txt")
    results = train(
        "pretrain-scratch",
        f'  runtime: nodus/sft\n  task: Pretrain\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: corpus, path: corpus.txt, format: Text}\n"
        "  parameters: {steps: 30, learningRate: 3.0e-3, maxLength: 128, initialization: Scratch, packing: true, "
        "saveSteps: 30}\n",
    )
    before, after = held_out(results, "heldOutLoss")
    print(f"\nnodus/sft (Pretrain, Scratch, packed): held-out loss {before:.3f} -> {after:.3f}")
    # Fresh weights spread their bets over the ~400 tokens (ln 400 = 6.0); trained ones do much better.
    assert before > 5.0 and after < before - 1.0
    assert output_json("pretrain-scratch", "provenance.json")["initialization"] == "Scratch"


def test_dpo_raises_the_held_out_preference_accuracy(model: str) -> None:
    rows = [{"instruction": r["prompt"], "good": r["chosen"], "bad": r["rejected"]} for r in pairs(300)]
    upload(jsonl(Path("data/prefs.jsonl"), rows), "prefs", "prefs.jsonl")
    results = train(
        "dpo",
        f'  runtime: nodus/dpo\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: prefs, path: prefs.jsonl, format: JSONL, columns: {prompt: instruction, chosen: good, "
        "rejected: bad}}\n"
        "  parameters: {steps: 10, learningRate: 1.0e-2, beta: 0.1, lora: {r: 8, alpha: 16}, saveSteps: 10}\n",
    )
    before, after = held_out(results, "heldOutPreferenceAccuracy")
    pairs_seen = results["heldOut"]["after"]["heldOutPairs"]
    print(f"\nnodus/dpo (LoRA): held-out preference accuracy {before:.3f} -> {after:.3f} on {pairs_seen} pairs")
    assert after > before and results["heldOut"]["improved"] and pairs_seen == 30


def test_orpo_raises_the_held_out_preference_accuracy(model: str) -> None:
    upload(jsonl(Path("data/prefs.jsonl"), pairs(300)), "prefs", "prefs.jsonl")
    results = train(
        "orpo",
        f'  runtime: nodus/orpo\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: prefs, path: prefs.jsonl, format: JSONL}\n"
        "  parameters: {steps: 20, learningRate: 1.0e-3, beta: 0.1, saveSteps: 20}\n",
    )
    before, after = held_out(results, "heldOutPreferenceAccuracy")
    print(f"\nnodus/orpo (full): held-out preference accuracy {before:.3f} -> {after:.3f}")
    assert after > before and results["heldOut"]["improved"]


def test_kto_on_thumbs_raises_the_held_out_preference_accuracy(model: str) -> None:
    with Path("data/feedback.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question", "reply", "thumb"])
        for row in pairs(300):
            writer.writerow([row["prompt"], row["chosen"], "up"])
            writer.writerow([row["prompt"], row["rejected"], "down"])
    upload(Path("data/feedback.csv"), "feedback", "feedback.csv")
    results = train(
        "kto",
        f'  runtime: nodus/kto\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: feedback, path: feedback.csv, format: CSV, columns: {prompt: question, completion: reply, "
        "label: thumb}}\n"
        "  parameters: {steps: 10, learningRate: 1.0e-3, beta: 0.1, saveSteps: 10}\n",
    )
    before, after = held_out(results, "heldOutPreferenceAccuracy")
    pairs_seen = results["heldOut"]["after"]["heldOutPairs"]
    print(f"\nnodus/kto (full): held-out preference accuracy {before:.3f} -> {after:.3f} on {pairs_seen} prompts")
    assert after > before and results["heldOut"]["improved"]


def test_a_reward_model_beats_chance_on_held_out_pairs(model: str) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    rows = pairs(300)
    # A rejected reply that gives no answer at all: the tiny model can tell that from the reply alone (telling an
    # unreversed word from a reversed one needs it to compare with the prompt, which 140k parameters barely do).
    table = pa.table(
        {
            "prompt": [r["prompt"] for r in rows],
            "chosen": [r["chosen"] for r in rows],
            "rejected": [f"I do not know the word {r['rejected'][8:-9]}." for r in rows],
        }
    )
    pq.write_table(table, "data/pairs.parquet")
    upload(Path("data/pairs.parquet"), "pairs", "pairs.parquet")
    results = train(
        "reward-model",
        f'  runtime: nodus/reward-model\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: pairs, path: pairs.parquet, format: Parquet}\n"
        "  parameters: {steps: 20, learningRate: 1.0e-2, lora: {r: 8, alpha: 16}, saveSteps: 20}\n",
    )
    before, after = held_out(results, "heldOutPairwiseAccuracy")
    print(f"\nnodus/reward-model (LoRA): held-out pairwise accuracy {before:.3f} -> {after:.3f} (chance: 0.5)")
    assert after >= 0.8 and after > before


def test_distillation_lowers_the_students_held_out_kl_to_the_teacher(model: str, tiny_model: tuple[str, str]) -> None:
    """The student: the tiny model's architecture with fresh weights, uploaded into a Volume (`model: {volume}`);
    the teacher: the tiny model by its pinned URI."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cache_folder, revision = tiny_model
    teacher = Path(cache_folder) / "models--nodus--tiny-qwen3" / "snapshots" / revision
    torch.manual_seed(7)
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(teacher))  # type: ignore[no-untyped-call, unused-ignore]
    fresh.save_pretrained("data/student")
    AutoTokenizer.from_pretrained(teacher).save_pretrained("data/student")
    upload(Path("data/student"), "student", "")
    chats = [
        {
            "messages": [
                {"role": "user", "content": PROMPT.format(word=w)},
                {"role": "assistant", "content": answer(w[::-1])},
            ]
        }
        for w in words(300)
    ]
    upload(jsonl(Path("data/chats.jsonl"), chats), "chats", "chats.jsonl")
    results = train(
        "distill",
        f'  runtime: nodus/distill\n  model: {{volume: {{name: student}}}}\n  teacher: {{uri: "{model}"}}\n'
        "  data: {volume: chats, path: chats.jsonl, format: JSONL}\n"
        "  parameters: {steps: 15, learningRate: 3.0e-3, temperature: 1.0, maxCompletionLength: 16, saveSteps: 15}\n",
    )
    before, after = held_out(results, "heldOutKL")
    print(
        f"\nnodus/distill (full): the student's held-out KL to the teacher {before:.3f} -> {after:.3f} nats per token"
    )
    assert after < before and results["heldOut"]["improved"]
    assert output_json("distill", "provenance.json")["teacher"]["revision"] == model


# --- the chain: SFT, exported to a Volume, then DPO from that Volume's revision -------------------------------------


def test_dpo_starts_from_the_sft_runs_export_and_its_provenance_names_both(model: str) -> None:
    """The seeds' Preference tuning: `model: {volume: {name: my-sft-model, revision: N}}`, a model trained earlier.
    The SFT run trains every weight (its outputs hold model/), exports them (`exportTo`) as the Volume's revision N;
    the DPO run starts from that revision, learns, and its provenance.json names the Volume revision it started
    from (`model.revision`) and the SFT run that trained those weights (`model.trainedBy`)."""
    rows = [{"question": PROMPT.format(word=w), "answer": answer(w[::-1])} for w in words(240)]
    upload(jsonl(Path("data/chats.jsonl"), rows), "support-chats", "chats.jsonl")
    volume("my-sft-model")
    sft = train(
        "support-sft",
        f'  runtime: nodus/sft\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: support-chats, path: chats.jsonl, format: JSONL, columns: {prompt: question, completion: "
        "answer}}\n"
        "  parameters: {steps: 10, learningRate: 1.0e-3, saveSteps: 10}\n"
        "  exportTo: {volume: my-sft-model}\n",
    )
    sft_before, sft_after = held_out(sft, "heldOutLoss")
    exported = status_of("support-sft")["export"]
    assert (exported["phase"], exported["volume"]) == ("Exported", "my-sft-model"), exported
    revision = int(exported["revision"])
    code, listing = nodus("cp", "vol/my-sft-model:model/config.json", "downloads/exported-config.json")
    assert code == 0, listing

    upload(jsonl(Path("data/prefs.jsonl"), pairs(300)), "prefs", "prefs.jsonl")
    upload(jsonl(Path("data/chats.jsonl"), rows[:10]), "my-sft-model", "later.jsonl")  # a later revision: not read
    dpo = train(
        "dpo-from-sft",
        f"  runtime: nodus/dpo\n  model: {{volume: {{name: my-sft-model, revision: {revision}}}}}\n"
        "  data: {volume: prefs, format: JSONL, columns: {prompt: prompt, chosen: chosen, rejected: rejected}}\n"
        "  parameters: {steps: 10, learningRate: 1.0e-2, beta: 0.1, lora: {r: 8, alpha: 16}, saveSteps: 10}\n",
    )
    before, after = held_out(dpo, "heldOutPreferenceAccuracy")
    held = dpo["heldOut"]
    margin_before, margin_after = (float(held[when]["heldOutLogprobMargin"]) for when in ("before", "after"))
    print(
        f"\nchain: nodus/sft (full) held-out loss {sft_before:.3f} -> {sft_after:.3f}, exported as my-sft-model "
        f"revision {revision}; nodus/dpo (LoRA) from it: held-out preference accuracy {before:.3f} -> {after:.3f}, "
        f"log-prob margin {margin_before:.3f} -> {margin_after:.3f}"
    )
    # The SFT model already ranks most of the 30 held-out pairs right (0.87 on one machine), so 10 DPO steps may
    # leave the accuracy where it was; the margin between chosen and rejected, which DPO widens, must grow.
    # (DPO learning from the base model: test_dpo_raises_the_held_out_preference_accuracy.)
    assert sft_after < sft_before and after >= before and margin_after > margin_before

    provenance = output_json("dpo-from-sft", "provenance.json")
    started = provenance["model"]
    assert started["revision"] == f"volume:my-sft-model@{revision}", started
    trained_by = started["trainedBy"]
    assert (trained_by["trainingJob"], trained_by["runtime"]) == ("support-sft", "nodus/sft"), trained_by
    assert trained_by["model"]["revision"] == model  # the SFT run's own start: the pinned tiny model
    sft_provenance = output_json("support-sft", "provenance.json")
    assert trained_by["model"]["digest"] == sft_provenance["model"]["digest"]


@pytest.mark.parametrize("method", ["full", "lora"])
def test_one_apply_runs_the_sft_job_then_the_dpo_job_that_trains_on_its_export(model: str, method: str) -> None:
    """Issue 25's acceptance (full and LoRA SFT): both jobs in one repo, one `nodus apply --wait`. The plan shows the
    DPO job waiting for the SFT job; apply launches the SFT job, holds the DPO job Pending (WaitingFor, naming it)
    until its export commits the Volume's revision 1, then launches it in the same apply; both succeed. A LoRA
    export is its base model with the adapter merged in, and the DPO run's status names both."""
    sft, out = f"sft-{method}", f"sft-{method}-out"
    lora = ", lora: {r: 8, alpha: 16}" if method == "lora" else ""
    rows = [{"question": PROMPT.format(word=w), "answer": answer(w[::-1])} for w in words(60)]
    upload(jsonl(Path("data/chats.jsonl"), rows), "support-chats", "chats.jsonl")
    upload(jsonl(Path("data/prefs.jsonl"), pairs(60)), "prefs", "prefs.jsonl")
    volume(out)
    Path("jobs").mkdir()
    (Path("jobs") / "sft.yaml").write_text(
        f"apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\nmetadata: {{name: {sft}}}\nspec:\n"
        f'  runtime: nodus/sft\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: support-chats, path: chats.jsonl, format: JSONL, columns: {prompt: question, completion: "
        "answer}}\n"
        f"  parameters: {{steps: 2, saveSteps: 2{lora}}}\n"
        f"  exportTo: {{volume: {out}}}\n"
    )
    (Path("jobs") / "dpo.yaml").write_text(  # named to sort first: only the dependency puts it second
        "apiVersion: nodus.dev/v1beta1\nkind: TrainingJob\nmetadata: {name: a-dpo}\nspec:\n"
        f"  runtime: nodus/dpo\n  model: {{volume: {{name: {out}, revision: 1}}}}\n"
        "  data: {volume: prefs, path: prefs.jsonl, format: JSONL}\n"
        "  parameters: {steps: 2, saveSteps: 2, lora: {r: 8, alpha: 16}}\n"
    )
    code, planned = nodus("plan", "jobs")
    assert code == 2, planned
    assert planned.index(f"TrainingJob/{sft}") < planned.index("TrainingJob/a-dpo"), planned
    assert f"# waits for tj/{sft}" in planned, planned

    code, output = nodus("apply", "-f", "volumes", "-f", "jobs", "--yes", "--wait", "--timeout", "8m")
    assert code == 0, output + nodus("logs", "tj/a-dpo")[1][-3000:]
    assert f"waits for TrainingJob {sft} to export Volume {out} revision 1" in output, output
    assert f"TrainingJob/{sft}: Succeeded" in output and "TrainingJob/a-dpo: Succeeded" in output, output
    assert status_of(sft)["export"]["revision"] == 1
    assert output_json("a-dpo", "provenance.json")["model"]["revision"] == f"volume:{out}@1"
    if method == "lora":
        assert status_of("a-dpo")["model"] == {"base": model, "adapters": [f"volume:{out}@1/adapter"], "merged": True}


def test_dpo_trains_on_an_sft_lora_export_merged_into_its_base(model: str) -> None:
    """Issue 25, problem 4: the seeds' SFT example is LoRA, and its export (`adapter/` with provenance.json) is a
    model. The DPO run naming that Volume revision gets the base model (the SFT run's pinned start, from its
    provenance.json) and the adapter, merges the adapter into the base (peft `merge_and_unload`) and trains on the
    merged weights; its status and provenance.json name both the base and the adapter revision."""
    rows = [{"question": PROMPT.format(word=w), "answer": answer(w[::-1])} for w in words(120)]
    upload(jsonl(Path("data/chats.jsonl"), rows), "chats", "chats.jsonl")
    volume("sft-out")
    train(
        "sft-lora",
        f'  runtime: nodus/sft\n  model: {{uri: "{model}"}}\n'
        "  data: {volume: chats, path: chats.jsonl, format: JSONL, columns: {prompt: question, completion: answer}}\n"
        "  parameters: {steps: 4, learningRate: 1.0e-3, lora: {r: 8, alpha: 16}, saveSteps: 4}\n"
        "  exportTo: {volume: sft-out}\n",
    )
    exported = status_of("sft-lora")["export"]
    assert (exported["phase"], exported["volume"], exported["revision"]) == ("Exported", "sft-out", 1), exported

    upload(jsonl(Path("data/prefs.jsonl"), pairs(120)), "prefs", "prefs.jsonl")
    results = train(
        "dpo-from-lora",
        "  runtime: nodus/dpo\n  model: {volume: {name: sft-out, revision: 1}}\n"
        "  data: {volume: prefs, format: JSONL, columns: {prompt: prompt, chosen: chosen, rejected: rejected}}\n"
        "  parameters: {steps: 4, learningRate: 1.0e-2, beta: 0.1, lora: {r: 8, alpha: 16}, saveSteps: 4}\n",
    )
    assert results["heldOut"]["metric"] == "heldOutPreferenceAccuracy"

    status = status_of("dpo-from-lora")
    assert status["model"] == {"base": model, "adapters": ["volume:sft-out@1/adapter"], "merged": True}, status
    started = output_json("dpo-from-lora", "provenance.json")["model"]
    assert started["revision"] == "volume:sft-out@1" and started["merged"] is True, started
    assert started["base"]["revision"] == model
    (adapter,) = started["adapters"]
    assert adapter["revision"] == "volume:sft-out@1/adapter"
    assert (adapter["trainedBy"]["trainingJob"], adapter["trainedBy"]["runtime"]) == ("sft-lora", "nodus/sft")
    sft_provenance = output_json("sft-lora", "provenance.json")
    assert started["base"]["digest"] == sft_provenance["model"]["digest"]  # the very base the SFT run trained on
