"""``CompiledModel``: a compiled model ready to run, save and profile."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

from ..dtypes import EXT_FLOAT, EXT_INT, np_dtype
from ..codegen.build import load_library
from .executor import GraphExecutor, benchmark


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Seeded random values of ``shape`` and numpy ``dtype`` drawn from ``rng``: standard normal
    for floats, 0/1 for bools, integers in [0, 10) otherwise."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 10, shape).astype(dt)


class Weights(dict):
    """``CompiledModel.params``: ``{name: ndarray}`` of the arrays the kernels read (views of the
    weight arena). Write into them in place (``model.params[name][...] = value``) to change a
    weight; binding a new array to a name would be ignored by the kernels, so it is refused. A
    weight that kernels also read from a packed copy (``NAME@packed...``) is a read-only
    ``RepackedWeight`` (a write would change only some of its uses).

    Raises:
        EmberError: on item assignment, deletion, ``update``, ``pop``... (names the fix).
    """

    def _refuse(self, *args, **kwargs):
        from ..errors import EmberError
        raise EmberError("CompiledModel.params holds the arrays the kernels read: change a weight "
                         "in place (model.params[name][...] = value), or build the model again "
                         "with the new weights; a new array bound to a name would be ignored")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _refuse
    __ior__ = _refuse

    def __copy__(self) -> dict:
        return dict(self)

    def __reduce__(self):
        return (dict, (dict(self),))


#: numpy functions that write into their first argument (``RepackedWeight`` refuses them)
_WRITES_FIRST = frozenset({np.copyto, np.put, np.place, np.putmask, np.fill_diagonal,
                           np.put_along_axis})


class RepackedWeight(np.ndarray):
    """A ``CompiledModel.params`` entry whose values some kernel reads from a re-laid-out copy
    packed at compile time (``NAME@packed...``, another entry of ``params``): a write into it
    would reach only the kernels that read it unpacked and give wrong results, so it is
    read-only.

    Views of it (slices, ``reshape``, ``.T``...) share its memory: they are read-only too and
    keep ``packed``, the names of the packed copies, for the error. A copy (``.copy()``,
    ``copy.copy``/``deepcopy``, pickling, arithmetic results) is a plain, writable
    ``numpy.ndarray`` independent of the model; other arrays numpy derives into new memory
    (``astype``, fancy indexing) keep the type but have no ``packed`` names and are writable.

    Attributes:
        packed: the names of the packed copies (``("W@packed...",)``); ``()`` on an array that
            does not share the model's memory.

    Raises:
        EmberError: on a write into it, naming the weight, its packed copies and the fix:
            item assignment (``w[...] = 0``), a ufunc writing into it (``w += 1``,
            ``np.add(a, b, out=w)``), a numpy function writing into its first argument
            (``np.copyto(w, v)``, ``np.put``, ``np.place``, ``np.putmask``,
            ``np.fill_diagonal``, ``np.put_along_axis``) or into ``out=w`` (``np.dot(a, b,
            out=w)``...), and the in-place methods ``fill``, ``put``, ``sort``,
            ``partition``. A write numpy makes some other way (a positional ``out``) raises
            numpy's read-only ``ValueError``.
    """

    packed: tuple = ()

    def __array_finalize__(self, obj):
        # only an array over the same memory (a view) is the model's weight; a copy is not
        shares = isinstance(obj, np.ndarray) and np.may_share_memory(self, obj)
        self.packed = getattr(obj, "packed", ()) if shares else ()

    def _refuse(self):
        from ..errors import EmberError
        name = self.packed[0].split("@", 1)[0]
        raise EmberError(f"weight {name!r} is also read re-laid out ({', '.join(self.packed)}, "
                         f"packed at compile time): an in-place write would reach only the "
                         f"kernels that read it unpacked; build the model again with the new "
                         f"weight (or write each packed copy in its own layout)")

    def __setitem__(self, key, value):
        if self.packed:
            self._refuse()
        super().__setitem__(key, value)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        written = tuple(out or ()) + ((inputs[0],) if method == "at" else ())
        for a in written:
            if isinstance(a, RepackedWeight) and a.packed:
                a._refuse()
        plain = tuple(a.view(np.ndarray) if isinstance(a, RepackedWeight) else a
                      for a in inputs)
        if out is not None:
            kwargs["out"] = tuple(a.view(np.ndarray) if isinstance(a, RepackedWeight) else a
                                  for a in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        if out is None:
            return result
        results = result if isinstance(result, tuple) else (result,)
        final = tuple(r if o is None else o for o, r in zip(out, results))
        return final[0] if len(final) == 1 else final

    def __array_function__(self, func, types, args, kwargs):
        # numpy functions that write into an array argument: their first one, or ``out=``
        out = kwargs.get("out")
        written = (out if isinstance(out, tuple) else (out,)) + \
            ((args[0],) if args and func in _WRITES_FIRST else ())
        for a in written:
            if isinstance(a, RepackedWeight) and a.packed:
                a._refuse()
        return super().__array_function__(func, types, args, kwargs)

    def _checked(method):  # noqa: N805 - wraps an in-place ndarray method (class body helper)
        def write(self, *args, **kwargs):
            if self.packed:
                self._refuse()
            return method(self, *args, **kwargs)
        write.__name__, write.__doc__ = method.__name__, method.__doc__
        return write

    fill = _checked(np.ndarray.fill)
    put = _checked(np.ndarray.put)
    sort = _checked(np.ndarray.sort)
    partition = _checked(np.ndarray.partition)
    del _checked

    def copy(self, order="C") -> np.ndarray:
        """A plain, writable ``numpy.ndarray`` copy, independent of the model."""
        return np.array(self, order=order, copy=True, subok=False)

    def __copy__(self) -> np.ndarray:
        return self.copy()

    def __deepcopy__(self, memo) -> np.ndarray:
        return self.copy()

    def __reduce__(self):
        return self.view(np.ndarray).__reduce__()


def _freeze_repacked(params: dict) -> dict:
    """``params`` with each weight that also has packed copies (``NAME@packed...``) replaced by
    a read-only ``RepackedWeight`` view of the same memory."""
    out = dict(params)
    for name, arr in params.items():
        packed = tuple(sorted(k for k in params if k.startswith(name + "@packed")))
        if packed and isinstance(arr, np.ndarray):
            view = arr.view(RepackedWeight)
            view.packed = packed
            view.flags.writeable = False
            out[name] = view
    return out


class CompiledModel:
    """A model compiled to native kernels plus its execution plan and weights.

    Attributes:
        plan: the execution plan (see ``ember.runtime.executor``).
        graph_text: the graph IR (text form) the kernels were generated from.
        target: the target string it was built for.
        info: compile statistics (``compile_s``, ``num_kernels``, ``num_unique_kernels``...).
    """

    def __init__(self, lib_path: Path, plan: dict, params: Mapping[str, np.ndarray],
                 graph_text: str = "", target: str = "llvm", info: dict | None = None,
                 source: str = "", num_threads: int | None = None):
        self.lib_path = Path(lib_path)
        self.plan = plan
        self.params = dict(params)
        self.graph_text = graph_text
        self.target = target
        self.info = dict(info or {})
        self.source = source
        self._executor = GraphExecutor(load_library(self.lib_path), plan, self.params, num_threads)
        # keep one copy of each weight: the aligned arrays the kernels read
        self.params = Weights(_freeze_repacked({k: self._executor._params.get(k, v)
                                                for k, v in self.params.items()}))

    def __copy__(self) -> "CompiledModel":
        """A shallow copy: the same library, plan, weights and executor."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __getstate__(self):
        """Refused: a compiled model holds a loaded library and buffers the kernels point into.

        Raises:
            EmberError: always, naming the way to move a model (``save`` / ``ember.load``).
        """
        from ..errors import EmberError
        raise EmberError("a CompiledModel cannot be pickled or deep-copied (it holds a loaded "
                         "kernel library): save it with model.save(path) and load it with "
                         "ember.load(path), in this process or another")

    @property
    def input_names(self) -> list[str]:
        return [d["name"] for d in self.plan["inputs"]]

    @property
    def input_shapes(self) -> dict[str, tuple]:
        return {d["name"]: tuple(d["shape"]) for d in self.plan["inputs"]}

    @property
    def input_dtypes(self) -> dict[str, str]:
        return {d["name"]: d["dtype"] for d in self.plan["inputs"]}

    @property
    def output_names(self) -> list[str]:
        return [d["name"] for d in self.plan["outputs"]]

    def run(self, inputs) -> list[np.ndarray]:
        """Run the model. ``inputs``: ``{name: array}`` or a list in input order (or a single
        array for a one-input model). Returns numpy arrays in graph-output order.

        Raises:
            InputError: wrong/missing input, shape or dtype (named in the message).
        """
        return self._executor.run(inputs)

    def benchmark(self, inputs, number: int = 20, warmup: int = 3) -> dict:
        """Latency statistics in ms (``median_ms``, ``mean_ms``, ``min_ms``)."""
        return benchmark(lambda: self._executor.run(inputs), number, warmup)

    def profile(self, inputs, repeat: int = 10) -> list[dict]:
        """Per-kernel median times in ms, in execution order."""
        return self._executor.time_steps(inputs, repeat)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random inputs of the right shapes and dtypes."""
        rng = np.random.default_rng(seed)
        out = {}
        for d in self.plan["inputs"]:
            dt = np.dtype("float32") if d["dtype"] in EXT_FLOAT else \
                np.dtype("int8") if d["dtype"] in EXT_INT else np.dtype(d["dtype"])
            out[d["name"]] = random_array(rng, d["shape"], dt)
            if d["dtype"] in EXT_FLOAT or d["dtype"] in EXT_INT:
                out[d["name"]] = out[d["name"]].astype(np_dtype(d["dtype"]))
        return out

    def save(self, path: "str | os.PathLike") -> None:
        """Write the library, graph and weights to one file, atomically."""
        from .artifact import save_artifact
        save_artifact(self, path)
