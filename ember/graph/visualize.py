"""Pictures of a graph module: Graphviz DOT text, a terminal text rendering, and files.

For the CLI (``ember graph MODEL --format svg|dot|txt``)::

    from ember.graph.visualize import to_dot, to_text, render
    dot_text = to_dot(mod)                  # str, Graphviz DOT
    print(to_text(mod))                     # str, one line per binding with its inputs
    render(mod, "graph.svg", format="svg")  # svg through the `dot` program; "dot" / "txt" too

Fused groups (``@fused_...`` calls) are drawn as one node listing their operators, or, with
``expand=True``, as a cluster of their own operator nodes.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from pathlib import Path

from ..errors import ToolchainError
from .ir import Constant, Function, IRModule, Var

_FILL = {"primitive": "#fde2c8", "composite": "#d8e8f8", "op": "#eeeeee", "param": "#ffffff"}


def _shape(t) -> str:
    return "x".join(str(d) for d in t.shape) + f" {t.dtype}" if t.shape else f"scalar {t.dtype}"


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(mod: IRModule, expand: bool = False, name: str = "main") -> str:
    """Graphviz DOT text of ``mod[name]``: parameters, one node per binding (fused calls show
    their operators), edges labelled with shapes. ``expand`` draws fused groups as clusters."""
    func = mod[name]
    lines = [f"digraph {_q(name)} {{", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    node_of: dict[int, str] = {}
    for k, p in enumerate(func.params):
        nid = f"p{k}"
        node_of[id(p)] = nid
        lines.append(f"  {nid} [label={_q('%' + p.name + chr(10) + _shape(p.type))}, "
                     f"shape=ellipse, fillcolor={_q(_FILL['param'])}];")
    nconst = 0
    for k, b in enumerate(func.bindings):
        nid = f"b{k}"
        call = b.call
        callee = mod.functions.get(call.callee) if call.is_function_call else None
        if callee is not None and expand:
            lines.append(f"  subgraph cluster_{k} {{ label={_q('@' + callee.name)}; "
                         f"style=filled; fillcolor={_q(_FILL['primitive'])};")
            for j, ib in enumerate(callee.bindings):
                lines.append(f"    {nid}_{j} [label={_q(ib.call.op)}, "
                             f"fillcolor={_q(_FILL['op'])}];")
                if j:
                    lines.append(f"    {nid}_{j - 1} -> {nid}_{j} [style=dotted];")
            lines.append("  }")
            head, tail = f"{nid}_0", f"{nid}_{len(callee.bindings) - 1}"
        else:
            if callee is not None:
                kind = "composite" if callee.attrs.get("composite") else "primitive"
                label = "@" + callee.name + "\n" + " > ".join(x.call.op for x in callee.bindings)
            else:
                kind, label = "op", call.op
            label += "\n" + ", ".join(_shape(o.type) for o in b.outputs)
            lines.append(f"  {nid} [label={_q(label)}, fillcolor={_q(_FILL[kind])}];")
            head = tail = nid
        for a in call.args:
            if isinstance(a, Var) and id(a) in node_of:
                lines.append(f"  {node_of[id(a)]} -> {head} [label={_q(_shape(a.type))}];")
            elif isinstance(a, Constant) and a.data.size > 1:
                cid = f"c{nconst}"
                nconst += 1
                lines.append(f"  {cid} [label={_q('const ' + _shape(a.type))}, shape=note, "
                             f"fillcolor={_q(_FILL['param'])}];")
                lines.append(f"  {cid} -> {head};")
        for o in b.outputs:
            node_of[id(o)] = tail
    for k, o in enumerate(func.outputs):
        lines.append(f"  out{k} [label={_q('output ' + str(k))}, shape=ellipse, "
                     f"fillcolor={_q(_FILL['param'])}];")
        if isinstance(o, Var) and id(o) in node_of:
            lines.append(f"  {node_of[id(o)]} -> out{k};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_text(mod: IRModule, name: str = "main") -> str:
    """A terminal rendering: one line per binding, ``%out <- op(inputs)  shape``, fused calls
    followed by their operators; a summary line with operator and kernel counts."""
    func: Function = mod[name]
    lines = [f"@{name}: {len(func.params)} inputs, {len(func.bindings)} kernels"]
    width = max([len(o.name) for b in func.bindings for o in b.outputs] + [1]) + 1
    n_ops = 0
    for b in func.bindings:
        outs = ", ".join("%" + o.name for o in b.outputs)
        ins = ", ".join("%" + a.name if isinstance(a, Var) else f"const[{_shape(a.type)}]"
                        for a in b.call.args)
        lines.append(f"  {outs:<{width}} <- {b.call.op}({ins})  "
                     f"{', '.join(_shape(o.type) for o in b.outputs)}")
        callee = mod.functions.get(b.call.callee) if b.call.is_function_call else None
        if callee is not None:
            n_ops += len(callee.bindings)
            lines.append("  " + " " * width + "    = " +
                         " > ".join(x.call.op for x in callee.bindings))
        else:
            n_ops += 1
    lines.append(f"  return {', '.join('%' + o.name if isinstance(o, Var) else 'const' for o in func.outputs)}")
    lines.append(f"{n_ops} operators in {len(func.bindings)} kernels")
    return "\n".join(lines) + "\n"


def render(mod: IRModule, path: "str | os.PathLike", format: str = "svg",  # noqa: A002
           expand: bool = False) -> Path:
    """Write a picture of ``mod`` to ``path``: ``svg`` (needs Graphviz's ``dot`` program),
    ``dot`` or ``txt``.

    Raises:
        ToolchainError: ``svg`` asked and ``dot`` is not installed (use ``dot`` or ``txt``).
        ValueError: unknown format.
    """
    path = Path(path)
    if format == "txt":
        path.write_text(to_text(mod))
    elif format == "dot":
        path.write_text(to_dot(mod, expand))
    elif format == "svg":
        exe = shutil.which("dot")
        if exe is None:
            raise ToolchainError("Graphviz 'dot' is not installed, so no svg: install graphviz "
                                 "(apt-get install graphviz) or use format 'dot' or 'txt'")
        res = subprocess.run([exe, "-Tsvg"], input=to_dot(mod, expand), capture_output=True,
                             text=True, timeout=120)
        if res.returncode != 0:
            raise ToolchainError(f"dot failed: {html.escape(res.stderr[:500])}")
        path.write_text(res.stdout)
    else:
        raise ValueError(f"unknown picture format {format!r}: use svg, dot or txt")
    return path
