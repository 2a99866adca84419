"""DaskRunner measures on the workers of a dask distributed LocalCluster of two workers."""

import pytest

from ember import tune
from ember.tune import MeasureErrorNo

distributed = pytest.importorskip("distributed", reason="dask distributed is not installed "
                                  "(pip install 'ember[tune]')")

from .test_measure import faulty  # noqa: E402,F401  (registers the test.faulty template)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       resources={"llvm": 1}, dashboard_address=None,
                                       silence_logs=40)
    c = distributed.Client(cluster)
    c.wait_for_workers(2, timeout=60)
    yield c
    c.close()
    cluster.close()


def test_dask_runner_measures_on_two_workers(client):
    task = tune.create_task("test.faulty", [])
    runner = tune.DaskRunner(client, resource="llvm", timeout=5, repeat=2)
    space = task.config_space
    variants = ["ok", "slow", "crash", "wrong", "ok", "slow"]
    inputs = [tune.MeasureInput(task.target, task, space.get(space.knobs["variant"].index_of(v)))
              for v in variants]
    builds = tune.LocalBuilder(n_parallel=2).build(inputs)
    results = runner.run(inputs, builds)
    errs = [r.error_no for r in results]
    assert errs == [0, 0, MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.WRONG_ANSWER, 0, 0]
    assert all(len(r.costs) == 2 and r.mean > 0 for r in results if r.ok)
    assert len(set(runner.workers_used)) == 2, runner.workers_used
    assert set(runner.workers_used) <= set(client.run(lambda: None))  # the cluster's workers


def test_tuning_through_dask_picks_a_correct_candidate(client):
    task = tune.create_task("test.faulty", [])
    runner = tune.DaskRunner(client, resource="llvm", timeout=3, repeat=1)
    tuner = tune.GridSearchTuner(task)
    tuner.tune(6, tune.measure_option(tune.LocalBuilder(n_parallel=2), runner), batch_size=6)
    # the winner is a correct candidate (which of the two correct ones is faster is timing, and
    # the machine may be loaded, so it is not asserted)
    assert tuner.best_config["variant"].val in ("ok", "slow")


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1", "notanaddress"])
def test_dask_runner_unreachable_scheduler_is_a_typed_error(address):
    from ember.errors import TuningError
    with pytest.raises(TuningError, match="cannot reach the dask scheduler"):
        tune.DaskRunner(address, connect_timeout=1)


def test_dask_runner_without_a_worker_is_a_typed_error(client):
    # (was: every measurement waited on a worker that never came: a hang of minutes)
    from ember.errors import TuningError
    with pytest.raises(TuningError, match="has no worker with the resource 'gpu'"):
        tune.DaskRunner(client, resource="gpu", connect_timeout=0.5)
    cluster = distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0",
                                       silence_logs=40)
    try:
        with distributed.Client(cluster) as empty:
            with pytest.raises(TuningError, match="dask scheduler"):  # no worker (or lost)
                tune.DaskRunner(empty, connect_timeout=0.5)
    finally:
        cluster.close()
