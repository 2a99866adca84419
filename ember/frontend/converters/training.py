"""Converters for the optimizer operators of ``ai.onnx.preview.training`` (opset 1): Adagrad,
Adam and Momentum (standard and Nesterov). Each update is elementwise arithmetic on the
parameters, gradients and accumulators, composed of compiled graph operators; the learning rate
``R`` and the step count ``T`` are run-time scalars. Several parameter tensors are updated at once
when the node lists them (inputs ``R, T, X1..Xn, G1..Gn, <states>1..n``)."""

from __future__ import annotations

from ...errors import ShapeMismatchError, UnsupportedOpError
from . import converter

DOMAIN = "ai.onnx.preview.training"


class _Arith:
    """Small arithmetic helper over ``ctx.call`` in one dtype."""

    def __init__(self, ctx, dtype):
        self.ctx, self.dt = ctx, dtype

    def c(self, v):
        return self.ctx.const(float(v), self.dt)

    def _v(self, v):
        return v if not isinstance(v, (int, float)) else self.c(v)

    def add(self, a, b):
        return self.ctx.call("add", [self._v(a), self._v(b)])

    def sub(self, a, b):
        return self.ctx.call("subtract", [self._v(a), self._v(b)])

    def mul(self, a, b):
        return self.ctx.call("multiply", [self._v(a), self._v(b)])

    def div(self, a, b):
        return self.ctx.call("divide", [self._v(a), self._v(b)])

    def sqrt(self, a):
        return self.ctx.call("sqrt", [a])

    def scalar(self, v):
        """A run-time scalar input as a 0-d value of this dtype."""
        if v.type.dtype != self.dt:
            v = self.ctx.call("cast", [v], {"dtype": self.dt})
        return self.ctx.call("reshape", [v], {"newshape": []}) if v.type.ndim else v

    def positive(self, t):
        """``t > 0`` of the (int64) step count as a bool scalar."""
        t = self.ctx.call("reshape", [t], {"newshape": []}) if t.type.ndim else t
        return self.ctx.call("greater", [t, self.ctx.const(0, t.type.dtype)])


def _groups(node, per: int):
    ins = node.inputs
    if len(ins) < 2 + per or (len(ins) - 2) % per:
        raise ShapeMismatchError(f"{node.op_type} takes R, T then {per} groups of n tensors, got "
                                 f"{len(ins)} inputs")
    n = (len(ins) - 2) // per
    return n, [ins[2 + k * n:2 + (k + 1) * n] for k in range(per)]


@converter("Adagrad", since=1, domain=DOMAIN)
def adagrad(ctx, node):
    """ONNX preview.training Adagrad: for each ``(X, G, H)`` group, ``H' = H + g^2`` and ``X' = X -
    r / (1 + T * decay_factor) * g / (sqrt(H') + epsilon)`` with ``g = norm_coefficient * X + G``;
    returns ``[X'..., H'...]``.

    Raises:
        ShapeMismatchError: the inputs are not R, T and whole groups."""
    n, (xs, gs, hs) = _groups(node, 3)
    decay = float(node.attr("decay_factor", 0.0))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        a = _Arith(ctx, x.type.dtype)
        r = a.scalar(node.input(0))
        t = a.scalar(node.input(1))
        rate = a.div(r, a.add(a.mul(t, decay), 1.0))
        gr = a.add(a.mul(x, norm), g)
        h2 = a.add(h, a.mul(gr, gr))
        new_x.append(a.sub(x, a.div(a.mul(rate, gr), a.add(a.sqrt(h2), eps))))
        new_h.append(h2)
    return new_x + new_h


@converter("Adam", since=1, domain=DOMAIN)
def adam(ctx, node):
    """ONNX preview.training Adam: per ``(X, G, V, H)`` group the spec's update (``V' = alpha V +
    (1 - alpha) g``, ``H' = beta H + (1 - beta) g^2``, bias-corrected rate when ``T > 0``,
    ``norm_coefficient_post`` decay); returns ``[X'..., V'..., H'...]``.

    Raises:
        ShapeMismatchError: the inputs are not R, T and whole groups."""
    n, (xs, gs, vs, hs) = _groups(node, 4)
    alpha = float(node.attr("alpha", 0.9))
    beta = float(node.attr("beta", 0.999))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    post = float(node.attr("norm_coefficient_post", 0.0))
    out_x, out_v, out_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        a = _Arith(ctx, x.type.dtype)
        r = a.scalar(node.input(0))
        t = a.scalar(node.input(1))
        gr = a.add(a.mul(x, norm), g)
        v2 = a.add(a.mul(v, alpha), a.mul(gr, 1 - alpha))
        h2 = a.add(a.mul(h, beta), a.mul(a.mul(gr, gr), 1 - beta))
        pw = lambda base: ctx.call("power", [a.c(base), t])  # noqa: E731
        adjusted = a.div(a.mul(r, a.sqrt(a.sub(1.0, pw(beta)))), a.sub(1.0, pw(alpha)))
        rate = ctx.call("where", [a.positive(node.input(1)), adjusted, r])
        x2 = a.sub(x, a.mul(rate, a.div(v2, a.add(a.sqrt(h2), eps))))
        out_x.append(a.mul(x2, 1 - post))
        out_v.append(v2)
        out_h.append(h2)
    return out_x + out_v + out_h


@converter("Momentum", since=1, domain=DOMAIN)
def momentum(ctx, node):
    """ONNX preview.training Momentum: per ``(X, G, V)`` group ``V' = alpha V + beta g`` (``beta``
    is 1 at ``T == 0``) and ``X' = X - R * V'`` (standard) or ``X - R * (g + alpha V')``
    (nesterov); returns ``[X'..., V'...]``.

    Raises:
        ShapeMismatchError: the inputs are not R, T and whole groups.
        UnsupportedOpError: an unknown ``mode``."""
    n, (xs, gs, vs) = _groups(node, 3)
    alpha, beta = float(node.attr("alpha")), float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient"))
    mode = node.attr("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise UnsupportedOpError(f"Momentum mode={mode!r} is not 'standard' or 'nesterov'")
    out_x, out_v = [], []
    for x, g, v in zip(xs, gs, vs):
        a = _Arith(ctx, x.type.dtype)
        r = a.scalar(node.input(0))
        b = ctx.call("where", [a.positive(node.input(1)), a.c(beta), a.c(1.0)])
        gr = a.add(a.mul(x, norm), g)
        v2 = a.add(a.mul(v, alpha), a.mul(gr, b))
        step = v2 if mode == "standard" else a.add(gr, a.mul(v2, alpha))
        out_x.append(a.sub(x, a.mul(r, step)))
        out_v.append(v2)
    return out_x + out_v
