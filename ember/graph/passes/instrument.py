"""Pass instruments: hooks a ``PassContext`` calls around every pass it runs.

An instrument may define any of ``enter_pass_ctx()``, ``exit_pass_ctx()``,
``should_run(mod, info) -> bool``, ``run_before_pass(mod, info)``, ``run_after_pass(mod, info)``
(``info`` is the pass's ``PassInfo``). Two are provided: ``PassTimingInstrument`` (wall time per
pass) and ``DumpIR`` (the module's text before and after each pass, one file each).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


class PassInstrument:
    """Base class with no-op hooks (subclass and override what you need)."""

    def enter_pass_ctx(self):
        """Called when the ``PassContext`` holding this instrument is entered."""
        pass

    def exit_pass_ctx(self):
        """Called when the ``PassContext`` holding this instrument is exited."""
        pass

    def should_run(self, mod, info) -> bool:
        """Return False to skip the pass ``info`` on ``mod`` (the default runs every pass)."""
        return True

    def run_before_pass(self, mod, info):
        """Called before pass ``info`` runs on ``mod``."""
        pass

    def run_after_pass(self, mod, info):
        """Called after pass ``info`` ran; ``mod`` is its result."""
        pass


class PassTimingInstrument(PassInstrument):
    """Wall-clock time of every pass run, in order.

    Attributes:
        timings: ``[(pass name, seconds), ...]`` in run order (a pass run twice appears twice).
    """

    def __init__(self):
        self.timings: list[tuple[str, float]] = []
        self._start: list[float] = []

    def run_before_pass(self, mod, info):
        """Start the clock for pass ``info``."""
        self._start.append(time.perf_counter())

    def run_after_pass(self, mod, info):
        """Append ``(info.name, seconds)`` to ``timings``."""
        self.timings.append((info.name, time.perf_counter() - self._start.pop()))

    def totals(self) -> dict[str, float]:
        """Seconds per pass name, summed over its runs."""
        out: dict[str, float] = {}
        for n, t in self.timings:
            out[n] = out.get(n, 0.0) + t
        return out

    def report(self) -> str:
        """A text table: pass, runs, total ms, share of the total."""
        tot = self.totals()
        runs: dict[str, int] = {}
        for n, _ in self.timings:
            runs[n] = runs.get(n, 0) + 1
        all_s = sum(tot.values()) or 1e-12
        w = max([len(n) for n in tot] + [4])
        lines = [f"{'pass':<{w}}  runs  total ms  share"]
        for n, t in sorted(tot.items(), key=lambda kv: -kv[1]):
            lines.append(f"{n:<{w}}  {runs[n]:>4}  {t * 1e3:>8.2f}  {t / all_s:>5.1%}")
        lines.append(f"{'total':<{w}}  {len(self.timings):>4}  {all_s * 1e3:>8.2f}")
        return "\n".join(lines)


class DumpIR(PassInstrument):
    """Writes the module text before and after each pass to ``directory``:
    ``NNN_<Pass>.before.txt`` and ``NNN_<Pass>.after.txt`` (NNN counts pass runs).

    Args:
        directory: created when missing.
        max_const_elems: constants with more elements are elided as ``...`` (bound weights would
            otherwise fill the dump); ``None`` writes every value (the text then parses back).
    """

    def __init__(self, directory: "str | os.PathLike", max_const_elems: int | None = 16):
        self.directory = Path(directory)
        self.max_const_elems = max_const_elems
        self.count = 0
        self.files: list[Path] = []

    def _write(self, mod, info, when):
        from ..text import print_module
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self.count:03d}_{info.name}.{when}.txt"
        path.write_text(print_module(mod, self.max_const_elems))
        self.files.append(path)

    def run_before_pass(self, mod, info):
        """Write ``NNN_<pass>.before.txt`` with the text of ``mod``."""
        self._write(mod, info, "before")

    def run_after_pass(self, mod, info):
        """Write ``NNN_<pass>.after.txt`` with the text of ``mod`` and count the run."""
        self._write(mod, info, "after")
        self.count += 1


class PrintIR(PassInstrument):
    """Prints the module text after each pass (or only after the passes named in ``only``)."""

    def __init__(self, only=(), max_const_elems: int | None = 16, stream=None):
        self.only = set(only)
        self.max_const_elems = max_const_elems
        self.stream = stream

    def run_after_pass(self, mod, info):
        """Print ``# after <pass>`` and the text of ``mod`` to ``stream`` (unless ``only`` excludes
        the pass)."""
        if self.only and info.name not in self.only:
            return
        from ..text import print_module
        print(f"# after {info.name}\n{print_module(mod, self.max_const_elems)}", file=self.stream)
