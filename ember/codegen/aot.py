"""The ahead-of-time entry points: one C function that runs a whole model.

``generate_aot_entry(plan)`` prints ``int32_t ember_run(char* arena, void** ext)``, which calls
the plan's kernels in order: arena slots are ``arena + offset`` (offsets from the static memory
plan, compiled in), parameter and input slots come from ``ext[slot]``. One native call per
inference, so no Python runs between kernels; the step-by-step ``GraphExecutor`` path stays for
debugging and per-kernel profiling. A plan with symbolic dimensions gets
``generate_symbolic_aot_entry``'s ``ember_run_sym`` instead, which takes the run's slot offsets
and symbol values as tables.
"""

from __future__ import annotations

AOT_SYMBOL = "ember_run"


STATUS_STEPS = 4  # the entry returns (k + 1) * STATUS_STEPS + status for a failing step k


def decode_status(rv: int) -> tuple[int, int]:
    """``(step index, kernel status)`` from the entry's non-zero return value (the kernel status
    is negative: -1 workspace allocation failure, -2 index out of range)."""
    return rv // STATUS_STEPS, rv % STATUS_STEPS - STATUS_STEPS


def generate_aot_entry(plan: dict, symbol: str = AOT_SYMBOL) -> str:
    """C source of the entry point for ``plan`` (see the module doc). A kernel that fails
    (status -1 workspace allocation failure, -2 index out of range) makes it return
    ``(k + 1) * STATUS_STEPS + status`` for step ``k`` (``decode_status`` inverts it)."""
    slots = plan["slots"]

    def arg(s: int) -> str:
        sl = slots[s]
        if sl["kind"] == "arena":
            return f"(void*)(arena + {int(sl['offset'])})"
        return f"ext[{s}]"

    lines = [f"int32_t {symbol}(char* restrict arena, void** restrict ext) {{", "  int32_t rc;"]
    for k, st in enumerate(plan["steps"]):
        args = ", ".join(arg(a) for a in st["args"])
        lines.append(f"  if ((rc = {st['symbol']}({args})) != 0) "
                     f"return {(k + 1) * STATUS_STEPS} + rc;")
    lines.append("  return 0;")
    lines.append("}")
    return "\n".join(lines) + "\n"


SYMBOLIC_AOT_SYMBOL = "ember_run_sym"


def symbolic_aot_symbols(plan: dict) -> list[str]:
    """The order of the symbol values ``ember_run_sym`` reads from its ``sym`` table: the
    plan's symbols sorted by name (``plan["symbols"]``)."""
    return sorted(plan["symbols"])


def generate_symbolic_aot_entry(plan: dict, symbol: str = SYMBOLIC_AOT_SYMBOL) -> str:
    """C source of the entry point of a plan with symbolic dimensions (``plan["symbols"]``):

    ``int32_t ember_run_sym(char* arena, void** ext, const int64_t* off, const int64_t* sym)``

    calls the plan's kernels in order, one native call per run. The sizes of a symbolic plan
    are known per run, so the offsets are not compiled in: an intermediate (arena) slot ``s``
    is ``arena + off[s]``, ``off`` being the slot offsets the runtime planned for this run's
    symbol values (``runtime.symbolic_run``, cached per set of values); a graph output is
    ``ext[s]`` (the runtime points it at the array it returns, so the last kernel writes the
    result in place and nothing is copied out), as are weights and inputs. ``sym[j]`` is the
    value of the ``j``-th symbol of ``symbolic_aot_symbols(plan)``; each kernel gets the
    symbols of its step (``step["symbols"]``) as trailing ``int64`` arguments. Failures are
    reported as by ``generate_aot_entry`` (``decode_status``)."""
    slots = plan["slots"]
    index = {n: j for j, n in enumerate(symbolic_aot_symbols(plan))}
    outputs = {int(o["slot"]) for o in plan["outputs"]}

    def arg(s: int) -> str:
        if slots[s]["kind"] == "arena" and s not in outputs:
            return f"(void*)(arena + off[{s}])"
        return f"ext[{s}]"

    lines = [f"int32_t {symbol}(char* restrict arena, void** restrict ext, "
             f"const int64_t* restrict off, const int64_t* restrict sym) {{", "  int32_t rc;"]
    for k, st in enumerate(plan["steps"]):
        args = [arg(a) for a in st["args"]] + [f"sym[{index[n]}]" for n in st.get("symbols", ())]
        lines.append(f"  if ((rc = {st['symbol']}({', '.join(args)})) != 0) "
                     f"return {(k + 1) * STATUS_STEPS} + rc;")
    lines.append("  return 0;")
    lines.append("}")
    return "\n".join(lines) + "\n"
