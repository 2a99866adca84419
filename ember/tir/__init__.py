"""Loop IR: expressions, statements, ``PrimFunc``, the simplifier and loop transforms."""

from .expr import *  # noqa: F401,F403
from .stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, Store  # noqa: F401
