#!/usr/bin/env python3
"""Runs the nn benchmark workloads and their PyTorch twins in one run and prints ratios.

    python3 benches/compare.py                 # needs `pip install torch` for the PyTorch column
    python3 benches/compare.py --threads 1     # only one thread count
    python3 benches/compare.py --peers         # also candle, burn and the gemm crate (crates.io)
    python3 benches/compare.py --gpu           # nn on gpu:0 (wgpu) beside PyTorch CUDA (TF32 off)
    python3 benches/compare.py --rounds 3      # nn and PyTorch alternated 3 times, medians
    python3 benches/compare.py --only gpt2 ew_ # only the workloads whose names start so

With --rounds N, every column is measured N times, and each figure is the median of its N
medians; the nn/PyTorch ratios of each round are printed below the table. A round runs each
thread count in turn, and for each of them nn, PyTorch and the peers back to back (round 1:
nn 1 thread, PyTorch 1 thread, peers 1 thread, nn 2 threads, ...; round 2 again). On a
machine whose speed drifts over minutes (a shared VM: the same binary measured 11.7 and 13.9
ms per Transformer step minutes apart, and on the 2-vCPU Zen 4 the CNN step at 2 threads 0.84
ms in one process and 1.6 ms in the next, with no other process running), measuring one
column or one thread count after another puts that drift into the ratios, nn/peer and
2 threads/1 thread too; interleaving spreads it over every column.

For each thread count (1 and 2), the Rust harness (`nn_bench`) is run with
RAYON_NUM_THREADS set (MATMUL_NUM_THREADS too, for peers that read it), and PyTorch with torch.set_num_threads. Ratios are
nn time / PyTorch time (below 1 means nn is faster); for throughput rows (GFLOP/s, MB/s)
nn / PyTorch (above 1 means nn is faster). Without torch, only the nn column is printed.

The workloads: GEMM 64..1024 (`gemm_N`); training steps (forward, loss, backward, SGD with
momentum) of an MLP, a CNN and a Transformer encoder layer; per-op overhead (`tiny_*`,
`mlp_forward_*`); safetensors save and load of 64 MB; the peak memory of 200 MLP steps; and
real models and their parts:
- `gpt2_fwd`, `gpt2_step`: GPT-2 at GPT-2-small width with 2 blocks (n_embd 768, 12 heads,
  vocabulary 50257, 1024 positions), `nn_models::gpt2::Gpt2LMHeadModel` against
  `transformers.GPT2LMHeadModel` (SDPA attention), random init, every dropout 0, on ids
  [2, 128]: the logits in eval mode without grad, and one training step (next-token
  cross-entropy over the 127 predicted positions of each row, backward, AdamW with PyTorch's
  defaults).
- `bert_fwd`: BERT of that width (2 layers, intermediate 3072, vocabulary 30522),
  `nn_models::bert::BertModel` against `transformers.BertModel`, eval mode, no grad, on ids
  [2, 128] with an attention mask padding the second row's last 32 tokens.
- `llama_fwd`, `llama_step`: a Llama of that width (12 query heads on 4 key/value heads,
  intermediate 2048, 2 layers, vocabulary 32000, RMSNorm, rotary), `LlamaForCausalLM` on
  both sides, as the GPT-2 pair.
- `attn_causal`: causal scaled_dot_product_attention on q, k, v [2, 12, 128, 64] f32,
  forward and backward from a fixed random upstream gradient.
- `ew_tanh`, `ew_gelu` (exact), `ew_gelu_tanh`, `ew_exp`, `ew_silu`: one op, forward only,
  on a [2, 128, 3072] f32 tensor (the MLPs' activations at GPT-2's width).
- `amp_gemm_bf16_1024` (bf16 x bf16, f32 sums), `amp_transformer_step_bf16` and
  `amp_gpt2_step_bf16`: the Transformer and GPT-2 steps with the forward pass and the loss
  under bf16 autocast (nn's `amp::autocast`, PyTorch's `torch.autocast("cpu")`).
The model rows show ms per call (their JSON throughput is tokens/s); both sides build the
model from the same config and the script prints a warning if the parameter counts differ.
The real-model rows need `pip install transformers` beside torch (without it, nn only).

--only PREFIX... runs only the workloads whose names start with one of the prefixes (nn's
groups `tiny`, `mlp_forward`, `state_dict` and `peak_memory` are selected by those names).
CARGO_TARGET_DIR, when set, is where the harnesses are built and run from.

With --peers, the Rust peers' harness (`benches/peers`, its own workspace: it needs crates.io
and takes minutes to build the first time) is built in release and `peers_bench candle`,
`peers_bench burn` and `peers_bench gemm` run with the same environment; the table gains a
column per peer and ratios nn/peer worded as above (time ratio for steps, throughput ratio for
GFLOP/s rows). A peer that fails to build or run is reported and left out.

With --gpu, `nn_bench gpu` (built with `--features gpu`) times GEMM 1024..8192, an f16 GEMM
4096 (`gpu_gemm_f16_4096`: f16 storage, f32 sums; PyTorch's is a half `torch.mm`) and the MLP,
CNN and Transformer training steps on `gpu:0`, and the same workloads run in PyTorch on
`cuda:0` with TF32 off (FP32 cuBLAS); both sides wait for the device at the end of each timed
call. Without a CUDA device (or torch), only the nn column is printed, with the adapter's name
(on Mesa's software Vulkan these are correctness runs, not GPU timings).
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


def target_dir(default):
    """cargo's output folder: CARGO_TARGET_DIR when set (a relative one from ROOT, where
    cargo runs), else `default`."""
    d = os.environ.get("CARGO_TARGET_DIR")
    return ROOT / d if d else default


def nn_results(threads, only=()):
    """`nn_bench` at `threads` threads, restricted to the workload-name prefixes `only`."""
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), MATMUL_NUM_THREADS=str(threads))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "nn-bench", "--bin", "nn_bench"], cwd=ROOT, check=True)
    exe = target_dir(ROOT / "target") / "release/nn_bench"
    run = subprocess.run([str(exe), *only], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    # The CPU kernels the run chose by measurement (`nn_core::cpu::kernel_report`).
    for line in run.stderr.splitlines():
        entry = f"{threads} thread(s): {line[len('nn_bench: '):]}"
        if line.startswith("nn_bench: kernel ") and entry not in KERNEL_LINES:
            KERNEL_LINES.append(entry)
    return {r["workload"]: r for r in map(json.loads, run.stdout.splitlines())}


# The kernel choices of every nn run, printed after the table.
KERNEL_LINES = []


PEERS = ["candle", "burn", "gemm"]
PEERS_DIR = ROOT / "benches/peers"


def build_peers():
    """Builds `peers_bench` in release; its path, or None (reported) when the build fails."""
    print("building benches/peers (candle, burn, gemm; the first build takes minutes)...", file=sys.stderr)
    cmd = ["cargo", "build", "--release", "-q", "--manifest-path", str(PEERS_DIR / "Cargo.toml")]
    try:
        subprocess.run(cmd, cwd=ROOT, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"peers: build failed ({e}); carrying on without candle/burn/gemm", file=sys.stderr)
        return None
    return target_dir(PEERS_DIR / "target") / "release/peers_bench"


def peer_results(exe, peer, threads, only=()):
    """Results of `peers_bench PEER` (once per prefix of `only`: it takes one); on failure,
    what it printed before failing (reported)."""
    if len(only) > 1:
        return {k: v for prefix in only for k, v in peer_results(exe, peer, threads, [prefix]).items()}
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), MATMUL_NUM_THREADS=str(threads))
    try:
        p = subprocess.run([str(exe), peer, *only], cwd=ROOT, env=env, capture_output=True, text=True)
    except OSError as e:
        print(f"peers: {peer} could not run ({e})", file=sys.stderr)
        return {}
    res = {}
    for line in p.stdout.splitlines():
        try:
            r = json.loads(line)
            res[r["workload"]] = r
        except (ValueError, KeyError, TypeError):
            print(f"peers: {peer}: unexpected output line {line!r}", file=sys.stderr)
    if p.returncode != 0:
        tail = " | ".join(p.stderr.strip().splitlines()[-3:])
        print(f"peers: {peer} failed at {threads} thread(s) (exit {p.returncode}, kept {len(res)} results): {tail}", file=sys.stderr)
    return res


def median_ms(f, budget_ms):
    for _ in range(3):
        f()
    t = time.perf_counter()
    f()
    one = (time.perf_counter() - t) * 1e3
    runs = int(min(max(budget_ms / max(one, 1e-3), 5), 100_000))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def torch_results(threads, only=()):
    """The workloads in PyTorch at `threads` threads, restricted as `nn_results`."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    res = {}
    want = lambda name: not only or any(name.startswith(o) for o in only)

    def emit(name, ms, unit, thr, **extra):
        res[name] = {"workload": name, "median_ms": ms, "unit": unit, "throughput": thr, **extra}

    for n in [64, 128, 256, 512, 1024]:
        if want(f"gemm_{n}"):
            a, b = torch.randn(n, n), torch.randn(n, n)
            ms = median_ms(lambda: torch.mm(a, b), 2000)
            emit(f"gemm_{n}", ms, "GFLOP/s", 2 * n**3 / (ms * 1e6))

    if want("amp_gemm_bf16_1024"):
        a, b = torch.randn(1024, 1024, dtype=torch.bfloat16), torch.randn(1024, 1024, dtype=torch.bfloat16)
        ms = median_ms(lambda: torch.mm(a, b), 2000)
        emit("amp_gemm_bf16_1024", ms, "GFLOP/s", 2 * 1024**3 / (ms * 1e6))

    def step_fn(model, x, y, classify, amp=False):
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                out = model(x)
                loss = F.cross_entropy(out, y) if classify else out.square().mean()
            loss.backward()
            opt.step()

        return step

    mlp = lambda: nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    for batch in [64, 256]:
        if want(f"mlp_step_b{batch}"):
            x, y = torch.randn(batch, 784), torch.arange(batch) % 10
            ms = median_ms(step_fn(mlp(), x, y, True), 3000)
            emit(f"mlp_step_b{batch}", ms, "samples/s", batch / (ms / 1e3))
    if want("cnn_step_b32"):
        cnn = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 10))
        ms = median_ms(step_fn(cnn, torch.randn(32, 1, 28, 28), torch.arange(32) % 10, True), 3000)
        emit("cnn_step_b32", ms, "samples/s", 32 / (ms / 1e3))
    if want("transformer_step"):
        layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
        ms = median_ms(step_fn(layer, torch.randn(16, 64, 128), None, False), 3000)
        emit("transformer_step", ms, "samples/s", 16 / (ms / 1e3))
    if want("amp_transformer_step_bf16"):
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
        ms = median_ms(step_fn(layer, torch.randn(16, 64, 128), None, False, amp=True), 3000)
        emit("amp_transformer_step_bf16", ms, "samples/s", 16 / (ms / 1e3))
    if want("tiny"):
        # Per-op bookkeeping (dispatch, autograd records) where the arithmetic is negligible.
        a, b = torch.randn(4), torch.randn(4)
        ms = median_ms(lambda: a + b, 1000)
        emit("tiny_op_add", ms, "us", ms * 1e3)
        lin, x1 = nn.Linear(4, 4), torch.randn(1, 4)
        ms = median_ms(lambda: lin(x1), 1000)
        emit("tiny_linear_forward", ms, "us", ms * 1e3)
        ms = median_ms(lambda: lin(x1).sum().backward(), 1000)
        emit("tiny_linear_forward_backward", ms, "us", ms * 1e3)
    if want("mlp_forward"):
        m, x = mlp(), torch.randn(64, 784)
        with torch.no_grad():
            ms = median_ms(lambda: m(x), 1500)
        emit("mlp_forward_layers", ms, "ms", ms)
        w1, b1, w2, b2 = [p.detach() for p in m.parameters()]
        ms = median_ms(lambda: F.linear(F.linear(x, w1, b1).relu(), w2, b2), 1500)
        emit("mlp_forward_raw_ops", ms, "ms", ms)
    if want("state_dict"):
        sd = {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(16)}
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "bench.safetensors")
            save = median_ms(lambda: save_file(sd, p), 4000)
            load = median_ms(lambda: load_file(p), 4000)
        emit("state_dict_save_64MB", save, "MB/s", 64 / (save / 1e3))
        emit("state_dict_load_64MB", load, "MB/s", 64 / (load / 1e3))
        res["state_dict_load_64MB"]["lazy"] = True
    real_models(torch, F, want, emit)
    if want("attn_causal"):
        # Forward and backward from a fixed upstream gradient; the leaves' gradients cleared
        # each time, so none is accumulated into.
        q, k, v = (torch.randn(2, 12, 128, 64, requires_grad=True) for _ in range(3))
        g = torch.randn(2, 12, 128, 64)

        def attn():
            for t in (q, k, v):
                t.grad = None
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)

        ms = median_ms(attn, 2000)
        emit("attn_causal", ms, "ms", ms)
    # The activations of the models' MLPs and two more transcendentals, as nn_bench.
    ops = {
        "ew_tanh": torch.tanh,
        "ew_gelu": F.gelu,
        "ew_gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "ew_exp": torch.exp,
        "ew_silu": F.silu,
    }
    if any(want(name) for name in ops):
        x = torch.randn(2, 128, 3072)
        for name, op in ops.items():
            if want(name):
                ms = median_ms(lambda: op(x), 1500)
                emit(name, ms, "ms", ms)
    return res


LM_INPUT = (2, 128)


def real_models(torch, F, want, emit):
    """The transformers twins of nn_bench's real-model workloads (see the module docs)."""
    names = ["gpt2_fwd", "gpt2_step", "bert_fwd", "llama_fwd", "llama_step", "amp_gpt2_step_bf16"]
    if not any(want(n) for n in names):
        return
    try:
        from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    except ImportError:
        print("transformers not installed: no PyTorch figures for the real models", file=sys.stderr)
        return
    tokens = LM_INPUT[0] * LM_INPUT[1]
    params = lambda m: sum(p.numel() for p in m.parameters())
    # nn's forward without a cache builds none; transformers' `use_cache` (on by default)
    # would keep every layer's keys and values.
    logits = lambda m, ids: m(ids, use_cache=False).logits

    def forward(name, model, call):
        model.eval()
        with torch.no_grad():
            ms = median_ms(call, 3000)
        emit(name, ms, "tokens/s", tokens / (ms / 1e3), params=params(model))

    def lm_step(name, model, ids, amp=False):
        model.train()
        opt = torch.optim.AdamW(model.parameters())

        def step():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                out = logits(model, ids)
                # Next-token cross-entropy: positions 0..L-1 predict the ids at 1..L.
                loss = F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), ids[:, 1:].reshape(-1))
            loss.backward()
            opt.step()

        ms = median_ms(step, 4000)
        emit(name, ms, "tokens/s", tokens / (ms / 1e3), params=params(model))

    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    gpt2 = lambda: GPT2LMHeadModel(
        GPT2Config(n_embd=768, n_head=12, n_layer=2, n_positions=1024, vocab_size=50257, attn_implementation="sdpa", **no_dropout)
    )
    llama = lambda: LlamaForCausalLM(
        LlamaConfig(
            hidden_size=768, num_attention_heads=12, num_key_value_heads=4, intermediate_size=2048,
            num_hidden_layers=2, vocab_size=32000, max_position_embeddings=2048, attn_implementation="sdpa",
        )
    )
    if want("gpt2_fwd"):
        m, ids = gpt2(), torch.randint(0, 50257, LM_INPUT)
        forward("gpt2_fwd", m, lambda: logits(m, ids))
    if want("gpt2_step"):
        lm_step("gpt2_step", gpt2(), torch.randint(0, 50257, LM_INPUT))
    if want("amp_gpt2_step_bf16"):
        lm_step("amp_gpt2_step_bf16", gpt2(), torch.randint(0, 50257, LM_INPUT), amp=True)
    if want("bert_fwd"):
        m = BertModel(
            BertConfig(
                hidden_size=768, num_attention_heads=12, num_hidden_layers=2, intermediate_size=3072, vocab_size=30522,
                max_position_embeddings=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                attn_implementation="sdpa",
            )
        )
        ids = torch.randint(0, 30522, LM_INPUT)
        # 1 = attend: the second sequence's last 32 tokens are padding.
        mask = torch.ones(LM_INPUT, dtype=torch.long)
        mask[1, -32:] = 0
        forward("bert_fwd", m, lambda: m(input_ids=ids, attention_mask=mask))
    if want("llama_fwd"):
        m, ids = llama(), torch.randint(0, 32000, LM_INPUT)
        forward("llama_fwd", m, lambda: logits(m, ids))
    if want("llama_step"):
        lm_step("llama_step", llama(), torch.randint(0, 32000, LM_INPUT))


def nn_gpu_results():
    """`nn_bench gpu`: the adapter's name and the GPU workloads."""
    # NN_BENCH_BIN names a prebuilt `nn_bench` (built with `--features gpu`): a GPU machine
    # without a Rust toolchain runs the binary built elsewhere. NN_BENCH_JSON names the
    # saved output of such a run instead.
    prebuilt = os.environ.get("NN_BENCH_BIN")
    if os.environ.get("NN_BENCH_JSON"):
        binary = None
    elif prebuilt:
        binary = Path(prebuilt).resolve()
    else:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "nn-bench", "--features", "gpu", "--bin", "nn_bench"], cwd=ROOT, check=True)
        binary = ROOT / "target/release/nn_bench"
    if os.environ.get("NN_BENCH_JSON"):
        # The rows of an earlier `nn_bench gpu` run (one JSON object per line).
        out = Path(os.environ["NN_BENCH_JSON"]).read_text()
    else:
        out = subprocess.run([str(binary), "gpu"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    adapter = next((r["adapter"] for r in rows if "adapter" in r), "?")
    counts = {r["counts"]: r["per_step"] for r in rows if "counts" in r}
    counts.update({"launch: recording thread's CPU time": f"{r['launch_thread_us']:.2f} us per launch" for r in rows if "launch_thread_us" in r})
    return adapter, {r["workload"]: r for r in rows if "workload" in r}, counts


def torch_gpu_results():
    """The GPU workloads in PyTorch on cuda:0 (TF32 off), or None without CUDA."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    torch.manual_seed(0)
    res = {"adapter": torch.cuda.get_device_name(0)}

    def timed(f):
        def run():
            f()
            torch.cuda.synchronize()

        return run

    def emit(name, ms, unit, thr):
        res[name] = {"workload": name, "median_ms": ms, "unit": unit, "throughput": thr}

    # Host time per launch of a one-element add, 10 000 in a row without a wait.
    one = torch.ones(1, device=dev)
    y = one.clone()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10_000):
        y = y + one
    us = (time.perf_counter() - t) * 1e6 / 1e4
    torch.cuda.synchronize()
    res["gpu_launch_1elem"] = {"workload": "gpu_launch_1elem", "median_ms": us / 1e3, "unit": "us/launch", "throughput": us}
    for n in [1024, 2048, 4096, 8192]:
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        ms = median_ms(timed(lambda: torch.mm(a, b)), 3000)
        emit(f"gpu_gemm_{n}", ms, "GFLOP/s", 2 * n**3 / (ms * 1e6))
    a, b = torch.randn(4096, 4096, device=dev).half(), torch.randn(4096, 4096, device=dev).half()
    ms = median_ms(timed(lambda: torch.mm(a, b)), 3000)
    emit("gpu_gemm_f16_4096", ms, "GFLOP/s", 2 * 4096**3 / (ms * 1e6))

    def step_fn(model, x, y, classify):
        model = model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y) if classify else out.square().mean()
            loss.backward()
            opt.step()

        return timed(step)

    for batch in [64, 256]:
        x, y = torch.randn(batch, 784, device=dev), torch.arange(batch, device=dev) % 10
        mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        ms = median_ms(step_fn(mlp, x, y, True), 3000)
        emit(f"gpu_mlp_step_b{batch}", ms, "samples/s", batch / (ms / 1e3))
    cnn = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 10))
    x, y = torch.randn(32, 1, 28, 28, device=dev), torch.arange(32, device=dev) % 10
    ms = median_ms(step_fn(cnn, x, y, True), 3000)
    emit("gpu_cnn_step_b32", ms, "samples/s", 32 / (ms / 1e3))
    layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
    ms = median_ms(step_fn(layer, torch.randn(16, 64, 128, device=dev), None, False), 3000)
    emit("gpu_transformer_step", ms, "samples/s", 16 / (ms / 1e3))
    return res


def gpu_main():
    adapter, mine, counts = nn_gpu_results()
    try:
        theirs = torch_gpu_results()
    except ImportError:
        theirs = None
    print(f"nn on gpu:0 = {adapter}")
    if theirs is None:
        print("PyTorch with CUDA not available: printing nn figures only")
        theirs = {}
    else:
        print(f"PyTorch on cuda:0 = {theirs.pop('adapter')} (TF32 off)")
    w = max(len(n) for n in mine)
    print(f"{'workload':<{w}}  {'nn':>16}  {'PyTorch':>16}  ratio (nn/PyTorch)")
    for name, r in mine.items():
        a, b, ratio = cell(r, theirs.get(name))
        print(f"{name:<{w}}  {a:>16}  {b:>16}  {ratio}")
    print(LEGEND)
    if counts:
        print("nn's device work in one warm step (gpu::stats):")
        for name, c in counts.items():
            print(f"  {name:<{w}}  {c}")


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


THROUGHPUT_UNITS = ("GFLOP/s", "MB/s")
LEGEND = (
    "ratios nn/X: 'x time' (and 'x mem') = nn time (memory) / X's (below 1: nn better); "
    "'x thr' = nn throughput / X throughput (above 1: nn faster)"
)


def cell(r, o):
    """(nn figure, other figure, ratio) strings of one workload against one other column.

    Time rows: nn time / other time, "x time" (below 1 means nn is faster); throughput rows
    (GFLOP/s, MB/s): nn / other throughput, "x thr" (above 1 means nn is faster).
    """
    if r["unit"] in THROUGHPUT_UNITS:
        mine, theirs = r["throughput"], (o or {}).get("throughput")
        ratio = f"{mine / theirs:.2f}x thr" if theirs and mine is not None else "-"
        if (o or {}).get("lazy"):
            # safetensors' load_file maps the file and reads pages on first touch: its
            # figure is not a read of the data, so no ratio is meaningful.
            ratio = "n/a (lazy)"
        fmt = lambda v: f"{v:.1f} {r['unit']}" if v is not None else "-"
    else:
        mine, theirs = r["median_ms"], (o or {}).get("median_ms")
        kind = "mem" if r["unit"] == "MB" else "time"
        ratio = f"{mine / theirs:.2f}x {kind}" if theirs and mine is not None else "-"
        if r["unit"] == "us":
            fmt = lambda v: f"{v * 1e3:.2f} us" if v is not None else "-"
        else:
            unit = "MB" if r["unit"] == "MB" else "ms"
            fmt = lambda v: f"{v:.3f} {unit}" if v is not None else "-"
    return fmt(mine), (fmt(theirs) if theirs else "-"), ratio


def main():
    ap = argparse.ArgumentParser(description="nn vs PyTorch (and, with --peers, candle/burn/gemm) benchmark table")
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument(
        "--peers",
        action="store_true",
        help="also build benches/peers (needs crates.io, minutes the first time) and run candle, burn and the gemm crate",
    )
    ap.add_argument("--gpu", action="store_true", help="the GPU workloads: nn on gpu:0 (wgpu) beside PyTorch on cuda:0")
    ap.add_argument(
        "--rounds", type=int, default=1, help="measure every column this many times, interleaved; report medians"
    )
    ap.add_argument(
        "--only", nargs="+", default=[], metavar="PREFIX", help="only the workloads whose names start with a PREFIX"
    )
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.only and (args.gpu or any(o.startswith("gpu") for o in args.only)):
        ap.error("--only selects CPU workloads (nn_bench reads a gpu prefix as the GPU run; use --gpu alone)")
    if args.gpu:
        gpu_main()
        return
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
        print("PyTorch not installed: printing nn figures only (pip install torch for ratios)")
    peers_exe = build_peers() if args.peers else None
    peers = PEERS if peers_exe else []
    rows = []
    per_round = []  # (threads, workload, [ratio of each round])
    # measured[t]: each column's results of every round at t threads ("nn", "torch", peers).
    measured = {t: {c: [] for c in ["nn", "torch"] + peers} for t in args.threads}
    for _ in range(args.rounds):
        for t in args.threads:
            measured[t]["nn"].append(nn_results(t, args.only))
            measured[t]["torch"].append(torch_results(t, args.only) if have_torch else {})
            for p in peers:
                measured[t][p].append(peer_results(peers_exe, p, t, args.only))
    for t in args.threads:
        nn_rounds, th_rounds = measured[t]["nn"], measured[t]["torch"]
        nn_r, th = combine(nn_rounds), combine(th_rounds)
        if args.rounds > 1:
            # nn/PyTorch for every workload; nn/peer for the training steps.
            others = [("PyTorch", th_rounds, lambda name: True)] if have_torch else []
            others += [(p, measured[t][p], lambda name: name.endswith("_step") or "_step_" in name) for p in peers]
            for label, rounds, wanted in others:
                for name in nn_r:
                    ratios = [round_ratio(n.get(name), o.get(name)) for n, o in zip(nn_rounds, rounds)]
                    if wanted(name) and all(x is not None for x in ratios):
                        per_round.append((t, name, label, ratios))
        if have_torch and "peak_rss_mlp_training" in nn_r:
            th["peak_rss_mlp_training"] = {"median_ms": torch_peak_rss(t), "unit": "MB", "throughput": 0}
        if not args.peers:
            for name, r in nn_r.items():
                mine_s, theirs_s, ratio = cell(r, th.get(name))
                rows.append((name, t, mine_s, theirs_s, ratio))
            continue
        pr = {p: combine(measured[t][p]) for p in peers}
        # nn's workloads first, then those only a peer has (the gemm crate's MLP shapes).
        names = list(nn_r) + [n for p in peers for n in pr[p] if n not in nn_r]
        for name in dict.fromkeys(names):
            peer_only = lambda: dict(next(pr[p][name] for p in peers if name in pr[p]), median_ms=None, throughput=None)
            r = nn_r.get(name) or peer_only()
            cells = [cell(r, o) for o in [th.get(name)] + [pr[p].get(name) for p in peers]]
            rows.append((name, t, cells[0][0], [c[1] for c in cells], [c[2] for c in cells]))
    w = max(len(r[0]) for r in rows)
    scaling = thread_scaling(measured, args.threads)
    if not args.peers:
        print(f"{'workload':<{w}}  thr  {'nn':>16}  {'PyTorch':>16}  ratio (nn/PyTorch)")
        for name, t, a, b, r in rows:
            print(f"{name:<{w}}  {t:>3}  {a:>16}  {b:>16}  {r}")
        print(LEGEND)
        print_params(measured)
        print_rounds(per_round, w)
        print_scaling(scaling, args.threads, w)
        print_machine()
        return
    cols = ["PyTorch"] + peers
    print(
        f"{'workload':<{w}}  thr  {'nn':>16}  "
        + "  ".join(f"{c:>16}" for c in cols)
        + "  "
        + "  ".join(f"{'nn/' + c:>11}" for c in cols)
    )
    for name, t, a, figs, ratios in rows:
        print(f"{name:<{w}}  {t:>3}  {a:>16}  " + "  ".join(f"{f:>16}" for f in figs) + "  " + "  ".join(f"{r:>11}" for r in ratios))
    print(LEGEND + "; gemm = the raw gemm crate (with the features candle and burn enable)")
    if not peers_exe:
        print("(peers not built: see the message above)")
    print_params(measured)
    print_rounds(per_round, w)
    print_scaling(scaling, args.threads, w)
    print_machine()


def print_machine():
    """The CPU the figures are from (`/proc/cpuinfo`'s model name, family and model) and the
    kernels nn chose by measurement on it: figures from another CPU are not this one's."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    print(
        f"CPU: {info.get('model name', 'unknown')} (family {info.get('cpu family', '?')}, "
        f"model {info.get('model', '?')}), {os.cpu_count()} logical CPUs"
    )
    for line in KERNEL_LINES:
        print(f"  {line}")


def print_params(measured):
    """The real models' parameter counts, nn's and PyTorch's, flagging any difference (the
    two sides would then not be running the same model)."""
    counts = {}
    for cols in measured.values():
        for col in ("nn", "torch"):
            for res in cols[col]:
                for name, r in res.items():
                    if "params" in r:
                        counts.setdefault(name, {}).setdefault(col, r["params"])
    for name, c in counts.items():
        nn_p, th_p = c.get("nn"), c.get("torch")
        if nn_p is None:
            continue
        if th_p is None:
            print(f"{name}: {nn_p:,} parameters in nn")
        elif nn_p == th_p:
            print(f"{name}: {nn_p:,} parameters in nn and PyTorch")
        else:
            print(f"WARNING {name}: {nn_p:,} parameters in nn but {th_p:,} in PyTorch: not the same model")


def thread_scaling(measured, threads):
    """nn's time at the most threads over its time at the fewest, per workload and round (a
    throughput row's ratio is inverted, so above 1 always means slower with more threads)."""
    if len(threads) < 2:
        return {}
    lo, hi = measured[min(threads)]["nn"], measured[max(threads)]["nn"]
    out = {}
    for name in (n for n, r in lo[0].items() if r["unit"] != "MB"):
        ratios = []
        for a, b in zip(lo, hi):
            if name not in a or name not in b:
                break
            if a[name]["unit"] in THROUGHPUT_UNITS:
                ratios.append(a[name]["throughput"] / b[name]["throughput"] if b[name]["throughput"] else float("nan"))
            else:
                ratios.append(b[name]["median_ms"] / a[name]["median_ms"] if a[name]["median_ms"] else float("nan"))
        else:
            out[name] = ratios
    return out


def print_scaling(scaling, threads, w):
    if scaling:
        print(f"nn at {max(threads)} threads / nn at {min(threads)} (time; above 1: slower with more threads), each round:")
        for name, ratios in scaling.items():
            print(f"  {name:<{w}}  " + "  ".join(f"{x:.2f}" for x in ratios))


def combine(rounds):
    """One result per workload from several rounds' results: the median of each figure."""
    out = {}
    for name in dict.fromkeys(n for r in rounds for n in r):
        rs = [r[name] for r in rounds if name in r]
        c = dict(rs[0])
        for key in ("median_ms", "throughput"):
            vals = [x[key] for x in rs if x.get(key) is not None]
            if vals:
                c[key] = statistics.median(vals)
        out[name] = c
    return out


def round_ratio(r, o):
    """nn / other in one round, worded as `cell` does (time or throughput); None if missing."""
    if not r or not o:
        return None
    if r["unit"] in THROUGHPUT_UNITS:
        return r["throughput"] / o["throughput"] if o.get("throughput") else None
    return r["median_ms"] / o["median_ms"] if o.get("median_ms") else None


def print_rounds(per_round, w):
    """Each round's ratios, nn/PyTorch for every workload and nn/peer for the steps."""
    for label in dict.fromkeys(r[2] for r in per_round):
        print(f"nn/{label} in each round (the table holds the medians of the rounds' figures):")
        for t, name, _, ratios in (r for r in per_round if r[2] == label):
            print(f"  {name:<{w}}  {t:>3}  " + "  ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
