#!/usr/bin/env bash
# The memory plan against the CUDA caching allocator, on a GPU host: run from the repository root
# with the bundle of bench/gpu/pack.sh, as `bash bench/gpu/run.sh BUNDLE OUT`. Every step is
# bounded (DEADLINE seconds in all) and writes one line to OUT/summary.txt; OUT/runs.tar.gz holds
# each run's report.json, config.toml, metrics.jsonl and log. Teachers have random weights of the
# real shapes (bench/gpu/random_teacher.py): memory and speed figures are real, quality ones not.
# DEV=cpu rehearses it on a machine without a GPU (PY: a Python with torch 2.11); STEPS="a b ..."
# runs only the named steps (with the data and teachers they need).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
DEADLINE=${DEADLINE:-420}; DEV=${DEV:-cuda}; py=${PY:-python3}; start=$SECONDS
W=$(mktemp -d); R=$W/runs; mkdir -p "$R" "$W/bin" data/gpu/fashion-mnist data/gpu/minilm data/gpu/smollm2
S=$OUT/summary.txt; : >"$S"
note() { echo "[$((SECONDS - start))s] $*" | tee -a "$S"; }
$py -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$B/distill.xz" "$W/bin/distill"
chmod +x "$W/bin/distill"; D=$W/bin/distill
TL=$($py -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
NV=$($py -c 'import glob, os, torch
r = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia")
print(":".join(sorted({os.path.dirname(p) for p in glob.glob(r + "/**/lib*.so*", recursive=True)})))')
export LD_LIBRARY_PATH="$TL:$NV:${LD_LIBRARY_PATH:-}" GLOO_SOCKET_IFNAME=lo
# the repository's package (random_teacher.py imports it) without installing into the host's Python
$py python/link_package.py "$W/py" && export PYTHONPATH="$W/py${PYTHONPATH:+:$PYTHONPATH}"
note "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null) torch $($py -c 'import torch; print(torch.__version__)') $(nproc) cores; $(ldd "$D" | grep -c 'not found') libraries missing"

# run NAME SECONDS CMD...: one bounded step, its output in runs/NAME.log
run() {
  local name=$1 t=$2; shift 2
  case " fm-data teachers ${STEPS:-$name} " in *" $name "*) ;; *) return 98 ;; esac
  local l=$((DEADLINE - (SECONDS - start)))
  if [ "$l" -lt 15 ]; then note "$name: skipped ($l s left)"; return 99; fi
  [ "$t" -gt "$l" ] && t=$l
  local s0=$SECONDS
  timeout -k 5 "$t" "$@" >"$R/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc in $((SECONDS - s0)) s $(grep -h -m1 -E '^memory:' "$R/$name.log" | cut -c1-400) $(grep -h -m1 -iE '^error|panicked' "$R/$name.log" | cut -c1-300)"
  return $rc
}

run probe 60 $py bench/gpu/allocator_probe.py lm_loss workspaces
cat "$R/probe.log" >>"$S"
# data and teachers
run fm-data 60 $py examples/fashion-mnist/prepare_data.py "$B/fmnist" data/gpu/fashion-mnist
cp "$B"/minilm/* data/gpu/minilm/; cp "$B"/smollm2/* data/gpu/smollm2/
run teachers 90 bash -c "$py bench/gpu/random_teacher.py fashion-mnist data/gpu/fashion-mnist/t.pt && \
  $py bench/gpu/random_teacher.py minilm data/gpu/minilm/config.json data/gpu/minilm/teacher.pt && \
  $py bench/gpu/random_teacher.py smollm2 data/gpu/smollm2/teacher.json data/gpu/smollm2/teacher.pt"

G=$PWD/data/gpu
FM=(--teacher $G/fashion-mnist/t.pt --student examples/fashion-mnist/student.toml --device $DEV
  --set "data.train=\"$G/fashion-mnist/train.npz\"" --set "data.test=\"$G/fashion-mnist/test.npz\"")
MINI=(--teacher $G/minilm/teacher.pt --student examples/minilm/student-bf16.toml --device $DEV --set train.epochs=1
  --set "data.train=\"$G/minilm/train.txt\"" --set "data.test=\"$G/minilm/test.txt\""
  --set "data.tokenizer=\"$G/minilm/tokenizer.json\"")
LM=(--teacher $G/smollm2/teacher.pt --student examples/smollm2/student-fast.toml --device $DEV --set train.epochs=1
  --set "data.train=\"$G/smollm2/train.txt\"" --set "data.test=\"$G/smollm2/test.txt\""
  --set "data.tokenizer=\"$G/smollm2/tokenizer.json\"")
fx=tests/fixtures
run digits-mlp 40 "$D" --teacher $fx/teacher-scripted.pt --student $fx/digits-student.toml --device $DEV --out "$R/digits-mlp"
run text-fixture 40 "$D" --teacher $fx/text/text-teacher.pt --student $fx/text/text-student.toml --device $DEV \
  --set train.precision=bf16 --set train.epochs=2 --out "$R/text-fixture"
run lm-fixture 40 "$D" --teacher $fx/lm/lm-teacher.pt --student $fx/lm/lm-student.toml --device $DEV \
  --set train.precision=bf16 --set train.epochs=2 --out "$R/lm-fixture"
run fm-fp32 60 "$D" "${FM[@]}" --set train.epochs=2 --baseline --out "$R/fm-fp32"
run fm-bf16-live 60 "$D" "${FM[@]}" --set train.epochs=1 --set train.precision=bf16 --set teacher.cache_logits=false --out "$R/fm-bf16-live"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 100 >"$R/smi-minilm.csv" 2>/dev/null &
smi=$!
run minilm-bf16 60 "$D" "${MINI[@]}" --out "$R/minilm-bf16"
kill $smi 2>/dev/null
run minilm-fp32 60 "$D" "${MINI[@]}" --set train.precision=fp32 --out "$R/minilm-fp32"
run minilm-b1024 60 "$D" "${MINI[@]}" --set train.batch_size=1024 --out "$R/minilm-b1024"
run minilm-b4096 60 "$D" "${MINI[@]}" --set train.batch_size=4096 --out "$R/minilm-b4096"
run minilm-auto 90 "$D" "${MINI[@]}" --set 'train.batch_size="auto"' --out "$R/minilm-auto"
run smollm2-chunked 80 "$D" "${LM[@]}" --out "$R/smollm2-chunked"
run smollm2-whole 80 "$D" "${LM[@]}" --set kd.loss_chunk=0 --out "$R/smollm2-whole"
run fm-fp32-10 60 "$D" "${FM[@]}" --baseline --out "$R/fm-fp32-10"
run fm-fp32-nobaseline 60 "$D" "${FM[@]}" --set train.epochs=2 --out "$R/fm-fp32-nobaseline"
run smollm2-auto 120 "$D" "${LM[@]}" --set 'train.batch_size="auto"' --out "$R/smollm2-auto"
run smollm2-b64 80 "$D" "${LM[@]}" --set train.batch_size=64 --set train.eval_batch_size=64 --out "$R/smollm2-b64"
run dp 100 env DEVICE=$DEV PYTHON=$py bash bench/data_parallel/gpu_check.sh "$D" "$R/dp"
sed 's/^/    dp: /' "$R/dp/summary.txt" 2>/dev/null | tee -a "$S"
# the allocator's own history of the runs whose reserved bytes the plan misses (minilm-fp32,
# text-fixture) and of minilm-bf16, which it meets, last (a repeat of those runs with
# --cuda-memory-history, which records on the host and changes nothing on the device): each
# run's snapshot (OUT/history-NAME.pickle, for https://pytorch.org/memory_viz) and requests
# (OUT/history-NAME.requests, replayed here by estimator-wasm's replay_requests example,
# docs/memory-model.md 7c); the small text fixture keeps each event's C++ stack (slow on a
# long run), which names the ops. CUDA only: skipped under DEV=cpu.
history() {
  local name=$1 t=$2; shift 2
  [ "$DEV" = cpu ] && return 0
  run "history-$name" "$t" "$@" --cuda-memory-history "$OUT/history-$name.pickle" --out "$R/history-$name" &&
    $py bench/gpu/allocator_history.py "$OUT/history-$name.pickle" --requests "$OUT/history-$name.requests" 2>&1 |
    sed "s/^/    history-$name: /" | tee -a "$S"
}
history minilm-fp32 90 "$D" "${MINI[@]}" --set train.precision=fp32
history minilm-bf16 90 "$D" "${MINI[@]}"
history text-fixture 60 env DISTILL_CUDA_MEMORY_STACKS=1 "$D" --teacher $fx/text/text-teacher.pt \
  --student $fx/text/text-student.toml --device $DEV --set train.precision=bf16 --set train.epochs=2
note "done"
(cd "$W" && find runs \( -name '*.pt' -o -name '*.safetensors' -o -name checkpoints -o -name teacher-cache \) -prune -o -type f -print) >"$W/files"
tar -C "$W" -czf "$OUT/runs.tar.gz" -T "$W/files"
