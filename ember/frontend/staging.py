"""The staged executor: runs any ONNX model as compiled segments plus host kernels.

``ember.compile`` needs a graph whose shapes and shape-like values (reduce ``axes``, Reshape
``shape``, TopK ``k``, Pad ``pads``...) are known at compile time. ``StagedModel`` lifts that
restriction the way a JIT does, by specializing at run time:

1. The graph's nodes are walked in order. Runs of consecutive tensor nodes form a *segment*,
   compiled by ``from_onnx`` + ``build`` (native kernels, static memory plan) for the concrete
   shapes and dtypes of the values entering it, and cached by that signature.
2. When a converter needs the value of a tensor that is only known at run time
   (``RuntimeValueError``), the segment is specialized on it: if the tensor enters the segment,
   its value becomes a compile-time constant of the specialization (part of the cache key); if it
   is computed inside the segment, the segment is cut before the node that needs it, so the value
   is known when the next segment is compiled.
3. Nodes that cannot be compiled run as host kernels (``ember.frontend.hostops``): string,
   sequence and optional operators, data-dependent output shapes (``NonZero``, ``Unique``...) and
   control flow, whose bodies (``If`` branches, ``Loop``/``Scan`` bodies) run as staged graphs of
   compiled segments themselves.

``report()`` lists the compiled segments (nodes, kernels, specializations) and the nodes that ran
on the host. A model with static shapes and no host node runs as one segment: exactly what
``ember.compile`` builds.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import (EmberError, InputError, ModelLoadError, RuntimeValueError,
                      UnsupportedOpError)
from .converters import lookup_converter
from .hostops import HostContext, lookup_host_op
from .onnx import from_onnx, load_model

CONTROL_OPS = {"If", "Loop", "Scan", "SequenceMap"}
SPECIALIZE_LIMIT = 4096  # elements: larger run-time tensors are never specialized on


def value_kind(v) -> str:
    """``"tensor"``, ``"string"``, ``"sequence"``, ``"optional_none"`` or ``"map"`` of a value."""
    if v is None:
        return "optional_none"
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    a = np.asarray(v)
    return "string" if a.dtype.kind in "OUS" else "tensor"


def _type_kind(tp: onnx.TypeProto) -> str | None:
    f = tp.WhichOneof("value")
    if f == "tensor_type":
        return "string" if tp.tensor_type.elem_type == onnx.TensorProto.STRING else "tensor"
    if f == "sparse_tensor_type":
        return "sparse"
    if f in ("sequence_type", "optional_type", "map_type"):
        return {"sequence_type": "sequence", "optional_type": "optional", "map_type": "map"}[f]
    return None


def _subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Names a node reads, including the outer-scope names its subgraphs capture."""
    names = {n for n in node.input if n}
    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            names |= _captured(g)
    return names


def _captured(g: onnx.GraphProto) -> set[str]:
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    used: set[str] = set()
    for n in g.node:
        used |= _subgraph_inputs(n)
        local |= set(n.output)
    used |= {o.name for o in g.output}
    return used - local


def np_to_onnx_elem(dtype: np.dtype) -> int:
    """ONNX element type of a numpy dtype (ml_dtypes types included)."""
    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (KeyError, ValueError, TypeError):
        raise UnsupportedOpError(f"numpy dtype {dtype} has no ONNX element type") from None


class GraphProgram:
    """One ONNX graph (the model's main graph or a subgraph) run by the staged executor.

    Args:
        graph: the ``GraphProto``.
        opsets: ``{domain: version}`` in force.
        build: ``(IRModule, params) -> CompiledModel`` (``ember.driver.build`` bound to a target).
        ir_version: the model's IR version (for the segment models).
        report: shared report dict the program appends to.
    """

    def __init__(self, graph: onnx.GraphProto, opsets: dict, build: Callable, ir_version: int,
                 report: dict, name: str = "main"):
        self.graph = graph
        self.name = name
        self.opsets = dict(opsets)
        self.build = build
        self.ir_version = ir_version
        self.report = report
        self.nodes = list(graph.node)
        self.init_protos = {t.name: t for t in graph.initializer}
        self._init_arrays: dict[str, np.ndarray] = {}
        self.input_names = [i.name for i in graph.input if i.name not in self.init_protos]
        self.output_names = [o.name for o in graph.output]
        self.kinds: dict[str, str | None] = self._infer_kinds()
        # names read by nodes[i:] (and the graph outputs): what a segment ending at i must keep
        self.later: list[set[str]] = [set() for _ in range(len(self.nodes) + 1)]
        self.later[-1] = set(self.output_names)
        for i in range(len(self.nodes) - 1, -1, -1):
            self.later[i] = self.later[i + 1] | _subgraph_inputs(self.nodes[i])
        self._segments: dict = {}   # compiled segments by key
        self._plans: dict = {}      # (start, signature) -> (end, specialized names)
        self._subprograms: dict = {}

    # types ------------------------------------------------------------------------------------
    def _infer_kinds(self) -> dict:
        kinds: dict[str, str | None] = {}
        g = self.graph
        try:
            m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in self.opsets.items()])
            m.ir_version = self.ir_version
            g = onnx.shape_inference.infer_shapes(m).graph
        except Exception:  # noqa: BLE001 - inference is a hint; unknown kinds stay None
            pass
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            kinds[vi.name] = _type_kind(vi.type)
        for t in self.graph.initializer:
            kinds[t.name] = "string" if t.data_type == onnx.TensorProto.STRING else "tensor"
        return kinds

    def _init(self, name: str) -> np.ndarray:
        if name not in self._init_arrays:
            self._init_arrays[name] = numpy_helper.to_array(self.init_protos[name])
        return self._init_arrays[name]

    def value(self, name: str, env: Mapping):
        """The value of ``name``: from ``env`` (computed so far) or the graph's initializers.

        Raises:
            ModelLoadError: ``name`` is read before any node defines it."""
        if name in env:
            return env[name]
        if name in self.init_protos:
            return self._init(name)
        raise ModelLoadError(f"graph {self.name!r}: value {name!r} is read before it is defined")

    # node classes -----------------------------------------------------------------------------
    def _domain(self, node) -> str:
        d = node.domain or ""
        return "" if d == "ai.onnx" else d

    def _is_host(self, node, env) -> bool:
        if node.op_type in CONTROL_OPS and self._domain(node) == "":
            return True
        reg = lookup_host_op(self._domain(node), node.op_type)
        if reg is None:
            # no host kernel of its own: strings still go to the host (the reference kernel)
            return self._domain(node) == "" and self._touches(node, env, ("string",))
        if reg[1] == "always":
            return True
        return self._touches(node, env, ("string", "sequence", "optional_none", "map",
                                         "optional", "sparse"))

    def _touches(self, node, env, kinds) -> bool:
        """True when one of ``node``'s inputs or outputs is (or is inferred to be) a value of
        one of ``kinds`` (``value_kind`` names): no compiled kernel takes those."""
        for n in node.input:
            if not n:
                continue
            if n in env or n in self.init_protos:
                if value_kind(self.value(n, env)) in kinds:
                    return True
            elif self.kinds.get(n) in kinds:
                return True
        return any(self.kinds.get(o) in kinds for o in node.output if o)

    # running ----------------------------------------------------------------------------------
    def run(self, env: dict, outer: Mapping | None = None) -> list:
        """Run the graph on ``env`` (``{input name: value}``; ``outer`` holds outer-scope values
        for subgraphs) and return the graph outputs in order."""
        env = dict(outer or {}) | dict(env)
        i, n = 0, len(self.nodes)
        while i < n:
            node = self.nodes[i]
            if self._is_host(node, env):
                self._run_host(node, env)
                i += 1
            else:
                i = self._run_segment(i, env)
        return [self.value(o, env) for o in self.output_names]

    def _run_host(self, node, env):
        dom = self._domain(node)
        opset = self.opsets.get(dom, 1)
        reg = lookup_host_op(dom, node.op_type)
        where = f"node {node.name or node.output[0]!r} ({node.op_type}, opset {opset}): "
        ins = [self.value(x, env) if x else None for x in node.input]
        if reg is None and dom == "" and all(value_kind(v) in ("tensor", "string", "optional_none")
                                             for v in ins):
            from .hostops.strings import reference_kernel  # strings through layout ops
            reg = (reference_kernel, "fallback")
        if reg is None:
            raise UnsupportedOpError(f"{where}operator {node.op_type} on string/sequence/"
                                     f"optional values is not supported", op=node.op_type,
                                     node=node.name, opset=opset)
        hctx = HostContext(node, opset, self.opsets, self._run_subgraph, env)
        try:
            outs = reg[0](hctx, ins)
        except EmberError:
            raise
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise UnsupportedOpError(f"{where}host kernel failed: {type(e).__name__}: {e}",
                                     op=node.op_type, node=node.name, opset=opset) from None
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v
        self.report.setdefault("host_nodes", []).append(
            {"graph": self.name, "node": node.name or node.output[0], "op": node.op_type})

    def _run_subgraph(self, graph: onnx.GraphProto, inputs: list, outer: Mapping) -> list:
        """Run subgraph ``graph`` (If branch, Loop/Scan body) with positional ``inputs``."""
        key = id(graph)
        prog = self._subprograms.get(key)
        if prog is None:
            prog = GraphProgram(graph, self.opsets, self.build, self.ir_version, self.report,
                                name=f"{self.name}/{graph.name or 'subgraph'}")
            prog._keepalive = graph
            self._subprograms[key] = prog
        if len(inputs) != len(prog.input_names):
            raise UnsupportedOpError(f"subgraph {graph.name!r} takes {len(prog.input_names)} "
                                     f"inputs, got {len(inputs)}")
        return prog.run(dict(zip(prog.input_names, inputs)), outer)

    # segments ---------------------------------------------------------------------------------
    def _segment_end(self, i: int, env) -> int:
        j = i
        while j < len(self.nodes) and not self._is_host(self.nodes[j], env):
            j += 1
        return j

    def _seg_inputs(self, i: int, j: int) -> list[str]:
        produced: set[str] = set()
        ins: list[str] = []
        for node in self.nodes[i:j]:
            for x in node.input:
                if x and x not in produced and x not in ins:
                    ins.append(x)
            produced |= set(node.output)
        return ins

    def _signature(self, names, env) -> tuple:
        sig = []
        for x in names:
            if x in env:
                v = np.asarray(env[x])
                sig.append((x, str(v.dtype), v.shape))
        return tuple(sig)

    def _run_segment(self, i: int, env: dict) -> int:
        j_max = self._segment_end(i, env)
        names = self._seg_inputs(i, j_max)
        sig = self._signature(names, env)
        plan = self._plans.get((i, sig))
        if plan is None:
            plan = self._discover(i, j_max, env)
            self._plans[(i, sig)] = plan
        j, spec = plan
        key = (i, j, self._signature(self._seg_inputs(i, j), env),
               tuple((x, np.asarray(self.value(x, env)).tobytes()) for x in spec))
        entry = self._segments.get(key)
        if entry is None:
            entry = self._compile(i, j, env, spec)
            self._segments[key] = entry
        model, in_names, out_names = entry
        outs = model.run([np.asarray(env[x]) for x in in_names]) if in_names or out_names else []
        for name, v in zip(out_names, outs):
            env[name] = v
        return j

    def _discover(self, i: int, j: int, env) -> tuple[int, tuple]:
        """Find the segment end and the names to specialize on by compiling (the compiled
        segment is cached, so the work is not repeated)."""
        spec: list[str] = []
        while True:
            try:
                entry = self._compile(i, j, env, tuple(spec))
            except RuntimeValueError as e:
                name = e.value_name
                k = i + e.node_index if e.node_index is not None else None
                if name is None or k is None:
                    raise
                produced = set()
                for node in self.nodes[i:k]:
                    produced |= set(node.output)
                if name in produced and k > i:
                    j = k
                    continue
                if name in spec or not (name in env or name in self.init_protos):
                    raise
                v = np.asarray(self.value(name, env))
                if v.size > SPECIALIZE_LIMIT:
                    raise RuntimeValueError(f"{e} (it has {v.size} elements: too large to "
                                            f"specialize on)", op=e.op, node=e.node,
                                            opset=e.opset, value_name=name) from None
                spec.append(name)
                continue
            key = (i, j, self._signature(self._seg_inputs(i, j), env),
                   tuple((x, np.asarray(self.value(x, env)).tobytes()) for x in spec))
            self._segments[key] = entry
            return j, tuple(spec)

    def _compile(self, i: int, j: int, env, spec) -> tuple:
        nodes = self.nodes[i:j]
        produced: list[str] = []
        for node in nodes:
            produced += [o for o in node.output if o]
        keep = self.later[j]
        out_names = [o for o in produced if o in keep]
        in_names, inits = [], []
        inputs = []
        for x in self._seg_inputs(i, j):
            if x in spec:
                inits.append(numpy_helper.from_array(np.asarray(self.value(x, env)), x))
            elif x in env:
                v = np.asarray(env[x])
                inputs.append(helper.make_tensor_value_info(x, np_to_onnx_elem(v.dtype),
                                                            list(v.shape)))
                in_names.append(x)
            elif x in self.init_protos:
                inits.append(self.init_protos[x])
            else:
                raise ModelLoadError(f"graph {self.name!r}: {x!r} is read before it is defined")
        outputs = [helper.make_empty_tensor_value_info(o) for o in out_names]
        g = helper.make_graph(nodes, f"{self.name}_seg{i}_{j}", inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v)
                                                for d, v in self.opsets.items()])
        m.ir_version = self.ir_version
        try:
            mod, params = from_onnx(m)
        except RuntimeValueError as e:
            raise e
        model = self.build(mod, params)
        model._ember_names = (in_names, out_names)
        self.report.setdefault("segments", []).append(
            {"graph": self.name, "nodes": [n.name or n.output[0] for n in nodes],
             "ops": sorted({n.op_type for n in nodes}), "specialized_on": list(spec),
             "kernels": model.info.get("num_kernels")})
        return model, in_names, out_names


def _has_function_body(node: onnx.NodeProto, opset: int) -> bool:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain)
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def check_runnable(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> None:
    """Check that the staged executor has a way to run every node of ``graph`` (and of the
    subgraphs of its control-flow nodes): a converter for the node's opset, a host kernel, or an
    ONNX function body to expand. Checked when a ``StagedModel`` is made, so an operator no
    executor can run is reported by ``ember.compile``, not at the first ``run``.

    Raises:
        UnsupportedOpError: names the first node that cannot run, its operator and opset."""
    for node in graph.node:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        opset = opsets.get(domain, 1)
        if domain == "" and node.op_type in CONTROL_OPS:
            for a in node.attribute:
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    check_runnable(g, opsets)
            continue
        if (lookup_converter(domain, node.op_type, opset) is not None
                or lookup_host_op(domain, node.op_type) is not None
                or _has_function_body(node, opset)):
            continue
        name = node.name or (node.output[0] if node.output else node.op_type)
        raise UnsupportedOpError(
            f"node {name!r} ({node.op_type}, opset {opset}): operator "
            f"{(domain + '.') if domain else ''}{node.op_type} is not supported at opset "
            f"{opset} (no native kernel, host kernel or ONNX function body)",
            op=node.op_type, node=name, opset=opset)


class StagedModel:
    """An ONNX model run by the staged executor (see the module doc).

    Args:
        model: path, bytes or ``onnx.ModelProto``.
        build: ``(IRModule, params) -> CompiledModel``; the caller binds the target
            (``lambda mod, params: ember.build(mod, "llvm", params)``).
    Raises:
        ModelLoadError: unreadable model.
        UnsupportedOpError: a node that no executor can run (``check_runnable``).
    """

    def __init__(self, model, build: Callable):
        from .functions import expand_model
        m = expand_model(load_model(model))
        self.model = m
        opsets = {(o.domain or ""): o.version for o in m.opset_import}
        if "ai.onnx" in opsets:
            opsets.setdefault("", opsets.pop("ai.onnx"))
        opsets.setdefault("", 1)
        self._report: dict = {"segments": [], "host_nodes": []}
        self.info: dict = {"executor": "staged"}
        check_runnable(m.graph, opsets)
        self.program = GraphProgram(m.graph, opsets, build, m.ir_version, self._report)

    @property
    def input_names(self) -> list[str]:
        return list(self.program.input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self.program.output_names)

    def run(self, inputs) -> list:
        """Run the model. ``inputs``: ``{name: value}`` or a list in graph-input order (values
        are numpy arrays, lists for sequences, ``None`` for empty optionals).

        Returns:
            the outputs in graph-output order.
        Raises:
            InputError, UnsupportedOpError, ShapeMismatchError, CodegenError...
        """
        names = self.program.input_names
        if isinstance(inputs, Mapping):
            env = dict(inputs)
            missing = [n for n in names if n not in env]
            if missing:
                raise InputError(f"missing input(s) {missing}; the model's inputs are {names}")
        else:
            vals = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            if len(vals) > len(names):
                raise InputError(f"expected at most {len(names)} input(s) {names}, got "
                                 f"{len(vals)}")
            env = dict(zip(names, vals))
            missing = names[len(vals):]
            for n in missing:  # trailing optional inputs left out
                env[n] = None
        return self.program.run(env)

    def benchmark(self, inputs, number: int = 20, warmup: int = 3) -> dict:
        """Latency statistics in ms (``median_ms``, ``mean_ms``, ``min_ms``) of ``run(inputs)``
        (host kernels and per-shape compiles included; the warm-up runs compile)."""
        from ..runtime.executor import benchmark
        return benchmark(lambda: self.run(inputs), number, warmup)

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random tensors for the graph inputs (numeric tensors with static dims).

        Raises:
            InputError: an input has a symbolic dim or is not a numeric tensor (give it
                explicitly).
        """
        from onnx.helper import tensor_dtype_to_np_dtype
        from ..runtime.module import random_array
        rng = np.random.default_rng(seed)
        init = {t.name for t in self.model.graph.initializer}
        out = {}
        for vi in self.model.graph.input:
            if vi.name in init:
                continue
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if not vi.type.HasField("tensor_type") or None in dims or not tt.HasField("shape"):
                raise InputError(f"input {vi.name!r} has no static tensor shape; give its value "
                                 f"explicitly (e.g. --input {vi.name}=file.npy)")
            dt = np.dtype(tensor_dtype_to_np_dtype(tt.elem_type))
            if dt.kind not in "fbiu":
                raise InputError(f"input {vi.name!r} is {dt}; give its value explicitly")
            out[vi.name] = random_array(rng, dims, dt)
        return out

    def save(self, path) -> None:
        """Staged models are not saved (their segments are compiled per run-time shape).

        Raises:
            ArtifactError: always; compile with static shapes (``ember.compile(...,
                shapes=...)``, ``executor="static"``) to get a saveable model.
        """
        from ..errors import ArtifactError
        raise ArtifactError(f"cannot save {str(path)!r}: this model runs on the staged executor "
                            f"(shapes or operators depend on run-time values: "
                            f"{self.info.get('staged_reason', 'executor=staged')}); only "
                            f"static-shape models compile to an artifact")

    def report(self) -> dict:
        """``{"segments": [...], "host_nodes": [...]}``: compiled segments (their nodes, ops,
        kernels, the run-time values they were specialized on and how many specializations were
        compiled) and the nodes that ran on the host, as recorded so far."""
        segs = {}
        for s in self._report["segments"]:
            key = (s["graph"], tuple(s["nodes"]), tuple(s["specialized_on"]))
            prev = segs.get(key)
            segs[key] = dict(s, specializations=(prev["specializations"] + 1) if prev else 1)
        hosts = {}
        for h in self._report["host_nodes"]:
            hosts[(h["graph"], h["node"])] = h
        return {"segments": list(segs.values()), "host_nodes": list(hosts.values())}
