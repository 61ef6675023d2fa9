#!/usr/bin/env bash
# The text demo on CUDA in bf16, on a GPU host with a torch 2.11.0+cu130 Python (and
# its tokenizers, safetensors, numpy) but no cargo and no network. Here: bench/text/gpu_pack.sh;
# there, from the repository root, with the bundle carried:
#   bash bench/text/gpu_check.sh [BUNDLE] [OUT_DIR]
#   1. make_teacher.py rebuilds the fp32 teacher from the bundle's fp16-rounded weights (with
#      its model-card checks) into /tmp/gpu-text/data, beside the bundle's text;
#   2. distill trains the demo's student (student-bf16.toml: 3 x 1536 from teacher layers
#      0, 4, 5, five epochs of WordNet) on DEVICE (default cuda) in bf16 autocast;
#   3. then the 2.5x-speed student (student-pruned-bf16.toml: 3 x 896 from teacher layers 0, 4,
#      5, 2.54x the teacher on an Intel Xeon and 2.69x on an AMD EPYC, where 4 x 512 measured
#      2.43x and 2.55x) on train-large.txt in bf16, for as many epochs as the time left allows
#      (at most MAX_EPOCHS, default 16; the rate measured in step 2, scaled by 0.7 for the
#      longer sentences);
#   4. bench/text/bench.py measures both against the teacher on the CPU (2 threads, 3 passes).
# OUT_DIR gets 7 small files (the device tool returns at most 8): summary.txt, teacher.log,
# demo.log, deep.log, runs.tar.gz (each run's report.json, metrics.jsonl, config.toml),
# bench.json and bench.log (the BENCHMARKS.md section). Run folders stay in /tmp/gpu-text.
# The whole script keeps within DEADLINE_S seconds (default 540) by sizing step 3.
# Rehearse it without a GPU: DEVICE=cpu MAX_TRAIN=2000 DEMO_EPOCHS=1 MAX_EPOCHS=2 (the first
# MAX_TRAIN lines of each training file).
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$SECONDS
bundle="${1:-.gpu}"
out="${2:-${OUT:-/tmp/gpu-text-out}}"
device="${DEVICE:-cuda}" deadline="${DEADLINE_S:-540}" max_epochs="${MAX_EPOCHS:-16}"
bench_reserve=180
py="${PYTHON:-python3}"
work=/tmp/gpu-text data=/tmp/gpu-text/data
rm -rf "$work" && mkdir -p "$out" "$data"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $((SECONDS - start)); }
die() { note "stopped: $*"; exit 2; }

[ -f "$bundle/distill.xz" ] || die "$bundle/distill.xz is missing: run bench/text/gpu_pack.sh here first and carry $bundle"
torch_lib=$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
  die "$py has no torch"
export LD_LIBRARY_PATH="$torch_lib:${LD_LIBRARY_PATH:-}"
# the repository's package (make_teacher.py and bench.py import it) without installing into the host's Python
"$py" python/link_package.py "$work/py" || die "python/link_package.py failed"
export PYTHONPATH="$work/py${PYTHONPATH:+:$PYTHONPATH}"
note "$(date -u +%FT%TZ) $("$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'), $(nproc) cores"
# unpacked with Python's lzma and tarfile: the device has python3, not necessarily xz
unxz() { "$py" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
unxz "$bundle/distill.xz" "$work/distill" && chmod +x "$work/distill" || die "cannot unpack distill"
bin="$work/distill"
ldd "$bin" | grep 'not found' && die "libraries not found (ldd above)"
"$py" -m tarfile -e "$bundle/text.tar.xz" "$data" || die "cannot unpack $bundle/text.tar.xz"
if [ -n "${MAX_TRAIN:-}" ]; then
  for f in train train-large; do head -n "$MAX_TRAIN" "$data/$f.txt" >"$data/$f.cut" && mv "$data/$f.cut" "$data/$f.txt"; done
fi
MINILM_MODEL_DIR="$bundle/minilm" "$py" examples/minilm/make_teacher.py "$data" >"$out/teacher.log" 2>&1 ||
  die "make_teacher.py failed: $(tail -1 "$out/teacher.log")"
note "teacher rebuilt in fp32 from the fp16-rounded weights, checks passed ($(elapsed) s)"

# train NAME CFG [--set ...]: one distill run into $work/NAME, its stderr into $work/NAME.log
train() {
  local name=$1 cfg=$2; shift 2
  "$bin" --teacher "$data/teacher.pt" --student "$cfg" --out "$work/$name" --device "$device" \
    --teacher-cache "$work/teacher-cache" --set "data.train=$data/${TRAIN:-train}.txt" \
    --set "data.test=$data/test.txt" --set "data.tokenizer=$data/tokenizer.json" "$@" 2>"$work/$name.log"
  local rc=$?
  cp "$work/$name.log" "$out/$name.log"
  note "$name: rc=$rc after $(elapsed) s $(grep -h -m1 'error:' "$work/$name.log")"
  return $rc
}
# field PATH KEY...: a number from report.json
field() { "$py" -c 'import json, sys; r = json.load(open(sys.argv[1]))
for k in sys.argv[2:]: r = r[k]
print(r)' "$@"; }

demo_sets=()
[ -n "${DEMO_EPOCHS:-}" ] && demo_sets=(--set "train.epochs=$DEMO_EPOCHS")
train demo examples/minilm/student-bf16.toml ${demo_sets[@]+"${demo_sets[@]}"} || die "the demo run failed"
rate=$(field "$work/demo/report.json" student samples_per_s)
teacher_rate=$(grep -ho 'cached in [0-9.]* s ([0-9]* samples/s)' "$work/demo.log" | grep -o '([0-9]*' | tr -d '(')
note "demo: trained at $rate samples/s, teacher pass at ${teacher_rate:-?} samples/s"

students=(--student "demo=$work/demo")
large=$(wc -l <"$data/train-large.txt")
epochs=$("$py" -c 'import sys
left, rate, teacher, n, cap = (float(x) for x in sys.argv[1:])
left -= n / teacher + 60  # the teacher pass over the corpus, then evaluation and export
print(max(0, min(int(cap), int(left * 0.7 * rate / n))))' \
  "$((deadline - $(elapsed) - bench_reserve))" "$rate" "${teacher_rate:-100}" "$large" "$max_epochs")
if [ "$epochs" -ge 1 ]; then
  note "deep: 3 x 896 from teacher layers 0, 4, 5, $epochs epochs of $large sentences"
  TRAIN=train-large train deep examples/minilm/student-pruned-bf16.toml --set "train.epochs=$epochs" &&
    students+=(--student "deep=$work/deep")
else
  note "deep: skipped, too little time left ($(elapsed) s gone)"
fi

tar -C "$work" -czf "$out/runs.tar.gz" $(cd "$work" && ls -d {demo,deep}/{report.json,metrics.jsonl,config.toml} 2>/dev/null)
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 "$py" bench/text/bench.py --data "$data" "${students[@]}" --threads 2 --reps 3 \
  --out "$out" --benchmarks "$work/BENCHMARKS.md" --command "bench/text/gpu_check.sh (DEVICE=$device)" \
  --note "The students were trained with DEVICE=$device in bf16 autocast; the teacher is rebuilt from fp16-rounded weights (bench/text/gpu_pack.sh)." \
  >"$out/bench.log" 2>&1 || note "bench.py failed: $(tail -1 "$out/bench.log")"
note "done in $(elapsed) s"
