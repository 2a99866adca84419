"""Helpers shared by the quantization benchmarks: onnxruntime's ``quantize_static`` on a list
of feeds, and writing a result file."""

from __future__ import annotations

import json
import os


def ort_quantize_static(src: str, dst: str, feeds: list, per_channel: bool = True,
                        pre_process: bool = False) -> None:
    """onnxruntime ``quantize_static`` of ONNX file ``src`` into ``dst`` (QDQ format, s8
    weights, u8 activations, calibrated on ``feeds``), after onnxruntime's
    ``quant_pre_process`` (shape inference, batch-norm folding) with ``pre_process``."""
    from onnxruntime import quantization as q
    if pre_process:
        from onnxruntime.quantization.shape_inference import quant_pre_process
        pre = dst + ".pre.onnx"
        quant_pre_process(src, pre)
        src = pre

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)
    q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ,
                      per_channel=per_channel, activation_type=q.QuantType.QUInt8,
                      weight_type=q.QuantType.QInt8)


def write_result(res: dict, path: str) -> None:
    """Print ``res`` as JSON and write it to ``path``."""
    print(json.dumps(res, indent=1))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(res, fh, indent=1)


def interleaved_times(runs: dict, rounds: int) -> dict:
    """``{name: [seconds per round]}``: two warm-up calls of each of ``runs`` (name ->
    callable), then ``rounds`` rounds that call each once, in turn, so that machine noise hits
    all of them alike."""
    import time
    for f in runs.values():
        f()
        f()
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, f in runs.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return times
