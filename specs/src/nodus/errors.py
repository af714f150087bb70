"""The one error root of nodus, shared by every layer (specs, builder, reconciler, CLI).

Who uses it: everything that can fail because of the user's input or the outside world raises one of
these; `nodus.cli` catches `NodusError` and prints it as one line plus a hint, with exit status 1.
Anything else that escapes is a bug and keeps its traceback.

    NodusError
    ├── ConfigError            bad input: a spec file, a flag, a reference (fix the input)
    │   └── SpecError          one or more located problems in resource files (file:line:col kind/name field)
    ├── PlanError              desired and observed state cannot be planned, or a saved plan is stale
    ├── BuildError             an Environment package failed to build (names the step and its log)
    ├── ExecutorError          a host could not do what a controller asked
    │   ├── TemporaryError     try again after `delay` seconds (capacity, a busy lease, a restart)
    │   └── PermanentError     retrying cannot help (recorded in status, never raised to the user)
    └── PrerequisiteError      a tool nodus needs is missing: says what to install
"""

from __future__ import annotations


class NodusError(Exception):
    """Root of every error nodus reports to a user as one line (plus an optional hint)."""

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def lines(self) -> list[str]:
        """The lines the CLI prints: the message (one line per problem) and then the hint."""
        out = self.message.splitlines() or [self.message]
        if self.hint:
            out.append(f"hint: {self.hint}")
        return out


class ConfigError(NodusError):
    """The user's input is wrong: a spec, a flag, a reference to something that does not exist."""


class SpecError(ConfigError):
    """Problems found while reading resource files; each problem is one located line."""

    def __init__(self, problems: list[str], *, hint: str | None = None) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        summary = f"{count} problem{'s' if count != 1 else ''} in resource files"
        super().__init__("\n".join(self.problems) if self.problems else summary, hint=hint)


class PlanError(NodusError):
    """Desired and observed state cannot be planned, or a saved plan no longer applies."""


class BuildError(NodusError):
    """An Environment package failed to build; the message names the step, the hint the log."""


class ExecutorError(NodusError):
    """A host could not carry out an action a controller asked for."""


class TemporaryError(ExecutorError):
    """Retry after `delay` seconds: the condition is expected to clear by itself."""

    def __init__(self, message: str, *, delay: float = 10.0, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.delay = delay


class PermanentError(ExecutorError):
    """Retrying cannot help; controllers record it in status as the reason the resource failed."""


class PrerequisiteError(NodusError):
    """A tool or optional package nodus needs is missing; the hint says how to install it."""
