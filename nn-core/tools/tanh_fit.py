#!/usr/bin/env python3
"""Fits the small-argument polynomial of the `f32` tanh (`TANH_P32` in
`nn-core/src/backend/cpu/vector_fns.rs`) and prints its error.

    python3 nn-core/tools/tanh_fit.py

Needs numpy only. Below the break point B = 0.625, tanh(x) = x + x^3 P(x^2) with P of
degree 4: P is fitted by least squares on Chebyshev nodes of x^2 in [0, B^2], weighted so
that the residual is the relative error of tanh (x^3 / tanh x), then rounded to f32. The
error printed is that polynomial evaluated in f32 (Horner, unfused: the kernel fuses,
which only rounds less) on 2M points of [0, B], in ulps of the f32 result, against
numpy's double-precision tanh. Above B the kernel uses 1 - 2 / (e^(2x) + 1), whose error
the Rust tests measure (`vector_fns_tests.rs`).
"""
import numpy as np

B = 0.625


def fit(deg):
    n = 4000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n) * 0.5 + 0.5
    z = t * B * B
    x = np.sqrt(z)
    with np.errstate(all="ignore"):
        target = np.where(x > 1e-4, (np.tanh(x) / x - 1) / z, -1 / 3 + 2 * z / 15)
        w = np.where(x < 1e-4, z, x**3 / np.tanh(np.maximum(x, 1e-300)))
    a = np.vstack([z**k for k in range(deg + 1)]).T
    return np.linalg.lstsq(a * w[:, None], target * w, rcond=None)[0].astype(np.float32)


def worst_ulps(c):
    xs = np.linspace(0, B, 2_000_001).astype(np.float32)
    z = xs * xs
    p = np.full_like(xs, c[-1])
    for k in c[-2::-1]:
        p = (p * z + k).astype(np.float32)
    y = ((xs * z).astype(np.float32) * p + xs).astype(np.float32)
    ref = np.tanh(xs.astype(np.float64))
    return float(np.max(np.abs(y.astype(np.float64) - ref) / np.spacing(ref.astype(np.float32))))


for deg in (4, 5, 6):
    c = fit(deg)
    print(f"degree {deg}: {worst_ulps(c):.3f} ulp, P = {[float(v) for v in c]}")
