"""A rank's memory, planned and measured.

Planned (``RankProgram.memory_plan``): the bytes a rank holds while it runs its shard --
the weights its compiled segments read, their arenas (static plans, all alive at once), the
host values the executor keeps between steps (segment outputs, collective results, the
feeds) and the largest communication buffer a collective allocates beside its result
(all-gather's and reduce-scatter's staging copies, the pickled outputs sent back).

Measured: the process's resident set (``VmRSS``) and its high-water mark (``VmHWM``, reset by
writing ``5`` to ``/proc/self/clear_refs``; Linux ``proc(5)``). RSS also counts the
interpreter, the loaded libraries and whatever the compiler left on the heap, so it is a
cross-check of the plan's *growth* terms, not the same number.
"""

from __future__ import annotations

__all__ = ["rss_bytes", "rss_peak_bytes", "reset_rss_peak"]


def _status(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """This process's resident set size in bytes (``None`` without ``/proc``)."""
    return _status("VmRSS")


def rss_peak_bytes() -> int | None:
    """The resident set's high-water mark since the last ``reset_rss_peak`` (bytes)."""
    return _status("VmHWM")


def reset_rss_peak() -> bool:
    """Reset the high-water mark to the current RSS; ``False`` where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
