"""nodus resource models: every kind of `nodus.dev/v1` and `nodus.dev/v1beta1`, and how to read them.

Who uses it: everything above it (builder, reconciler, CLI, SDK). Start with `parse_resources(paths)`;
the kinds are importable by name (`from nodus.specs import TrainingJob`).
"""

from nodus.specs.agent import Agent, AgentGroup, AgentRun
from nodus.specs.base import Metadata, Resource, SpecModel
from nodus.specs.budget import Budget
from nodus.specs.environment import Environment
from nodus.specs.inference import InferenceEndpoint
from nodus.specs.job import Job
from nodus.specs.parse import Parsed, ParseResult, Problem, Source, parse_resources, parse_text
from nodus.specs.registry import BY_KIND, KINDS, RESOURCE_ADAPTER, kind_for_name
from nodus.specs.secret import Secret
from nodus.specs.training import TrainingJob, TrainingRuntime
from nodus.specs.volume import Volume

__all__ = [
    "BY_KIND",
    "KINDS",
    "RESOURCE_ADAPTER",
    "Agent",
    "AgentGroup",
    "AgentRun",
    "Budget",
    "Environment",
    "InferenceEndpoint",
    "Job",
    "Metadata",
    "ParseResult",
    "Parsed",
    "Problem",
    "Resource",
    "Secret",
    "Source",
    "SpecModel",
    "TrainingJob",
    "TrainingRuntime",
    "Volume",
    "kind_for_name",
    "parse_resources",
    "parse_text",
]
