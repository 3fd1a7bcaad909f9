# Builds, on a machine without a GPU, every kernel `h200-evidence-2026-12-07.sh` runs, into
# .emmy-cache (carry it with .whl), so the device call spends no time in nvcc. Run it from the
# repository root after any change to Emmy's device library or lowering (a kernel's cache key is a
# hash of its source and of the library).
set -eu
export EMMY_HOME=$PWD/.emmy-cache
PY=${PYTHON:-python3}
eval "$(grep '^PP=' docs/bench/h200-evidence-2026-12-07.sh)"
$PY tools/prebuild_gpu_tests.py --target sm_90a --only attention --match epilogue
$PY tools/prebuild_gpu_tests.py --target sm_90a --only gpu --match sliding_window --match other_family
$PY tools/bench.py --build-only --target sm_90a --cases layer --layer-sizes 512,3000,4096 --contenders emmy \
  --variant qk=attention.fusion=epilogue --variant qkpp=attention.fusion=epilogue,$PP
$PY tools/bench.py --build-only --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 \
  --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
$PY tools/bench.py --build-only --target sm_90a --cases layer,projections --layer-sizes 32,512,3000,4096 \
  --contenders emmy,eager,compile,cublas
$PY tools/bench.py --build-only --target sm_90a --cases attention --attention-sizes 512,1000,2000,3000 \
  --attention-heads 4/4,8/8,2/2 --contenders emmy,sdpa-cudnn --variant s1=attention.split_kv=1
$PY tools/bench.py --build-only --target sm_90a --cases layer --layer-sizes 768,6000 --contenders emmy,emmy-prior,compile
