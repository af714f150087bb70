"""The words a resource's status is written in: its phases, the reasons for them, the types of its conditions.

Who uses it: every part of nodus that writes or reads `status.phase`, `status.reason` or `status.conditions`:
the reconciler's controllers and executors (the local executor's job folder and its supervisor), `nodus get`,
`describe` and `wait` (the views and the CLI), the GitOps loop's health table and the SDK (`nodus.recipes`).

Why here, in `nodus.specs`: it is the lowest layer of the workspace, which the reconciler, the builder and the
CLI all import and which imports none of them, and a status is part of the resource model (the seeds document
phases and reasons beside the fields they belong to). `nodus.env` does not use it: it runs inside grader images
and imports nothing else of nodus.

Each name is a `StrEnum`, so a member *is* its string: `Phase.RUNNING == "Running"`, JSON and SQL write the
plain string, and a status read back from the store (plain strings) compares equal to the members. YAML writes
them as plain strings too: this module teaches PyYAML's safe dumper the StrEnum (once, at import). The
spellings are the seeds' (`../shared/seeds/`) wherever the seeds name a value; `test_status_names.py` checks
that, and that no reconciler source writes a phase or reason that is not a member here.
"""

from __future__ import annotations

from enum import StrEnum

import yaml


class Phase(StrEnum):
    """`status.phase` of every kind nodus stores (and the `phase` of a TrainingJob's `status.export`)."""

    # Runs (TrainingJob, Job): written by the controllers before launch and by the executor's supervisor after.
    PENDING = "Pending"
    """Not running yet: waiting on a dependency (`reason` says which), launching, or caching the model."""
    RUNNING = "Running"
    """The trainer process is running (the seeds' InferenceEndpoint and AgentGroup use it the same way)."""
    SUSPENDED = "Suspended"
    """Stopped with its state kept (`spec.state: Suspended` or a reached `maxCostUSD`); resuming continues it."""
    SUCCEEDED = "Succeeded"
    """Ended, and the trainer reported success (its outputs are final)."""
    FAILED = "Failed"
    """Ended without success, or refused before launch (`reason` says why); also an Environment or Volume
    that cannot become Ready, and an export that could not copy."""
    CANCELLED = "Cancelled"
    """Ended on request (a cancel through the executor: a delete, or a replace ending the generation before)."""
    CANCELLING = "Cancelling"
    """On the way to Cancelled (the seeds' AgentGroup); no nodus controller writes it yet."""

    # Services (InferenceEndpoint): kept up by their executor until stopped.
    STOPPED = "Stopped"
    """A service stopped on request (`nodus stop ep/NAME`, `spec.state: Stopped`): it answers 503 until started."""

    # Things that are made once and then used (Environment, Volume, TrainingRuntime): their controllers.
    READY = "Ready"
    """Usable: an Environment whose image digest is verified, a Volume whose folder exists, a runtime stored."""

    # Written by the controller registry for a kind that no controller runs (`controllers.stored_only`).
    UNSUPPORTED = "Unsupported"
    """Stored, and nothing runs it on this installation (InferenceEndpoint, AgentRun, ...)."""

    # `status.export.phase` of a TrainingJob with `spec.exportTo` (`controllers.export`).
    EXPORTED = "Exported"
    """The outputs are committed to the Volume (Pending while waiting for it, Failed when the copy failed)."""

    # Shown, never stored: `nodus describe` of a resource nothing has written a status for.
    UNKNOWN = "Unknown"


ENDED_PHASES: frozenset[Phase] = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED})
"""Phases a run never leaves (Suspended does: resuming)."""
LIVE_PHASES: frozenset[Phase] = frozenset({Phase.PENDING, Phase.RUNNING})
"""Phases in which a run has, or is about to have, a process whose heartbeat means something."""


class Stage(StrEnum):
    """`status.stage` of a running TrainingJob: what it is doing now (the seeds' STAGE column)."""

    CACHING_MODEL = "CachingModel"
    """Set by the TrainingJob controller while the model is imported into the cache."""
    BASELINE = "Baseline"
    """Reported by the trainer (attempt API events): scoring the model before training."""
    TRAINING = "Training"
    EVALUATING = "Evaluating"
    EXPORTING = "Exporting"
    """Set while the outputs are copied to `spec.exportTo`."""


class GradingPhase(StrEnum):
    """The `phase` of a grading (attempt API `POST .../gradings`, `gradings.jsonl`): which part of a run the
    completions were graded for. Not a status phase: the seeds' `run.tasks(phase="Evaluation")`."""

    BASELINE = "Baseline"
    TRAINING = "Training"
    """The default when a grading names no phase."""
    EVALUATION = "Evaluation"


class Reason(StrEnum):
    """`status.reason` (CamelCase, one word for a machine, with `status.message` for a person) and the reasons
    of the events recorded with it. The groups say who records each."""

    # The local executor and its supervisor (`executors/local/job.py` re-exports these under their old names).
    LAUNCHED = "Launched"
    """A supervisor was started for this generation and attempt."""
    RESUMED = "Resumed"
    """A suspended run was started again from its checkpoint."""
    MAX_COST_REACHED = "MaxCostReached"
    """The run's estimated cost reached `spec.maxCostUSD`: suspended; raising the cap resumes it."""
    SUSPEND_REQUESTED = "SuspendRequested"
    """`spec.state: Suspended` (the controller, before launch) or a suspend request (the supervisor)."""
    CANCEL_REQUESTED = "CancelRequested"
    TRAINER_SUCCEEDED = "TrainerSucceeded"
    TRAINER_FAILED = "TrainerFailed"
    """The trainer exited non-zero or wrote no results."""
    SUPERVISOR_LOST = "SupervisorLost"
    """The supervisor died and `recovery.maxAttempts` restarts are spent (or recovery is off)."""
    SUPERVISOR_STOPPED = "SupervisorStopped"
    """The supervisor was stopped by a signal before the trainer ended."""
    SUPERVISOR_ERROR = "SupervisorError"
    """The supervisor itself failed (a bug or the host): its message says how."""

    # The Ray executor (`executors/ray`).
    UNSCHEDULABLE = "Unschedulable"
    """Pending: no alive node of the Ray cluster fits the job's resources; the message lists each offer tried
    (tried again at the next reconcile)."""
    GANG_ASSEMBLING = "GangAssembling"
    """Pending (or Running, between epochs): a gang's members are being placed, started and network-checked."""
    GANG_ASSEMBLY_TIMEOUT = "GangAssemblyTimeout"
    """Failed: the members of a gang were not all placed within `distributed.startupTimeout`; every member was
    released (the Ray executor removes the gang's placement group), each of its `maxAssemblyRetries` tries too."""
    NODE_LOST = "NodeLost"
    """Failed: a member of a gang was lost (its node or its Ray worker gone) and `recovery.maxAttempts` restarts are
    spent; the message is the first loss's."""

    # The TrainingJob and Job controllers and `nodus apply`.
    ENVIRONMENT_NOT_READY = "EnvironmentNotReady"
    """Pending: the Environment named in `spec.environment` is not Ready yet (requeued)."""
    VOLUME_NOT_READY = "VolumeNotReady"
    """Pending: the Volume of `spec.model.volume` or `spec.exportTo` is not Ready yet (requeued)."""
    MODEL_NOT_CACHED = "ModelNotCached"
    """Pending: the pinned model revision is not in the model cache yet (requeued)."""
    WAITING_FOR = "WaitingFor"
    """Pending: a Volume the run reads (`spec.model.volume`, `spec.data.volume`, `spec.teacher.volume`) is still to be
    written by another TrainingJob's `spec.exportTo`; the message names that producer (requeued)."""
    DEPENDENCY_FAILED = "DependencyFailed"
    """Failed: the TrainingJob that was to export a Volume this run reads failed, so the run cannot start; the message
    names the producer and its reason (the seeds' word for a dependency that failed)."""
    NOT_READY = "NotReady"
    """An Environment that is not Ready and says no reason of its own; a service that does not answer its readiness
    probe yet (starting, loading its model)."""
    SERVICE_EXITED = "ServiceExited"
    """A service's process exited and its supervisor starts it again (Pending), or gave up after its restarts in a
    row (Failed, with the last lines of its log)."""
    STOP_REQUESTED = "StopRequested"
    """Stopped: a service stopped on request."""
    BUDGET_EXCEEDED = "BudgetExceeded"
    """Pending: a project Budget that covers the run would be passed by its first hold (the seeds' 402 code of an
    inference request the same Budget blocks)."""
    DATA_COLUMN_MISSING = "DataColumnMissing"
    """Refused at plan time: `spec.data.columns` maps a name onto a column the data file does not have."""
    MODEL_NOT_FOUND = "ModelNotFound"
    """An InferenceEndpoint's `spec.model` is no id of the model table, or names weights this project lacks."""
    TRAINING_JOB_NOT_SUCCEEDED = "TrainingJobNotSucceeded"
    """Pending: an InferenceEndpoint serves `{trainingJob: NAME}`, which has not Succeeded (yet)."""
    REPLACED = "Replaced"
    """Pending: a replace ended the generation before; the next one launches."""
    EXECUTOR_LACKS_GANGS = "ExecutorLacksGangs"
    """Failed: a run of several nodes on an executor that starts no gangs (the local one); nothing was launched."""
    LAUNCH_FAILED = "LaunchFailed"
    """The executor refused or failed the launch (a permanent error, recorded in status)."""
    NAME_TAKEN = "NameTaken"
    """Failed: a Job named like a TrainingJob of the project, which owns the Job of that name."""

    # Admission (`controllers.admission`): a TrainingJob refused before anything runs (phase Failed).
    RUNTIME_NOT_FOUND = "RuntimeNotFound"
    MODE_NOT_SUPPORTED = "ModeNotSupported"
    ENVIRONMENT_NOT_FOUND = "EnvironmentNotFound"
    ENVIRONMENT_VERSION_NOT_FOUND = "EnvironmentVersionNotFound"
    RUNTIME_LACKS_ATTEMPT_API = "RuntimeLacksAttemptAPI"
    INVALID_PARAMETERS = "InvalidParameters"
    MODEL_NOT_PINNED = "ModelNotPinned"
    VOLUME_NOT_FOUND = "VolumeNotFound"
    VOLUME_REVISION_NOT_FOUND = "VolumeRevisionNotFound"
    """A pinned Volume revision (`spec.model.volume.revision`, `spec.data.revision`) the Volume does not have, that
    no TrainingJob exports and no upload has made."""
    SECRET_NOT_FOUND = "SecretNotFound"
    TRAINING_JOB_NOT_FOUND = "TrainingJobNotFound"
    """An InferenceEndpoint's `spec.model.trainingJob` names no TrainingJob of its project."""
    VOLUME_NOT_WRITABLE = "VolumeNotWritable"
    RUNTIME_LACKS_OUTPUTS = "RuntimeLacksOutputs"
    TOO_FEW_HELD_OUT_TASKS = "TooFewHeldOutTasks"

    # A dry run's blocking reasons (`dry_run`), beside the admission ones.
    CAP_BELOW_FIRST_HOLD = "CapBelowFirstHold"
    """`spec.maxCostUSD` is below what the first step would hold."""
    MAX_COST_LOWERED = "MaxCostLowered"
    """The plan lowers a cap, which can only be raised."""

    # The Environment controller.
    IMAGE_NOT_BUILT = "ImageNotBuilt"
    """Pending: `nodus.lock` records no image for this name and version (run `nodus-build`)."""
    IMAGE_MISSING = "ImageMissing"
    """Pending: the locked digest is not in the image store."""
    BUILD_FAILED = "BuildFailed"

    # The grader sandbox (`controllers.sandbox`, `controllers.environment`): `status.sandbox.reason`.
    NO_CONTAINER_RUNTIME = "NoContainerRuntime"
    """Graders run in the process sandbox: no podman or docker on this host (said out loud)."""
    IMAGE_NOT_LOADED = "ImageNotLoaded"
    """Graders run in the process sandbox: the container runtime cannot load the Environment's image."""
    PROCESS_MODE_REQUESTED = "ProcessModeRequested"
    """The project asked for the process sandbox."""
    SANDBOX_UNAVAILABLE = "SandboxUnavailable"
    """Failed: no sandbox can run this Environment's graders here."""
    NO_GRADER_IMAGE = "NoGraderImage"
    """The Environment names no image to grade in."""

    # The Volume controller.
    SOURCE_MISSING = "SourceMissing"
    SIZE_EXCEEDED = "SizeExceeded"
    """Failed: the source is larger than `spec.size`."""

    # The export of a TrainingJob's outputs (`status.export.reason`).
    NO_OUTPUTS = "NoOutputs"
    SYMLINK_REJECTED = "SymlinkRejected"
    COPY_FAILED = "CopyFailed"

    # The controller registry, for a kind no controller runs (`controllers.stored_only`).
    NO_CONTROLLER = "NoController"

    # `status.summary.comparison.reason` when the before-and-after comparison is not made (the seeds' list).
    TOO_FEW_TASKS = "TooFewTasks"
    DIFFERENT_TASKS = "DifferentTasks"
    NONE_PASSED = "NonePassed"
    ALL_PASSED = "AllPassed"
    INCOMPLETE_EVENTS = "IncompleteEvents"

    # The reason of the GradingFailures condition: the verdict of the replies never scored.
    INFRASTRUCTURE_FAILURE = "InfrastructureFailure"

    # Shown, never stored: a comparison that names no reason.
    UNKNOWN = "Unknown"


WAITING_REASONS: frozenset[Reason] = frozenset(
    {Reason.ENVIRONMENT_NOT_READY, Reason.VOLUME_NOT_READY, Reason.MODEL_NOT_CACHED, Reason.WAITING_FOR}
)
"""Reasons of a Pending run that waits on something else becoming Ready: its controller requeues it."""
ADMISSION_REASONS: frozenset[Reason] = frozenset(
    {
        Reason.RUNTIME_NOT_FOUND,
        Reason.MODE_NOT_SUPPORTED,
        Reason.ENVIRONMENT_NOT_FOUND,
        Reason.ENVIRONMENT_VERSION_NOT_FOUND,
        Reason.RUNTIME_LACKS_ATTEMPT_API,
        Reason.INVALID_PARAMETERS,
        Reason.MODEL_NOT_PINNED,
        Reason.MODEL_NOT_FOUND,
        Reason.VOLUME_NOT_FOUND,
        Reason.VOLUME_REVISION_NOT_FOUND,
        Reason.SECRET_NOT_FOUND,
        Reason.TRAINING_JOB_NOT_FOUND,
        Reason.VOLUME_NOT_WRITABLE,
        Reason.RUNTIME_LACKS_OUTPUTS,
        Reason.TOO_FEW_HELD_OUT_TASKS,
    }
)
"""Reasons admission refuses a TrainingJob with (the Admitted condition is False for exactly these)."""


class ConditionType(StrEnum):
    """`status.conditions[].type`, kubectl style, derived from the status by `controllers.status.conditions`."""

    READY = "Ready"
    """An Environment: True once its image is verified."""
    ADMITTED = "Admitted"
    """A TrainingJob: False when admission refused it (its reason is one of ADMISSION_REASONS)."""
    ENVIRONMENT_READY = "EnvironmentReady"
    """A TrainingJob: False while it waits for its Environment."""
    SUCCEEDED = "Succeeded"
    SUSPENDED = "Suspended"
    CONTAINER_SANDBOX = "ContainerSandbox"
    """False when the graders run outside the Environment's image (the process sandbox), with the reason."""
    GRADING_FAILURES = "GradingFailures"
    """True when some replies were never scored (InfrastructureFailure): unscored, never a reward of 0."""
    EXPORTED = "Exported"
    """The seeds' condition: the exact Volume revision the outputs were committed to."""


def _represent_member(dumper: yaml.SafeDumper, member: StrEnum) -> yaml.Node:
    """A member is dumped as its string (`phase: Running`), never as a Python object tag."""
    return dumper.represent_str(str(member))


# Why at import: every document a command prints (a dry run's Job, `nodus get -o yaml`) may carry members, and
# PyYAML's safe dumper refuses a type it does not know; registering on SafeDumper covers yaml.safe_dump(_all).
yaml.SafeDumper.add_multi_representer(StrEnum, _represent_member)
