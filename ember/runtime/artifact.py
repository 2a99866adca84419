"""Artifacts: a compiled model in one file (zip of the library, plan, graph text and weights).

Written atomically (a temporary file renamed into place), so a crash never leaves a
half-written artifact under the requested name.

Format 3 keeps the weights as one stored (uncompressed) member, ``weights.bin``, whose data
starts at a 2 MiB boundary of the file and holds the weight arena as the executor lays it out
(``executor.param_layout``: first-use order, 64-byte aligned). ``load`` maps that region
(``mmap``, copy-on-write: ``model.params`` writes stay in the process) and the kernels read
the weights in place, so loading costs no copy; ``EMBER_MAP_WEIGHTS=0`` reads it into a
huge-page arena instead. The member's CRC-32 is checked either way (a damaged weight byte is
an ``ArtifactError``). Formats 1 and 2 (``params.npz``; one ``.npy`` member per weight) still
load. A mapped artifact must not be rewritten in place while a model uses it (``save`` never
does: it writes a new file and renames it over the old one).
"""

from __future__ import annotations

import io
import json
import mmap
import os
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..codegen.build import install_library
from ..errors import ArtifactError, TargetError

FORMAT_VERSION = 3  # 3: the weight arena as one aligned member, mapped; 2: one .npy per weight
READABLE_VERSIONS = (1, 2, 3)
#: the format-3 member holding the weight arena, and the file offset its arena starts on
WEIGHTS_MEMBER = "weights.bin"
WEIGHTS_ALIGN = 2 << 20
#: ``EMBER_MAP_WEIGHTS=0``: read a format-3 artifact's weights instead of mapping them
MAP_WEIGHTS_ENV = "EMBER_MAP_WEIGHTS"
#: bytes of a weight read from an artifact at once (``ZipExtFile.readinto`` reads into a
#: temporary ``bytes`` of the requested size and copies it: one whole-weight read would hold a
#: second copy of the weight at the peak)
READ_CHUNK = 1 << 20


def write_device_artifact(path, manifest: dict, members: dict, params: dict) -> None:
    """Write a device model's artifact (``WebGPUModel`` / ``CUDAModel``) to ``path``
    atomically: a stored zip of ``manifest.json``, the text/bytes ``members`` (name -> str or
    bytes) and one ``params/p<k>.npy`` per weight, in ``params`` order.

    Raises:
        ArtifactError: the path cannot be written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
            z.writestr("manifest.json", json.dumps(manifest))
            for name, data in members.items():
                z.writestr(name, data)
            for k, v in enumerate(params.values()):
                buf = io.BytesIO()
                np.save(buf, np.ascontiguousarray(v), allow_pickle=False)
                z.writestr(f"params/p{k}.npy", buf.getvalue())
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise ArtifactError(f"cannot save the artifact to {str(path)!r}: "
                            f"{e.strerror or e}") from None


def read_device_artifact(path, version: int, what: str, members: tuple) -> tuple:
    """``(manifest, {member: bytes}, params)`` of a device artifact that
    ``write_device_artifact`` wrote, whose manifest ``version`` must match.

    Raises:
        ArtifactError: missing, truncated or unreadable (naming ``what``, e.g. "WebGPU"), or
            of another version."""
    try:
        with zipfile.ZipFile(path) as z:
            m = json.loads(z.read("manifest.json"))
            if m.get("version") != version:
                raise ArtifactError(f"{path}: {what} artifact version {m.get('version')}, this "
                                    f"ember reads {version}: recompile the model")
            data = {n: z.read(n) for n in members}
            params = {n: np.load(io.BytesIO(z.read(f"params/p{k}.npy")), allow_pickle=False)
                      for k, n in enumerate(m["param_names"])}
            # .npy stores ml_dtypes arrays (bfloat16 weights) as raw bytes ("V2"): view them
            # with the plan's dtype again
            from ..dtypes import np_dtype
            kinds = {sl["param"]: sl["dtype"] for sl in m["plan"]["slots"]
                     if sl["kind"] == "param"}
            params = {n: (a.view(np_dtype(kinds[n])) if a.dtype.kind == "V" and n in kinds
                          else a) for n, a in params.items()}
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, OSError, ValueError,
            TypeError) as e:
        raise ArtifactError(f"{path} is not a readable ember {what} artifact: "
                            f"{type(e).__name__}: {e}") from None
    return m, data, params


def save_artifact(model, path) -> None:
    """Save a ``CompiledModel`` to ``path``: written to a temporary file in the same folder,
    then renamed over ``path``, so ``path`` never holds a half-written artifact (a previous
    file there stays intact when the save fails).

    Raises:
        ArtifactError: the folder is missing or not writable, the disk is full... (the message
            names the path and the cause).
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ArtifactError(f"cannot save the artifact to {str(path)!r}: it exists and is not a "
                            f"regular file (a folder or a device); choose another path")
    source_model = model.info.get("model")
    if source_model and path.exists() and os.path.exists(source_model) \
            and os.path.samefile(path, source_model):
        raise ArtifactError(f"refusing to overwrite the source model {str(path)!r} with the "
                            f"artifact; choose another output path (e.g. *.ember)")
    manifest = {"format": "ember-artifact", "version": FORMAT_VERSION, "target": model.target,
                "plan": model.plan, "info": model.info}
    arrays, ext = {}, {}
    for k, v in enumerate(model.params.values()):
        v = np.asarray(v)
        if v.dtype.kind == "V" or v.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            ext[f"p{k}"] = v.dtype.name  # ml_dtypes types: stored as raw bits
            v = v.view(f"u{v.dtype.itemsize}")
        arrays[f"p{k}"] = v
    names = list(model.params.keys())
    manifest["param_names"] = names
    manifest["param_ext_dtypes"] = ext
    folder = path.parent if str(path.parent) else Path(".")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
            z.writestr("graph.txt", model.graph_text)
            z.writestr("kernels.c", model.source)
            z.write(model.lib_path, "lib.so")
            manifest["weights"] = _write_weights(z, model.plan, names, arrays)
            z.writestr("manifest.json", json.dumps(manifest))  # last: it records the padding
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; artifacts are shared like files
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise ArtifactError(f"cannot save the artifact to {str(path)!r}: "
                                f"{e.strerror or e} (check that the folder {str(folder)!r} "
                                f"exists and is writable)") from e
        raise


def _weights_layout(plan: dict, names: list, arrays: dict) -> tuple[list, int]:
    """``([(name, byte offset, bytes), ...], total bytes)`` of the weight arena in the member:
    ``executor.param_layout`` for the weights the steps read (so the executor uses the
    loaded arrays in place), the others after them, each 64-byte aligned."""
    from .executor import ALIGN, param_layout
    try:
        layout, total = param_layout(plan)
    except (IndexError, KeyError, TypeError, ValueError, AttributeError):
        layout, total = {}, 0
    out = []
    for k, n in enumerate(names):
        v = arrays[f"p{k}"]
        if n in layout and layout[n][1] == v.nbytes:
            out.append((n, layout[n][0], v.nbytes))
        else:
            out.append((n, total, v.nbytes))
            total += -(-v.nbytes // ALIGN) * ALIGN
    return out, total


def _write_weights(z: zipfile.ZipFile, plan: dict, names: list, arrays: dict) -> dict:
    """Write the weight arena as the stored member ``WEIGHTS_MEMBER`` of ``z``: zero padding
    up to the next ``WEIGHTS_ALIGN`` boundary of the file, then the arena. Returns the
    manifest's ``weights`` entry: the padding, the arena's size, and per weight (in
    ``names`` order) its byte offset in the arena, dtype and shape."""
    layout, total = _weights_layout(plan, names, arrays)
    with z.open(zipfile.ZipInfo(WEIGHTS_MEMBER), "w", force_zip64=True) as f:
        pad = (-z.fp.tell()) % WEIGHTS_ALIGN  # the member's data starts here
        f.write(bytes(pad))
        pos = 0
        for k, (_, off, nbytes) in sorted(enumerate(layout), key=lambda e: e[1][1]):
            if not nbytes:
                continue
            if off > pos:
                f.write(bytes(off - pos))
            f.write(np.ascontiguousarray(arrays[f"p{k}"]).reshape(-1).view(np.uint8))
            pos = off + nbytes
        if total > pos:
            f.write(bytes(total - pos))
    return {"member": WEIGHTS_MEMBER, "pad": pad, "bytes": total,
            "params": [[off, arrays[f"p{k}"].dtype.str, list(arrays[f"p{k}"].shape)]
                       for k, (_, off, _) in enumerate(layout)]}


def map_weights_enabled() -> bool:
    """Whether ``load`` maps a format-3 artifact's weights (``EMBER_MAP_WEIGHTS`` is not
    ``0``)."""
    return os.environ.get(MAP_WEIGHTS_ENV, "1").strip() != "0"


def _arena_start(f, info: zipfile.ZipInfo) -> int:
    """File offset of a stored member's data (from its local header, as zipfile reads it)."""
    f.seek(info.header_offset)
    head = f.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise ValueError(f"{info.filename}: bad local file header")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_len + extra_len


def _read_weights(path: Path, z: zipfile.ZipFile, manifest: dict) -> list[np.ndarray]:
    """The weights of a format-3 artifact, in ``param_names`` order: views of its weight arena,
    mapped from the file (copy-on-write) or, with ``EMBER_MAP_WEIGHTS=0`` or where mapping
    fails, read into a huge-page arena. The member's CRC-32 is checked over the arena (and
    its padding) before any weight is used.

    Raises:
        ValueError: the member is compressed, shorter than the manifest says, or its CRC-32
            does not match (a damaged weight)."""
    from .executor import ALIGN, hugepage_empty
    w = manifest["weights"]
    info = z.getinfo(w["member"])
    pad, total = int(w["pad"]), int(w["bytes"])
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError(f"{info.filename}: compressed (format 3 stores the weights)")
    if pad < 0 or total < 0 or pad + total != info.file_size:
        raise ValueError(f"{info.filename}: {info.file_size} bytes, the manifest says "
                         f"{pad} + {total}")
    arena = None
    with open(path, "rb") as f:
        start = _arena_start(f, info) + pad
        if start + total > os.fstat(f.fileno()).st_size:
            raise ValueError(f"{info.filename}: truncated")
        if total and map_weights_enabled():
            base = start - start % mmap.ALLOCATIONGRANULARITY
            try:
                mm = mmap.mmap(f.fileno(), start - base + total, access=mmap.ACCESS_COPY,
                               offset=base)
            except (OSError, ValueError, OverflowError):
                mm = None
            if mm is not None:
                arena = np.frombuffer(mm, np.uint8)[start - base:]
                if arena.ctypes.data % ALIGN:
                    arena = None
        if arena is None:
            arena = hugepage_empty(max(total, 1))[:total]
            f.seek(start)
            view, got = memoryview(arena), 0
            while got < total:
                k = f.readinto(view[got:])
                if not k:
                    raise ValueError(f"{info.filename}: truncated")
                got += k
    crc = zlib.crc32(arena, zlib.crc32(bytes(pad)) if pad else 0)
    if crc != info.CRC:
        raise ValueError(f"Bad CRC-32 for file {info.filename!r}: a weight is damaged")
    out = []
    for off, dtype, shape in w["params"]:
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        off = int(off)
        if off < 0 or off + n > total:
            raise ValueError(f"{info.filename}: a weight at {off} + {n} lies outside the "
                             f"{total}-byte arena")
        out.append(arena[off:off + n].view(dt).reshape(shape) if n else np.empty(shape, dt))
    return out


def _read_aligned(z: zipfile.ZipFile, name: str, dest: np.ndarray | None = None) -> np.ndarray:
    """A ``.npy`` member read straight into a 64-byte aligned array (one copy of the data in
    memory, and the one the kernels use): into ``dest`` (a uint8 slice of the weight arena,
    ``GraphExecutor`` then uses it in place) when it is given and large enough."""
    from .executor import aligned_empty
    with z.open(name) as f:
        major, _ = np.lib.format.read_magic(f)
        if major == 1:
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if fortran or dtype.hasobject:
            raise ValueError(f"{name}: unsupported array layout")
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buf = dest if dest is not None and dest.nbytes >= n else aligned_empty(max(n, 1))
        view = memoryview(buf)[:n]
        got = 0
        while got < n:  # in chunks: a zip member's readinto reads into a temporary of its size
            k = f.readinto(view[got:got + READ_CHUNK])
            if not k:
                raise ValueError(f"{name}: truncated")
            got += k
        return buf[:n].view(dtype).reshape(shape) if n else np.empty(shape, dtype)


def load_artifact(path, num_threads: int | None = None):
    """Load a ``CompiledModel`` saved by ``save``. ``num_threads``: the kernels' thread count
    (``None``: the saved target's ``-num-threads``, else all online CPUs).

    Raises:
        ArtifactError: missing, truncated or incompatible file.
    """
    from .module import CompiledModel
    path = Path(path)
    if not path.exists():
        raise ArtifactError(f"artifact {str(path)!r} does not exist")
    try:
        with zipfile.ZipFile(path) as z:
            manifest = json.loads(z.read("manifest.json"))
            if manifest.get("format") != "ember-artifact":  # a device model's artifact?
                # (imported only then: a CPU load imports no GPU runtime)
                from .cuda import is_cuda_artifact, load_cuda_artifact
                if is_cuda_artifact(manifest):  # cubins + PTX (runtime.cuda)
                    return load_cuda_artifact(path)
                from .webgpu import is_webgpu_artifact, load_webgpu_artifact
                if is_webgpu_artifact(manifest):  # WGSL + plan + weights (runtime.webgpu)
                    return load_webgpu_artifact(path)
            if manifest.get("format") != "ember-artifact":
                raise ArtifactError(f"{path} is not an ember artifact")
            if manifest.get("version") not in READABLE_VERSIONS:
                raise ArtifactError(f"{path} has artifact version {manifest.get('version')}, this "
                                    f"ember reads version {FORMAT_VERSION}: recompile the model")
            graph = z.read("graph.txt").decode()
            source = z.read("kernels.c").decode() if "kernels.c" in z.namelist() else ""
            lib = install_library(z.read("lib.so"))
            ext = manifest.get("param_ext_dtypes", {})
            params = {}
            if manifest.get("version") == 1:
                with np.load(io.BytesIO(z.read("params.npz"))) as npz:
                    raw = {f"p{k}": npz[f"p{k}"] for k in range(len(manifest["param_names"]))}
            elif manifest.get("version") == 3:
                raw = {f"p{k}": a for k, a in
                       enumerate(_read_weights(path, z, manifest))}
                if len(raw) != len(manifest["param_names"]):
                    raise ValueError("the weights and param_names disagree")
            else:
                from .executor import weight_arena
                dest = weight_arena(manifest["plan"], manifest["param_names"])
                raw = {f"p{k}": _read_aligned(z, f"params/p{k}.npy", dest.get(n))
                       for k, n in enumerate(manifest["param_names"])}
            for k, n in enumerate(manifest["param_names"]):
                a = raw.pop(f"p{k}")
                if f"p{k}" in ext:
                    import ml_dtypes
                    a = a.view(np.dtype(getattr(ml_dtypes, ext[f"p{k}"])))
                params[n] = a
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, OSError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable ember artifact (truncated or corrupted): "
                            f"{type(e).__name__}: {e}") from None
    target = manifest.get("target", "llvm")
    if num_threads is None:
        from ..target import Target
        try:
            num_threads = Target(target).num_threads
        except TargetError:
            pass
    return CompiledModel(lib, manifest["plan"], params, graph, target,
                         manifest.get("info"), source, num_threads)
