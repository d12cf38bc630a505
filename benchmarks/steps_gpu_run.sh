#!/usr/bin/env bash
# The executed-schedule check in one call: the end-to-end scenarios' and the validation
# suite's allocation logs, each replayed through the whole decoder forward (a sample of its
# steps, kernels.execute), one after another with the GPU to itself.
#
#   # on the CPU, once: the logs (git-ignored .gpu_data/, carried to the GPU machine)
#   PYTHONPATH=. python benchmarks/e2e_check.py prepare .gpu_data/e2e
#   python benchmarks/validate_suite.py --phase record --traces TRACES_DIR
#   # on the GPU machine
#   bash benchmarks/steps_gpu_run.sh OUT_DIR [DATA_DIR]
#   # back on the CPU, with OUT_DIR/e2e_NAME.jsonl copied to DATA_DIR/e2e/NAME/executed_steps.jsonl
#   PYTHONPATH=. python benchmarks/e2e_check.py compare .gpu_data/e2e
#   PYTHONPATH=. python benchmarks/step_errors.py --executed OUT_DIR/vs_*.jsonl
#
# Environment: E2E_S / VS_S (seconds per e2e scenario / validation log, 110 / 45), STOP_S
# (no validation log starts after this many seconds, 520), E2E (scenario names, default
# every prepared one; moe-chunked, Mixtral-8x7B, needs a GPU of more than 90 GiB).
set -o pipefail
out=${1:?usage: steps_gpu_run.sh OUT_DIR [DATA_DIR]}
data=${2:-.gpu_data}
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1
start=$(date +%s)
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    python -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, 'cuda', torch.version.cuda)"
} > "$out/log.txt" 2>&1
mark() { echo "[$1: exit $2 at $(($(date +%s) - start)) s]" >> "$out/log.txt"; }
names=${E2E:-$(ls "$data/e2e" 2>/dev/null)}
for s in $names; do
    timeout "${E2E_S:-110}" python -m kernels.execute "$data/e2e/$s/allocation_log.jsonl.gz" \
        --device cuda --per-class 3 --max-steps 48 --no-parts --out "$out/e2e_$s.jsonl" \
        > "$out/e2e_$s.log" 2>&1
    mark "e2e $s" $?
done
for log in "$data"/validate_suite/*/allocation_log.jsonl.gz; do
    [ -f "$log" ] || continue
    [ $(($(date +%s) - start)) -lt "${STOP_S:-520}" ] || { mark "stopped before $log" 0; break; }
    s=$(basename "$(dirname "$log")")
    timeout "${VS_S:-45}" python -m kernels.execute "$log" --device cuda --per-class 2 \
        --max-steps 32 --no-parts --out "$out/vs_$s.jsonl" > "$out/vs_$s.log" 2>&1
    mark "validation log $s" $?
done
echo "[total $(($(date +%s) - start)) s]" >> "$out/log.txt"
cat "$out/log.txt"
