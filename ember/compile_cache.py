"""The compiled-model cache: ``ember.compile`` of a model it has compiled before loads the saved
artifact instead of running the passes, schedules and code generation again (warm compile).

The key is a digest of the ONNX model's bytes, the target, the input ``shapes`` (which may name
symbols), the ``dynamic=`` symbols and bounds of a symbolic compile, the current
``PassContext`` (opt_level, disabled/required passes, config) and ember's own source code (so a
changed compiler never serves a stale program). Entries are artifacts under
``<kernel cache>/models/``; the folder is pruned to ``MAX_BYTES`` (oldest first). The cache is
skipped when tuning records are being applied or pass instruments are set (their effects are
not part of the key), and when ``EMBER_NO_MODEL_CACHE=1``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from .codegen.build import cache_dir

MAX_BYTES = 4 << 30


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """Digest of every ``.py`` file of the ember package (contents and relative paths)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def model_digest(model, proto, external_files=()) -> bytes:
    """SHA-256 of the model's bytes: of the file for a path (read in 1 MiB chunks, so hashing
    holds no copy of a large model) and of its ``external_files`` (``load_model`` lists them),
    of the bytes given, else of ``proto`` serialized."""
    h = hashlib.sha256()
    if isinstance(model, (str, os.PathLike)):
        for k, path in enumerate([model, *external_files]):  # an edited data file too
            if k:  # the model file alone hashes as its bytes given to compile would
                h.update(b"\0" + os.path.basename(path).encode() + b"\0")
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        h.update(model)
    else:
        h.update(proto.SerializeToString())
    return h.digest()


def cache_key(model_bytes, target, shapes, ctx, dynamic=None) -> str | None:
    """The cache key, or ``None`` when this compilation must not be cached. ``model_bytes``:
    the model's bytes, or a callable returning their SHA-256 digest (``model_digest``), called
    only when the compilation is cached. ``dynamic``: ``compile``'s ``dynamic=`` (``True`` or
    ``{symbol: (lo, hi)}``; ``None`` for a static compile), part of the key."""
    if os.environ.get("EMBER_NO_MODEL_CACHE") == "1":
        return None
    if getattr(ctx, "instruments", None):
        return None
    try:
        from .tune.dispatch import current
        if current() is not None:
            return None
    except ImportError:  # pragma: no cover
        pass
    desc = {"target": str(target), "shapes": {k: list(v) for k, v in (shapes or {}).items()},
            "opt_level": ctx.opt_level,
            "disabled": sorted(getattr(ctx, "disabled_pass", ()) or ()),
            "required": sorted(getattr(ctx, "required_pass", ()) or ()),
            "config": sorted((k, repr(v)) for k, v in (ctx.config or {}).items()),
            "ember": source_digest()}
    if dynamic is not None:
        desc["dynamic"] = _dynamic_desc(dynamic)
    h = hashlib.sha256(json.dumps(desc, sort_keys=True).encode())
    h.update(model_bytes() if callable(model_bytes) else hashlib.sha256(model_bytes).digest())
    return h.hexdigest()


def _dynamic_desc(dynamic):
    """``dynamic=`` as JSON for the key: ``True``/``False``, or ``[[symbol, lo, hi], ...]``
    sorted (``frontend.onnx.check_dynamic`` has checked it; anything else: its ``repr``)."""
    if isinstance(dynamic, bool):
        return dynamic
    if isinstance(dynamic, Mapping):
        return sorted([str(k), *(list(v) if v is not None else [None, None])]
                      for k, v in dynamic.items())
    return repr(dynamic)


def _folder() -> Path:
    d = cache_dir() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d


def lookup(key: str, num_threads: int | None = None):
    """The cached ``CompiledModel`` for ``key`` or ``None`` (a damaged entry is removed)."""
    from .errors import ArtifactError
    from .runtime.artifact import load_artifact
    path = _folder() / f"{key}.ember"
    if not path.exists():
        return None
    try:
        model = load_artifact(path, num_threads)
    except (ArtifactError, ValueError, TypeError, KeyError, OSError):  # damaged or stale
        try:
            path.unlink()
        except OSError:
            pass
        return None
    os.utime(path)
    return model


def store(key: str, model) -> None:
    """Save ``model`` under ``key`` (best effort: a full disk only costs the next compile)."""
    from .errors import ArtifactError
    from .runtime.artifact import save_artifact
    try:
        save_artifact(model, _folder() / f"{key}.ember")
        _prune()
    except (ArtifactError, OSError):
        pass


def _prune() -> None:
    entries = sorted(_folder().glob("*.ember"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for p in entries:
        total += p.stat().st_size
        if total > MAX_BYTES:
            try:
                p.unlink()
            except OSError:
                pass
