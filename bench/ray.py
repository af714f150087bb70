"""Benchmark: seconds from `nodus apply` to a job's first step on a Ray cluster, against `ray job submit` of the same
command, measured in the same run (issue 15's last acceptance point).

Run: `.venv/bin/python bench/ray.py [--runs 3]` as root (the cluster gets a network namespace of its own). It
starts a local Ray cluster with `nodus.reconciler.executors.ray.cluster.up` (a head without CPUs and one worker
with 2 CPUs, token auth) in a fresh namespace with only loopback, and always stops it by pid at the end
(`cluster.down`). Then, `--runs` times each, alternating:

- nodus: a fresh project whose nodus.yaml says `executor: {ray: {address, sharedFilesystem: true}}` and a plain
  Job printing `step 1`; the clock runs from starting `nodus apply . --yes` (a new process: settings, plan,
  state store, placement, submission) until `step 1` is in the Ray job's log (the node session on the worker
  started the local supervisor, which started the command).
- baseline: `JobSubmissionClient.submit_job` of the same command with the same reservation (1 CPU), from this
  process, until `step 1` is in its log.

Both sides are read the same way (the Jobs API's logs, polled every 50 ms), and each run waits for the job before
to end, so the worker is free. Medians and the ratio nodus/baseline are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# Python puts this script's folder first on sys.path, where `import ray` would find this file, not Ray.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]
BIN = Path(sys.executable).parent
LINE = "step 1"
COMMAND = [sys.executable, "-c", f"print({LINE!r}, flush=True)"]
POLL_S = 0.05
TIMEOUT_S = 120.0
ENDED = {"SUCCEEDED", "FAILED", "STOPPED"}
console = Console()


def wait_for(what: str, found: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not found():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/ray.py: {what} did not happen within {TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def has_line(client: Any, submission_id: str) -> bool:
    try:
        return LINE in client.get_job_logs(submission_id).splitlines()
    except RuntimeError:  # not known to Ray yet (the job was only just submitted)
        return False


def wait_ended(client: Any, submission_id: str) -> str:
    wait_for(f"Ray job {submission_id} ending", lambda: str(client.get_job_status(submission_id)) in ENDED)
    return str(client.get_job_status(submission_id))


def through_nodus(client: Any, workdir: Path, url: str, index: int) -> tuple[float, float]:
    """A fresh project each run; seconds from starting `nodus apply . --yes` to `step 1` in its Ray job's log, and
    to its submission first being listed by Ray (the part spent in the apply process, not on the node)."""
    project = workdir / f"nodus-{index}"
    project.mkdir()
    name = f"bench-{index}"
    (project / "nodus.yaml").write_text(f"executor: {{ray: {{address: {url}, sharedFilesystem: true}}}}\n")
    (project / "nodus.lock").write_text("lockfileVersion: 1\nenvironments: {}\n")
    command = ", ".join(f"'{part}'" if "'" not in part else f'"{part}"' for part in COMMAND)
    (project / "job.yaml").write_text(
        f"apiVersion: nodus.dev/v1beta1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n  command: [{command}]\n"
    )
    start = time.perf_counter()
    apply = subprocess.Popen(
        [str(BIN / "nodus"), "apply", ".", "--yes"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # started from this thread, so inside the cluster's namespace too

    def submitted() -> str | None:
        for job in client.list_jobs():
            if (job.metadata or {}).get("nodus.name") == name and job.submission_id:
                return str(job.submission_id)
        return None

    listed: list[float] = []

    def first_step() -> bool:
        if apply.poll() not in (None, 0):
            raise SystemExit(f"bench/ray.py: nodus apply of {project} failed: {apply.communicate()[0].strip()}")
        identifier = submitted()
        if identifier is not None and not listed:
            listed.append(time.perf_counter() - start)
        return identifier is not None and has_line(client, identifier)

    wait_for(f"step 1 of {project}/job.yaml through nodus", first_step)
    seconds = time.perf_counter() - start
    output = apply.communicate(timeout=TIMEOUT_S)[0]
    if apply.returncode != 0:
        raise SystemExit(f"bench/ray.py: nodus apply of {project} failed: {output.strip()}")
    identifier = submitted()
    assert identifier is not None
    status = wait_ended(client, identifier)
    if status != "SUCCEEDED":
        raise SystemExit(f"bench/ray.py: Ray job {identifier} of {project}/job.yaml ended {status}")
    return seconds, listed[0]


def through_ray(client: Any) -> float:
    """Seconds from `submit_job` of the same command (1 CPU, as nodus reserves) to `step 1` in its log."""
    start = time.perf_counter()
    identifier = client.submit_job(entrypoint=subprocess.list2cmdline(COMMAND), entrypoint_num_cpus=1)
    wait_for(f"step 1 of Ray job {identifier}", lambda: has_line(client, identifier))
    seconds = time.perf_counter() - start
    status = wait_ended(client, identifier)
    if status != "SUCCEEDED":
        raise SystemExit(f"bench/ray.py: baseline Ray job {identifier} ended {status}")
    return seconds


def report(runs: int, nodus_s: list[float], submitted_s: list[float], ray_s: list[float]) -> None:
    nodus_median, ray_median = statistics.median(nodus_s), statistics.median(ray_s)
    ratio = nodus_median / ray_median
    if console.is_terminal:
        table = Table(title=f"seconds from submitting to the job's first line `{LINE}` on Ray (median of {runs})")
        table.add_column("run")
        table.add_column("median s", justify="right")
        table.add_column("runs s", justify="right")
        table.add_column("ratio", justify="right")
        table.add_row("ray job submit (baseline)", f"{ray_median:.2f}", " ".join(f"{s:.2f}" for s in ray_s), "1.00x")
        table.add_row(
            "nodus apply: plan, state, node session, supervisor",
            f"{nodus_median:.2f}",
            " ".join(f"{s:.2f}" for s in nodus_s),
            f"{ratio:.2f}x",
        )
        console.print(table)
        print(f"nodus: its submission listed by Ray after {statistics.median(submitted_s):.2f} s (median)")
    else:
        print("run\tindex\tseconds")
        for side, values in (("ray-job-submit", ray_s), ("nodus-apply", nodus_s), ("nodus-submitted", submitted_s)):
            for index, value in enumerate(values, 1):
                print(f"{side}\t{index}\t{value:.3f}")
        print(f"median\tray-job-submit\t{ray_median:.3f}")
        print(f"median\tnodus-apply\t{nodus_median:.3f}")
        print(f"median\tnodus-submitted\t{statistics.median(submitted_s):.3f}")
    print(f"nodus/baseline: {ratio:.2f}x (nodus apply to the first step, against ray job submit; not a goal yet)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        print("bench/ray.py needs Ray: pip install 'nodus[ray]' (make setup installs it)")
        return 2
    if shutil.which("ip") is None or os.geteuid() != 0:
        print("bench/ray.py needs root and `ip` (iproute2): the cluster gets a network namespace of its own")
        return 2
    from nodus.reconciler.executors.ray import cluster, netns

    with tempfile.TemporaryDirectory(prefix="nodus-bench-ray-") as temporary:
        workdir = Path(temporary)
        folder = workdir / "cluster"
        folder.mkdir()
        print("starting a Ray cluster (a head, one worker with 2 CPUs) in its own network namespace ...", flush=True)
        started = time.perf_counter()
        record = cluster.up(folder, cluster.worker_specs(1, (), 2), namespace=f"nodus-bench-ray-{os.getpid()}")
        print(f"cluster up in {time.perf_counter() - started:.1f} s (not timed below)", flush=True)
        nodus_s: list[float] = []
        submitted_s: list[float] = []
        ray_s: list[float] = []
        try:
            os.environ["RAY_AUTH_TOKEN"] = record.token()
            with netns.entered(record.netns):
                headers = {"Authorization": f"Bearer {record.token()}"}
                client = JobSubmissionClient(record.dashboard_url, headers=headers)
                for index in range(1, args.runs + 1):
                    ray_s.append(through_ray(client))
                    seconds, submitted = through_nodus(client, workdir, record.dashboard_url, index)
                    nodus_s.append(seconds)
                    submitted_s.append(submitted)
                    print(
                        f"run {index}: ray job submit {ray_s[-1]:.2f} s, nodus apply {seconds:.2f} s "
                        f"(submitted after {submitted:.2f} s)",
                        flush=True,
                    )
        finally:
            cluster.down(folder)  # by the pids it recorded, and the namespace it made
    report(args.runs, nodus_s, submitted_s, ray_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
