"""Expand ONNX function operators into their defining bodies.

Many ONNX operators are *functions*: the specification defines them by a body of simpler
operators (``Celu``, ``LayerNormalization``, ``GroupNormalization``, ``Mish``...), some of them
context-dependent (the body depends on input types or attributes). When ember has no converter for
such an operator, ``expand_functions`` replaces the node by that body (from the installed onnx's
schema: ``has_function`` / ``has_context_dependent_function``), so every operator of the body is
converted and compiled as usual. The expansion recurses into bodies whose operators are functions
themselves. ``expand_model`` also inlines the model's own (model-local) functions; ``from_onnx``
applies it to every model it imports, so ``ember.compile`` and the staged executor see the same
graph.
"""

from __future__ import annotations

import itertools

import onnx
from onnx import helper

from .converters import lookup_converter
from .hostops import lookup_host_op

MAX_ROUNDS = 8


def schema_function(node: onnx.NodeProto, opset: int, input_types: list) -> onnx.FunctionProto | None:
    """The body defining ``node`` at ``opset`` (``input_types``: ``TypeProto`` per input, or
    ``None`` where unknown), or ``None`` when the operator is not a function."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    f = onnx.FunctionProto()
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if versions:
            f.ParseFromString(schema.get_function_with_opset_version(max(versions)))
        else:
            f.CopyFrom(schema.function_body)
        return f
    if schema.has_context_dependent_function:
        names = list(node.input) + [""] * (len(input_types) - len(node.input))
        if any(t is None and n for t, n in zip(input_types, names)):
            return None  # an input whose type is unknown
        input_types = [t if t is not None else onnx.TypeProto() for t in input_types]
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        data = [t.SerializeToString() for t in input_types]
        try:
            if versions:
                b = schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(), data)
            else:
                b = schema.get_context_dependent_function(node.SerializeToString(), data)
        except Exception:  # noqa: BLE001 - the schema refuses this context: not expandable
            return None
        if not b:
            return None
        f.ParseFromString(b)
        return f
    return None


_uid = itertools.count()


def schema_defaults(node: onnx.NodeProto, opset: int) -> dict:
    """``{attribute name: AttributeProto}`` of the defaults the operator's schema declares."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, domain)
    except onnx.defs.SchemaError:
        return {}
    out = {}
    for name, a in schema.attributes.items():
        d = a.default_value
        if d is not None and d.type != onnx.AttributeProto.UNDEFINED:
            out[name] = d
    return out


def inline_body(node: onnx.NodeProto, f: onnx.FunctionProto,
                defaults: dict | None = None) -> list[onnx.NodeProto]:
    """``f``'s nodes with formal inputs/outputs renamed to ``node``'s, internal values given
    unique names and attribute references resolved from ``node``'s attributes (or ``f``'s
    defaults)."""
    prefix = f"_{node.op_type}{next(_uid)}_"
    rename: dict[str, str] = {"": ""}
    for k, name in enumerate(f.input):
        rename[name] = node.input[k] if k < len(node.input) else ""
    for k, name in enumerate(f.output):
        actual = node.output[k] if k < len(node.output) else ""
        rename[name] = actual or prefix + name
    attrs = {a.name: a for a in node.attribute}
    defaults = dict(defaults or {}) | {a.name: a for a in f.attribute_proto}
    out = []
    for n in f.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        del m.input[:]
        del m.output[:]
        m.input.extend(rename.get(x, prefix + x) if x else "" for x in n.input)
        m.output.extend(rename.get(x, prefix + x) if x else "" for x in n.output)
        m.name = prefix + (n.name or n.op_type)
        del m.attribute[:]
        for a in n.attribute:
            if a.ref_attr_name:
                src = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if src is None:
                    continue
                b = onnx.AttributeProto()
                b.CopyFrom(src)
                b.name = a.name
                m.attribute.append(b)
            else:
                m.attribute.append(a)
        for a in m.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_captures(g, lambda x: rename.get(x, prefix + x), set())
        out.append(m)
    return out


def _rename_captures(g: onnx.GraphProto, outer_name, bound: set) -> None:
    """Rename, in place, the names subgraph ``g`` reads from the enclosing scope."""
    local = set(bound) | {i.name for i in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        for k, x in enumerate(n.input):
            if x and x not in local:
                n.input[k] = outer_name(x)
        for a in n.attribute:
            for sg in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_captures(sg, outer_name, local)
        local |= set(n.output)
    for o in g.output:
        if o.name not in local:
            o.name = outer_name(o.name)


def _needs_expansion(node, opsets) -> bool:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    opset = opsets.get(domain, 1)
    if lookup_converter(domain, node.op_type, opset) is not None:
        return False
    return lookup_host_op(domain, node.op_type) is None


def expand_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose main-graph nodes without an ember converter or host kernel are
    replaced by their ONNX function bodies (when the operator is a function); other nodes are
    left for the importer to report."""
    opsets = {("" if o.domain in ("", "ai.onnx") else o.domain): o.version
              for o in model.opset_import}
    if not any(_needs_expansion(n, opsets) for n in model.graph.node):
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for _ in range(MAX_ROUNDS):
        types = _value_types(m)
        changed = False
        nodes = []
        for n in m.graph.node:
            if _needs_expansion(n, opsets):
                domain = "" if n.domain in ("", "ai.onnx") else n.domain
                f = schema_function(n, opsets.get(domain, 1),
                                    [types.get(x) if x else None for x in n.input])
                if f is not None:
                    for o in f.opset_import:
                        d = "" if o.domain in ("", "ai.onnx") else o.domain
                        if d not in opsets:
                            opsets[d] = o.version
                            m.opset_import.append(helper.make_opsetid(o.domain, o.version))
                    nodes.extend(inline_body(n, f, schema_defaults(n, opsets.get(domain, 1))))
                    changed = True
                    continue
            nodes.append(n)
        if not changed:
            break
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    return m


def expand_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its model-local functions inlined (``onnx.inliner``) and its nodes without
    an ember converter or host kernel expanded into their ONNX function bodies
    (``expand_functions``): what ``from_onnx`` and the staged executor import, so a function
    operator compiles statically and fuses like the arithmetic it is made of. ``model`` itself
    is not modified; it is returned as is when nothing needs expanding."""
    if model.functions:
        from onnx import inliner
        model = inliner.inline_local_functions(model)
    return expand_functions(model)


def function_ops() -> dict[tuple[str, str], int]:
    """``{(domain, op_type): opset}``: the operators of the installed onnx that are defined by a
    function body (plain or context-dependent) from ``opset`` on (the first schema version that
    has one); these are what ``expand_functions`` can expand when ember has no converter."""
    out: dict[tuple[str, str], int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.deprecated or not (schema.has_function or
                                     schema.has_context_dependent_function):
            continue
        key = ("" if schema.domain in ("", "ai.onnx") else schema.domain, schema.name)
        out[key] = min(out.get(key, schema.since_version), schema.since_version)
    return out


def _value_types(m: onnx.ModelProto) -> dict:
    types = {}
    g = m.graph
    try:
        g = onnx.shape_inference.infer_shapes(m).graph
    except Exception:  # noqa: BLE001 - without inference only declared types are known
        pass
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.type.WhichOneof("value") is not None:
            types[vi.name] = vi.type
    for t in m.graph.initializer:
        types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
    return types
