#!/usr/bin/env bash
# The step-timing GPU check in one call: the calibration grid of each model (a time budget
# each, points in a seeded shuffled order), then the executor's GPU tests.
#
#   bash benchmarks/timing_gpu_run.sh OUT_DIR [MODEL...]
#
# Environment: BUDGET_S (seconds of grid per model, 25), GRID (fit), KV (the KV cache dtype:
# auto, or fp8 for e4m3 caches; a KV other than auto joins the artefacts' names, as
# h200_llama-3-8b_fp8.json, whose prefix is the GPU's family or GPU_TAG), SUFFIX (of the
# artefacts' names, after KV), TESTS_S (60; 0 skips the GPU tests), EXEC_LOGS (allocation
# logs to execute, sampled: EXEC_STEPS steps, EXEC_S seconds each). The fp8 artefacts of Llama-3-8B (fit and prefill grids; log.txt per OUT_DIR):
#
#   KV=fp8 TESTS_S=0 bash benchmarks/timing_gpu_run.sh OUT/fit Llama-3-8B
#   KV=fp8 GRID=prefill SUFFIX=_prefill TESTS_S=120 bash benchmarks/timing_gpu_run.sh OUT/prefill \
#       Llama-3-8B
set -o pipefail
out=${1:?usage: timing_gpu_run.sh OUT_DIR [MODEL...]}
shift
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(Llama-3-8B Qwen3-30B-A3B Mixtral-8x7B Qwen3-14B Qwen2.5-7B
                                  Mistral-7B)
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
start=$(date +%s)
budget=${BUDGET_S:-25}
kv=${KV:-auto}
kv_name=$([ "$kv" = auto ] || echo "_$kv")
# The artefacts' name prefix: the GPU's family as nvidia-smi names it (h100, h200), else GPU_TAG.
gpu_tag=${GPU_TAG:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 \
    | grep -o 'H[0-9]\+\|A[0-9]\+\|L[0-9]\+S\?' | head -n 1 | tr 'A-Z' 'a-z')}
gpu_tag=${gpu_tag:-gpu}
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, 'cuda', torch.version.cuda)"
    git rev-parse HEAD 2>/dev/null || echo "commit: see the caller"
} > "$out/log.txt" 2>&1
for m in "${models[@]}"; do
    name=$(echo "$m" | tr 'A-Z.' 'a-z_' | tr -cd 'a-z0-9_-')
    echo "== $m ($(($(date +%s) - start)) s)" >> "$out/log.txt"
    timeout $((budget + 40)) python benchmarks/calibrate.py --model "$m" --grid "${GRID:-fit}" \
        --kv-cache-dtype "$kv" --time-budget "$budget" \
        --out "$out/${gpu_tag}_$name$kv_name${SUFFIX:-}.json" >> "$out/log.txt" 2>&1
    echo "[exit $?]" >> "$out/log.txt"
done
for log in ${EXEC_LOGS:-}; do
    name=$(basename "$(dirname "$log")")
    echo "== execute $log ($(($(date +%s) - start)) s)" >> "$out/log.txt"
    timeout "${EXEC_S:-40}" python -m kernels.execute "$log" --device cuda \
        --max-steps "${EXEC_STEPS:-24}" --out "$out/exec_$name.jsonl" >> "$out/log.txt" 2>&1
    echo "[exit $?]" >> "$out/log.txt"
done
if [ "${TESTS_S:-60}" -gt 0 ]; then
    echo "== GPU tests ($(($(date +%s) - start)) s)" >> "$out/log.txt"
    timeout "${TESTS_S:-60}" python -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
        -k "execute or calibrat" >> "$out/log.txt" 2>&1
    echo "[exit $?]" >> "$out/log.txt"
fi
echo "[total $(($(date +%s) - start)) s]" >> "$out/log.txt"
tail -n 40 "$out/log.txt"
