"""A run's inputs cannot be used: one line naming the file or field and why, exit status 2, no traceback.

Who raises it: the data-driven trainers' shared parts (`data` for files and columns, `weights` for the method
and quantization, `finetune` for the contract's data and teacher folders) before anything is trained or written.
It is the contract's own `ContractError`, so the supervisor sees the same exit status for both.
"""

from __future__ import annotations

from nodus.runtimes.contract import ContractError


class Refusal(ContractError):  # noqa: N818 - a refusal, as the contract's ContractError is an error
    """The message starts with the real cause and names where it comes from (file, column, `spec.` field)."""
