"""ConfigSpace: knob enumeration, index <-> config round trips, JSON round trips."""

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from ember.errors import TuningError
from ember.tune import ConfigEntity, ConfigSpace


def _space():
    cfg = ConfigSpace()
    cfg.define_split("tile_x", 48, num_outputs=3)
    cfg.define_split("tile_y", 10, num_outputs=2, policy="power2")
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    cfg.define_reorder("order", ["i", "j", "k"], policy="all")
    cfg.define_annotate("ann", ["i", "j"], policy="try_unroll_vec")
    return cfg


def test_split_factors_are_exact_factorizations():
    cfg = _space()
    sizes = cfg.knobs["tile_x"].entities
    assert all(math.prod(s) == 48 and len(s) == 3 for s in sizes)
    # every ordered factorization of 48 = 2^4 * 3 into 3 parts: C(6,2) * C(3,2) = 45
    assert len(sizes) == 45 and len({tuple(s) for s in sizes}) == 45


def test_power2_split_covers_the_extent():
    sizes = _space().knobs["tile_y"].entities
    assert all(s[1] & (s[1] - 1) == 0 for s in sizes)
    assert all(s[0] * s[1] >= 10 and (s[0] - 1) * s[1] < 10 for s in sizes)


def test_space_size_is_the_product_of_knobs():
    cfg = _space()
    assert len(cfg) == 45 * len(cfg.knobs["tile_y"]) * 3 * 2 * 6 * 4
    assert cfg.knobs["order"].entities[0] == [0, 1, 2]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_index_config_json_round_trip(data):
    cfg = _space()
    idx = data.draw(st.integers(0, len(cfg) - 1))
    ent = cfg.get(idx)
    assert ent.index == idx
    assert cfg.knob2point(cfg.point2knob(idx)) == idx
    back = ConfigEntity.from_json(json.loads(json.dumps(ent.to_json())), cfg)
    assert back.index == idx and back.values() == ent.values()
    assert math.prod(ent["tile_x"].size) == 48
    assert sorted(ent["order"].perm) == [0, 1, 2]


def test_entities_answer_by_name():
    cfg = _space()
    ent = cfg.get(len(cfg) - 1)
    assert ent["auto_unroll_max_step"].val == 1500
    assert ent["ann"].anns == ["unroll", "vec"]
    assert ent["order"].apply(["i", "j", "k"]) == ["k", "j", "i"]


def test_bad_records_and_knobs_raise_typed_errors():
    cfg = _space()
    d = cfg.get(3).to_json()
    d["entity"][0][2] = [7, 7, 7]
    with pytest.raises(TuningError, match="not a candidate"):
        ConfigEntity.from_json(d, cfg)
    with pytest.raises(TuningError, match="out of range"):
        cfg.get(len(cfg))
    with pytest.raises(TuningError, match="unknown policy"):
        cfg.define_split("z", 8, policy="nope")
    with pytest.raises(TuningError, match="no knob"):
        cfg.get(0)["missing"]
