"""The C thread pool (ember/codegen/threadpool.py): every index of a parallel loop runs exactly
once, for partitioned (per-thread ranges plus stealing) and shared-counter claiming, with more
threads than cores, more threads than chunks, and chunk sizes that do not divide the extent."""
import ctypes
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
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
static void tid_task(int64_t lo, int64_t hi, void* p) {
  for (int64_t i = lo; i < hi; ++i) ((uint64_t*)p)[i] = (uint64_t)pthread_self();
  usleep(300);  /* long enough for every awake thread to claim chunks */
}
void tid_run(int64_t n, uint64_t* ids) { ember_parallel_for(n, 1, tid_task, ids); }
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


def test_workers_beyond_a_lowered_thread_count_stay_out(lib):
    # workers started for 6 threads kept claiming chunks after ember_set_num_threads(2)
    lib.ember_set_pool_partition(ctypes.c_int(1))
    ids = np.zeros(96, np.uint64)
    lib.ember_set_num_threads(ctypes.c_int(6))
    lib.tid_run(ctypes.c_int64(ids.size), ids.ctypes.data_as(ctypes.c_void_p))
    assert len(set(ids.tolist())) <= 6
    for _ in range(3):
        ids[:] = 0
        lib.ember_set_num_threads(ctypes.c_int(2))
        lib.tid_run(ctypes.c_int64(ids.size), ids.ctypes.data_as(ctypes.c_void_p))
        assert np.all(ids != 0)
        assert len(set(ids.tolist())) <= 2, "more threads than ember_set_num_threads(2) ran"
    lib.ember_set_num_threads(ctypes.c_int(2))


def _conv_model(cin, cout, h, w, seed=0):
    """A one-Conv model (3x3, pads 1) and its float64 im2col reference ``ref(x)``; shapes that no
    other test uses give it a library of its own, whose pool has started no workers yet."""
    wt = (np.random.default_rng(seed).standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        "share", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(wt, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8

    def ref(x):
        xp = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
        cols = np.stack([xp[:, i:i + h, j:j + w] for i in range(3) for j in range(3)], 1)
        return np.einsum("ckhw,mck->mhw", cols, wt.reshape(cout, cin, 9).astype(np.float64))[None]
    return model, ref


def _tasks():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_models_sharing_a_library_keep_their_own_thread_count():
    """Two models with the same kernels share one library (content-hash cache), and the thread
    count lives in the library: the 1-thread model must not run on the pool that the 3-thread
    model (compiled after it) asked for, and the 3-thread model must still get its workers."""
    model, ref = _conv_model(5, 13, 37, 29)
    one = ember.compile(model, target="llvm -num-threads=1")
    three = ember.compile(model, target="llvm -num-threads=3")
    assert one.lib_path == three.lib_path  # the premise: one shared library
    x = np.random.default_rng(1).standard_normal((1, 5, 37, 29)).astype(np.float32)
    before = _tasks()
    np.testing.assert_allclose(one.run({"x": x})[0], ref(x), rtol=1e-4, atol=1e-5)
    assert _tasks() == before, "the 1-thread model started pool workers"
    np.testing.assert_allclose(three.run({"x": x})[0], ref(x), rtol=1e-4, atol=1e-5)
    assert _tasks() == before + 2, "the 3-thread model did not get its two workers"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_loaded_artifact_keeps_the_saved_targets_thread_count(tmp_path):
    # ember.load without num_threads ran a "-num-threads=1" model on all CPUs
    model, ref = _conv_model(6, 11, 31, 23)
    ember.compile(model, target="llvm -num-threads=1").save(tmp_path / "m.ember")
    loaded = ember.load(tmp_path / "m.ember")
    x = np.random.default_rng(2).standard_normal((1, 6, 31, 23)).astype(np.float32)
    before = _tasks()
    np.testing.assert_allclose(loaded.run({"x": x})[0], ref(x), rtol=1e-4, atol=1e-5)
    assert _tasks() == before, "the loaded 1-thread model started pool workers"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_profile_runs_kernels_at_the_models_thread_count():
    # the profiler called the kernels one by one without setting the model's thread count:
    # a 1-thread model profiled after a 3-thread model with the same library ran on 3 threads
    from ember.runtime.profiler import profile
    model, ref = _conv_model(7, 9, 33, 19)
    one = ember.compile(model, target="llvm -num-threads=1")
    three = ember.compile(model, target="llvm -num-threads=3")  # leaves the library at 3
    assert one.lib_path == three.lib_path
    x = np.random.default_rng(3).standard_normal((1, 7, 33, 19)).astype(np.float32)
    before = _tasks()
    report = profile(one, {"x": x}, repeat=1, warmup=1)
    assert _tasks() == before, "profiling the 1-thread model started pool workers"
    assert len(report.to_dict()["kernels"]) >= 1
    np.testing.assert_allclose(one.run({"x": x})[0], ref(x), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; needs 2 CPUs for a default pool worker")
def test_tune_worker_kernel_without_a_thread_count_runs_at_the_default():
    # the worker set the kernel library's thread count only when the request named one: a
    # request without one ran at whatever an earlier request on the same library had set
    from ember.tune import worker
    src = _SRC + r"""
int32_t ember_kernel(uint64_t* ids) { ember_parallel_for(64, 1, tid_task, ids); return 0; }
"""
    path = build_library(src)
    req = {"lib": path, "specs": [[[64], "uint64"]], "num_inputs": 0, "seed": 0}
    fn, args = worker._prepare({**req, "num_threads": 1})
    fn(*worker._ptrs(args))
    before = _tasks()
    fn, args = worker._prepare(req)
    fn(*worker._ptrs(args))
    assert _tasks() > before, "the default (all CPUs) started no pool worker"


def test_each_kernel_function_runs_on_its_own_target_thread_count(monkeypatch):
    """Two ``KernelFunction``s of the same code share one library and so its thread count:
    the one built for ``-num-threads=1`` must not leave the other on 1 thread."""
    from ember import te
    from ember.runtime import kernel as K
    calls = []

    class Spy:  # the library, recording the thread counts set on it
        def __init__(self, lib):
            self._lib = lib

        def __getattr__(self, name):
            fn = getattr(self._lib, name)
            if name != "ember_set_num_threads":
                return fn

            def set_threads(n):
                calls.append(int(getattr(n, "value", n)))
                fn(n)
            return set_threads
    real_load = K.load_library
    monkeypatch.setattr(K, "load_library", lambda path: Spy(real_load(path)))
    x = te.placeholder((64, 4096), "float32", "x")
    y = te.compute((64, 4096), lambda i, j: x[i, j] + te.const(1.0, "float32"), name="y")
    one = K.compile_prim_func(te.create_prim_func([x, y], "add1"), "llvm -num-threads=1")
    auto = K.compile_prim_func(te.create_prim_func([x, y], "add1"), "llvm")
    a = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    out = np.empty_like(a)
    one(a, out)
    assert calls and calls[-1] == 1
    auto(a, out)
    assert calls[-1] == 0  # all online CPUs again, not the count the other kernel set
    np.testing.assert_allclose(out, a + 1, rtol=1e-6)
