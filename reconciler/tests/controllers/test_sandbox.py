"""The graders' sandbox: chosen from the project's setting and what this host can run, never a silent fall back."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nodus.builder import host_programs
from nodus.builder.layers import Entry
from nodus.builder.oci import NewLayer, add_layer, read_image, write_image
from nodus.errors import ConfigError
from nodus.reconciler.controllers import environment as environment_controller
from nodus.reconciler.controllers.sandbox import choose, from_status
from nodus.reconciler.controllers.status import conditions
from nodus.specs.settings import load_settings

LOADED = {"phase": "Ready", "graderImage": "localhost/nodus-env/demo:1.0.0", "graderImageId": "sha256:" + "1" * 64}
NO_PODMAN = {
    "phase": "Ready",
    "sandbox": {"mode": "process", "reason": "NoContainerRuntime", "message": "podman is not installed (...)"},
}


def test_auto_uses_the_image_where_podman_has_it_and_says_why_when_it_falls_back() -> None:
    assert choose("auto", LOADED).mode == "container" and not choose("auto", LOADED).refused
    fallback = choose("auto", NO_PODMAN)
    assert (fallback.mode, fallback.reason, fallback.refused) == ("process", "NoContainerRuntime", False)
    assert fallback.message.startswith("graders run in process mode") and "podman is not installed" in fallback.message


def test_container_refuses_a_host_that_cannot_and_process_is_taken_when_asked() -> None:
    refused = choose("container", NO_PODMAN)
    assert refused.refused and refused.refusal()["reason"] == "SandboxUnavailable"
    assert "nodus.yaml grading.sandbox: container" in refused.message and "podman is not installed" in refused.message
    assert choose("container", LOADED).container and not choose("container", LOADED).refused
    asked = choose("process", LOADED)
    assert (asked.mode, asked.reason) == ("process", "ProcessModeRequested")


def test_the_choice_is_a_condition_of_the_job_and_survives_in_its_status() -> None:
    fallback = choose("auto", NO_PODMAN)
    status = {"phase": "Running", "sandbox": fallback.to_status()}
    found = {c["type"]: c for c in conditions("TrainingJob", status)}
    assert found["ContainerSandbox"]["status"] == "False"
    assert found["ContainerSandbox"]["reason"] == "NoContainerRuntime"
    assert from_status(status) == fallback
    contained = {c["type"]: c for c in conditions("TrainingJob", {"sandbox": {"mode": "container"}})}
    assert contained["ContainerSandbox"]["status"] == "True"


def test_without_podman_the_environment_says_so_instead_of_a_silent_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_programs, "which", lambda name: None)
    found = environment_controller.load_for_graders(tmp_path, {"metadata": {"name": "demo"}, "spec": {}}, "t")
    assert found == {
        "sandbox": {
            "mode": "process",
            "reason": "NoContainerRuntime",
            "message": "podman is not installed (Debian: apt-get install podman runc uidmap)",
        }
    }


def test_the_settings_file_is_never_part_of_a_package() -> None:
    from nodus.builder import package_files
    from nodus.specs import settings

    assert settings.SETTINGS_FILE == package_files.SETTINGS_FILE in package_files.SKIPPED_FILES


def test_project_settings_are_checked_and_default_to_auto(tmp_path: Path) -> None:
    assert load_settings(tmp_path).grading.sandbox == "auto"
    (tmp_path / "nodus.yaml").write_text("grading:\n  sandbox: container\n")
    assert load_settings(tmp_path).grading.sandbox == "container"
    (tmp_path / "nodus.yaml").write_text("grading:\n  sandbox: containr\n")
    with pytest.raises(ConfigError, match=r"nodus.yaml: grading.sandbox: Input should be 'auto', 'container'"):
        load_settings(tmp_path)
    (tmp_path / "nodus.yaml").write_text("grading:\n  sanbox: container\n")
    with pytest.raises(ConfigError, match=r"nodus.yaml: grading.sanbox: Extra inputs are not permitted"):
        load_settings(tmp_path)


PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]


@pytest.mark.podman
def test_an_image_reaches_podman_storage_with_podman_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh machine has podman but no skopeo: the image is loaded with podman itself, under its name and id,
    from a layout whose path podman would refuse as an image name (`.nodus/images`)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    real_which = host_programs.which
    monkeypatch.setattr(host_programs, "which", lambda name: None if name == "skopeo" else real_which(name))
    layout = tmp_path / "Project" / ".nodus" / "images"
    marker = tmp_path.name.lower().replace("_", "-")
    layer = add_layer(layout, {"marker": Entry.file(f"{marker}\n".encode())}, epoch=0)
    write_image(layout, "env-demo-1.0.0", [NewLayer(layer, "the only layer")], epoch=0)
    config = read_image(layout, "env-demo-1.0.0").ref.config_digest
    document = {"metadata": {"name": f"demo-{marker}"}, "spec": {"version": "1.0.0"}}
    name = f"localhost/nodus-env/demo-{marker}:1.0.0"
    try:
        found = environment_controller.load_for_graders(layout, document, "env-demo-1.0.0")
        assert found == {"graderImage": name, "graderImageId": config}
        inspect = subprocess.run(
            [*PODMAN, "image", "inspect", "--format", "{{.Id}} {{.RepoTags}}", name],
            capture_output=True,
            text=True,
            check=True,
        )
        image_id, tags = inspect.stdout.split(" ", 1)
        assert image_id == config.removeprefix("sha256:")
        assert tags.strip() == f"[{name}]"  # the temporary path's name was taken off again
        # Done once: a second look finds it and loads nothing.
        assert environment_controller.load_for_graders(layout, document, "env-demo-1.0.0") == found
    finally:
        subprocess.run([*PODMAN, "rmi", "--force", config.removeprefix("sha256:")], capture_output=True, check=False)
