"""The profiler's table and ``ember bench``'s output read well on real models: whole kernel
names (two kernels of one long fused op stay distinguishable), no negative stall percentages,
and no onnxruntime warnings (ANSI-coloured on stderr) in ``ember bench``."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ember.runtime.profiler import KernelStat, ProfileReport


def _report(hot_a, hot_b):
    op = "fused_nn.conv2d_add_nn.relu_add_nn.relu_nn.max_pool2d_layout_transform"
    ks = [KernelStat(0, "resnetv17_stage1_conv3_fwd", op, "k0", ms=2.0, flops=4e9, bytes=1 << 20,
                     hot_ms=hot_a),
          KernelStat(1, "resnetv17_stage1_conv4_fwd", op, "k1", ms=1.0, flops=2e9, bytes=1 << 20,
                     hot_ms=hot_b)]
    return ProfileReport(ks, total_ms=3.0, end_to_end_ms=3.2, peak_gflops=100.0, threads=2)


def test_table_keeps_whole_kernel_names():
    text = _report(None, None).table()
    rows = [ln for ln in text.splitlines() if "fused_nn" in ln]
    assert len(rows) == 2
    for ln, name in zip(rows, ["resnetv17_stage1_conv3_fwd", "resnetv17_stage1_conv4_fwd"]):
        assert "layout_transform (" + name + ")" in ln


def test_stall_is_never_negative():
    rep = _report(1.5, 1.3)  # the second kernel's hot median above its in-model one (noise)
    a, b = rep.kernels
    assert a.stall_ms == 0.5 and b.stall_ms == 0.0
    text = rep.table()
    stall_col = [float(ln.split()[-1]) for ln in text.splitlines() if "fused_nn" in ln]
    assert sorted(stall_col) == [0.0, 25.0]  # 0.5 of 2.0 ms; not -30.0
    total = [ln for ln in text.splitlines() if ln.startswith("hot ")][0]
    assert "0.500 ms (16.7%)" in total  # the sum of per-kernel stalls, not 3.0 - 2.8 = 0.2
    assert "-" not in total.split(":")[1].split("of")[0]


def test_ember_bench_prints_no_onnxruntime_warnings(tmp_path, capfd):
    # an unused initializer: onnxruntime warns "Removing initializer ..." in colour on stderr
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y],
                          initializer=[numpy_helper.from_array(np.ones(3, np.float32), "unused")])
    path = tmp_path / "unused.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    from ember.cli import main
    assert main(["bench", str(path), "--repeat", "1", "--threads", "1"]) == 0
    out, err = capfd.readouterr()  # file-descriptor level: onnxruntime logs from C++
    assert "onnxruntime" in out and "median ms" in out
    assert "Removing initializer" not in err and "\x1b[" not in err, err
