"""The compiled-model cache: ``ember.compile`` of a model it has compiled before loads the saved
artifact instead of running the passes, schedules and code generation again (warm compile).

The key is a digest of the ONNX model (``proto_digest``: its weights' bytes and its structure),
the target (with ``$CC``, ``$EMBER_CFLAGS`` and, for ``-mcpu=native``, the host CPU's flags),
the input ``shapes`` (which may name symbols), the ``dynamic=`` symbols and bounds of a
symbolic compile, the current ``PassContext`` (opt_level, disabled/required passes, config) and
ember's own source code (so a changed compiler never serves a stale program). Entries are
artifacts under ``<kernel cache>/models/``; the folder is pruned to ``MAX_BYTES`` (oldest
first). The cache is skipped when tuning records are being applied or pass instruments are set
(their effects are not part of the key), and when ``EMBER_NO_MODEL_CACHE=1``.
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


#: container messages ``proto_digest`` walks (the fields that hold or lead to weights, hashed
#: apart); any other message, and these when they hold no tensor, hash as their serialization
_HEAVY = {"ModelProto": ("graph",), "GraphProto": ("node", "initializer"),
          "NodeProto": ("attribute",), "AttributeProto": ("t", "g", "tensors", "graphs"),
          "TensorProto": ("raw_data",)}
_DIGEST_VERSION = b"ember-proto-digest-1"


def _frame(h, tag: bytes, data: bytes) -> None:
    h.update(tag + len(data).to_bytes(8, "little"))
    h.update(data)


def _holds_tensors(msg, kind: str) -> bool:
    """Whether a NodeProto / AttributeProto holds a tensor or a graph (else: serialized)."""
    attrs = msg.attribute if kind == "NodeProto" else (msg,)
    return any(a.HasField("t") or a.HasField("g") or len(a.tensors) or len(a.graphs)
               for a in attrs)


def _repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)  # protobuf >= 5.28 (``label`` is deprecated)
    return rep if rep is not None else fd.label == fd.LABEL_REPEATED


def _walk(h, msg) -> None:
    """Feed ``msg`` into ``h``: a message without weights as its serialization; a container
    (``_HEAVY``) as the serialization of its other fields, then each weight-leading field in
    field order (a ``TensorProto``'s ``raw_data`` buffer hashed as it is, never serialized
    again), every part framed with a tag and its length."""
    kind = msg.DESCRIPTOR.name
    heavy = _HEAVY.get(kind)
    if heavy is None or (kind == "TensorProto" and not msg.HasField("raw_data")) \
            or (kind in ("NodeProto", "AttributeProto") and not _holds_tensors(msg, kind)):
        _frame(h, b"M", msg.SerializeToString())
        return
    light = type(msg)()
    later = []
    for fd, value in msg.ListFields():
        if fd.name in heavy:
            later.append((fd, value))
        elif fd.type == fd.TYPE_MESSAGE:
            if _repeated(fd):
                getattr(light, fd.name).extend(value)
            else:
                getattr(light, fd.name).CopyFrom(value)
        elif _repeated(fd):
            getattr(light, fd.name).extend(value)
        else:
            setattr(light, fd.name, value)
    _frame(h, kind.encode(), light.SerializeToString())
    for fd, value in later:
        tag = fd.number.to_bytes(4, "little")
        if fd.type != fd.TYPE_MESSAGE:  # raw_data: the weight's bytes
            _frame(h, b"R" + tag, value)
        elif _repeated(fd):
            h.update(b"[" + tag + len(value).to_bytes(8, "little"))
            for v in value:
                _walk(h, v)
        else:
            h.update(b"{" + tag)
            _walk(h, value)


def proto_digest(proto) -> bytes:
    """SHA-256 of an ``onnx.ModelProto`` without serializing it again: each tensor's
    ``raw_data`` buffer (the weights) is hashed as it is, the rest of the model (graph
    structure, attributes, small tensors, metadata) as the serialization of the messages
    without those buffers. Every weight byte and every attribute is in the digest; equal
    models (the same messages) give the same digest, whether they came from a path, bytes or
    a ModelProto (``load_model`` reads external data in first)."""
    h = hashlib.sha256(_DIGEST_VERSION)
    _walk(h, proto)
    return h.digest()


def model_digest(model, proto, external_files=()) -> bytes:
    """The model's digest for the cache key: ``proto_digest`` of the loaded ``proto`` (a
    model given by path or bytes is hashed as its parsed proto, so the three forms of one
    model share a key; ``model`` and ``external_files`` are kept for callers)."""
    return proto_digest(proto)


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
    desc = {"target": str(target),
            "shapes": {k: [_dim(d) for d in v] for k, v in (shapes or {}).items()},
            "opt_level": ctx.opt_level,
            "disabled": sorted(getattr(ctx, "disabled_pass", ()) or ()),
            "required": sorted(getattr(ctx, "required_pass", ()) or ()),
            "config": sorted((k, repr(v)) for k, v in (ctx.config or {}).items()),
            "toolchain": _toolchain_desc(target),
            "ember": source_digest()}
    if dynamic is not None:
        desc["dynamic"] = _dynamic_desc(dynamic)
    h = hashlib.sha256(json.dumps(desc, sort_keys=True).encode())
    h.update(model_bytes() if callable(model_bytes) else hashlib.sha256(model_bytes).digest())
    return h.hexdigest()


def _dim(d):
    """A ``shapes=`` dimension for the JSON key: a symbol name as it is, a NumPy integer as
    the ``int`` it equals (the importer takes both)."""
    if d is None or isinstance(d, str):
        return d
    return int(d) if hasattr(d, "__index__") else repr(d)


def _toolchain_desc(target) -> list:
    """What the machine code depends on besides the target string: ``$CC``, ``$EMBER_CFLAGS``
    (a ``-march`` there, for a portable artifact) and, for ``-mcpu=native``, the host CPU
    (``host_cpu_flags``), which a cache folder shared between machines may not share."""
    native = getattr(target, "is_gpu", False) is False and \
        getattr(target, "mcpu", "native") == "native"
    return [os.environ.get("CC", ""), os.environ.get("EMBER_CFLAGS", ""),
            host_cpu_flags() if native else ""]


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> str:
    """The host CPU's feature flags (``/proc/cpuinfo``; elsewhere the C compiler's
    ``-march=native`` features), what ``-mcpu=native`` code is built for. Read once: a warm
    compile asks no compiler."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):  # x86 / ARM
                    return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    try:
        from .target import Target
        return " ".join(sorted(Target("llvm").features))
    except Exception:  # noqa: BLE001 - no compiler to ask: the build will say so
        return ""


def _dynamic_desc(dynamic):
    """``dynamic=`` as JSON for the key: ``True``/``False``, or ``[[symbol, lo, hi], ...]``
    sorted (``frontend.onnx.check_dynamic`` has checked it; anything else: its ``repr``)."""
    if isinstance(dynamic, bool):
        return dynamic
    if isinstance(dynamic, Mapping):
        return sorted([str(k), *([_dim(d) for d in v] if v is not None else [None, None])]
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
