"""FuseOps: group operators into fused kernels by their fusion kind (``OpPattern``), with the
dominator-based algorithm of TVM's FuseOps.

The bindings of ``main`` form a dataflow graph; each edge carries the consumer's pattern (a
broadcast op reading an input of its own output shape is an elementwise edge). A post-dominator
tree is built over it (a value that is a graph output has no post-dominator: it must be stored).
Then, in topological order, each node is fused into its immediate post-dominator when every
path between them satisfies the rule of its kind:

- phase 0, ``OUT_ELEMWISE_FUSABLE`` (conv, gemm, matmul, pooling): when the relation to the
  post-dominator is elementwise and every op on the paths is at most broadcast (epilogues:
  + bias, batch norm, relu, residual add);
- phase 0, ``ELEMWISE``/``BROADCAST``: into a post-dominator that is injective or a reduction,
  with injective ops on the paths (producers of reductions; chains);
- phase 0, a chain of ``cast`` read only by an ``OUT_ELEMWISE_FUSABLE`` op joins it (the
  conversion happens as the data is loaded: ToMixedPrecision's float16 inputs of a float32
  accumulation);
- phase 1, ``INJECTIVE``: when every path up to the post-dominator is injective, the
  post-dominator itself injective or a reduction (TVM stops before reductions; here the
  reduction reads the injective chain inlined, so the chain's result is never stored).

A group of two or more bindings becomes a function of the module,
``def @fused_nn_conv_add_nn_relu_3(...) attrs={"primitive": 1}``, called from ``main``; its
parameters are the group's inputs (non-scalar constants included), its result the value of the
group's last binding. Every call lowers to one kernel (``ember.graph.lower``). Because only a
group's last value leaves it, a value read outside its group (or returned by ``main``) is always
materialized.

Config: ``FuseOps.max_depth`` (int, default 256) caps the bindings of one group.
"""

from __future__ import annotations

import re

from ...ops import OpPattern, get_op
from ..ir import Binding, Call, Function, IRModule, Var
from ..mutator import extract_function
from .pass_manager import module_pass, register_config
from .to_mixed_precision import bf16_compute

MAX_DEPTH = register_config("FuseOps.max_depth", int, "most bindings in one fused group")


def op_pattern(b: Binding) -> OpPattern:
    """The fusion kind of a binding (function calls and multi-output ops are opaque)."""
    if b.call.is_function_call or len(b.outputs) != 1:
        return OpPattern.OPAQUE
    opdef = get_op(b.call.op)
    return opdef.pattern if opdef.compute is not None else OpPattern.OPAQUE


class _Node:
    __slots__ = ("index", "binding", "pattern", "outputs", "extern_ref")

    def __init__(self, index, binding, pattern):
        self.index = index
        self.binding = binding
        self.pattern = pattern
        self.outputs: list[tuple[int, OpPattern]] = []  # (consumer index, edge pattern)
        self.extern_ref = False


def build_graph(func: Function) -> list[_Node]:
    """The indexed dataflow graph of ``func``'s bindings."""
    nodes = [_Node(k, b, op_pattern(b)) for k, b in enumerate(func.bindings)]
    index_of = {id(o): k for k, b in enumerate(func.bindings) for o in b.outputs}
    for k, b in enumerate(func.bindings):
        out_t = b.outputs[0].type
        for a in b.call.args:
            j = index_of.get(id(a)) if isinstance(a, Var) else None
            if j is None:
                continue
            edge = nodes[k].pattern
            if edge == OpPattern.BROADCAST and a.type.shape == out_t.shape:
                edge = OpPattern.ELEMWISE
            nodes[j].outputs.append((k, edge))
    for o in func.outputs:
        j = index_of.get(id(o)) if isinstance(o, Var) else None
        if j is not None:
            nodes[j].extern_ref = True
    return nodes


class _DomNode:
    __slots__ = ("parent", "depth", "pattern")

    def __init__(self, parent, depth, pattern):
        self.parent, self.depth, self.pattern = parent, depth, pattern


def _combine(a: OpPattern, b: OpPattern) -> OpPattern:
    return a if a > b else b


def post_dominators(nodes: list[_Node]) -> list[_DomNode]:
    """Immediate post-dominator (as an index) of every node, with the combined pattern of the
    paths to it."""
    tree: list[_DomNode | None] = [None] * len(nodes)
    for k in range(len(nodes) - 1, -1, -1):
        n = nodes[k]
        if n.extern_ref or not n.outputs:
            tree[k] = _DomNode(None, 1, OpPattern.OPAQUE)
            continue
        parent, pat = None, OpPattern.ELEMWISE
        for j, (c, edge) in enumerate(n.outputs):
            if j == 0:
                parent = c
            else:
                parent, pat = _lca(tree, parent, c, pat)
            pat = _combine(pat, edge)
            if parent is None:
                break
        depth = tree[parent].depth + 1 if parent is not None else 1
        tree[k] = _DomNode(parent, depth, pat)
    return tree


def _lca(tree, a, b, pat):
    while a != b:
        if a is None or b is None:
            return None, pat
        da, db = tree[a].depth, tree[b].depth
        if da < db:
            pat = _combine(pat, tree[b].pattern)
            b = tree[b].parent
        elif db < da:
            pat = _combine(pat, tree[a].pattern)
            a = tree[a].parent
        else:
            pat = _combine(pat, _combine(tree[a].pattern, tree[b].pattern))
            a, b = tree[a].parent, tree[b].parent
    return a, pat


class _Groups:
    """Union-find over nodes; a root carries its group's pattern, anchor and size."""

    def __init__(self, nodes):
        self.parent = list(range(len(nodes)))
        self.pattern = [n.pattern for n in nodes]
        self.anchored = [n.pattern == OpPattern.OUT_ELEMWISE_FUSABLE for n in nodes]
        self.size = [1] * len(nodes)

    def find(self, k):
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def merge(self, child, parent):
        c, p = self.find(child), self.find(parent)
        if c == p:
            return
        if self.anchored[c]:
            self.anchored[p] = True
            self.pattern[p] = _combine(self.pattern[c], self.pattern[p])
        self.parent[c] = p
        self.size[p] += self.size[c]


def partition_groups(func: Function, max_depth: int = 256) -> list[int]:
    """Group root index of every binding of ``func`` (TVM's dominator-based partition)."""
    nodes = build_graph(func)
    dom = post_dominators(nodes)
    g = _Groups(nodes)

    # the walks below use explicit stacks: a dominator sink can lie hundreds of bindings
    # away (a 12-layer QDQ BERT), past Python's recursion limit
    def check_path(src, sink, fcond):
        seen, stack = set(), [c for c, _ in nodes[src].outputs]
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            if not fcond(g.pattern[g.find(k)], k == sink):
                return False
            if k != sink:
                stack.extend(c for c, _ in nodes[k].outputs)
        return True

    def commit(src, sink):
        target = sink
        seen = set()

        stack = [src]
        while stack:
            k = stack.pop()
            if k == sink or k in seen:
                continue
            seen.add(k)
            g.merge(k, target)
            stack.extend(c for c, _ in nodes[k].outputs)

    def group_size_with(src, sink):
        """Size of the group ``src .. sink`` would make (stops counting past max_depth)."""
        seen, total = set(), g.size[g.find(sink)]
        roots_seen, stack = {g.find(sink)}, [src]
        while stack and total <= max_depth:
            k = stack.pop()
            if k == sink or k in seen:
                continue
            seen.add(k)
            r = g.find(k)
            if r not in roots_seen:
                roots_seen.add(r)
                total += g.size[r]
            stack.extend(c for c, _ in nodes[k].outputs)
        return total

    for phase in (0, 1):
        for k, n in enumerate(nodes):
            gp = g.pattern[g.find(k)]
            d = dom[k]
            if gp == OpPattern.OPAQUE or d.parent is None:
                continue
            sink = d.parent
            if g.find(k) == g.find(sink):
                continue
            if group_size_with(k, sink) > max_depth:
                continue
            if gp == OpPattern.OUT_ELEMWISE_FUSABLE:
                if _cast_into_anchor(nodes, sink) and not (
                        bf16_compute() and _rounds_to_bf16(nodes[sink])):
                    # the cast goes with the conv/gemm that reads it (stored narrow); under
                    # bf16 compute a rounding cast read by a pooling stays with its producer,
                    # which then stores bf16 (the stem's output before the max pool)
                    continue
                if bf16_compute() and _widens_bf16(nodes[sink]) and nodes[sink].outputs and \
                        all(nodes[c].pattern <= OpPattern.BROADCAST for c, _ in nodes[sink].outputs):
                    # a value stored as bf16 (its producer rounded it) and widened for an
                    # elementwise op: the widening goes with that op (a downsampling conv's
                    # output read by the residual add), the producer stores bf16
                    continue
                if phase == 0 and d.pattern == OpPattern.ELEMWISE and \
                        check_path(k, sink, lambda kind, is_sink: kind <= OpPattern.BROADCAST):
                    commit(k, sink)
            elif gp <= OpPattern.BROADCAST:
                if _rounds_to_bf16(nodes[k]) and bf16_compute() and \
                        _cast_into_anchor(nodes, sink):
                    continue  # stored as bf16 by its producer: the GEMM reads bf16 (vdpbf16ps)
                if phase == 0 and _is_cast_group(nodes, g, k) and \
                        d.pattern == OpPattern.OUT_ELEMWISE_FUSABLE and \
                        [c for c, _ in nodes[k].outputs] == [sink] and \
                        (not _widens_bf16(nodes[k]) or not bf16_compute()
                         or _bf16_gemm_anchor(nodes, sink)):
                    # a dtype conversion read by one conv/gemm: converted as it is loaded
                    # (ToMixedPrecision's float16 storage read in float32)
                    commit(k, sink)
                elif phase == 0 and (d.pattern <= OpPattern.INJECTIVE or
                                     d.pattern == OpPattern.COMM_REDUCE):
                    def fcond(kind, is_sink):
                        if not is_sink:
                            return kind <= OpPattern.INJECTIVE
                        return kind <= OpPattern.OUT_ELEMWISE_FUSABLE
                    if check_path(k, sink, fcond):
                        commit(k, sink)
            elif gp == OpPattern.INJECTIVE:
                # unlike TVM, an injective chain also feeds a reduction (inlined into its body)
                def fcond_inj(kind, is_sink):
                    return kind <= OpPattern.INJECTIVE or (is_sink and
                                                           kind == OpPattern.COMM_REDUCE)
                if phase == 1 and check_path(k, sink, fcond_inj):
                    commit(k, sink)
    return [g.find(k) for k in range(len(nodes))]


def _is_cast_group(nodes, g, k) -> bool:
    """True when node ``k``'s group is made of ``cast`` bindings only."""
    r = g.find(k)
    return all(nodes[j].binding.call.op == "cast" for j in range(k + 1) if g.find(j) == r)


def _rounds_to_bf16(n) -> bool:
    """True for a ``cast`` of float32 to bfloat16 (these rules apply under ``quantize="bf16"``,
    ``to_mixed_precision.bf16_compute``): when a conv/gemm reads its result (through
    the widening cast that ToMixedPrecision puts there) it is not fused into the conv's loads
    but ends its producer's group (or runs alone), so the conv reads bfloat16 from memory as
    the ``vdpbf16ps`` micro-kernel needs (``ember.codegen.microkernel_bf16``)."""
    call = n.binding.call
    return (call.op == "cast" and call.attrs.get("dtype") == "bfloat16"
            and call.args[0].type.dtype == "float32")


def _cast_into_anchor(nodes, k) -> bool:
    """True when node ``k`` is a ``cast`` read only by one conv/gemm-like op (it will be fused
    into that op's loads, so a producer group should end before it). A bf16 -> float32 cast is
    fused only into a bf16 GEMM (``_bf16_gemm_anchor``)."""
    n = nodes[k]
    if n.binding.call.op != "cast" or n.extern_ref or len(n.outputs) != 1:
        return False
    c = n.outputs[0][0]
    if _widens_bf16(n) and bf16_compute() and not _bf16_gemm_anchor(nodes, c):
        return False
    return nodes[c].pattern == OpPattern.OUT_ELEMWISE_FUSABLE


def _widens_bf16(n) -> bool:
    """True for a ``cast`` of bfloat16 to float32."""
    call = n.binding.call
    return (call.op == "cast" and call.attrs.get("dtype") == "float32"
            and call.args[0].type.dtype == "bfloat16")


def _bf16_gemm_anchor(nodes, k) -> bool:
    """True when conv/gemm-like node ``k`` is a bf16 GEMM as ToMixedPrecision makes it: every
    operand (the first two inputs) is a bf16 -> float32 cast and the weight (second input) casts a constant or a
    parameter (bound weights), not a value the graph computes. Other
    anchors (the attention products of two activations, float32 operators reading one bf16
    value) do not get a bf16 cast fused into their loads: they read float32, which their
    float32 schedules (``rules/gemm``, ``rules/attention``) need."""
    call = nodes[k].binding.call
    if nodes[k].pattern != OpPattern.OUT_ELEMWISE_FUSABLE or len(call.args) < 2:
        return False
    made = {id(o): n for n in nodes for o in n.binding.outputs}
    for j, a in enumerate(call.args[:2]):  # the GEMM operands (a bias is the epilogue's)
        p = made.get(id(a))
        if p is None or not _widens_bf16(p):
            return False
        if j == 1 and id(p.binding.call.args[0]) in made:
            return False  # a weight computed by the graph: no constant to pack
    return True


def _fused_name(ops: list[str], k: int) -> str:
    parts = [re.sub(r"[^A-Za-z0-9]", "_", o) for o in ops]
    if len(parts) > 6:
        parts = parts[:6]
    return "fused_" + "_".join(parts) + f"_{k}"


def fuse_function(func: Function, mod: IRModule, max_depth: int = 256,
                  start: int = 0) -> tuple[Function, dict[str, Function]]:
    """``func`` with each multi-binding group replaced by a call of a new primitive function.

    Returns:
        ``(new func, {name: fused function})``.
    """
    roots = partition_groups(func, max_depth)
    members: dict[int, list[int]] = {}
    for k, r in enumerate(roots):
        members.setdefault(r, []).append(k)
    sub: dict[int, Var] = {}
    new_funcs: dict[str, Function] = {}
    bindings = []
    counter = start
    taken = set(mod.functions)
    for k, b in enumerate(func.bindings):
        r = roots[k]
        group = members[r]
        if len(group) == 1:
            args = tuple(sub.get(id(a), a) if isinstance(a, Var) else a for a in b.call.args)
            bindings.append(b if all(x is y for x, y in zip(args, b.call.args))
                            else Binding(b.outputs, Call(b.call.op, args, b.call.attrs)))
            continue
        if k != group[-1]:
            continue  # emitted at the group's last binding
        fbs = [func.bindings[i] for i in group]
        while True:
            name = _fused_name([fb.call.op for fb in fbs], counter)
            counter += 1
            if name not in taken:
                break
        taken.add(name)
        fused, outside = extract_function(fbs, name, {"primitive": 1})
        call_args = [sub.get(id(a), a) if isinstance(a, Var) else a for a in outside]
        root_out = fbs[-1].outputs[0]
        new_funcs[name] = fused
        res = Var(root_out.name, root_out.type)
        sub[id(root_out)] = res
        bindings.append(Binding((res,), Call("@" + name, tuple(call_args), {})))
    outputs = [sub.get(id(o), o) if isinstance(o, Var) else o for o in func.outputs]
    return Function(list(func.params), bindings, outputs, func.name, dict(func.attrs)), new_funcs


@module_pass("FuseOps", opt_level=1, required=("InferType",))
def FuseOps(mod: IRModule, ctx) -> IRModule:
    """Fuse ``main``'s bindings into primitive functions (one kernel each)."""
    main, fused = fuse_function(mod.main, mod, ctx.get_config(MAX_DEPTH, 256))
    out = IRModule(mod.functions)
    out["main"] = main
    for n, f in fused.items():
        out[n] = f
    return out


__all__ = ["FuseOps", "fuse_function", "partition_groups", "op_pattern"]
