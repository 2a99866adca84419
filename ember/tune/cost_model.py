"""Learned cost models: gradient-boosted trees (xgboost) that rank candidate programs.

``XGBoostCostModel`` fits ``features -> normalized throughput`` (0 for failed candidates) with a
pairwise ranking objective, since tuners only need to know which candidates are faster.
``pairwise_accuracy`` and ``top_k_recall`` measure a model's ranking on held-out programs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import TuningError


def _xgb():
    try:
        import xgboost
    except ImportError:
        raise TuningError("the xgboost cost model needs the xgboost package: "
                          "pip install 'ember[tune]' (or pip install xgboost)") from None
    return xgboost


class XGBoostCostModel:
    """A ranking model over feature vectors.

    ``fit(X, y)``: ``X`` is ``[n, d]`` features, ``y`` throughputs (higher is better; 0 for
    errors). ``predict(X)``: scores, higher is predicted faster (comparable within one model
    only). ``loss``: ``"rank"`` (``rank:pairwise``) or ``"reg"`` (squared error on normalized
    throughput). Training uses ``nthread`` threads (1 by default: measurement runs beside it).
    """

    def __init__(self, loss: str = "rank", num_boost_round: int = 60, max_depth: int = 6,
                 eta: float = 0.2, nthread: int = 1, seed: int = 0):
        if loss not in ("rank", "reg"):
            raise TuningError(f"unknown cost-model loss {loss!r} (rank or reg)")
        self.loss = loss
        self.num_boost_round = num_boost_round
        self.params = {"max_depth": max_depth, "eta": eta, "gamma": 1e-4, "min_child_weight": 1,
                       "subsample": 1.0, "nthread": nthread, "seed": seed,
                       "objective": "rank:pairwise" if loss == "rank" else "reg:squarederror",
                       "verbosity": 0}
        self.booster = None

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def fit(self, X: np.ndarray, y: Sequence[float]) -> None:
        """Train on features ``X`` and throughputs ``y`` (needs at least two distinct y)."""
        xgb = _xgb()
        y = np.asarray(y, np.float64)
        if len(y) < 2 or float(y.max()) <= 0:
            return
        y = y / y.max()
        dtrain = xgb.DMatrix(np.asarray(X, np.float32), label=y)
        if self.loss == "rank":
            dtrain.set_group([len(y)])
        self.booster = xgb.train(self.params, dtrain, self.num_boost_round)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of ``X`` (zeros before the model is trained)."""
        X = np.asarray(X, np.float32)
        if self.booster is None:
            return np.zeros(len(X))
        return self.booster.predict(_xgb().DMatrix(X))


def pairwise_accuracy(pred: Sequence[float], truth: Sequence[float]) -> float:
    """Fraction of pairs with different ``truth`` that ``pred`` orders the same way."""
    p, t = np.asarray(pred, np.float64), np.asarray(truth, np.float64)
    dp = np.sign(p[:, None] - p[None, :])
    dt = np.sign(t[:, None] - t[None, :])
    mask = dt != 0
    return float((dp[mask] == dt[mask]).mean()) if mask.any() else float("nan")


def top_k_recall(pred: Sequence[float], truth: Sequence[float], k: int) -> float:
    """Fraction of the true best ``k`` (highest ``truth``) among the predicted best ``k``."""
    p, t = np.asarray(pred), np.asarray(truth)
    k = min(k, len(t))
    return len(set(np.argsort(-p)[:k]) & set(np.argsort(-t)[:k])) / k if k else float("nan")
