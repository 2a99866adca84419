"""Tensor expressions (``placeholder``, ``compute``, ``reduce_axis``...) and their lowering."""

from .tensor import *  # noqa: F401,F403
from .tensor import (Tensor, IndexCheck, compute, placeholder, reduce_axis, sum, max, min, prod,  # noqa: F401
                     if_then_else, select, all_of, lt, le, gt, ge, eq, ne, maximum, minimum,
                     power, truncdiv, truncmod, exp, log, sqrt, tanh, erf, sigmoid, floor, ceil,
                     round, abs, fabs, sign, isnan, isinf, fmod)
from .lower import create_prim_func  # noqa: F401
from ..tir.expr import cast, const, Expr, Var  # noqa: F401
