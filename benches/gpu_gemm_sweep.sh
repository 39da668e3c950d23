#!/usr/bin/env bash
# GFLOP/s of every GPU GEMM variant the adapter offers, each forced in turn, then what the
# autotuner picks: square f32 products (1024, 4096, 8192) and f16 (4096), on gpu:0. Needs
# only a prebuilt `nn_bench` (no Rust toolchain on the device):
#
#   cargo build --release -p nn-bench --features gpu --bin nn_bench      # here
#   benches/gpu_gemm_sweep.sh                                             # on the device
#
# Environment (all optional):
#   NN_BENCH_BIN     the binary (default target/release/nn_bench, from the repository root)
#   SWEEP_SIZES      f32 sizes, comma-separated (default 1024,4096,8192)
#   SWEEP_F16_SIZES  f16 sizes (default 4096)
#   SWEEP_BUDGET_MS  sampling time per product (default 400; at least 5 timed runs)
#   SWEEP_VARIANTS   the variants to force, space-separated (default: every one offered, the
#                    new ones first)
#   SWEEP_CHECKED    variants to run again compiled with wgpu's bounds checks
#                    (default "db128x128_k16")
#   SWEEP_RUN_S      time limit of one variant's run (default 45: a run past it is reported)
#   SWEEP_MAX_S      stop starting runs after this many seconds (default 170)
#   GEMM_TEST_BIN    a prebuilt nn-core/tests/gpu_gemm.rs binary, run first (each variant
#                    against the CPU: the cooperative-matrix ones can be checked only on a
#                    device): cargo test --release -p nn-core --features gpu --test gpu_gemm --no-run
#                    prints its path; strip it (`strip -o target/gpu_gemm_test PATH`)
# Tiny sizes for a software adapter (lavapipe):
#   SWEEP_SIZES=64,128 SWEEP_F16_SIZES=64 SWEEP_BUDGET_MS=20 benches/gpu_gemm_sweep.sh
# Output: one line per (variant, product): GFLOP/s, milliseconds and the variant that really
# ran it (a forced variant that cannot run falls back to t64x64_4x4, saying why), then the
# autotuner's choice per product and its table of timings.
set -u
cd "$(dirname "$0")/.."
BIN=${NN_BENCH_BIN:-target/release/nn_bench}
SIZES=${SWEEP_SIZES:-1024,4096,8192}
F16_SIZES=${SWEEP_F16_SIZES:-4096}
BUDGET=${SWEEP_BUDGET_MS:-400}
CHECKED=${SWEEP_CHECKED:-db128x128_k16}
RUN_S=${SWEEP_RUN_S:-45}
MAX_S=${SWEEP_MAX_S:-170}
[ -x "$BIN" ] || { echo "gpu_gemm_sweep: no binary $BIN (build: cargo build --release -p nn-bench --features gpu --bin nn_bench)" >&2; exit 2; }
START=$(date +%s)

# The value of "key" in a one-line JSON object (a string, a number or null).
field() { sed -n "s/.*\"$1\": \(\"\(\([^\"\\\\]\|\\\\.\)*\)\"\|\(null\|[0-9.][0-9.]*\)\).*/\2\4/p"; }

# run SPEC F32_SIZES F16_SIZES: one nn_bench process with NN_GPU_GEMM=SPEC; prints a line per product.
run() {
    local spec=$1 out rc
    if [ $(( $(date +%s) - START )) -ge "$MAX_S" ]; then
        printf '%-24s skipped (the sweep reached SWEEP_MAX_S=%ss)\n' "$spec" "$MAX_S"
        return
    fi
    out=$(NN_GPU_GEMM=$spec NN_BENCH_GPU_GEMM_SIZES=$2 NN_BENCH_GPU_GEMM_F16_SIZES=$3 NN_BENCH_BUDGET_MS=$BUDGET \
        timeout "$RUN_S" "$BIN" gpu_gemm_ 2>&1)
    rc=$?
    local workload="" gflops="" ms=""
    while IFS= read -r line; do
        case $line in
            *'"workload"'*)
                workload=$(field workload <<<"$line"); gflops=$(field throughput <<<"$line"); ms=$(field median_ms <<<"$line") ;;
            *'"gemm_ran"'*)
                printf '%-24s %-20s %10.1f GFLOP/s %10.3f ms   ran %s\n' "$spec" "$workload" "$gflops" "$ms" "$(field variant <<<"$line")" ;;
            *'"gemm_tuned"'*)
                [ "$spec" = auto ] && printf '    tuned %s: %s\n' "$(field gemm_tuned <<<"$line")" "$(field choice <<<"$line")" ;;
        esac
    done <<<"$out"
    if [ $rc -ne 0 ]; then
        [ $rc -eq 124 ] && printf '%-24s ran past SWEEP_RUN_S=%ss (the lines above are what finished)\n' "$spec" "$RUN_S" \
            || { printf '%-24s failed (exit %s):\n' "$spec" "$rc"; tail -n 5 <<<"$out" | sed 's/^/    /'; }
    fi
}

if [ -n "${GEMM_TEST_BIN:-}" ]; then
    echo "== $GEMM_TEST_BIN (every variant against the CPU)"
    NN_GPU_GEMM= timeout 150 "$GEMM_TEST_BIN" --test-threads=1 --nocapture 2>&1 \
        | grep -E "offered|refused|REFUSED|forced coop|panicked|test result|element|ran past" | grep -v "^forced t\|^forced db\|^forced sg\|forcing_an_unknown"
    echo "== (test binary exit ${PIPESTATUS[0]}, $(( $(date +%s) - START )) s)"
    START=$(date +%s)
fi
report=$(NN_BENCH_GPU_GEMM_SIZES= NN_BENCH_GPU_GEMM_F16_SIZES= timeout 60 "$BIN" gpu_gemm_report 2>&1) \
    || { echo "gpu_gemm_sweep: nn_bench failed:"; echo "$report"; exit 1; }
echo "adapter: $(grep '"adapter"' <<<"$report" | field adapter)"
offered=""
while IFS= read -r line; do
    v=$(field gemm_variant <<<"$line")
    why=$(field refused <<<"$line")
    if [ "$why" = null ]; then offered="$offered $v"; else echo "refused: $why"; fi
done < <(grep '"gemm_variant"' <<<"$report")
echo "offered:$offered"
# The newest and likeliest fastest first (SWEEP_MAX_S may cut the tail).
ordered=""
for v in u128x128_8x8 u64x64_8x8 u128x64_8x4 u64x64_4x4 db128x128_k16 db128x128_k8 db128x64_k16 coop128x128_db_f16 coop128x128_f16 t128x128_8x8 t64x64_8x8 coop64x64_f16 \
    t128x64_8x4 sg64x64_4x4 t64x64_4x4 t32x32_4x4 $offered; do
    case " $offered " in *" $v "*) case " $ordered " in *" $v "*) ;; *) ordered="$ordered $v" ;; esac ;; esac
done
echo
run auto "$SIZES" "$F16_SIZES"
for v in ${SWEEP_VARIANTS:-$ordered}; do
    case $v in
        coop*) run "$v" "" "$F16_SIZES" ;;   # f16 only
        *) run "$v" "$SIZES" "$F16_SIZES" ;;
    esac
done
for v in $CHECKED; do
    case " $offered " in *" $v "*) run "$v+checked" "$SIZES" "" ;; esac
done
echo "sweep took $(( $(date +%s) - START )) s"
