"""Shared by the WebGPU tests: whether an adapter is present (tests needing one skip, naming
the reason, when there is none; CI installs Mesa's lavapipe so they run there)."""

import functools

import pytest


@functools.lru_cache(maxsize=None)
def adapter_problem() -> str | None:
    """``None`` when a WebGPU adapter comes up, else why not."""
    try:
        from ember.runtime.webgpu import get_device
        get_device()
    except Exception as e:  # DeviceError (no adapter / no wgpu)
        return str(e)
    return None


needs_adapter = pytest.mark.skipif(
    adapter_problem() is not None,
    reason="no WebGPU adapter: install mesa-vulkan-drivers (and the wgpu package)")
