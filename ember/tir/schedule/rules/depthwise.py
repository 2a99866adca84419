"""Channel-vectorized reductions (depthwise convolution, pooling in NHWC): placeholder rule that
declines until implemented."""

from __future__ import annotations


def depthwise_rule(func, target):
    """Not implemented yet: returns ``None`` (the generic rule applies)."""
    return None
