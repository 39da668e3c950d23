#!/usr/bin/env python3
"""Runs the nn benchmark workloads and their PyTorch twins in one run and prints ratios.

    python3 benches/compare.py                 # needs `pip install torch` for the PyTorch column
    python3 benches/compare.py --threads 1     # only one thread count

For each thread count (1 and 2), the Rust harness (`nn_bench`) is run with
RAYON_NUM_THREADS/MATMUL_NUM_THREADS set, and PyTorch with torch.set_num_threads. Ratios are
nn time / PyTorch time (below 1 means nn is faster); for throughput rows (GFLOP/s, MB/s)
nn / PyTorch (above 1 means nn is faster). Without torch, only the nn column is printed.
Rust peers (candle, burn) are not built by this script; see README.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def nn_results(threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), MATMUL_NUM_THREADS=str(threads))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "nn-bench", "--bin", "nn_bench"], cwd=ROOT, check=True)
    out = subprocess.run([str(ROOT / "target/release/nn_bench")], cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    return {r["workload"]: r for r in map(json.loads, out.splitlines())}


def median_ms(f, budget_ms):
    for _ in range(3):
        f()
    t = time.perf_counter()
    f()
    one = (time.perf_counter() - t) * 1e3
    runs = int(min(max(budget_ms / max(one, 1e-3), 5), 2000))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def torch_results(threads):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    res = {}

    def emit(name, ms, unit, thr):
        res[name] = {"workload": name, "median_ms": ms, "unit": unit, "throughput": thr}

    for n in [64, 128, 256, 512, 1024]:
        a, b = torch.randn(n, n), torch.randn(n, n)
        ms = median_ms(lambda: torch.mm(a, b), 2000)
        emit(f"gemm_{n}", ms, "GFLOP/s", 2 * n**3 / (ms * 1e6))

    def step_fn(model, x, y, classify):
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y) if classify else out.square().mean()
            loss.backward()
            opt.step()

        return step

    mlp = lambda: nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    for batch in [64, 256]:
        x, y = torch.randn(batch, 784), torch.arange(batch) % 10
        ms = median_ms(step_fn(mlp(), x, y, True), 3000)
        emit(f"mlp_step_b{batch}", ms, "samples/s", batch / (ms / 1e3))
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 10))
    ms = median_ms(step_fn(cnn, torch.randn(32, 1, 28, 28), torch.arange(32) % 10, True), 3000)
    emit("cnn_step_b32", ms, "samples/s", 32 / (ms / 1e3))
    layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
    ms = median_ms(step_fn(layer, torch.randn(16, 64, 128), None, False), 3000)
    emit("transformer_step", ms, "samples/s", 16 / (ms / 1e3))
    m, x = mlp(), torch.randn(64, 784)
    with torch.no_grad():
        ms = median_ms(lambda: m(x), 1500)
    emit("mlp_forward_layers", ms, "ms", ms)
    w1, b1, w2, b2 = [p.detach() for p in m.parameters()]
    ms = median_ms(lambda: F.linear(F.linear(x, w1, b1).relu(), w2, b2), 1500)
    emit("mlp_forward_raw_ops", ms, "ms", ms)
    sd = {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(16)}
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "bench.safetensors")
        save = median_ms(lambda: save_file(sd, p), 4000)
        load = median_ms(lambda: load_file(p), 4000)
    emit("state_dict_save_64MB", save, "MB/s", 64 / (save / 1e3))
    emit("state_dict_load_64MB", load, "MB/s", 64 / (load / 1e3))
    return res


def torch_peak_rss(threads):
    code = (
        "import torch,torch.nn as nn,torch.nn.functional as F,resource\n"
        f"torch.set_num_threads({threads})\n"
        "m=nn.Sequential(nn.Linear(784,256),nn.ReLU(),nn.Linear(256,10));o=torch.optim.SGD(m.parameters(),lr=0.01,momentum=0.9)\n"
        "x=torch.randn(256,784);y=torch.arange(256)%10\n"
        "for _ in range(200):\n o.zero_grad();F.cross_entropy(m(x),y).backward();o.step()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(out.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    args = ap.parse_args()
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
        print("PyTorch not installed: printing nn figures only (pip install torch for ratios)")
    rows = []
    for t in args.threads:
        nn_r = nn_results(t)
        th = torch_results(t) if have_torch else {}
        if have_torch:
            th["peak_rss_mlp_training"] = {"median_ms": torch_peak_rss(t), "unit": "MB", "throughput": 0}
        for name, r in nn_r.items():
            o = th.get(name)
            if r["unit"] in ("GFLOP/s", "MB/s"):
                mine, theirs = r["throughput"], (o or {}).get("throughput")
                ratio = f"{mine / theirs:.2f}x thr" if theirs else "-"
                mine_s, theirs_s = f"{mine:.1f} {r['unit']}", (f"{theirs:.1f} {r['unit']}" if theirs else "-")
            else:
                mine, theirs = r["median_ms"], (o or {}).get("median_ms")
                ratio = f"{mine / theirs:.2f}x time" if theirs else "-"
                unit = "MB" if r["unit"] == "MB" else "ms"
                mine_s, theirs_s = f"{mine:.3f} {unit}", (f"{theirs:.3f} {unit}" if theirs else "-")
            rows.append((name, t, mine_s, theirs_s, ratio))
    w = max(len(r[0]) for r in rows)
    print(f"{'workload':<{w}}  thr  {'nn':>16}  {'PyTorch':>16}  ratio (nn/PyTorch)")
    for name, t, a, b, r in rows:
        print(f"{name:<{w}}  {t:>3}  {a:>16}  {b:>16}  {r}")


if __name__ == "__main__":
    main()
