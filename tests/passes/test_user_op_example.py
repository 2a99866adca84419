"""Runs the user-operator example of docs/passes.md (ConvReLUFuser + custom.fused_conv_relu):
the registered op compiles and matches the unfused model."""

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "passes.md"


def test_documented_user_op_example_runs():
    text = DOC.read_text()
    block = re.search(r"<!-- example: user-op.*?```python\n(.*?)```", text, re.S)
    assert block, "the user-op example block is missing from docs/passes.md"
    try:
        exec(compile(block.group(1), str(DOC), "exec"), {"__name__": "doc_example"})
    finally:  # the example's operator must not outlive the test (registry-wide tests)
        from ember.ops import list_ops, unregister_op
        if "custom.fused_conv_relu" in list_ops():
            unregister_op("custom.fused_conv_relu")
