#!/usr/bin/env python3
"""Splits a `perf record --call-graph dwarf` profile of a training step into the parts the
profiles in `benches/results/` report, each sample counted once, under the innermost frame that names a
part (a GEMM inside the fused attention counts as GEMM, the attention's softmax as
attention; see TIERS for the generic kernels).

    cargo build --release -p nn-bench --bin profile_step
    RAYON_NUM_THREADS=1 perf record -o step.data --call-graph dwarf,32768 -F 2000 \\
        target/release/profile_step transformer 120
    perf script -i step.data > step.txt
    python3 benches/profile_parts.py step.txt

Samples outside the step (the dynamic loader, building the model before the first step)
are left out: a sample counts only when `nn_bench::Step::step` is on its stack.
"""
import re
import sys
from collections import Counter

# (part, pattern of a frame's symbol), in three tiers: a sample goes to the innermost frame
# that matches a part of the first tier; failing that, of the second (the generic
# elementwise kernels, which the first tier's ops call: ReLU's map is an elementwise kernel
# inlined under `relu`); failing that, of the third (the engine, on every backward stack).
TIERS = [
    [
        ("GEMM microkernels", r"gemm_f32::microkernel|gemm_f64::microkernel"),
        ("GEMM operand packing and driver (inside the gemm crate)", r"gemm_common::|gemm_f32::gemm|gemm_f64::gemm"),
        ("thread team: waiting, waking", r"backend::cpu::team::(run|wait_for_loop|helper)|futex|park"),
        ("optimizer update", r"nn_core::optim::"),
        ("fused attention outside its products (softmax and its gradient)", r"backend::cpu::attention"),
        ("layer norm forward and backward", r"layer_norm|backend::cpu::norm"),
        ("ReLU and its gradient", r"relu"),
        ("bias-gradient and other sums", r"reduce::sum|sum_to_shape|backend::cpu::reduce"),
        ("copies: gathers, contiguous, narrowed gradients", r"strided_to_vec|contiguous|backend::cpu::index|memmove|memcpy"),
        ("zero fills", r"memset|zeros"),
        ("allocator", r"malloc|free|_int_|alloc::"),
    ],
    [("other elementwise maps (residual adds, scaling, the loss)", r"backend::cpu::(elementwise|isa_loops|rows)|ops::binary|ops::unary")],
    [("autograd engine", r"autograd::engine")],
]
PARTS = [part for tier in TIERS for part in tier]
COMPILED = [[(name, re.compile(p)) for name, p in tier] for tier in TIERS]
OTHER = "other"


def samples(lines):
    """Yields each sample's frame symbols, leaf first."""
    frames = []
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = []
        elif line.startswith(("\t", " ")):
            parts = line.split(None, 1)
            if len(parts) == 2:
                frames.append(parts[1])
    if frames:
        yield frames


def part_of(frames):
    for tier in COMPILED:
        for frame in frames:
            for name, pattern in tier:
                if pattern.search(frame):
                    return name
    return OTHER


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: profile_parts.py PERF_SCRIPT_OUTPUT")
    with open(sys.argv[1], errors="replace") as f:
        counts = Counter(part_of(s) for s in samples(f) if any("Step::step" in fr for fr in s))
    total = sum(counts.values())
    if total == 0:
        sys.exit("no sample inside nn_bench::Step::step (was the binary built with symbols?)")
    print(f"{total} samples inside the step")
    print("| part | share |\n|---|---|")
    for name, _ in PARTS + [(OTHER, None)]:
        if counts[name]:
            print(f"| {name} | {100 * counts[name] / total:.1f}% |")


if __name__ == "__main__":
    main()
