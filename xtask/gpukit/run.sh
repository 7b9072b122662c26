#!/usr/bin/env bash
# The GPU proof kit's one command: proves every CUDA path of Torchlight on a machine that has
# python3 with torch 2.11 and no Rust toolchain. `cargo xtask gpu-kit` builds the kit folder this
# script sits in; docs/setup.md explains it.
#
#   bash target/gpu-kit/run.sh
#
# Environment: OUT (where gpu-report.json, gpu-kit.log and the parts go; default <kit>/out),
# TORCHLIGHT_KIT_PYTHON (the python whose torch libraries the binaries load; default python3),
# TORCHLIGHT_KIT_BUDGET_S (the whole run's time budget in seconds; default 330).
#
# Parts, in this order; each has a time limit, and a failing part never stops the run:
#   environment         host  python3's torch and its lib folder, GPU, glibc
#   device              host  `cuda_status()` through the dlopen of libtorch_cuda.so, against that lib folder
#   tests:<crate>       cuda  the crate's `cuda::` tests (release test binary, cuda-tests feature)
#   train               cuda  `torchlight train --device cuda --amp` on the kit's tiny ImageFolder
#   train-cpu-stand-in  host  only without a GPU: the same command on the CPU, 1 epoch, no --amp
#   train-text          cuda  `torchlight train --task text --model bilstm --device cuda --amp` on a
#                             generated two-class TextFolder (cuDNN's packed LSTM under fp16)
#   bench               cuda  `torchlight-bench gpu run`: resnet50 fp32 vs AMP, copies, GradScaler, data stall
#   bench-pytorch       cuda  the same rows in PyTorch (pytorch_gpu_bench.py), the reference
# Without a GPU each cuda part reports "skipped: no CUDA". `torchlight-bench gpu summarize` then
# turns parts.tsv into gpu-report.json (with a plain fallback if it cannot run). The exit status
# is 0 when no part failed.
set -u -o pipefail

KIT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-$KIT/out}"
PYTHON="${TORCHLIGHT_KIT_PYTHON:-python3}"
BUDGET_S="${TORCHLIGHT_KIT_BUDGET_S:-330}"
START=$(date +%s)
# A previous run's files must not stand in for this run's.
rm -rf "$OUT/parts" "$OUT/train" "$OUT/gpu-report.json"
mkdir -p "$OUT/parts" "$OUT/train"
LOG="$OUT/gpu-kit.log"
PARTS="$OUT/parts.tsv"
: > "$LOG"
: > "$PARTS"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/torchlight-gpu-kit.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
# KIT_PROFILE, KIT_COMMIT, KIT_BUILT, KIT_GLIBC_REQUIRED, KIT_TESTS.
# shellcheck source=/dev/null
source "$KIT/kit.env"
cp "$KIT/kit.env" "$OUT/parts/kit.env"

say() { printf '%s\n' "$*" | tee -a "$LOG"; }

# record NAME KIND STATUS SECONDS DATA DETAIL: one line of parts.tsv (DATA is relative to OUT, or -).
record() {
  local detail="${6//$'\t'/ }"
  detail="${detail//$'\n'/ }"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$detail" >> "$PARTS"
  say "== $1: $3${detail:+ - $detail} (${4} s)"
}

# limit WANTED: the seconds a part may take, less when the budget runs out.
limit() {
  local left=$(( BUDGET_S - ($(date +%s) - START) ))
  if (( left < $1 )); then echo "$left"; else echo "$1"; fi
}

# logged SECONDS CMD..: CMD with a time limit, its output appended to the log; 124 on timeout.
logged() {
  captured "$LOG" "$@"
}

# captured FILE SECONDS CMD..: as `logged`, with the output also kept in FILE (truncated first).
captured() {
  local file=$1 t=$2
  shift 2
  if (( t < 5 )); then
    say "no time left in the kit's ${BUDGET_S} s budget for: $*"
    return 125
  fi
  say "\$ $* (limit ${t} s)"
  if [ "$file" = "$LOG" ]; then
    timeout --kill-after=10 "$t" "$@" >> "$LOG" 2>&1
  else
    timeout --kill-after=10 "$t" "$@" > "$file" 2>&1
    local rc=$?
    cat "$file" >> "$LOG"
    return "$rc"
  fi
}

# why STATUS SECONDS: a failed command's status in words.
why() {
  case "$1" in
    124) echo "timed out after $2 s" ;;
    125) echo "no time left in the kit's ${BUDGET_S} s budget" ;;
    *) echo "exit status $1" ;;
  esac
}

elapsed() { echo $(( $(date +%s) - $1 )); }

json_str() {
  local s="$1"
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  s="${s//$'\t'/ }"
  s="${s//$'\n'/ }"
  s="${s//$'\r'/ }"
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}

say "GPU proof kit: profile ${KIT_PROFILE}, commit ${KIT_COMMIT}, built ${KIT_BUILT}; OUT=$OUT"

# --- environment -------------------------------------------------------------------------
t0=$(date +%s)
ENV_FILE="$OUT/parts/environment.env"
TORCH_LIB=""
GPU=no
cat > "$SCRATCH/environment.py" <<'PY'
import os, platform, sys, torch
cuda = torch.cuda.is_available()
print("python=" + sys.executable)
print("python_version=" + platform.python_version())
print("torch=" + torch.__version__)
print("torch_lib=" + os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), "lib"))
print("torch_cuda=" + str(cuda).lower())
print("torch_cuda_version=" + str(torch.version.cuda))
if cuda:
    print("gpu=" + torch.cuda.get_device_name(0))
    print("gpu_memory_gib=%.1f" % (torch.cuda.get_device_properties(0).total_memory / 2**30))
PY
if captured "$ENV_FILE" "$(limit 90)" "$PYTHON" "$SCRATCH/environment.py"; then
  grep -E '^[a-z_]+=' "$ENV_FILE" > "$ENV_FILE.keys"
  mv "$ENV_FILE.keys" "$ENV_FILE"
  TORCH_LIB="$(sed -n 's/^torch_lib=//p' "$ENV_FILE")"
  grep -q '^torch_cuda=true$' "$ENV_FILE" && GPU=yes
  torch_version="$(sed -n 's/^torch=//p' "$ENV_FILE")"
  env_status=passed
  env_detail="torch $torch_version, libraries in $TORCH_LIB"
  case "$torch_version" in
    2.11.*) ;;
    *)
      # The binaries are built against libtorch 2.11 (tch 0.24); another version's libraries
      # do not have the same symbols.
      env_status=failed
      env_detail="torch $torch_version in $TORCH_LIB, but the kit needs torch 2.11 (set TORCHLIGHT_KIT_PYTHON)"
      ;;
  esac
else
  : > "$ENV_FILE"
  env_status=failed
  env_detail="$PYTHON with torch not found: the binaries have no libtorch to load (set TORCHLIGHT_KIT_PYTHON)"
fi
if command -v nvidia-smi > /dev/null 2>&1; then
  smi="$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -n 1)"
  if [ -n "$smi" ]; then
    echo "nvidia_smi=$smi" >> "$ENV_FILE"
    GPU=yes
  fi
fi
glibc="$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{print $2}')"
{
  echo "gpu_present=$GPU"
  echo "glibc=${glibc:-unknown}"
  echo "cpu_cores=$(nproc)"
  echo "kernel=$(uname -r)"
} >> "$ENV_FILE"
if [ -n "$glibc" ] && [ "$(printf '%s\n%s\n' "$KIT_GLIBC_REQUIRED" "$glibc" | sort -V | head -n 1)" != "$KIT_GLIBC_REQUIRED" ]; then
  env_status=failed
  env_detail="the kit's binaries need glibc >= $KIT_GLIBC_REQUIRED, this machine has $glibc"
fi
record environment host "$env_status" "$(elapsed "$t0")" parts/environment.env "$env_detail; GPU: $GPU"
[ -n "$TORCH_LIB" ] && export LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- device ------------------------------------------------------------------------------
t0=$(date +%s)
t=$(limit 60)
captured "$OUT/parts/device.log" "$t" "$KIT/bin/torchlight-bench" gpu probe --out "$OUT/parts/device.json"
rc=$?
if (( rc != 0 )) || [ ! -s "$OUT/parts/device.json" ]; then
  # A loader error (a missing library, a glibc or libstdc++ too old) is the output's last line.
  record device host failed "$(elapsed "$t0")" - \
    "torchlight-bench gpu probe: $(why "$rc" "$t"): $(tail -n 1 "$OUT/parts/device.log")"
else
  seen_lib="$(sed -n 's/.*"libtorch_lib_dir": "\(.*\)",*$/\1/p' "$OUT/parts/device.json")"
  available=no
  grep -q '"available": true' "$OUT/parts/device.json" && available=yes
  if [ -n "$TORCH_LIB" ] && [ "$(realpath "$seen_lib" 2> /dev/null)" != "$(realpath "$TORCH_LIB")" ]; then
    record device host failed "$(elapsed "$t0")" parts/device.json \
      "the binaries loaded libtorch from $seen_lib, not from $TORCH_LIB (LD_LIBRARY_PATH lost to an rpath?)"
  elif [ "$GPU" = yes ] && [ "$available" = no ]; then
    record device host failed "$(elapsed "$t0")" parts/device.json \
      "the machine has a GPU but cuda_status() reports no CUDA (the dlopen of libtorch_cuda.so failed?)"
  else
    record device host passed "$(elapsed "$t0")" parts/device.json "CUDA available: $available; libtorch from $seen_lib"
  fi
fi

# --- tests:<crate> -----------------------------------------------------------------------
for crate in $KIT_TESTS; do
  t0=$(date +%s)
  bin="$KIT/tests/$crate"
  data="parts/tests-$crate.json"
  listed="$(cd "$SCRATCH" && timeout 60 "$bin" --list cuda:: 2>> "$LOG" | grep -c ': test$')"
  if [ "${listed:-0}" -eq 0 ]; then
    record "tests:$crate" cuda failed "$(elapsed "$t0")" - "the test binary lists no cuda:: tests (or does not start; see the log)"
    continue
  fi
  if [ "$GPU" = no ]; then
    printf '{"listed": %d}\n' "$listed" > "$OUT/$data"
    record "tests:$crate" cuda skipped "$(elapsed "$t0")" "$data" "skipped: no CUDA ($listed cuda tests listed)"
    continue
  fi
  t=$(limit 150)
  out="$OUT/parts/tests-$crate.log"
  (cd "$SCRATCH" && captured "$out" "$t" "$bin" cuda:: --color never)
  rc=$?
  result="$(grep -E '^test result: ' "$out" | tail -n 1)"
  passed="$(echo "$result" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')"
  failed="$(echo "$result" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')"
  failures="$(awk '/^test cuda::.* \.\.\. FAILED$/ {print $2}' "$out" | sort -u | tr '\n' ' ')"
  list=""
  for f in $failures; do list="$list${list:+, }$(json_str "$f")"; done
  printf '{"listed": %d, "passed": %d, "failed": %d, "failures": [%s]}\n' \
    "$listed" "${passed:-0}" "${failed:-0}" "$list" > "$OUT/$data"
  if (( rc == 0 )); then
    record "tests:$crate" cuda passed "$(elapsed "$t0")" "$data" "${passed:-0} of $listed cuda tests passed"
  else
    record "tests:$crate" cuda failed "$(elapsed "$t0")" "$data" "$(why "$rc" "$t"); failed: ${failures:-see the log}"
  fi
done

# --- train -------------------------------------------------------------------------------
# train_cmd DEVICE EPOCHS [--amp]: a short run on the kit's tiny ImageFolder, into the array CMD.
train_cmd() {
  CMD=("$KIT/bin/torchlight" train --data "$KIT/data/target" --model resnet18 --image-size 64
    --batch-size 16 --epochs "$2" --workers 4 --device "$1" --out "$SCRATCH/runs-$1" "${@:3}")
}
# keep_run DEVICE: copies the run's small files into OUT/train; prints the run folder.
keep_run() {
  local summary run meta
  summary="$(find "$SCRATCH/runs-$1" -name summary.json 2> /dev/null | head -n 1)"
  [ -n "$summary" ] || return 1
  run="$(dirname "$summary")"
  cp "$summary" "$OUT/train/summary.json"
  for f in metrics.csv config.toml; do [ -f "$run/$f" ] && cp "$run/$f" "$OUT/train/"; done
  meta="$(find "$run" -path '*last*' -name meta.json 2> /dev/null | head -n 1)"
  [ -n "$meta" ] && cp "$meta" "$OUT/train/meta.json"
  echo "$run"
}
t0=$(date +%s)
if [ "$GPU" = yes ]; then
  t=$(limit 150)
  train_cmd cuda 2 --amp
  captured "$OUT/parts/train.log" "$t" "${CMD[@]}"
  rc=$?
  if (( rc == 0 )) && keep_run cuda > /dev/null; then
    scale="$(sed -n 's/.*"scale": \([0-9.e+-]*\).*/\1/p' "$OUT/train/meta.json" 2> /dev/null | head -n 1)"
    record train cuda passed "$(elapsed "$t0")" train "2 epochs, fp16 + GradScaler (scale ${scale:-?} at the end)"
  else
    record train cuda failed "$(elapsed "$t0")" - \
      "torchlight train --device cuda --amp: $(why "$rc" "$t"): $(tail -n 1 "$OUT/parts/train.log")"
  fi
else
  record train cuda skipped 0 - "skipped: no CUDA"
  t0=$(date +%s)
  t=$(limit 240)
  train_cmd cpu 1
  captured "$OUT/parts/train.log" "$t" "${CMD[@]}"
  rc=$?
  if (( rc == 0 )) && keep_run cpu > /dev/null; then
    record train-cpu-stand-in host passed "$(elapsed "$t0")" train "the train part's command on the CPU, 1 epoch, no --amp"
  else
    record train-cpu-stand-in host failed "$(elapsed "$t0")" - \
      "torchlight train --device cpu: $(why "$rc" "$t"): $(tail -n 1 "$OUT/parts/train.log")"
  fi
fi

# --- train-text --------------------------------------------------------------------------
# text_corpus DIR: DIR/train/<class>/<i>.txt, 40 documents per class of 12 to 30 filler words
# with the class's keyword three times (the CLI test's corpus, larger).
text_corpus() {
  local c class word i j n words
  for c in 0 1; do
    class=$([ "$c" = 0 ] && echo pos || echo neg)
    word=$([ "$c" = 0 ] && echo good || echo bad)
    mkdir -p "$1/train/$class"
    for i in $(seq 0 39); do
      n=$(( 12 + (i * 7 + c) % 19 ))
      words=""
      for j in $(seq 1 "$n"); do words="$words w$(( (i * 7 + j * 3 + c) % 23 ))"; done
      echo "$word$words $word and $word" > "$1/train/$class/$i.txt"
    done
  done
}
t0=$(date +%s)
if [ "$GPU" = yes ]; then
  t=$(limit 90)
  text_corpus "$SCRATCH/text"
  captured "$OUT/parts/train-text.log" "$t" "$KIT/bin/torchlight" train --task text --data "$SCRATCH/text" \
    --model bilstm --epochs 3 --batch-size 16 --workers 2 --device cuda --amp --out "$SCRATCH/runs-text" \
    --set text.max_len=64
  rc=$?
  summary="$(find "$SCRATCH/runs-text" -name summary.json 2> /dev/null | head -n 1)"
  if (( rc == 0 )) && [ -n "$summary" ]; then
    cp "$summary" "$OUT/train/summary-text.json"
    record train-text cuda passed "$(elapsed "$t0")" - \
      "bilstm, 3 epochs, fp16 + GradScaler: $(grep -E 'best|val_acc' "$OUT/parts/train-text.log" | tail -n 1)"
  else
    record train-text cuda failed "$(elapsed "$t0")" - \
      "torchlight train --task text --device cuda --amp: $(why "$rc" "$t"): $(tail -n 1 "$OUT/parts/train-text.log")"
  fi
else
  record train-text cuda skipped 0 - "skipped: no CUDA"
fi

# --- bench, bench-pytorch ----------------------------------------------------------------
# bench_part NAME DATA RC SECONDS: the part's status from the command's status and its rows.
bench_part() {
  local name=$1 data=$2 rc=$3 t=$4 t0=$5 bad
  if (( rc != 0 )) || [ ! -s "$OUT/$data" ]; then
    record "$name" cuda failed "$(elapsed "$t0")" - "$(why "$rc" "$t")"
  elif grep -q '"status": "failed"' "$OUT/$data"; then
    bad="$(grep -B1 '"status": "failed"' "$OUT/$data" | sed -n 's/.*"name": "\(.*\)",/\1/p' | tr '\n' ' ')"
    record "$name" cuda failed "$(elapsed "$t0")" "$data" "failed rows: $bad"
  elif [ "$GPU" = no ]; then
    record "$name" cuda skipped "$(elapsed "$t0")" "$data" "skipped: no CUDA"
  else
    record "$name" cuda passed "$(elapsed "$t0")" "$data" "every row measured"
  fi
}
require=no
[ "$GPU" = yes ] && require=yes
t0=$(date +%s)
t=$(limit 180)
(cd "$SCRATCH" && logged "$t" "$KIT/bin/torchlight-bench" gpu run --data "$SCRATCH/photos" \
  --out "$OUT/parts/bench-torchlight.json" --require-cuda "$require")
bench_part bench parts/bench-torchlight.json $? "$t" "$t0"
t0=$(date +%s)
t=$(limit 150)
(cd "$SCRATCH" && logged "$t" "$PYTHON" "$KIT/pytorch_gpu_bench.py" \
  --out "$OUT/parts/bench-pytorch.json" --require-cuda "$require")
bench_part bench-pytorch parts/bench-pytorch.json $? "$t" "$t0"

# --- report ------------------------------------------------------------------------------
if ! timeout 60 "$KIT/bin/torchlight-bench" gpu summarize --out-dir "$OUT" --out "$OUT/gpu-report.json" 2>&1 | tee -a "$LOG"; then
  say "torchlight-bench gpu summarize failed; writing the plain report"
  {
    printf '{\n  "format": 1,\n  "summary_error": "torchlight-bench gpu summarize failed: see gpu-kit.log",\n'
    printf '  "cuda": %s,\n  "parts": [\n' "$([ "$GPU" = yes ] && echo true || echo false)"
    sep=""
    while IFS=$'\t' read -r name kind status seconds _data detail; do
      printf '%s    {"name": %s, "kind": %s, "status": %s, "seconds": %s, "detail": %s}' "$sep" \
        "$(json_str "$name")" "$(json_str "$kind")" "$(json_str "$status")" "${seconds:-0}" "$(json_str "$detail")"
      sep=$',\n'
    done < "$PARTS"
    printf '\n  ]\n}\n'
  } > "$OUT/gpu-report.json"
fi
say "GPU proof kit finished in $(elapsed "$START") s: $OUT/gpu-report.json, $LOG"
! cut -f3 "$PARTS" | grep -qx failed
