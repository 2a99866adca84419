"""Static memory planning: place intermediate tensors in one arena, reusing memory of tensors
whose lifetimes have ended (greedy by size, best-fit offset)."""

from __future__ import annotations

from typing import Sequence

ALIGN = 64


def _round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def plan_memory(tensors: Sequence[tuple[int, int, int]], align: int = ALIGN
                ) -> tuple[list[int], int]:
    """Offsets for tensors given as ``(nbytes, first_step, last_step)`` (inclusive lifetimes).

    Two tensors share bytes only if their lifetimes are disjoint. Offsets are ``align``-byte
    aligned (64 by default; the WebGPU runtime asks 256, the storage-binding offset alignment
    every adapter accepts).

    Returns:
        ``(offsets, arena_bytes)``.
    """
    order = sorted(range(len(tensors)), key=lambda i: (-tensors[i][0], tensors[i][1]))
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets = [0] * len(tensors)
    total = 0
    for i in order:
        size, first, last = tensors[i]
        size = _round_up(max(size, 1), align)
        live = sorted((o, s) for o, s, f, l in placed if not (l < first or last < f))
        best, cursor = None, 0
        for o, s in live:
            if o - cursor >= size and (best is None or o - cursor < best[1]):
                best = (cursor, o - cursor)
            cursor = max(cursor, o + s)
        off = best[0] if best is not None else cursor
        offsets[i] = off
        placed.append((off, size, first, last))
        total = max(total, off + size)
    return offsets, total
