"""Save and load a ``ShardedModule`` (every rank's graph, weights and plan) as one zip file.

Layout: ``manifest.json`` (format version, ember version, strategy, interface, plan info,
which outputs each rank returns), ``rank<r>.ir`` (rank r's graph text) and ``rank<r>.npz``
(its weights). Ranks compile their graph again when it is built (the kernel cache makes that
a lookup when the same shard was compiled before on the machine).
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np

from ..errors import ArtifactError
from ..graph.ir import IRModule, TensorType

__all__ = ["save_sharded", "load_sharded", "FORMAT"]

FORMAT = "ember-sharded-1"


def save_sharded(sharded, path) -> None:
    """Write ``sharded`` to ``path`` atomically (a temporary file renamed into place)."""
    from .. import __version__
    manifest = {"format": FORMAT, "ember": __version__, "strategy": sharded.strategy,
                "input_names": sharded.input_names, "output_names": sharded.output_names,
                "output_types": [[list(t.shape), t.dtype] for t in sharded.output_types],
                "info": sharded.info, "outputs": [s.outputs for s in sharded.shards]}
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest, default=int))
        for s in sharded.shards:
            z.writestr(f"rank{s.rank}.ir", s.mod.text())
            buf = io.BytesIO()
            np.savez(buf, **s.params)
            z.writestr(f"rank{s.rank}.npz", buf.getvalue())
    os.replace(tmp, path)


def load_sharded(path):
    """The ``ShardedModule`` saved at ``path``.

    Raises:
        ArtifactError: missing, truncated or not a sharded-module file, another format, or
            written by another ember version (names both).
    """
    from .. import __version__
    from .partition import RankShard, ShardedModule
    try:
        with zipfile.ZipFile(path) as z:
            m = json.loads(z.read("manifest.json"))
            if m.get("format") != FORMAT:
                raise ArtifactError(f"{path}: format {m.get('format')!r}, expected {FORMAT!r}")
            if m.get("ember") != __version__:
                # the ranks' graph text and operator attributes are this version's: a shard
                # written by another ember is refused here rather than mis-built on a rank
                raise ArtifactError(f"{path} was written by ember {m.get('ember')}, this is ember "
                                    f"{__version__}: partition the model again and save it "
                                    f"with this version")
            shards = []
            for r, outs in enumerate(m["outputs"]):
                mod = IRModule.from_text(z.read(f"rank{r}.ir").decode())
                with np.load(io.BytesIO(z.read(f"rank{r}.npz"))) as npz:
                    params = {k: npz[k] for k in npz.files}
                shards.append(RankShard(r, mod, params, list(outs)))
    except (OSError, KeyError, zipfile.BadZipFile, json.JSONDecodeError, ValueError) as e:
        raise ArtifactError(f"{path} is not a readable sharded-module file: "
                            f"{type(e).__name__}: {e}") from None
    types = [TensorType(tuple(s), d) for s, d in m["output_types"]]
    return ShardedModule(shards, m["strategy"], m["input_names"], m["output_names"], types,
                         m["info"])
