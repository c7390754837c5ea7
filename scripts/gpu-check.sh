#!/usr/bin/env bash
# The checks only a GPU machine can make, as one prepared script (README "GPU check").
#
#   1. The GPU mask is honoured: with CUDA_VISIBLE_DEVICES set to the last GPU's UUID (and, with
#      two or more GPUs, to the last two by index, in reverse), the launcher starts torchrun
#      trainers on NCCL; each rank reports the mask it was given and the UUID of the one device
#      it sees (scripts/gpu/probe.py), and an all_reduce over the world gives the right sum.
#   2. The default recipe trains on NCCL (rollout=none: rank 0 samples with HF generate).
#   3. The memory estimate against a real step: a ~1B random-weight Llama (scripts/gpu/mid_model.py)
#      trained by the default recipe, the GPU's used memory sampled by nvidia-smi every 100 ms;
#      the plan's per-GPU estimate for the actor is printed beside the measured peak, with and
#      without gradient checkpointing.
#   4. The Megatron recipe's training step (CPU cannot run one), when megatron-core is carried.
#   5. The estimate per term against real FSDP2 steps on CUDA (NCCL, 2 GPUs, or 1):
#      benchmarks/measure_fsdp_memory.py --device cuda, the same runs as its CPU measurement in
#      docs/benchmarks.md (tiny Llama and a 170M one, checkpointing off and on); the
#      estimate's peak must be at least the measured used memory and within 15 % of it.
#
# On the lent machine (Python 3.12 with torch and transformers; no network, no Hydra): run
# scripts/gpu-wheels.sh here first, carry .whl, and run `bash scripts/gpu-check.sh` there.
# Findings go to $OUT/gpu-check.txt (OUT defaults to /tmp/gpu-check); the exit code is the
# number of failed checks.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
REPORT=$OUT/gpu-check.txt
: >"$REPORT"
WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
    .whl/*.whl || exit 99
fi
export PYTHONPATH="$PWD:$WORK/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export AREAL_TINY_MODEL=$WORK/tiny
LAUNCH=(python3 -m launcher.cli.main)
FAILED=0

say() { echo "gpu-check: $*" | tee -a "$REPORT"; }
verdict() {  # NAME STATUS: STATUS 0 passes
  if [ "$2" -eq 0 ]; then say "PASS $1"; else say "FAIL $1"; FAILED=$((FAILED + 1)); fi
}
launch() {  # LOG OVERRIDES...: a real launch, its console kept in $OUT
  local log=$1; shift
  timeout 400 "${LAUNCH[@]}" "$@" >"$OUT/$log" 2>&1
}

say "$(nvidia-smi -L | tr '\n' ' ')"
say "$(python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch",
      torch.__version__, "cuda", torch.version.cuda)')"
python3 -m launcher.trainer.tiny_model >/dev/null || { say "FAIL tiny model build"; exit 99; }

# 1. the mask
count=$(nvidia-smi -L | grep -c '^GPU')
last_uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | tail -1 | tr -d ' ')
masks=("$last_uuid")
[ "$count" -ge 2 ] && masks+=("$((count - 1)),$((count - 2))")
for mask in "${masks[@]}"; do
  n=$(tr ',' '\n' <<<"$mask" | wc -l)
  dir=$WORK/mask-$n
  CUDA_VISIBLE_DEVICES=$mask launch "mask-$n.log" rollout=none "actor.backend=fsdp:d$n" \
    cluster.device=cuda "cluster.gpus_per_node=$n" trainer.entry=scripts/gpu/probe.py \
    "hydra.run.dir=$dir"
  code=$?
  python3 - "$dir" "$mask" <<'EOF' | tee -a "$REPORT"
import json, subprocess, sys
from pathlib import Path
run, mask = Path(sys.argv[1]), sys.argv[2].split(",")
uuids = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                       capture_output=True, text=True).stdout.split()
want = [m if m.startswith("GPU-") else uuids[int(m)] for m in mask]
bad = 0
for rank, expect in enumerate(mask):
    path = run / "probe" / f"{rank}.json"
    if not path.is_file():
        print(f"  rank {rank}: no probe record"); bad += 1; continue
    r = json.loads(path.read_text())
    ok = (r["visible"] == expect and r["uuid"] == want[rank] and r["device_count"] == 1
          and r["all_reduce"] == r["all_reduce_expected"] and r["backend"] == "nccl")
    bad += not ok
    print(f"  rank {rank}: given CUDA_VISIBLE_DEVICES={r['visible']} (want {expect}), sees "
          f"{r['uuid']} {r['name']} (want {want[rank]}), {r['backend']} all_reduce "
          f"{r['all_reduce']} (want {r['all_reduce_expected']}) {'ok' if ok else 'WRONG'}")
sys.exit(1 if bad else 0)
EOF
  verdict "mask $mask: launch exit $code, every rank on its GPU" $((code + ${PIPESTATUS[0]}))
done

# 2. the default recipe on NCCL
launch recipe.log rollout=none actor.backend=fsdp:d1 cluster.device=cuda cluster.gpus_per_node=1 \
  recipe.steps=2 "hydra.run.dir=$WORK/recipe"
code=$?
grep -h "grpo done\|step 2/2" "$OUT/recipe.log" | tail -2 | sed 's/^/  /' | tee -a "$REPORT"
grep -q "grpo done" "$OUT/recipe.log"
verdict "default recipe on cuda/nccl (exit $code)" $((code + $?))

# 3. the memory estimate against a measured step
python3 scripts/gpu/mid_model.py "$AREAL_TINY_MODEL" "$WORK/mid" | tee -a "$REPORT"
MEM=(rollout=none actor.backend=fsdp:d1 cluster.device=cuda cluster.gpus_per_node=1
     "model_path=$WORK/mid" recipe.steps=2 recipe.prompts_per_step=16 recipe.samples_per_prompt=16
     recipe.max_new_tokens=120 actor.mb_spec.max_tokens_per_mb=4096)
for ckpt in false true; do
  name=mem-ckpt-$ckpt
  "${LAUNCH[@]}" plan --json "${MEM[@]}" "actor.gradient_checkpointing=$ckpt" \
    >"$WORK/$name.json" 2>"$OUT/$name-plan.log"
  base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tail -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$WORK/$name.smi" &
  sampler=$!
  launch "$name.log" "${MEM[@]}" "actor.gradient_checkpointing=$ckpt" "hydra.run.dir=$WORK/$name"
  code=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  python3 - "$WORK/$name.json" "$WORK/$name.smi" "$base" "$ckpt" <<'EOF' | tee -a "$REPORT"
import json, sys
plan = json.load(open(sys.argv[1]))["memory"]["engines"]["actor"]
used = [int(x) for x in open(sys.argv[2]).read().split() if x.isdigit()]
peak = (max(used) - int(sys.argv[3])) / 1024 if used else float("nan")
estimate = plan["per_gpu_gib"]
parts = ", ".join(f"{k} {v:.2f}" for k, v in plan["parts"].items())
print(f"  gradient_checkpointing={sys.argv[4]}: estimate {estimate:.2f} GiB/GPU ({parts}); "
      f"measured peak {peak:.2f} GiB (nvidia-smi, over the idle GPU); estimate/measured "
      f"{estimate / peak:.2f}")
sys.exit(0 if peak <= estimate else 1)  # an estimate below the real peak would let a plan OOM
EOF
  verdict "memory estimate >= measured peak, checkpointing $ckpt (launch exit $code)" \
    $((code + ${PIPESTATUS[0]}))
done

# 4. Megatron's training step
if python3 -c "import megatron.core" 2>/dev/null; then
  launch megatron.log trainer.entry=recipes/grpo_megatron/train.py rollout=none \
    actor.backend=megatron:d1 cluster.device=cuda cluster.gpus_per_node=1 recipe.steps=2 \
    "hydra.run.dir=$WORK/megatron"
  code=$?
  grep -h "grpo done\|step 2/2\|Error" "$OUT/megatron.log" | tail -3 | sed 's/^/  /' \
    | tee -a "$REPORT"
  grep -q "grpo done" "$OUT/megatron.log"
  verdict "megatron recipe steps on cuda (exit $code)" $((code + $?))
else
  say "SKIP megatron recipe: megatron-core not installed (scripts/gpu-wheels.sh carries it)"
fi

# 5. the estimate per term against FSDP2 steps on CUDA
if [ "$count" -ge 1 ]; then
  ranks=$(( count >= 2 ? 2 : 1 ))
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((ranks - 1))) python3 benchmarks/measure_fsdp_memory.py \
    --device cuda --ranks "$ranks" --json "$OUT/fsdp-memory-cuda.json" >"$OUT/fsdp-memory-cuda.txt" 2>&1
  code=$?
  tail -40 "$OUT/fsdp-memory-cuda.txt" | sed 's/^/  /' | tee -a "$REPORT"
  python3 - "$OUT/fsdp-memory-cuda.json" <<'EOF' | tee -a "$REPORT"
import json, sys
rows = json.load(open(sys.argv[1]))
bad = [r for r in rows if not (r["measured_mib"]["peak"] <= r["estimated_mib"]["peak"]
                               <= 1.15 * r["measured_mib"]["peak"])]
for r in bad:
    print(f"  {r['model']} checkpointing={r['checkpointing']} rank {r['rank']}: estimate "
          f"{r['estimated_mib']['peak']} MiB against measured {r['measured_mib']['peak']} MiB")
sys.exit(1 if bad or not rows else 0)
EOF
  verdict "estimate per term against FSDP2 steps on cuda (exit $code)" $((code + ${PIPESTATUS[0]}))
fi

say "$FAILED check(s) failed"
exit "$FAILED"
