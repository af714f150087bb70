"""Session-wide test settings for every test folder of the workspace.

Who uses it: pytest, for all tests. Completion code runs as `NODUS_RUNNER_UID`, and after each run every
process of that uid is killed (that is how fork bombs are cleaned up). Parallel test workers on one host
share no pid namespace, so each worker gets its own runner uid, or one worker's sweep would kill another's
runner mid-test.
"""

from __future__ import annotations

import os

worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
# The pid keeps two test runs on one host (two checkouts, a developer and CI) apart as well.
# Set, not defaulted: xdist workers inherit the controller's environment, and each needs its own value.
os.environ["NODUS_RUNNER_UID"] = str(10100 + (os.getpid() * 7 + int(worker.removeprefix("gw") or 0)) % 5000)
