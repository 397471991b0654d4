#!/usr/bin/env bash
# Issue 22's checks on a machine with an NVIDIA GPU, in one go, each step under its own time limit:
#   facts   the GPU, driver, CUDA and package versions
#   tests   the tests marked gpu (pytest -m gpu)
#   bench   python -m benchmarks gpu (kiln's CUDA kernels against PyTorch, TF32 off)
#   models  python -m benchmarks gpu_models (relay.build for cuda against PyTorch eager)
#   tuning  python -m benchmarks gpu_tuning (AutoTVM's CUDA templates: fallback vs tuned)
#   sweep   python -m benchmarks gpu_sweep (candidate schedules of SGEMM and depthwise)
#   conv    python -m benchmarks gpu_conv (ResNet-18's conv layers: direct vs implicit GEMM)
#   ansor   python -m benchmarks gpu_autoschedule (auto_scheduler's GPU search vs hand schedules)
#   report  kiln report assignment for the GPU operators at the course's sizes
#   recheck the tests that failed on the first GPU machine (GCC 13, onnxruntime 1.30, ASan)
#   suite   the whole suite without the gpu tests, on most of the machine's cores
# Usage: bash scripts/gpu_check.sh OUTDIR [STEP ...]     (default: every step)
# Step limits in seconds: TESTS_S, BENCH_S, MODELS_S, TUNING_S, SWEEP_S, CONV_S, REPORT_S,
# RECHECK_S, SUITE_S, ANSOR_S; TUNING_ARGS: extra arguments of the tuning step; WORKERS: pytest
# worker processes (default: the cores less two).
# Uses the python3 on PATH (or $PY) with kiln from this checkout on PYTHONPATH, so it runs on a
# machine that has numpy, pytest, cuda-bindings and PyTorch but no network to install kiln.
# Wheels in .whl/ (ignored by git) are installed first into a private site folder: fetch the
# ones such a machine lacks beforehand, e.g. xgboost (the auto_scheduler's and AutoTVM's learned
# cost model, 6 MB as xgboost-cpu) with
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl xgboost-cpu
# and carry .whl with the call.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-results/gpu}
shift || true
steps=${*:-facts tests bench models tuning sweep suite}
mkdir -p "$out"
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-gpu-cache}
if compgen -G ".whl/*.whl" >/dev/null; then
  site=/tmp/kiln-gpu-site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:$site"
fi
cores=$(nproc)
workers=${WORKERS:-$(( cores > 4 ? cores - 2 : 2 ))}
xdist=()
if "$PY" -c "import xdist" 2>/dev/null; then xdist=(-n "$workers" --dist worksteal); fi

step() {  # step NAME SECONDS COMMAND...: run one step, its output in OUTDIR/NAME.log
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  tail -n 25 "$out/$name.log"
}

for s in $steps; do
  case $s in
    facts) step facts 60 bash -c "nvidia-smi; nvcc --version; $PY -V; \
      $PY -m pip list 2>/dev/null | grep -iE 'torch|cuda|nvidia|numpy|onnx|pytest|hypothesis'; \
      gcc --version | head -1; lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-300; \
      $PY -c 'import kiln; from kiln.runtime import cuda_driver as c; \
print(c.nvrtc_version(), c.device_arch(0), c.device_attributes(0))'" ;;
    tests) step tests "${TESTS_S:-120}" "$PY" -m pytest -m gpu -p no:cacheprovider -v --tb=short \
      -rfEs "${xdist[@]}" ;;
    bench) step bench "${BENCH_S:-180}" "$PY" -m benchmarks gpu --out "$out" ;;
    models) step models "${MODELS_S:-180}" "$PY" -m benchmarks gpu_models --out "$out" ;;
    tuning) step tuning "${TUNING_S:-180}" "$PY" -m benchmarks.gpu_tuning --out "$out" \
      ${TUNING_ARGS:-} ;;
    ansor) step ansor "${ANSOR_S:-180}" "$PY" -m benchmarks gpu_autoschedule --out "$out" ;;
    conv) step conv "${CONV_S:-180}" "$PY" -m benchmarks gpu_conv --out "$out" ;;
    report) step report "${REPORT_S:-180}" "$PY" -m kiln.cli report assignment \
      --operator conv1d_gpu --operator gemm_gpu --operator dwsp_conv2d_gpu --out "$out/report" ;;
    sweep) step sweep "${SWEEP_S:-120}" "$PY" -m benchmarks gpu_sweep --out "$out" ;;
    recheck) step recheck "${RECHECK_S:-120}" "$PY" -m pytest -p no:cacheprovider -q -rfE \
      "${xdist[@]}" tests/runtime/test_compiler_workarounds.py tests/relay/test_onnx_ops.py \
      tests/autotvm/test_relay_integration.py "tests/reliability/test_sanitize.py" ;;
    suite) step suite "${SUITE_S:-240}" "$PY" -m pytest -m "not gpu" -p no:cacheprovider -v \
      --tb=short -rfE \
      "${xdist[@]}" ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
