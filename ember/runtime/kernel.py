"""Compile one ``PrimFunc`` to a callable over NumPy arrays (for tests, benchmarks and tuning
measurements)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from ..codegen.build import build_library, load_library
from ..codegen.module import generate_c_module
from ..errors import EmberError, InputError
from ..target import Target
from ..tir.stmt import PrimFunc
from .executor import aligned_copy


class KernelFunction:
    """A compiled ``PrimFunc``: ``f(*arrays)`` runs it in place on C-contiguous arrays (inputs
    then outputs, of the parameters' shapes and dtypes).

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
        self._fn.argtypes = [ctypes.c_void_p] * len(func.params)
        if self.target.num_threads and hasattr(self.lib, "ember_set_num_threads"):
            self.lib.ember_set_num_threads(ctypes.c_int(self.target.num_threads))

    def __call__(self, *arrays: np.ndarray) -> None:
        ps = self.func.params
        if len(arrays) != len(ps):
            raise InputError(f"{self.func.name} takes {len(ps)} arrays, got {len(arrays)}")
        for k, (a, p) in enumerate(zip(arrays, ps)):
            if tuple(a.shape) != tuple(p.shape) or a.dtype != np.dtype(p.dtype):
                raise InputError(f"{self.func.name} argument {k}: expected {p.shape} {p.dtype}, "
                                 f"got {a.shape} {a.dtype}")
            if not a.flags.c_contiguous:
                raise InputError(f"{self.func.name} argument {k} is not C-contiguous")
        rc = self._fn(*[a.ctypes.data for a in arrays])
        if rc != 0:
            raise EmberError(f"kernel {self.func.name} failed with code {rc}")

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run on ``inputs`` (copied to aligned buffers); returns new output arrays."""
        ins = [aligned_copy(np.ascontiguousarray(x)) for x in inputs]
        n_out = self.func.attrs.get("num_outputs", len(self.func.params) - len(ins))
        outs = [aligned_copy(np.zeros(p.shape, p.dtype)) for p in self.func.params[len(ins):]]
        if len(ins) + len(outs) != len(self.func.params) or n_out != len(outs):
            raise InputError(f"{self.func.name} takes {len(self.func.params) - n_out} inputs, got "
                             f"{len(ins)}")
        self(*ins, *outs)
        return outs


def compile_prim_func(func: PrimFunc, target: "str | Target" = "llvm") -> KernelFunction:
    """Build ``func`` for ``target`` (cached by source hash)."""
    return KernelFunction(func, target)
