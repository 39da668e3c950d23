#!/usr/bin/env python3
"""Validates ONNX files written by nn-onnx with the reference tools (optional; not part of
the test suite, which runs the files in tract):

    pip install onnx onnxruntime numpy safetensors
    NN_ONNX_OUT=/tmp/nn-onnx cargo test -p nn-onnx      # every model the tests export
    cargo run --release -p nn-examples --bin export_onnx  # out/digits_mlp.onnx, out/mnist_cnn.onnx
    python3 nn-onnx/check_onnx.py /tmp/nn-onnx out

For each `*.onnx` (files, or all in the folders given): `onnx.checker.check_model(path,
full_check=True)` (structure, opset rules and shape inference), then an onnxruntime
session. When `<name>.io.safetensors` sits beside it (`input_<i>`, `output_<k>`: one batch
of inputs and nn's outputs), the file runs on that batch and on its first sample alone
(the batch axis is dynamic) and must match nn within 1e-5 (absolute, plus relative to the
value). Exits non-zero if any file fails.
"""
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from safetensors.numpy import load_file

TOL = 1e-5


def check(path):
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    io = path.with_name(path.name[: -len(".onnx")] + ".io.safetensors")
    if not io.exists():
        return f"checker ok, onnxruntime loads it (opset {opset}, {len(model.graph.node)} nodes)"
    data = load_file(str(io))
    names = [i.name for i in sess.get_inputs()]
    xs = [data[f"input_{i}"] for i in range(len(names))]
    want = [data[f"output_{k}"] for k in range(len(sess.get_outputs()))]
    worst = 0.0
    batched = [len(x.shape) > 0 and x.shape[0] == want[0].shape[0] for x in xs]
    for sl in (slice(None), slice(0, 1)):
        # The first sample alone only where the batch is axis 0 of every input and output.
        if sl != slice(None) and not (all(batched) and all(w.shape[0] == xs[0].shape[0] for w in want)):
            continue
        got = sess.run(None, {n: x[sl] for n, x in zip(names, xs)})
        for g, w in zip(got, want):
            w = w[sl]
            if g.shape != w.shape:
                raise AssertionError(f"output shape {g.shape}, nn gives {w.shape}")
            g, w = g.astype(np.float64), w.astype(np.float64)
            ok = np.isclose(g, w, rtol=TOL, atol=TOL, equal_nan=True)
            if not ok.all():
                raise AssertionError(f"max abs error {np.nanmax(np.abs(g - w)):.3g} over {TOL}")
            worst = max(worst, float(np.nanmax(np.abs(g - w))) if g.size else 0.0)
    return f"checker ok, onnxruntime matches nn (opset {opset}, max abs error {worst:.2e})"


def main(args):
    files = []
    for a in args or ["."]:
        p = Path(a)
        files += sorted(p.glob("*.onnx")) if p.is_dir() else [p]
    failed = 0
    for f in files:
        try:
            print(f"ok    {f}: {check(f)}")
        except Exception as e:  # report every file, then fail
            failed += 1
            print(f"FAIL  {f}: {type(e).__name__}: {e}")
    print(f"{len(files) - failed} passed, {failed} failed")
    return 1 if failed or not files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
