"""`nodus cluster up/down/status`: a Ray cluster on this machine for trying the Ray executor, stopped by pid.

Who uses it: people trying nodus's Ray executor on one machine (README "Ray clusters"), and the tests. The work is
in `nodus.reconciler.executors.ray.cluster`; this module parses flags, finds the cluster's folder (`--dir`, else
`.nodus/ray/` of the project found from here) and prints. A real cluster (KubeRay, `ray up`) is not started here:
the project's executor setting points at its dashboard.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from nodus.cli.console import err_line, line, print_json, rich_console
from nodus.reconciler.executors.ray import cluster as ray_cluster
from nodus.reconciler.project import Project


def _folder(folder: Path | None) -> Path:
    return folder if folder is not None else Project.find().files.root / "ray"


_DIR = click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="The cluster's folder (default: .nodus/ray/).",
)


@click.group("cluster")
def cluster_group() -> None:
    """Start, inspect and stop a Ray cluster on this machine (for trying the Ray executor)."""


@cluster_group.command("up")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker nodes to start beside the head.")
@click.option(
    "--gpu-type",
    "gpu_types",
    multiple=True,
    metavar="TYPE[:COUNT]",
    help="The made-up GPU type of the next worker (repeat: one per worker), e.g. H100:8.",
)
@click.option("--cpus", type=int, default=1, show_default=True, help="CPUs each worker offers.")
@click.option(
    "--netns", "namespace", metavar="NAME", help="Run every node in a new network namespace NAME (loopback only)."
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=ray_cluster.UP_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for all nodes.",
)
@_DIR
def up(
    workers: int, gpu_types: tuple[str, ...], cpus: int, namespace: str | None, timeout_s: float, folder: Path | None
) -> None:
    """Start a Ray head (no tasks on it) and worker nodes, with token auth, and record their pids."""
    specs = ray_cluster.worker_specs(workers, gpu_types, cpus)
    where = _folder(folder)
    if namespace is None:
        err_line("warning: Ray listens on every interface of this machine, not only 127.0.0.1 (--netns NAME avoids it)")
    started = time.monotonic()
    record = ray_cluster.up(where, specs, namespace=namespace, timeout_s=timeout_s)
    took = time.monotonic() - started
    line(f"Ray cluster up in {took:.0f} s: {len(record.nodes)} nodes, dashboard {record.dashboard_url}")
    if record.netns is not None:
        line(f"  in network namespace {record.netns} (reach it with: nsenter --net=/run/netns/{record.netns} ...)")
    line(f"  token: {record.token_file} (send it as RAY_AUTH_TOKEN or Authorization: Bearer)")
    line(f"  stop it with: nodus cluster down{'' if folder is None else f' --dir {folder}'}")


@cluster_group.command("down")
@_DIR
def down(folder: Path | None) -> None:
    """End exactly the processes `nodus cluster up` started here, and remove the record."""
    where = _folder(folder)
    result = ray_cluster.down(where)
    if result.already_gone:
        line(f"no process of the cluster recorded in {where} was running; removed its record")
        return
    line(f"Ray cluster down: ended {len(result.ended)} node(s); removed {ray_cluster.record_path(where)}")


@cluster_group.command("status")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_DIR
def status(fmt: str, folder: Path | None) -> None:
    """The recorded nodes: role, pid, whether each is alive, its resources; and the dashboard address."""
    record, nodes = ray_cluster.status(_folder(folder))
    if fmt == "json":
        print_json(
            {
                "address": record.address,
                "dashboardURL": record.dashboard_url,
                "tokenFile": record.token_file,
                "netns": record.netns,
                "nodes": [
                    {"role": n.node.role, "pid": n.node.pid, "alive": n.alive, "resources": n.node.resources,
                     "labels": n.node.labels}
                    for n in nodes
                ],
            }
        )  # fmt: skip
        return
    titles = ["ROLE", "PID", "ALIVE", "RESOURCES"]
    rows = [[n.node.role, str(n.node.pid), "yes" if n.alive else "no", _resources(n.node.resources)] for n in nodes]
    if sys.stdout.isatty():
        from rich.table import Table

        table = Table(box=None, header_style="bold", pad_edge=False)
        for title in titles:
            table.add_column(title, no_wrap=True)
        for row in rows:
            table.add_row(*row)
        rich_console().print(table)
    else:  # a pipe gets whole rows
        widths = [max(len(r[i]) for r in [titles, *rows]) for i in range(len(titles))]
        for row in [titles, *rows]:
            line("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    where = f" (network namespace {record.netns})" if record.netns else ""
    line(f"Dashboard: {record.dashboard_url}{where}")


def _resources(resources: dict[str, float]) -> str:
    return ",".join(f"{name}={value:g}" for name, value in sorted(resources.items())) or "-"
