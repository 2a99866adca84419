"""Target tags: names that expand to a GPU's full attribute set (TVM-style
``Target("nvidia/nvidia-t4")``).

Each tag maps to a target kind and its attributes: ``arch`` (the CUDA compute capability as
``sm_XX``), ``max_threads_per_block`` (threads), ``max_shared_memory_per_block`` (bytes),
``thread_warp_size`` (threads) and ``l2_cache_size_bytes`` (bytes). The values follow NVIDIA's
data sheets and the CUDA programming guide's "Compute Capabilities" table (the shared memory per
block is the default static limit, 48 KiB, which every kernel may use without an opt-in).
"""

from __future__ import annotations

TAGS: dict[str, dict] = {
    "nvidia/nvidia-t4": {"kind": "cuda", "arch": "sm_75", "max_threads_per_block": 1024,
                         "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                         "l2_cache_size_bytes": 4 * 1024 * 1024},
    "nvidia/a100": {"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 1024,
                    "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                    "l2_cache_size_bytes": 40 * 1024 * 1024},
    "nvidia/h200": {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                    "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                    "l2_cache_size_bytes": 50 * 1024 * 1024},
}
