"""Runtime: the graph executor, memory planning, compiled models and artifacts."""

from .module import CompiledModel  # noqa: F401
from .artifact import load_artifact, save_artifact  # noqa: F401
