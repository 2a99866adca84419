"""Artifact format 3 (``ember.runtime.artifact``): the weight arena as one stored member on a
2 MiB boundary of the file, mapped copy-on-write on load (``EMBER_MAP_WEIGHTS=0`` reads it),
its CRC-32 checked either way; formats 1 and 2 still load."""

import io
import json
import mmap
import sys
import zipfile

import numpy as np
import pytest

import ember
from ember.errors import ArtifactError
from ember.runtime import artifact, executor as ex

from test_build_units import _blocks_model


@pytest.fixture
def saved(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ex, "HUGEPAGE_MIN_BYTES", 0)
    m = ember.compile(_blocks_model(n_blocks=2, c=16))
    path = tmp_path / "m.ember"
    m.save(path)
    x = np.random.default_rng(3).standard_normal((1, 16, 10, 10)).astype(np.float32)
    return m, path, {"x": x}


def _mapping(a: np.ndarray):
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


def _mapped_file(a: np.ndarray) -> str | None:
    """The file whose mapping holds ``a``'s data (``/proc/self/maps``), ``None`` for memory
    that maps no file (anonymous: the huge-page arena)."""
    addr = a.ctypes.data
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            lo, hi = (int(v, 16) for v in parts[0].split("-"))
            if lo <= addr < hi:
                path = parts[5].strip() if len(parts) > 5 else ""
                return path if path.startswith("/") else None
    raise AssertionError("address not mapped")


def _data_start(path, name):
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    with open(path, "rb") as f:
        return artifact._arena_start(f, info), info


def test_weights_are_one_aligned_stored_member(saved):
    m, path, _ = saved
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        names = z.namelist()
    assert manifest["version"] == 3 and not [n for n in names if n.startswith("params/")]
    start, info = _data_start(path, artifact.WEIGHTS_MEMBER)
    assert info.compress_type == zipfile.ZIP_STORED
    w = manifest["weights"]
    assert (start + w["pad"]) % artifact.WEIGHTS_ALIGN == 0
    layout, _ = ex.param_layout(m.plan)  # the executor's arena layout, so used in place
    for n, (off, _, _) in zip(manifest["param_names"], w["params"]):
        if n in layout:
            assert off == layout[n][0]


@pytest.mark.parametrize("mapped", [True, False])
def test_loaded_weights_are_mapped_or_read_and_give_the_same_outputs(saved, monkeypatch,
                                                                     mapped):
    m, path, feeds = saved
    if not mapped:
        monkeypatch.setenv("EMBER_MAP_WEIGHTS", "0")
    want = m.run(feeds)[0]
    cm = ember.load(path)
    layout, _ = ex.param_layout(cm.plan)
    assert layout
    for n in layout:  # the kernels read the loaded arrays in place: the file's mapping or
        arr = cm._executor._params[n]  # the huge-page arena they were read into
        assert isinstance(_mapping(arr), mmap.mmap)
        if sys.platform.startswith("linux"):
            assert _mapped_file(arr) == (str(path.resolve()) if mapped else None)
    np.testing.assert_array_equal(cm.run(feeds)[0], want)


def test_a_write_into_a_mapped_weight_stays_in_the_process(saved):
    m, path, feeds = saved
    before = path.read_bytes()
    want = m.run(feeds)[0]
    cm = ember.load(path)
    name = next(n for n in cm.params if cm.params[n].flags.writeable and cm.params[n].size)
    cm.params[name][...] = 0  # copy-on-write: the file is not changed
    assert not np.array_equal(cm.run(feeds)[0], want)
    assert path.read_bytes() == before
    np.testing.assert_array_equal(ember.load(path).run(feeds)[0], want)


@pytest.mark.parametrize("mapped", [True, False])
def test_a_flipped_weight_byte_is_an_artifact_error(saved, monkeypatch, mapped):
    _, path, _ = saved
    if not mapped:
        monkeypatch.setenv("EMBER_MAP_WEIGHTS", "0")
    with zipfile.ZipFile(path) as z:
        w = json.loads(z.read("manifest.json"))["weights"]
    start, _ = _data_start(path, artifact.WEIGHTS_MEMBER)
    data = bytearray(path.read_bytes())
    data[start + w["pad"] + w["params"][0][0] + 5] ^= 0x10  # a byte of the first weight
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="CRC"):
        ember.load(path)


def test_a_truncated_weights_member_is_an_artifact_error(saved, tmp_path):
    _, path, _ = saved
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = {n: z.read(n) for n in z.namelist()}
    manifest["weights"]["bytes"] += 64  # the manifest promises more than the member holds
    bad = tmp_path / "bad.ember"
    with zipfile.ZipFile(bad, "w") as z:
        for n, d in members.items():
            z.writestr(n, json.dumps(manifest) if n == "manifest.json" else d)
    with pytest.raises(ArtifactError, match="manifest says"):
        ember.load(bad)


def _rewrite_old(src, dst, version: int) -> None:
    """``src`` (format 3) rewritten as format ``version`` (1: ``params.npz``; 2: one ``.npy``
    member per weight), the layouts older embers wrote."""
    cm = ember.load(src)
    with zipfile.ZipFile(src) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = {n: z.read(n) for n in ("graph.txt", "kernels.c", "lib.so")}
    del manifest["weights"]
    manifest["version"] = version
    arrays = {}
    for k, n in enumerate(manifest["param_names"]):
        v = np.asarray(cm.params[n])
        if f"p{k}" in manifest["param_ext_dtypes"]:
            v = v.view(f"u{v.dtype.itemsize}")
        arrays[f"p{k}"] = np.array(v)
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            z.writestr(n, d)
        if version == 1:
            buf = io.BytesIO()
            np.savez(buf, **arrays)
            z.writestr("params.npz", buf.getvalue())
        else:
            for key, v in arrays.items():
                buf = io.BytesIO()
                np.save(buf, v, allow_pickle=False)
                z.writestr(f"params/{key}.npy", buf.getvalue())


@pytest.mark.parametrize("version", [1, 2])
def test_older_formats_still_load(saved, tmp_path, version):
    m, path, feeds = saved
    old = tmp_path / f"v{version}.ember"
    _rewrite_old(path, old, version)
    with zipfile.ZipFile(old) as z:
        assert artifact.WEIGHTS_MEMBER not in z.namelist()
    np.testing.assert_array_equal(ember.load(old).run(feeds)[0], m.run(feeds)[0])
