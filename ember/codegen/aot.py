"""The ahead-of-time entry point: one C function that runs a whole static-shape model.

``generate_aot_entry(plan)`` prints ``int32_t ember_run(char* arena, void** ext)``, which calls
the plan's kernels in order: arena slots are ``arena + offset`` (offsets from the static memory
plan, compiled in), parameter and input slots come from ``ext[slot]``. One native call per
inference, so no Python runs between kernels; the step-by-step ``GraphExecutor`` path stays for
debugging and per-kernel profiling.
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
