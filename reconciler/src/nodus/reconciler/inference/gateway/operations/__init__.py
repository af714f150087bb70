"""The routes the gateway serves, one module each behind the `Operation` seam (`base.py`).

Who uses it: the gateway's app (`../app.py`), which looks an operation up by its route in `OPERATIONS` and runs
every one through the same pipeline (key, endpoint, hold, forward, settle). An operation turns the client's body
into the request the model server gets (`prepare`: refusals, the input bound, the output limit), its answer into
the client's shape (`answer`), and its stream into the client's events (`translator`). A new route is a new module
and one line here.
"""

from __future__ import annotations

from nodus.reconciler.inference.gateway.operations.base import Operation
from nodus.reconciler.inference.gateway.operations.chat import ChatCompletions
from nodus.reconciler.inference.gateway.operations.completions import Completions
from nodus.reconciler.inference.gateway.operations.embeddings import Embeddings
from nodus.reconciler.inference.gateway.operations.messages import Messages
from nodus.reconciler.inference.gateway.operations.responses import Responses

OPERATIONS: tuple[Operation, ...] = (ChatCompletions(), Completions(), Responses(), Messages(), Embeddings())
"""Every operation, keyed by its route (`Operation.route`)."""
