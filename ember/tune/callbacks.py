"""Tuning callbacks: ``callback(tuner, inputs, results)`` after each measured batch.

``log_to_file(path)`` appends every measurement to a records file; ``progress_bar(total)``
shows a tqdm bar per task with the best GFLOP/s so far, trials done and errors.
"""

from __future__ import annotations

import os
import sys

from .records import save_records


class log_to_file:  # noqa: N801 - AutoTVM's spelling of a callback factory
    """Append each measurement as a JSON line to ``path`` (flushed per batch, so an
    interrupted run keeps what it measured)."""

    def __init__(self, path: "str | os.PathLike"):
        self.path = os.fspath(path)
        d = os.path.dirname(self.path)
        if d:
            os.makedirs(d, exist_ok=True)

    def __call__(self, tuner, inputs, results) -> None:
        save_records(self.path, zip(inputs, results))  # (drops a line cut short first)

    log_extra = __call__  # measurements that are no trial (a tuner's anchor) are kept too


def _gflops(tuner) -> float:
    return tuner.best_flops / 1e9 if tuner.task.flop else 0.0


class progress_bar:  # noqa: N801
    """A tqdm progress bar of the trials of one task: ``[prefix] best GFLOP/s, errors``.

    ``total`` defaults to the ``n_trial`` of the run; the bar writes to ``file`` (stderr)."""

    def __init__(self, total: int | None = None, prefix: str = "", file=None):
        self.total = total
        self.prefix = prefix
        self.file = file or sys.stderr
        self.bar = None

    def start(self, tuner, n_trial: int) -> None:
        """Open the tqdm bar for a run of ``n_trial`` trials of ``tuner`` (``Tuner.tune`` calls it
        first)."""
        from tqdm import tqdm
        desc = self.prefix or tuner.task.name
        self.bar = tqdm(total=self.total or n_trial, desc=desc, file=self.file, leave=True,
                        dynamic_ncols=True, unit="trial")
        self._show(tuner)

    def _show(self, tuner) -> None:
        best = _gflops(tuner)
        cost = tuner.best_cost * 1e3 if tuner.best_cost < float("inf") else float("nan")
        self.bar.set_postfix_str(f"best {best:.2f} GFLOP/s {cost:.3f} ms, errors {tuner.errors}")

    def __call__(self, tuner, inputs, results) -> None:
        if self.bar is None:
            self.start(tuner, len(inputs))
        self.bar.update(len(inputs))
        self._show(tuner)

    def finish(self, tuner) -> None:
        """Show the final best GFLOP/s, ms and errors and close the bar (``Tuner.tune`` calls it
        last)."""
        if self.bar is not None:
            self._show(tuner)
            self.bar.close()
            self.bar = None
