"""Artifacts: a compiled model in one file (zip of the library, plan, graph text and weights).

Written atomically (a temporary file renamed into place), so a crash never leaves a
half-written artifact under the requested name.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ..codegen.build import install_library
from ..errors import ArtifactError, TargetError

FORMAT_VERSION = 2  # 2: one .npy member per weight, read straight into aligned memory
READABLE_VERSIONS = (1, 2)
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
            z.writestr("manifest.json", json.dumps(manifest))
            z.writestr("graph.txt", model.graph_text)
            z.writestr("kernels.c", model.source)
            z.write(model.lib_path, "lib.so")
            for key, v in arrays.items():
                with z.open(f"params/{key}.npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.ascontiguousarray(v), allow_pickle=False)
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
