"""Graph IR: typed SSA functions, text form, builder, lowering, reference interpreter."""

from .ir import (Binding, Call, Constant, Function, IRModule, TensorType, Var,  # noqa: F401
                 structural_equal)
from .builder import FunctionBuilder, const  # noqa: F401
