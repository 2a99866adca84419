"""ember.distributed: tensor- and pipeline-parallel GPT-2/BERT-style models on 2, 3 and 4 local
MPI ranks against the single-device compiled model (rtol 1e-5) and onnxruntime; memory
budgets; failing and hanging ranks."""

import os
import signal

import numpy as np
import pytest

import ember
from ember.distributed import (load_sharded, mpi_available, partition_for_distributed,
                               split_sizes)
from ember.errors import (ArtifactError, CollectiveTimeoutError, DeviceError,
                          DistributedError, InputError, RankFailedError, ShardingError)
from ember.frontend.onnx import from_onnx
from ember.testing.models import bert_encoder, bert_inputs, gpt2_decoder

needs_mpi = pytest.mark.skipif(not mpi_available(),
                               reason="mpi4py with an MPI library is not installed "
                                      "(pip install 'ember[distributed]')")


def _gpt2(heads=4, hidden=32, layers=1):
    m = gpt2_decoder(num_layers=layers, hidden=hidden, heads=heads, seq=8, vocab=96,
                     max_position=8)
    ids = np.random.default_rng(1).integers(0, 96, (1, 8)).astype(np.int64)
    return m, {"input_ids": ids}


def _bert(heads=4, hidden=32, layers=1):
    m = bert_encoder(num_layers=layers, hidden=hidden, heads=heads, seq=8, vocab=64,
                     max_position=16)
    return m, bert_inputs(m, pad=2)


def _references(model, feeds):
    """Single-device compiled outputs, checked against onnxruntime first."""
    mod, params = from_onnx(model)
    single = ember.build(mod, "llvm", params).run(feeds)
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(single, sess.run(None, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    return mod, params, single


_CLUSTERS = {}


@pytest.fixture(scope="module")
def clusters():
    from ember.distributed import DeviceCluster

    def get(n):
        c = _CLUSTERS.get(n)
        if c is None or c.closed:
            c = _CLUSTERS[n] = DeviceCluster([f"cpu:{i}" for i in range(n)], timeout=30)
        return c
    yield get
    for c in _CLUSTERS.values():
        c.close()
    _CLUSTERS.clear()


def _run_sharded(cluster, mod, params, feeds, strategy, **kw):
    with cluster:
        sharded = partition_for_distributed(mod, params, strategy=strategy, **kw)
        model = ember.build(sharded, target="llvm")
    return sharded, model, model.run(feeds)


def test_split_sizes_match_numpy_array_split():
    for blocks in range(1, 20):
        for n in range(1, 6):
            ref = [len(a) for a in np.array_split(np.arange(blocks), n)]
            assert split_sizes(blocks, n) == ref


@needs_mpi
@pytest.mark.parametrize("n,heads,builder", [(2, 4, _gpt2), (3, 8, _gpt2), (2, 4, _bert),
                                             (3, 4, _bert)])
def test_tensor_parallel_equals_single_device(clusters, n, heads, builder):
    model, feeds = builder(heads=heads)
    mod, params, single = _references(model, feeds)
    sharded, dm, outs = _run_sharded(clusters(n), mod, params, feeds, "tensor")
    assert sharded.strategy == "tensor"
    for a, b in zip(outs, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    text = sharded.text(n - 1)
    # Megatron layers: column-parallel Q/K/V/MLP-up, all-reduce after the row-parallel
    # projections and the vocabulary-parallel embedding
    assert text.count("dist.all_reduce") == 3
    # uneven split: the last rank holds heads // n whole heads
    dh = 32 // heads
    assert f"newshape=[1, 8, {heads // n}, {dh}]" in text
    assert sum(sharded.weight_bytes) < n * sharded.info["total_weight_bytes"]
    if builder is _gpt2:  # vocabulary-parallel LM head: logits all-gathered over the vocab
        assert "dist.all_gather" in text and f"sizes={split_sizes(96, n)}" in text


@needs_mpi
@pytest.mark.parametrize("n,builder", [
    (2, _bert), pytest.param(3, _gpt2, marks=pytest.mark.slow(
        reason="a second pipeline configuration: 3 more shards to compile"))])
def test_pipeline_parallel_equals_single_device(clusters, n, builder, tmp_path):
    model, feeds = builder()
    mod, params, single = _references(model, feeds)
    sharded, dm, outs = _run_sharded(clusters(n), mod, params, feeds, "pipeline")
    assert len(sharded.info["stages"]) == n
    for a, b in zip(outs, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # the shards and their plan save and load as one artifact that builds to the same model
    path = tmp_path / "sharded.zip"
    sharded.save(path)
    loaded = load_sharded(path)
    assert loaded.strategy == "pipeline" and loaded.weight_bytes == sharded.weight_bytes
    with clusters(n):
        again = ember.build(loaded, target="llvm")
    for a, b in zip(again.run(feeds), single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ArtifactError):
        load_sharded(tmp_path / "bad.zip")
    # each weight lives on exactly one stage
    names = [set(s.params) for s in sharded.shards]
    assert sum(len(s) for s in names) == len(set().union(*names)) == len(params)
    # another model built on the same ranks does not replace this one
    with clusters(n):
        tp = ember.build(partition_for_distributed(mod, params, strategy="tensor"), "llvm")
    for m in (dm, tp):
        for a, b in zip(m.run(feeds), single):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # micro-batches stream through the stages
    rng = np.random.default_rng(7)
    batches = [dict(feeds, input_ids=rng.integers(0, 64, (1, 8)).astype(np.int64))
               for _ in range(3)]
    got = dm.run_batches(batches)
    single_model = ember.build(mod, "llvm", params)
    for b, outs_b in zip(batches, got):
        for a, r in zip(outs_b, single_model.run(b)):
            np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-5)


_SLOW_MATRIX = "another cell of the ranks x model x strategy matrix: more shards to compile"


@needs_mpi
@pytest.mark.parametrize("n,strategy,builder,heads", [
    (2, "pipeline", _gpt2, 4),
    pytest.param(3, "pipeline", _bert, 4, marks=pytest.mark.slow(reason=_SLOW_MATRIX)),
    pytest.param(4, "tensor", _gpt2, 6, marks=pytest.mark.slow(reason=_SLOW_MATRIX)),
    pytest.param(4, "tensor", _bert, 6, marks=pytest.mark.slow(reason=_SLOW_MATRIX)),
    pytest.param(4, "pipeline", _gpt2, 4, marks=pytest.mark.slow(reason=_SLOW_MATRIX)),
    pytest.param(4, "pipeline", _bert, 4, marks=pytest.mark.slow(reason=_SLOW_MATRIX))])
def test_rank_count_model_strategy_matrix(clusters, n, strategy, builder, heads):
    """The cells the two tests above leave out: 2, 3 and 4 ranks, GPT-2- and BERT-style,
    tensor and pipeline parallel, uneven (6 heads over 4 ranks: 2, 2, 1, 1; pipeline stages
    of unequal bindings), against the single-device model (rtol 1e-5)."""
    model, feeds = builder(heads=heads, hidden=8 * heads)
    mod, params, single = _references(model, feeds)
    sharded, _, outs = _run_sharded(clusters(n), mod, params, feeds, strategy)
    for a, b in zip(outs, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    if strategy == "tensor":
        sizes = split_sizes(heads, n)
        assert len(set(sizes)) > 1
        for r in range(n):
            assert f"newshape=[1, 8, {sizes[r]}, 8]" in sharded.text(r)
    else:
        stages = sharded.info["stages"] + [len(mod.main.bindings)]
        lengths = [b - a for a, b in zip(stages, stages[1:])]
        assert len(lengths) == n and min(lengths) > 0


def _big_vocab_gpt2():
    """Weights dominated by the embedding and LM head (2 x 2048 x 64 floats of 1.3 MB), small
    activations (8 tokens): a model whose weights exceed a budget its shards fit."""
    m = gpt2_decoder(num_layers=1, hidden=64, heads=4, seq=8, vocab=2048, max_position=8)
    ids = np.random.default_rng(3).integers(0, 2048, (1, 8)).astype(np.int64)
    return m, {"input_ids": ids}


@needs_mpi
def test_auto_splits_a_model_over_budget_until_every_rank_peak_fits(clusters):
    """The weights exceed memory_per_device; "auto" shards them and every rank's planned peak
    (weights + arenas + host values + communication buffers) stays under it; the ranks'
    measured memory agrees with the plan (a run grows the resident set by no more than its
    planned arenas, values and buffers; a traced run allocates what the plan says)."""
    model, feeds = _big_vocab_gpt2()
    mod, params, single = _references(model, feeds)
    total = sum(a.nbytes for a in params.values())
    budget = int(total * 0.8)    # weights 1.25 MB; a rank's peak ~0.97 MB (0.63 of weights)
    sharded, dm, outs = _run_sharded(clusters(2), mod, params, feeds, "auto",
                                     memory_per_device=budget)
    assert total > budget and sharded.strategy == "tensor"
    for a, b in zip(outs, single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for r, m in enumerate(dm.info["memory"]):
        assert m["peak"] == m["weights"] + m["arenas"] + m["host_values"] + m["comm_buffers"]
        assert dm.info["peak_bytes"][r] == m["peak"] <= budget, (m, budget)
        # the kernels' weights are the shard's (plus rank 0's (V, 1) bounds column)
        assert dm.weight_bytes[r] <= m["weights"] <= dm.weight_bytes[r] + 2048 * 4
        st = dm.last_stats[r]
        growth = st["rss_peak_run"] - st["rss_before_run"]
        assert 0 <= growth <= m["arenas"] + m["host_values"] + m["comm_buffers"] + (1 << 20)
    # a traced run allocates on the heap what the plan says its values and buffers take
    # (measured 2.7% more: Python objects around the arrays)
    for r, t in enumerate(dm.measure_memory(feeds)):
        assert 0.9 * t["run_allocations"] <= t["traced_peak_run"] <= \
            t["run_allocations"] + (64 << 10), (r, t)


@needs_mpi
def test_a_rank_whose_planned_peak_exceeds_the_budget_is_refused(clusters):
    """A budget the rank's weights fit but not its whole peak: the build names the rank, the
    terms and the budget."""
    model, feeds = _big_vocab_gpt2()
    mod, params = from_onnx(model)
    with clusters(2):
        sharded = partition_for_distributed(mod, params, "tensor")
        budget = max(sharded.weight_bytes) + 4096
        sharded = partition_for_distributed(mod, params, "tensor", memory_per_device=budget)
        with pytest.raises(ShardingError) as e:
            ember.build(sharded, target="llvm")
    msg = str(e.value)
    assert f"memory_per_device={budget}" in msg and "planned peak" in msg
    assert "rank 0" in msg and "arenas" in msg


def test_a_model_that_cannot_fit_names_the_largest_tensor_and_budget():
    model, _ = _gpt2(heads=4, hidden=64)
    mod, params = from_onnx(model)
    with pytest.raises(ShardingError) as e:
        partition_for_distributed(mod, params, "auto", memory_per_device=4096, num_ranks=2)
    msg = str(e.value)
    assert "memory_per_device=4096" in msg and "largest" in msg
    biggest = max(params, key=lambda k: params[k].nbytes)
    assert f"largest tensor is {biggest} {params[biggest].shape}" in msg
    assert f"({params[biggest].nbytes} bytes)" in msg
    # and each strategy's reason: the bytes a rank would hold
    assert "tensor: a rank holds" in msg and "pipeline:" in msg


@needs_mpi
def test_bad_feeds_are_input_errors_and_leave_the_cluster_usable(clusters):
    """A feed of the wrong dtype or shape was a RankFailedError from rank 0 that marked the
    cluster unusable (a new DeviceCluster was needed); it is an InputError from the driver."""
    model, feeds = _gpt2()
    mod, params, single = _references(model, feeds)
    cluster = clusters(2)
    _, dm, _ = _run_sharded(cluster, mod, params, feeds, "tensor")
    ids = feeds["input_ids"]
    with pytest.raises(InputError, match="'input_ids': expected dtype int64, got float32"):
        dm.run({"input_ids": ids.astype(np.float32)})
    with pytest.raises(InputError, match=r"'input_ids': expected shape \(1, 8\), got \(1, 4\)"):
        dm.run({"input_ids": ids[:, :4]})
    assert not cluster.broken
    np.testing.assert_allclose(dm.run(feeds)[0], single[0], rtol=1e-5, atol=1e-5)


@needs_mpi
def test_idle_ranks_do_not_take_the_cores(clusters):
    """Idle spawned ranks polled every 1 ms, ~3% of a core each (9 ranks in this module's
    clusters); after a second idle they poll every 10 ms (~0.7%)."""
    import time
    cluster = clusters(2)
    cluster.check_usable()
    time.sleep(1.5)

    def ticks(pid):
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        return int(st[11]) + int(st[12])     # utime + stime
    if not os.path.exists(f"/proc/{cluster.pids[0]}/stat"):
        pytest.skip("no /proc to read the ranks' CPU time from")
    before = [ticks(p) for p in cluster.pids]
    time.sleep(4.0)
    used = [(ticks(p) - b) / os.sysconf("SC_CLK_TCK") for p, b in zip(cluster.pids, before)]
    assert max(used) < 0.08, f"idle ranks used {used} s of CPU in 4 s"


def test_bad_cluster_arguments():
    from ember.distributed import DeviceCluster
    with pytest.raises(ShardingError, match="strategy"):
        partition_for_distributed(*from_onnx(_gpt2()[0]), strategy="data", num_ranks=2)
    with pytest.raises(ShardingError, match="number of ranks"):
        partition_for_distributed(*from_onnx(_gpt2()[0]), strategy="tensor")
    with pytest.raises(DistributedError, match="unknown device"):
        DeviceCluster(["tpu:0"])


def test_gpu_ranks_without_a_gpu_or_nccl_say_what_to_install():
    """GPU devices select the NCCL communicator; here (no GPU, maybe no NCCL wheel) that is a
    DeviceError naming what is missing and what to install."""
    from ember.distributed import DeviceCluster
    from ember.distributed.comm_nccl import check_nccl
    try:
        check_nccl([0, 1])
    except DeviceError:
        pass
    else:
        pytest.skip("this machine has 2 GPUs with NCCL: bench/gpu.py checks NCCL there")
    for devices in (["gpu:0", "gpu:1"], ["cuda:0", "cuda:1"], ["gpu0", "gpu1"]):
        with pytest.raises(DeviceError) as e:
            DeviceCluster(devices)
        msg = str(e.value)
        assert "pip install 'ember[nccl]'" in msg or ("NCCL" in msg and "NVIDIA GPU" in msg)


def _own_cluster(timeout):
    """A fresh 2-rank cluster (a failure makes a cluster unusable) and the GPT-2 model."""
    from ember.distributed import DeviceCluster
    model, feeds = _gpt2()
    return (DeviceCluster(["cpu:0", "cpu:1"], timeout=timeout), feeds) + from_onnx(model)


@needs_mpi
def test_a_rank_that_fails_names_the_rank_and_the_cluster_restarts(clusters):
    model, feeds = _gpt2()
    mod, params = from_onnx(model)
    cluster = clusters(2)
    restarts = cluster.restarts
    with cluster:
        sharded = partition_for_distributed(mod, params, strategy="tensor")
        good = ember.build(sharded, target="llvm")
        single = ember.build(mod, "llvm", params).run(feeds)
        bad = partition_for_distributed(mod, params, strategy="tensor")
        w = sorted(bad.shards[1].params)[0]
        bad.shards[1].params[w] = np.zeros((3, 3), np.float32)  # a corrupt shard
        with pytest.raises(RankFailedError) as e:
            ember.build(bad, target="llvm")
    assert e.value.rank == 1 and "rank 1" in str(e.value)
    assert e.value.error_type == "ShapeMismatchError"
    old = list(cluster.pids)
    # the next run restarts the ranks and rebuilds the models built on them
    for a, b in zip(good.run(feeds), single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert cluster.restarts == restarts + 1 and cluster.pids != old
    _wait_gone(old)


def _wait_gone(pids, seconds=20.0):
    """The retired ranks exit (none is left behind)."""
    import time
    deadline = time.time() + seconds
    alive = pids
    while time.time() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return
        time.sleep(0.1)
    raise AssertionError(f"retired ranks {alive} are still running")


def _alive(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@needs_mpi
@pytest.mark.parametrize("strategy", ["pipeline", "tensor"])
def test_a_data_error_on_one_rank_ends_the_run_and_the_cluster_restarts(clusters, strategy):
    """An id outside the vocabulary is an InputError on the rank that looks it up (rank 0: the
    pipeline's first stage; the vocabulary-parallel embedding's bound check); the others, which
    wait for it in a collective, are aborted at once (no waiting out the 30 s timeout), and the
    next run restarts the cluster and gives the single-device result. Negative ids count from
    the end of the vocabulary on every rank, as on one device."""
    import time
    model, feeds = _gpt2()
    mod, params, single = _references(model, feeds)
    cluster = clusters(2)
    _, dm, _ = _run_sharded(cluster, mod, params, feeds, strategy)
    restarts = cluster.restarts
    bad = feeds["input_ids"].copy()
    bad[0, 3] = 96
    t0 = time.perf_counter()
    with pytest.raises(RankFailedError) as e:
        dm.run({"input_ids": bad})
    assert time.perf_counter() - t0 < 10
    assert e.value.rank == 0 and e.value.error_type == "InputError"
    assert "rank 0" in str(e.value) and "[-96, 95]" in str(e.value)
    old = list(cluster.pids)
    for a, b in zip(dm.run(feeds), single):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert cluster.restarts == restarts + 1
    _wait_gone(old)
    neg = feeds["input_ids"].copy()
    neg[0, 2] = -5
    ref = ember.build(mod, "llvm", params).run({"input_ids": neg})
    for a, b in zip(dm.run({"input_ids": neg}), ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@needs_mpi
def test_ranks_of_another_ember_version_are_refused(monkeypatch):
    from ember.distributed import DeviceCluster
    monkeypatch.setattr(ember, "__version__", "0.0.0-driver")
    with pytest.raises(DistributedError) as e:
        DeviceCluster(["cpu:0", "cpu:1"], timeout=3)
    assert e.value.rank == 0 and "version" in str(e.value)


@needs_mpi
def test_a_cluster_that_cannot_be_started_is_a_typed_error(tmp_path):
    """MPICH's process manager ends the whole job when it cannot exec the ranks' program, so
    the interpreter is checked first."""
    from ember.distributed import DeviceCluster
    with pytest.raises(DistributedError, match="does not exist or is not executable"):
        DeviceCluster(["cpu:0", "cpu:1"], python=tmp_path / "no-python")


def test_a_sharded_artifact_of_another_ember_version_is_refused(tmp_path):
    import json
    import zipfile
    mod, params = from_onnx(_gpt2()[0])
    sharded = partition_for_distributed(mod, params, "tensor", num_ranks=2)
    path = tmp_path / "s.zip"
    sharded.save(path)
    assert load_sharded(path).weight_bytes == sharded.weight_bytes
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    m = json.loads(members["manifest.json"])
    m["ember"] = "0.0.1-other"
    members["manifest.json"] = json.dumps(m).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(ArtifactError,
                       match=f"ember 0.0.1-other, this is ember {ember.__version__}"):
        load_sharded(path)


@needs_mpi
def test_a_rank_that_hangs_gives_a_timeout_naming_it():
    cluster, feeds, mod, params = _own_cluster(2)
    try:
        with cluster:
            dm = ember.build(partition_for_distributed(mod, params, strategy="tensor"),
                             target="llvm")
        dm.run(feeds)
        os.kill(cluster.pids[1], signal.SIGSTOP)
        try:
            with pytest.raises(CollectiveTimeoutError) as e:
                dm.run(feeds)
        finally:
            os.kill(cluster.pids[1], signal.SIGCONT)
        assert e.value.rank == 1 and "rank 1" in str(e.value)
        # the stopped rank is let go; the next run restarts the ranks
        old = list(cluster.pids)
        single = ember.build(mod, "llvm", params).run(feeds)
        np.testing.assert_allclose(dm.run(feeds)[0], single[0], rtol=1e-5, atol=1e-5)
        assert cluster.restarts == 1
        _wait_gone(old)
    finally:
        cluster.close()


_SPMD_APP = """
import sys
import numpy as np
import ember
from ember.distributed import DeviceCluster, partition_for_distributed
from ember.frontend.onnx import from_onnx
from ember.testing.models import gpt2_decoder
model = gpt2_decoder(num_layers=1, hidden=32, heads=4, seq=8, vocab=96, max_position=8)
mod, params = from_onnx(model)
cluster = DeviceCluster(timeout=60)
with cluster:
    dm = ember.build(partition_for_distributed(mod, params, strategy=sys.argv[2]), "llvm")
ids = np.load(sys.argv[1] + "/ids.npy")
logits, = dm.run({"input_ids": ids})
np.save(sys.argv[1] + f"/out{cluster.comm.rank}.npy", logits)
"""


@needs_mpi
@pytest.mark.parametrize("strategy", ["tensor", pytest.param("pipeline", marks=pytest.mark.slow(
    reason="an mpiexec job of 2 ranks for each strategy"))])
def test_under_mpiexec_every_rank_returns_the_outputs(tmp_path, strategy):
    import shutil
    import subprocess
    import sys
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or \
        shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec next to the Python executable or on PATH (the mpich wheel "
                    "installs one)")
    model, feeds = _gpt2()
    mod, params = from_onnx(model)
    single = ember.build(mod, "llvm", params).run(feeds)[0]
    np.save(tmp_path / "ids.npy", feeds["input_ids"])
    app = tmp_path / "app.py"
    app.write_text(_SPMD_APP)
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, str(app), str(tmp_path),
                           strategy], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"out{r}.npy"), single, rtol=1e-5,
                                   atol=1e-5)
