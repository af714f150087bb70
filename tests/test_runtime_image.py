"""A runtime with an `image`: the local executor runs its trainer in that image under podman, with no network,
the contract's folders and socket mounted at `/nodus/...`, and only the job's environment.

The image is the real base image (mmdebstrap rootfs with Python) plus a layer holding the stdlib echo trainer
(`reconciler/tests/executors/runtimes/echo_trainer.py`) and a probe that records what the container sees,
written with the builder's OCI code and copied into podman's storage with skopeo. The job trains on the
catalog's arithmetic Environment (built as in `test_apply_trainingjob.py`), so tasks, gradings and events
cross the mounted Unix socket to the supervisor, whose graders run in their own containers.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from nodus.builder.cli import main as nodus_build
from nodus.cli.main import cli

pytestmark = [pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ECHO_TRAINER = REPO / "reconciler" / "tests" / "executors" / "runtimes" / "echo_trainer.py"
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
HOST_SECRET = "NODUS_TEST_HOST_ONLY"
PROBE = """\
import json, os, runpy, socket, sys
def reach(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "connected"
    except OSError as error:
        return type(error).__name__
seen = {
    "interfaces": sorted(os.listdir("/sys/class/net")),
    "hostListener": reach(int(os.environ["HOST_PORT"])),
    "environment": {k: v for k, v in os.environ.items() if k.startswith("NODUS_") or k == "JOB_SETTING"},
    "uid": os.getuid(),
    "hostname": os.uname().nodename,
}
with open(os.path.join(os.environ["NODUS_OUTPUT_DIR"], "seen.json"), "w") as out:
    json.dump(seen, out)
sys.argv = ["echo_trainer.py"]
runpy.run_path("/opt/echo/echo_trainer.py", run_name="__main__")
"""
RUNTIME = """apiVersion: nodus.dev/v1beta1
kind: TrainingRuntime
metadata: {{name: echo-image}}
spec:
  image: {image}
  command: [python3, /opt/echo/probe.py]
  tasks: [GRPO]
  environmentTasks: AttemptAPI
  env: {{JOB_SETTING: from-the-runtime, HOST_PORT: "{port}"}}
  parameterSchema:
    type: object
    additionalProperties: false
    properties:
      steps: {{type: integer, minimum: 1}}
      sleepS: {{type: number}}
      batch: {{type: integer}}
      ignoreSigterm: {{type: boolean}}
  defaults: {{steps: 3, sleepS: 0.05, batch: 4}}
"""
JOB = """apiVersion: nodus.dev/v1beta1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  runtime: echo-image
  environment: {{name: nodus/arithmetic@2.0.0, trainTasks: 20, heldOutTasks: 8, seed: 42}}
  evaluation: {{minComparisonTasks: 8}}  # 8 held out: plan refuses a comparison that could never be made
  parameters: {parameters}
"""


@pytest.fixture(scope="module")
def trainer_image(base_reference: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`localhost/nodus-test/echo-trainer:<random>` in podman's storage: the base image plus the trainer."""
    from nodus.builder.layers import Entry
    from nodus.builder.oci import NewLayer, add_layer, read_image, write_image

    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (apt-get install skopeo)")
    _, base_layout, base_tag = base_reference.split(":", 2)
    layout = tmp_path_factory.mktemp("echo-image") / "layout"
    entries = {
        "opt": Entry.directory(),
        "opt/echo": Entry.directory(),
        "opt/echo/echo_trainer.py": Entry.file(ECHO_TRAINER),
        "opt/echo/probe.py": Entry.file(PROBE.encode()),
    }
    layer = add_layer(layout, entries)
    write_image(layout, "echo", [NewLayer(layer, "the echo trainer")], base=read_image(Path(base_layout), base_tag))
    name = f"localhost/nodus-test/echo-trainer:{uuid.uuid4().hex[:12]}"
    subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}:echo", f"containers-storage:{name}"], check=True)
    yield name
    subprocess.run([*PODMAN, "rmi", "--force", name], capture_output=True, check=False)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listener on 127.0.0.1 in the host's namespace: the trainer's container must not reach it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    yield server
    server.close()


@pytest.fixture
def project(
    tmp_path: Path, base_reference: str, trainer_image: str, listener: socket.socket, monkeypatch: pytest.MonkeyPatch
) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "catalog" / "arithmetic", root / "arithmetic", ignore=shutil.ignore_patterns("tests"))
    (root / "runtime.yaml").write_text(RUNTIME.format(image=trainer_image, port=listener.getsockname()[1]))
    flags = ["--network", "none", "--base", base_reference, "--lock", str(root / "nodus.lock")]
    with pytest.raises(SystemExit) as exited:
        nodus_build([str(root / "arithmetic"), *flags, "--state-dir", str(root / ".nodus"), "--json"])
    assert exited.value.code == 0
    monkeypatch.chdir(root)
    monkeypatch.setenv("NODUS_ACCOUNTING_INTERVAL", "0.5")
    monkeypatch.setenv(HOST_SECRET, "the supervisor's environment stays on the host")
    return root


def nodus(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def containers(project: Path) -> list[str]:
    from nodus.reconciler.executors.local.job import JobFiles
    from nodus.reconciler.executors.local.trainer_container import container_name

    name = container_name(JobFiles.of(project / ".nodus" / "jobs", "default", "boxed"))
    found = subprocess.run(
        [*PODMAN, "ps", "--all", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.split()


def test_the_trainer_runs_in_its_image_with_only_the_contract(project: Path) -> None:
    (project / "job.yaml").write_text(JOB.format(name="boxed", parameters="{steps: 4}"))
    code, output = nodus("apply", str(project), "--yes", "--wait", "--timeout", "3m")
    assert code == 0 and "TrainingJob/boxed: Succeeded" in output, output
    outputs = project / ".nodus" / "jobs" / "default" / "boxed" / "outputs"
    seen = json.loads((outputs / "seen.json").read_text())
    assert seen["interfaces"] == ["lo"]  # --network=none: the socket is the only way out
    assert seen["hostListener"] == "ConnectionRefusedError"  # the container's 127.0.0.1 is its own
    environment = seen["environment"]
    assert environment["NODUS_INPUT_PARAMS"] == "/nodus/input" and environment["NODUS_STATE_DIR"] == "/nodus/state"
    assert environment["NODUS_OUTPUT_DIR"] == "/nodus/outputs"
    assert environment["NODUS_ATTEMPT_API"] == "/nodus/attempt.sock"
    assert environment["NODUS_JOB_NAME"] == "boxed" and environment["JOB_SETTING"] == "from-the-runtime"
    assert HOST_SECRET not in environment  # nothing of the supervisor's environment
    # Tasks, gradings and events crossed the mounted socket: the platform scored both evaluations.
    status = json.loads(nodus("get", "tj", "boxed", "-o", "json")[1])["status"]
    summary = status["summary"]
    assert summary["baseline"]["scored"] == 8 and summary["final"]["scored"] == 8, summary
    assert (outputs / "adapter" / "weights.bin").stat().st_size == 4096
    assert json.loads((outputs / "results.json").read_text())["steps"] == 4
    assert containers(project) == []  # --rm
    code, output = nodus("logs", "tj/boxed")  # the container's output reaches the job's log
    assert code == 0 and "echo-trainer: done" in output, output


def test_cancelling_stops_and_removes_the_container(project: Path) -> None:
    # A trainer that ignores SIGTERM: podman stop must SIGKILL it after the grace, and nothing is left.
    (project / "job.yaml").write_text(
        JOB.format(name="boxed", parameters="{steps: 500, sleepS: 0.2, ignoreSigterm: true}")
    )
    assert nodus("apply", str(project), "--yes")[0] == 0
    code, output = nodus("wait", "tj/boxed", "--for=jsonpath={.status.stage}=Training", "--timeout", "2m")
    assert code == 0, output
    assert len(containers(project)) == 1
    code, output = nodus("cancel", "tj/boxed")
    assert code == 0, output
    code, output = nodus("wait", "tj/boxed", "--for=jsonpath={.status.phase}=Cancelled", "--timeout", "1m")
    assert code == 0, output
    assert containers(project) == []
