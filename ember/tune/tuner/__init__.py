"""Template tuners: random, grid, genetic and model-based (xgboost + simulated annealing)."""

from .base import Tuner  # noqa: F401
from .ga import GATuner  # noqa: F401
from .sa import SimulatedAnnealingOptimizer  # noqa: F401
from .simple import GridSearchTuner, RandomTuner  # noqa: F401
from .xgb import XGBTuner  # noqa: F401

TUNERS = {"random": RandomTuner, "grid": GridSearchTuner, "ga": GATuner, "xgb": XGBTuner}
