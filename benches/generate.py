#!/usr/bin/env python3
"""Greedy generation with and without the KV cache: nn-models against transformers, on the
CPU, at 1 and 2 threads, same model, same prompt.

    cargo build --release -p nn-examples --bin generate
    /tmp/torchenv/bin/python benches/generate.py [--layers 2] [--new 64] [--runs 3]

The model is a GPT-2 at GPT-2-small width (768 wide, 12 heads, vocabulary 50257, 1024
positions) with `--layers` blocks and random weights, saved by transformers'
`save_pretrained`; nn loads that directory (`nn_models::gpt2::Gpt2LMHeadModel`). The
prompt is 32 seeded token ids; every run adds `--new` tokens greedily. nn's tokens are
checked against transformers' before any timing. nn runs in its own process
(`target/release/generate --bench`) with RAYON_NUM_THREADS set; transformers with
`torch.set_num_threads`. Reported: tokens per second, the median of `--runs` runs after one
warm-up.
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / "target" / "release" / "generate"


def nn_run(model_dir, prompt, new, threads, cache, runs):
    args = [str(EXE), str(model_dir), "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", str(new),
            "--bench", str(runs)]
    if not cache:
        args.append("--no-cache")
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    tokens = [int(t) for t in re.search(r"\[([0-9, ]+)\]", out).group(1).split(",")]
    tps = float(re.search(r"bench: ([0-9.]+) tokens/s", out).group(1))
    return tokens, tps


def torch_run(model, prompt, new, threads, cache, runs):
    torch.set_num_threads(threads)
    ids = torch.tensor([prompt])
    kw = dict(do_sample=False, max_new_tokens=new, min_new_tokens=new, use_cache=cache, pad_token_id=0)
    with torch.no_grad():
        tokens = model.generate(ids, **kw)[0].tolist()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            model.generate(ids, **kw)
            times.append(time.perf_counter() - t)
    return tokens, new / statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not EXE.exists():
        raise SystemExit(f"{EXE} is missing: cargo build --release -p nn-examples --bin generate")
    torch.manual_seed(0)
    config = GPT2Config(n_embd=768, n_head=12, n_layer=args.layers, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).eval()
    prompt = torch.randint(0, 50257, (32,), generator=torch.Generator().manual_seed(1)).tolist()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"GPT-2 768 wide, {args.layers} blocks, vocab 50257; prompt 32 tokens, {args.new} new; {cpu}, "
          f"{os.cpu_count()} CPUs; torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        rows = []
        for threads in (1, 2):
            for cache in (True, False):
                nn_tokens, nn_tps = nn_run(d, prompt, args.new, threads, cache, args.runs)
                pt_tokens, pt_tps = torch_run(model, prompt, args.new, threads, cache, args.runs)
                same = "identical" if nn_tokens == pt_tokens else "DIFFER"
                rows.append((threads, "on" if cache else "off", nn_tps, pt_tps, same))
    print(f"{'threads':>7} {'cache':>5} {'nn tok/s':>9} {'torch tok/s':>11} {'nn/torch':>8}  tokens")
    for threads, cache, nn_tps, pt_tps, same in rows:
        print(f"{threads:>7} {cache:>5} {nn_tps:>9.1f} {pt_tps:>11.1f} {nn_tps / pt_tps:>7.2f}x  {same}")


if __name__ == "__main__":
    main()
