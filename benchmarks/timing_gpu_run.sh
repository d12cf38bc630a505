#!/usr/bin/env bash
# The step-timing GPU check in one call: the calibration grid of each model (a time budget
# each, points in a seeded shuffled order), then the executor's GPU tests.
#
#   bash benchmarks/timing_gpu_run.sh OUT_DIR [MODEL...]
#
# Environment: BUDGET_S (seconds of grid per model, 25), GRID (fit), KV (the KV cache dtype:
# auto, or fp8 for e4m3 caches; a KV other than auto joins the artefacts' names, as
# h200_llama-3-8b_fp8.json), SUFFIX (of the artefacts' names, after KV), TESTS_S (60),
# EXEC_LOGS (allocation logs to execute, sampled: EXEC_STEPS steps, EXEC_S seconds each).
#
#   KV=fp8 BUDGET_S=25 bash benchmarks/timing_gpu_run.sh OUT Llama-3-8B
#   KV=fp8 GRID=prefill SUFFIX=_prefill BUDGET_S=25 bash benchmarks/timing_gpu_run.sh OUT Llama-3-8B
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
        --out "$out/h200_$name$kv_name${SUFFIX:-}.json" >> "$out/log.txt" 2>&1
    echo "[exit $?]" >> "$out/log.txt"
done
for log in ${EXEC_LOGS:-}; do
    name=$(basename "$(dirname "$log")")
    echo "== execute $log ($(($(date +%s) - start)) s)" >> "$out/log.txt"
    timeout "${EXEC_S:-40}" python -m kernels.execute "$log" --device cuda \
        --max-steps "${EXEC_STEPS:-24}" --out "$out/exec_$name.jsonl" >> "$out/log.txt" 2>&1
    echo "[exit $?]" >> "$out/log.txt"
done
echo "== GPU tests ($(($(date +%s) - start)) s)" >> "$out/log.txt"
timeout "${TESTS_S:-60}" python -m pytest -q -p no:cacheprovider -m gpu tests/gpu \
    -k "execute or calibrat" >> "$out/log.txt" 2>&1
echo "[exit $?] [total $(($(date +%s) - start)) s]" >> "$out/log.txt"
tail -n 40 "$out/log.txt"
