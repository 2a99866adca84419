"""Template-free search (Ansor-style): sketches derived from a PrimFunc by rules, random
sampling of concrete programs, evolutionary search against an online-trained cost model, and a
task scheduler spreading the budget over a model's kernels by expected gain."""

from .evolution import SearchPolicy, SearchTask  # noqa: F401
from .scheduler import TaskScheduler, tune_tasks_search  # noqa: F401
from .sketch import (Sketch, Step, Trace, apply_trace, crossover, generate_sketches,  # noqa: F401
                     mutate, sample)
