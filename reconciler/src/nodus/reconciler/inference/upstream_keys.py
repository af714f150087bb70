"""The keys of model servers on other machines: what the gateway sends them, and what their executor gives them.

Who uses it: the gateway (`gateway/app.py`: the Authorization header of an endpoint whose status says
`upstreamAuth: Bearer`) and the Ray executor's services (`executors/ray/services.py`: the key a model server on a
Ray node takes, `NODUS_SERVING_API_KEY`). Both run on the project's host and derive the same key from the project's
state folder, so no key is written into any status or spec.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Final

UPSTREAM_KEY_FILE: Final = "upstream.key"
BEARER: Final = "Bearer"


def upstream_key(state_folder: Path, project: str, name: str) -> str:
    """The key the model server of endpoint `project/name` takes when it listens on a network (see the module
    docstring): HMAC-SHA256 of the state folder's key file, made here on first use (0600)."""
    path = state_folder / UPSTREAM_KEY_FILE
    if not path.is_file():
        state_folder.mkdir(parents=True, exist_ok=True)
        made = path.with_name(f".{UPSTREAM_KEY_FILE}.{os.getpid()}")
        descriptor = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(made, path)  # the first writer wins: two processes starting at once agree on one key
        except FileExistsError:
            pass
        finally:
            made.unlink(missing_ok=True)
    secret = path.read_text().strip().encode()
    return hmac.new(secret, f"{project}/{name}".encode(), hashlib.sha256).hexdigest()
