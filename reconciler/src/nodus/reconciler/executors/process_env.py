"""The environment a process nodus starts and keeps running begins with: an allow-list over its starter's.

Who calls it: every place that starts a long-lived process. The local executor (a job's supervisor,
`local/executor.py`; its trainer, and podman for a trainer in an image, `local/supervisor.py`), the local service host
(a service's supervisor, `local/services.py`; the model server or gateway it keeps up, `local/service_supervisor.py`),
and the Ray executor's own (the nodes `nodus cluster up` starts, `ray/cluster.py`; a gang member's command,
`ray/gang_member.py`). Ray's node and service sessions hand their work to the local executor and service host, so the
same rules hold on a node. Each caller adds on top what the resource names: its spec env, its Secrets (the supervisor
reads them when it starts the trainer), the runtime contract's NODUS_* variables.

`base_environment` keeps only the variables listed here (each with why); everything else of the starter's environment,
a token exported for some other tool included (HF_TOKEN, AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN), stays with it. A
variable a run needs goes in its resource (`spec.env`, or a Secret it names). One that a host's processes need and no
resource can name (a proxy, NCCL's network interface, a package index, a setting of the model server: an
InferenceEndpoint has no env) is listed in `NODUS_PASS_ENV` where nodus runs: names or `PREFIX*`, separated by commas
or spaces, read from the same environment that is filtered.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import ValidationError

from nodus.errors import ConfigError
from nodus.specs.secret import SecretSpec

PASS_VARIABLE: Final = "NODUS_PASS_ENV"

PASSED: Final = frozenset(
    {
        "PATH",  # programs a process starts (podman, unshare, torchrun, git) are found as its starter finds them
        "HOME",  # per-user defaults: ~/.cache, podman's storage, the gateway's ~/.pgpass
        "USER",  # who the process runs as, for the programs that ask (podman, getpass)
        "LOGNAME",  # the same, by its other name
        "TMPDIR",  # temporary files, and the Unix sockets' fallback folder the starter computed (`JobFiles.socket`)
        "TZ",  # local time in logs
        "LANG",  # the locale (with LC_*): how text in logs and files is decoded
        "LANGUAGE",  # the locale's message languages
        "PYTHONPATH",  # supervisors are `python -m nodus...`: nodus (and a trainer its runtime) imports as it did
        "PYTHONHOME",  # the same, for an interpreter moved from where it was built
        "LD_LIBRARY_PATH",  # shared libraries (CUDA's, a shared Python's) are found as the starter's process found them
        "CUDA_VISIBLE_DEVICES",  # placement: the GPUs this host (or Ray, for a job on a node) gives the process
        "NVIDIA_VISIBLE_DEVICES",  # the same, as NVIDIA's container runtime spells it
        "ROCR_VISIBLE_DEVICES",  # the same, for AMD GPUs
        "HIP_VISIBLE_DEVICES",  # the same, for AMD GPUs
        "OMP_NUM_THREADS",  # the thread counts this host's owner chose for torch on CPU
        "MKL_NUM_THREADS",  # the same, for MKL
        "HF_HOME",  # where Hugging Face keeps its caches (datasets a trainer loads, a tokenizer's files)
        "HF_HUB_CACHE",  # where the hub's models are cached (the tests' tiny model)
        "HF_DATASETS_CACHE",  # where data sets are cached
        "HF_HUB_OFFLINE",  # an offline host stays offline: nothing calls the hub
        "HF_DATASETS_OFFLINE",  # the same, for data sets
        "TRANSFORMERS_OFFLINE",  # the same, transformers' older spelling
        "HF_HUB_DISABLE_TELEMETRY",  # the host's owner turned the hub's telemetry off
        "DO_NOT_TRACK",  # the host's owner asked every tool to send no telemetry
        "SSL_CERT_FILE",  # the host's CA certificates (a private CA in front of MLflow or a registry): paths
        "SSL_CERT_DIR",  # the same, as a folder
        "REQUESTS_CA_BUNDLE",  # the same, as requests reads it
        "CURL_CA_BUNDLE",  # the same, as curl (and huggingface_hub) read it
        "DOCKER_HOST",  # which container engine the graders' launcher picks (`grading/launcher.py`): an address
        "NODUS_HOME",  # where nodus keeps a project's state: the gateway finds the project's state folder by it
        "NODUS_CACHE_HOME",  # where nodus keeps its caches
        "NODUS_PRICES",  # the price table the gateway charges requests by
        "NODUS_LOCAL_PRICE_PER_HOUR",  # this host's price, the same table's
        "NODUS_RECORD_WIRE",  # a supervisor records the attempt API's bodies (tests)
        PASS_VARIABLE,  # so that a supervisor passes the same names on to what it starts
    }
)
"""Variables passed as they are. Left out on purpose: credentials (HF_TOKEN: a run gets it from the Secret its
`spec.model.secret` names; NODUS_API_KEY, RAY_AUTH_TOKEN, NODUS_REGISTRY_PASSWORD, cloud keys), NODUS_STATE (a URL may
hold a password: the gateway is given `--state`), the proxies (`*_PROXY`: a proxy URL may hold a password, and a
loopback call must not go through one) and pip's and uv's configuration (an index URL may hold a token, and no process
nodus starts installs packages): NODUS_PASS_ENV names those on a host that needs them."""

PASSED_PREFIXES: Final = (
    "LC_",  # the locale's categories, as LANG
    "XDG_",  # per-user folders: podman's runtime folder and storage, the graders' stage folder (XDG_CACHE_HOME)
    "CONTAINERS_",  # podman's configuration files (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF) for graders and images
)

RAY_SETTINGS: Final = ("RAY_*",)
"""A Ray node's own settings (auth mode and token file, tuning): for the nodes `nodus cluster up` starts and for the
command of a `Ray` or `Verl` gang, which starts Ray nodes of its own that must ask for the same token."""
NODE_SESSION_SETTINGS: Final = ("NODUS_REGISTRY_USERNAME", "NODUS_REGISTRY_PASSWORD")
"""What a node session reads from its node's environment: the registry credentials a run's inputs and outputs travel
with (`ray/channel.py`: they never travel in a submission). For the nodes `nodus cluster up` starts and the node
sessions of a TrainingJob's gang members; never for a trainer."""
STATE_STORE_SETTINGS: Final = ("PG*",)
"""libpq's settings (PGHOST, PGUSER, PGPASSWORD, PGPASSFILE, ...): the gateway opens the state store as the `nodus`
that started it did (a password belongs in PGPASSWORD or ~/.pgpass, never in its argv). For the gateway alone."""

_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


def base_environment(environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `environ` (this process's by default) a started process gets before what its resource names:
    those of PASSED and PASSED_PREFIXES, those NODUS_PASS_ENV lists, and `extra` (names or `PREFIX*`: what this one
    start needs of its starter's, such as the variables its Secrets are read from). A ConfigError names a
    NODUS_PASS_ENV entry that is not a variable name."""
    environ = os.environ if environ is None else environ
    names, prefixes = set(PASSED), list(PASSED_PREFIXES)
    for entry in [*pass_list(environ), *extra]:
        if entry.endswith("*"):
            prefixes.append(entry[:-1])
        else:
            names.add(entry)
    return {name: value for name, value in environ.items() if name in names or name.startswith(tuple(prefixes))}


def pass_list(environ: Mapping[str, str]) -> list[str]:
    """The entries of NODUS_PASS_ENV in `environ`; a ConfigError naming one that is neither a name nor `PREFIX*`."""
    entries = [entry for entry in re.split(r"[,\s]+", environ.get(PASS_VARIABLE, "")) if entry]
    for entry in entries:
        if not _ENTRY.fullmatch(entry):
            raise ConfigError(
                f"{PASS_VARIABLE}: {entry!r} is not a variable name or a PREFIX* pattern",
                hint=f"list names separated by commas, e.g. {PASS_VARIABLE}=HTTPS_PROXY,NO_PROXY,NCCL_*",
            )
    return entries


def secret_variables(refs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The variables the Secret references `refs` (`SecretRef`s as JSON: `key` and the Secret's spec as `source`)
    are read from where the Secret says the environment (`envPrefix` + key): the process that reads them needs them."""
    found = []
    for ref in refs:
        try:
            source = SecretSpec.model_validate(ref.get("source") or {})
        except ValidationError as exc:
            where = f"{ref.get('field') or 'secrets'}: Secret {ref.get('secret')}"
            raise ConfigError(f"{where}: not a Secret's spec: {exc.errors()[0]['msg']}") from None
        if source.provider == "Env":
            found.append(source.env_prefix + str(ref["key"]))
    return found
