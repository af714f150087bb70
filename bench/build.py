"""Benchmark of nodus-build: a cold build, a no-op rebuild, and `buildah build` of an equivalent Containerfile.

Run: `make bench` or `.venv/bin/python bench/build.py [--environment catalog/reasoning-gym]`.

All three make the same image from the same base (the mmdebstrap base, built once beforehand and not
timed) on this machine in one run, so the ratios compare like with like:

- cold: `nodus-build` into an empty store and lock (the requirements resolution cache is warm, as on any
  machine that built before; layers, manifests and the build cache are empty): install the locked
  requirements, write the layers, freeze and check in the sandbox, provenance;
- no-op: `nodus-build` again with nothing changed, as a new process (what CI pays on every push);
- buildah: `buildah build --timestamp 0 --layers=false` of a Containerfile that does the same work (COPY the
  same installed requirements and package, RUN the same task listings and self-check), then `buildah push`
  to an OCI layout, which is where buildah compresses its layers.

Goals (from the builder issue): no-op rebuild under one second; cold build no slower than buildah.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILDAH = ["buildah", "build", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1000:1000"]


def nodus_build(*args: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    result = subprocess.run(
        [str(REPO / ".venv/bin/nodus-build"), *args, "--json"], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"nodus-build failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return elapsed, json.loads(result.stdout)


def base_layout(work: Path) -> str:
    """The base image, made once (not timed): `oci:LAYOUT:nodus-env-base`."""
    sys.path.insert(0, str(REPO / "builder" / "src"))
    from nodus.builder.base import BASE_TAG, build_base, current_base
    from nodus.builder.store import Store, user_cache

    store = Store(user_cache() / "bench-base")
    if current_base(store) is None:
        print("making the base image (mmdebstrap, once; not timed)...", flush=True)
        build_base(store)
    # podman and buildah name `oci:` images after the path: give them a plain one.
    link = work / "base"
    link.symlink_to(store.images, target_is_directory=True)
    return f"oci:{link}:{BASE_TAG}"


def containerfile(environment: Path, base: str, env: dict[str, str], keys: list[str]) -> str:
    """The Containerfile a person would write for what nodus-build does."""
    lines = [f"FROM {base}", "COPY site-packages /opt/nodus/site-packages"]
    lines.append("COPY --chown=10001:10001 package /opt/environment")
    lines += [f"ENV {name}={json.dumps(value)}" for name, value in sorted(env.items())]
    lines.append("USER 10001:10001")
    steps = ["mkdir -p /tmp/m", "nodus-env info > /tmp/m/info.json"]
    steps += [
        f"nodus-env tasks --split {k.split('/')[0]} --seed {k.split('/')[1]} > /tmp/m/{k.replace('/', '-')}.jsonl"
        for k in keys
    ]
    fixtures = " --fixtures /opt/environment/fixtures.jsonl" if (environment / "fixtures.jsonl").is_file() else ""
    steps.append(f"nodus-env selfcheck --gold 1{fixtures} > /dev/null")
    lines.append(f"RUN {' && '.join(steps)}")
    return "\n".join(lines) + "\n"


def buildah_build(environment: Path, base: str, work: Path, build_spec: dict[str, object]) -> float:
    """Time `buildah build` + `buildah push oci:` of the equivalent Containerfile."""
    context = work / "buildah-context"
    shutil.copytree(environment, context / "package", ignore=shutil.ignore_patterns("tests", "__pycache__"))
    site = context / "site-packages"
    site.mkdir()
    requirements = [str(line) for line in build_spec["requirements"]["lines"]]  # type: ignore[index]
    env = dict(build_spec["image"]["env"])  # type: ignore[index]
    keys = [f"{s}/{n}" for s in build_spec["splits"] for n in build_spec["seeds"]]  # type: ignore[attr-defined]
    (context / "Containerfile").write_text(containerfile(environment, base, env, keys))
    tag = f"localhost/nodus-bench-buildah:{work.name.lower()}"
    started = time.perf_counter()
    if requirements:
        from nodus.builder.plan import LockedRequirements
        from nodus.builder.requirements import install

        # The same install nodus-build does (hash-checked, image platform), so both sides copy the same tree.
        install(LockedRequirements.of(requirements), site, scratch=context)
    subprocess.run(
        [*BUILDAH, *LIMITS, "--network", "none", "--timestamp", "0", "--layers=false", "-q", "-t", tag, str(context)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["buildah", "push", "-q", tag, f"oci:{work / 'buildah-layout'}:env"], check=True, capture_output=True
    )
    elapsed = time.perf_counter() - started
    subprocess.run(["buildah", "rmi", "-f", tag], capture_output=True, check=False)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environment", type=Path, default=REPO / "catalog" / "reasoning-gym")
    args = parser.parse_args()
    for tool in ("podman", "buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/build.py needs {tool} (apt-get install {tool})")
    environment = args.environment.resolve()
    with tempfile.TemporaryDirectory(prefix="nodus-bench-build-") as scratch:
        work = Path(scratch)
        base = base_layout(work)
        project = work / "project"
        shutil.copytree(environment, project / environment.name, ignore=shutil.ignore_patterns("tests", "__pycache__"))
        flags = [
            "--network",
            "none",
            "--base",
            base,
            "--lock",
            str(project / "nodus.lock"),
            "--state-dir",
            str(project / ".nodus"),
        ]
        target = str(project / environment.name)
        cold, output = nodus_build(target, *flags)
        noop_times = [nodus_build(target, *flags)[0] for _ in range(3)]
        noop = sorted(noop_times)[1]
        name = output["results"][0]["name"]  # type: ignore[index]
        from nodus.builder.build import BuildOptions, find_environments, plan_environment
        from nodus.builder.plan import BaseImage
        from nodus.builder.store import Store

        parsed = find_environments([Path(target)])[0]
        build, _, _ = plan_environment(
            parsed.resource,  # type: ignore[arg-type]
            Path(parsed.source.file),
            store=Store(project / ".nodus"),
            base=BaseImage("bench", "sha256:" + "0" * 64),
            options=BuildOptions(),
        )
        buildah = buildah_build(environment, base, work, build.to_dict())
    print(
        f"nodus-build benchmark: {name} ({environment.relative_to(REPO) if environment.is_relative_to(REPO) else environment})"
    )
    print(f"  cold build            {cold:7.2f} s")
    print(f"  no-op rebuild         {noop:7.2f} s   (median of 3, a new process each; goal < 1 s)")
    print(f"  buildah build + push  {buildah:7.2f} s")
    print(f"  cold / buildah        {cold / buildah:7.2f}x  (goal <= 1.0)")
    print(f"  no-op / cold          {noop / cold:7.3f}x")


if __name__ == "__main__":
    main()
