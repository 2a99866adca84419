"""The C thread pool (ember/codegen/threadpool.py): every index of a parallel loop runs exactly
once, for partitioned (per-thread ranges plus stealing) and shared-counter claiming, with more
threads than cores, more threads than chunks, and chunk sizes that do not divide the extent."""
import ctypes

import numpy as np
import pytest

from ember.codegen.build import build_library, load_library
from ember.codegen.c import C_PRELUDE

_SRC = C_PRELUDE + r"""
typedef struct { int32_t* hits; } cov_ctx;
static void cov_task(int64_t lo, int64_t hi, void* p) {
  cov_ctx* c = (cov_ctx*)p;
  for (int64_t i = lo; i < hi; ++i) __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}
void cov_run(int64_t n, int64_t chunk, int32_t* hits, int64_t reps) {
  cov_ctx c = {hits};
  for (int64_t r = 0; r < reps; ++r) ember_parallel_for(n, chunk, cov_task, &c);
}
"""


@pytest.fixture(scope="module")
def lib():
    return load_library(build_library(_SRC))


@pytest.mark.parametrize("partition", [1, 0])
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_every_index_runs_once(lib, partition, threads):
    lib.ember_set_pool_partition(ctypes.c_int(partition))
    lib.ember_set_num_threads(ctypes.c_int(threads))
    for n, chunk in [(1, 1), (2, 1), (5, 2), (31, 1), (64, 2), (1000, 7), (1000, 1000), (3, 8),
                     (4097, 128)]:
        reps = 5
        hits = np.zeros(n, np.int32)
        lib.cov_run(ctypes.c_int64(n), ctypes.c_int64(chunk),
                    hits.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(reps))
        np.testing.assert_array_equal(hits, np.full(n, reps, np.int32),
                                      err_msg=f"n={n} chunk={chunk}")
    lib.ember_set_pool_partition(ctypes.c_int(1))
    lib.ember_set_num_threads(ctypes.c_int(2))
