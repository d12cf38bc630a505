#!/usr/bin/env bash
# The kernel GPU check in one call: first the kernel GPU tests in SHARDS parallel pytest runs
# while WORKERS `bench_kernels.py --dry` runs compile the benchmark's kernels into Triton's
# cache; then, with the GPU to itself, the timed benchmark (its tables print last).
#
#   bash benchmarks/kernel_gpu_run.sh OUT_DIR [bench_kernels.py arguments...]
#
# Environment: SHARDS (6), WORKERS (6), PREP_S / BENCH_S (time limits, 80 / 100 seconds).
set -o pipefail
out=${1:?usage: kernel_gpu_run.sh OUT_DIR [bench args...]}
shift
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
shards=${SHARDS:-6}
workers=${WORKERS:-6}
tests=(tests/gpu/test_kernels_gpu.py tests/gpu/test_kernels_variants_gpu.py)
start=$(date +%s)
python -m pytest --collect-only -q -m gpu "${tests[@]}" | grep '::' > "$out/test_ids"
split -n "r/$shards" -d "$out/test_ids" "$out/shard_"
for f in "$out"/shard_??; do
    xargs -a "$f" timeout "${PREP_S:-80}" python -m pytest -v -p no:cacheprovider -m gpu \
        > "$f.log" 2>&1 &
done
for ((i = 0; i < workers; i++)); do
    timeout "${PREP_S:-80}" python benchmarks/bench_kernels.py --dry "$i/$workers" "$@" \
        > "$out/warm_$i.log" 2>&1 &
done
wait
echo "[tests and compiles: $(($(date +%s) - start)) s]"
echo "[GPU tests: $(cat "$out"/shard_*.log | grep -c ' PASSED') passed," \
    "$(cat "$out"/shard_*.log | grep -c -E ' (FAILED|ERROR)') failed," \
    "$(wc -l < "$out/test_ids") collected]"
grep -h -E '(FAILED|ERROR)' "$out"/shard_*.log | head -n 20
grep -h '^\[dry' "$out"/warm_*.log
timeout "${BENCH_S:-100}" python benchmarks/bench_kernels.py --out "$out/bench.json" "$@" \
    2>&1 | tee "$out/bench.log"
echo "[total: $(($(date +%s) - start)) s]"
