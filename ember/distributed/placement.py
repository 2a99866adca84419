"""Device meshes and tensor placements (``Replicate``, ``Shard(axis)``).

A placement says how a tensor of the graph is held by the ranks of a one-dimensional mesh:
``Replicate()``: every rank holds all of it; ``Shard(axis)``: rank r holds the contiguous
slice ``[offset_r, offset_r + size_r)`` of ``axis``. Splits may be uneven: ``split_sizes``
deals ``blocks`` indivisible units (attention heads, columns) over the ranks, the first ranks
taking one more when they do not divide evenly (8 heads over 3 ranks: 3, 3, 2), as
PyTorch's ``torch.distributed.tensor`` does for ``Shard`` placements.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceMesh", "Replicate", "Shard", "split_sizes", "shard_extents"]


@dataclass(frozen=True)
class Replicate:
    """Every rank holds the whole tensor."""

    def __str__(self):
        return "R"


@dataclass(frozen=True)
class Shard:
    """Rank r holds its contiguous slice of ``axis`` (see ``shard_extents``)."""

    axis: int

    def __str__(self):
        return f"S({self.axis})"


@dataclass(frozen=True)
class DeviceMesh:
    """A one-dimensional mesh: ``devices[r]`` is rank r's device (``"cpu:0"``...)."""

    devices: tuple

    @property
    def size(self) -> int:
        return len(self.devices)


def split_sizes(blocks: int, n: int) -> list[int]:
    """``blocks`` units dealt over ``n`` ranks: ``[q + 1] * (blocks % n) + [q] * (n - blocks % n)``
    with ``q = blocks // n``."""
    q, rem = divmod(int(blocks), int(n))
    return [q + 1] * rem + [q] * (n - rem)


def shard_extents(size: int, blocks: int, n: int) -> list[tuple[int, int]]:
    """``(offset, extent)`` per rank of an axis of ``size`` elements split in ``blocks`` units
    (``size % blocks == 0``) over ``n`` ranks."""
    unit = size // blocks
    out, off = [], 0
    for c in split_sizes(blocks, n):
        out.append((off, c * unit))
        off += c * unit
    return out
