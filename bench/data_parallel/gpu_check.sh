#!/usr/bin/env bash
# The data-parallel CUDA path on a GPU host that has a torch 2.11.0+cu130 Python but no cargo:
# build here (cargo build --release -p distill), carry target/release/distill and the repo, run
#   bash bench/data_parallel/gpu_check.sh [DISTILL_BINARY] [OUT_DIR]
# there. Each check writes its run folder and log under OUT_DIR and one line to
# OUT_DIR/summary.txt; the script never stops at a failed check (it records it). About a minute.
#   1. one process on cuda:0 at batch 64 (the anchor);
#   2. 2 ranks sharing the GPU over Gloo (DISTILL_DIST_BACKEND=gloo) at 32 each: their losses
#      must equal the anchor's to 1e-5 (bench/data_parallel/same_losses.py);
#   3. 2 ranks over NCCL on one GPU: NCCL refuses two ranks on one device ("Duplicate GPU"), so
#      this records the refusal line; on a host with 2 GPUs it trains and is compared as 2.;
#   4. 2 ranks with --sync-batch-norm on a BatchNorm CNN against one process at the global batch.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-target/release/distill}"
out="${2:-${OUT:-/tmp/gpu-check}}"
device="${DEVICE:-cuda}" # DEVICE=cpu rehearses the script on a machine without a GPU
mkdir -p "$out"
py="${PYTHON:-python3}" # a Python with torch 2.11.0+cu130 (and its torch.distributed.run)
torch_lib=$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$torch_lib:${LD_LIBRARY_PATH:-}"
export GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
fx=tests/fixtures
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
note "$(date -u +%FT%TZ) $("$py" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU", torch.cuda.device_count(), "GPU(s)")')"
ldd "$bin" | grep -E 'not found' && note "ldd: libraries not found"

cnn_cfg="$out/cnn.toml"
sed -e 's/family = "mlp"/family = "cnn"\nchannels = [8]\nnorm = "batch"/' \
    -e "s|\"digits-|\"$PWD/$fx/digits-|g" $fx/digits-student.toml >"$cnn_cfg"
mlp_cfg="$out/mlp.toml"
sed -e "s|\"digits-|\"$PWD/$fx/digits-|g" $fx/digits-student.toml >"$mlp_cfg"

one() { # name cfg batch [extra...]
  local name=$1 cfg=$2 batch=$3; shift 3
  "$bin" --teacher $fx/teacher-scripted.pt --student "$cfg" --out "$out/$name" --device "$device" --quiet \
    --set train.batch_size="$batch" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc $(grep -h -m1 'error:' "$out/$name.log" || true)"
  return $rc
}
job() { # name cfg micro-batch backend [extra...]
  local name=$1 cfg=$2 batch=$3 backend=$4; shift 4
  DISTILL_DIST_BACKEND=$backend "$py" -m torch.distributed.run --standalone --nproc-per-node=2 --no-python "$bin" \
    --teacher $fx/teacher-scripted.pt --student "$cfg" --out "$out/$name" --device "$device" --quiet \
    --set train.batch_size="$batch" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc $(grep -h -m1 'error:' "$out/$name.log" || true)"
  return $rc
}
same() { note "$1 vs $2: $("$py" bench/data_parallel/same_losses.py "$out/$1" "$out/$2" 2>&1)"; }

one anchor "$mlp_cfg" 64
job gloo-2 "$mlp_cfg" 32 gloo && same anchor gloo-2
job nccl-2 "$mlp_cfg" 32 nccl && same anchor nccl-2
one bn-anchor "$cnn_cfg" 32
job bn-sync-2 "$cnn_cfg" 16 gloo --sync-batch-norm && same bn-anchor bn-sync-2
for r in anchor gloo-2 nccl-2 bn-anchor bn-sync-2; do
  [ -f "$out/$r/report.json" ] && note "$r: $("$py" -c "
import json
r = json.load(open('$out/$r/report.json'))
m = r.get('memory') or {}
print(r.get('data_parallel'), 'samples/s', round(r['student']['samples_per_s']), 'peak allocated',
      m.get('measured_peak_allocated_bytes'), 'predicted', m.get('predicted_allocated_bytes'))")"
done
exit 0
