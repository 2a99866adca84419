"""Compile one ``PrimFunc`` to a callable over NumPy arrays (for tests, benchmarks and tuning
measurements)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ..codegen.build import build_library, load_library, thread_setter
from ..codegen.module import generate_c_module
from ..errors import EmberError, InputError
from ..target import Target
from ..tir.stmt import PrimFunc
from .executor import ALIGN

# bytes of canary on each side of every argument ``KernelFunction.run`` passes to a kernel
GUARD_BYTES = 64
CANARY = 0xA5


def guarded_copy(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """A 64-byte aligned, C-contiguous copy of ``a`` with ``GUARD_BYTES`` of ``CANARY`` bytes
    right before and right after it: ``(raw, view, offset)`` where ``view`` (``a``'s shape and
    dtype) starts at byte ``offset`` of the uint8 array ``raw``. ``check_guard`` tells whether a
    kernel wrote outside ``view``."""
    a = np.ascontiguousarray(a)
    n = a.nbytes
    raw = np.empty(n + 2 * GUARD_BYTES + ALIGN, np.uint8)
    off = GUARD_BYTES + (-(raw.ctypes.data + GUARD_BYTES)) % ALIGN
    raw[:off] = CANARY
    raw[off + n:] = CANARY
    view = raw[off:off + n].view(a.dtype).reshape(a.shape)
    view[...] = a
    return raw, view, off


def check_guard(raw: np.ndarray, off: int, nbytes: int) -> int:
    """Number of canary bytes around ``raw[off:off + nbytes]`` that are no longer ``CANARY``."""
    return int(np.count_nonzero(raw[:off] != CANARY) +
               np.count_nonzero(raw[off + nbytes:] != CANARY))


class KernelFunction:
    """A compiled ``PrimFunc``: ``f(*arrays)`` runs it in place on C-contiguous arrays (inputs
    then outputs, of the parameters' shapes and dtypes), on the target's ``-num-threads``
    (default: all online CPUs), set on the library before every call. A kernel with symbolic
    dimensions (``attrs["symbols"]``) takes any sizes: the symbols are bound from the arrays'
    shapes and passed as its trailing ``int64`` arguments (one build serves every size).

    Raises (on call):
        InputError: wrong number, shape or dtype of arrays.
        EmberError: the kernel returned an error code (workspace allocation failed).
    """

    def __init__(self, func: PrimFunc, target: "str | Target" = "llvm"):
        self.func = func
        self.target = Target(target)
        self.source, syms = generate_c_module([func], self.target)
        self.lib = load_library(build_library(self.source, self.target.mcpu))
        self._fn = getattr(self.lib, syms[0])
        self._fn.restype = ctypes.c_int32
        self.symbols = list(func.attrs.get("symbols", ()))
        self._fn.argtypes = [ctypes.c_void_p] * len(func.params) + \
            [ctypes.c_int64] * len(self.symbols)
        # the thread count belongs to the library, and kernels of the same code share one
        # (content-hash cache): every call sets this kernel's (0: all online CPUs)
        self.num_threads = int(self.target.num_threads or 0)
        self._set_threads = thread_setter(self.lib)

    def bind(self, shapes: Sequence[tuple]) -> dict:
        """``{symbol: int}`` bound from the shapes of the arrays of one call (all parameters,
        or the inputs only: ``tir.symbolic.bind_shapes``).

        Raises:
            ShapeMismatchError: shapes that contradict a symbol or a static dimension."""
        from ..tir.symbolic import bind_shapes
        ps = self.func.params
        return bind_shapes([(p.name, p.shape) for p in ps[:len(shapes)]],
                           {p.name: tuple(s) for p, s in zip(ps, shapes)})

    def shape_of(self, param, env: dict) -> tuple:
        """The concrete shape of buffer ``param`` for symbol values ``env``."""
        from ..tir.symbolic import evaluate
        return tuple(evaluate(d, env) for d in param.shape)

    def __call__(self, *arrays: np.ndarray) -> None:
        ps = self.func.params
        if len(arrays) != len(ps):
            raise InputError(f"{self.func.name} takes {len(ps)} arrays, got {len(arrays)}")
        env = self.bind([a.shape for a in arrays]) if self.symbols else {}
        for k, (a, p) in enumerate(zip(arrays, ps)):
            if tuple(a.shape) != self.shape_of(p, env) or a.dtype != np.dtype(p.dtype):
                raise InputError(f"{self.func.name} argument {k}: expected {p.shape} {p.dtype}, "
                                 f"got {a.shape} {a.dtype}")
            if not a.flags.c_contiguous:
                raise InputError(f"{self.func.name} argument {k} is not C-contiguous")
        if self._set_threads is not None:
            self._set_threads(self.num_threads)
        rc = self._fn(*[a.ctypes.data for a in arrays], *[env[n] for n in self.symbols])
        if rc != 0:
            raise EmberError(f"kernel {self.func.name} failed with code {rc}")

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on ``inputs`` (copied to aligned buffers); returns new output arrays.

        Every argument lies between ``GUARD_BYTES`` of canary bytes, and the inputs are kept
        to compare: a kernel that writes outside an argument, or into an input, is a code
        generation bug and raises instead of returning (tests and tuning runs catch it where
        a bigger process would corrupt its heap).

        Raises:
            InputError: wrong number of inputs.
            EmberError: the kernel failed, wrote outside an argument or changed an input.
        """
        n_in = len(inputs)
        n_out = self.func.attrs.get("num_outputs", len(self.func.params) - n_in)
        if n_in + n_out != len(self.func.params):
            raise InputError(f"{self.func.name} takes {len(self.func.params) - n_out} inputs, got "
                             f"{n_in}")
        orig = [np.ascontiguousarray(x) for x in inputs]
        args = [guarded_copy(x) for x in orig]
        env = self.bind([x.shape for x in orig]) if self.symbols else {}
        args += [guarded_copy(np.zeros(self.shape_of(p, env), p.dtype))
                 for p in self.func.params[n_in:]]
        self(*[v for _, v, _ in args])
        for k, (raw, view, off) in enumerate(args):
            bad = check_guard(raw, off, view.nbytes)
            if bad:
                raise EmberError(f"kernel {self.func.name} wrote {bad} byte(s) outside argument "
                                 f"{k} ({self.func.params[k].name}): a code generation bug")
            if k < n_in and view.tobytes() != orig[k].tobytes():
                raise EmberError(f"kernel {self.func.name} wrote into its input {k} "
                                 f"({self.func.params[k].name}): a code generation bug")
        return [view for _, view, _ in args[n_in:]]


def compile_prim_func(func: PrimFunc, target: "str | Target" = "llvm") -> KernelFunction:
    """Build ``func`` for ``target`` (cached by source hash)."""
    return KernelFunction(func, target)
