# Builds, on a machine without a GPU, every kernel device-2026-12-08-s76.sh runs, into
# .emmy-cache (carry it with .whl). Run from the repository root after any change to the device
# library or the lowering (a kernel's cache key hashes its source and the library).
set -eu
export EMMY_HOME=$PWD/.emmy-cache
PY=${PYTHON:-python3}
$PY tools/bench.py --build-only --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 \
  --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
$PY tools/bench.py --build-only --target sm_90a --cases layer,projections --layer-sizes 32,512,3000,4096 \
  --contenders emmy,eager,compile,cublas
$PY tools/bench.py --build-only --target sm_90a --cases layer --layer-sizes 768,6000 --contenders emmy,emmy-prior,compile
$PY -c "import sys; sys.path.insert(0, 'test/pytest'); from pathlib import Path; from tiny_models import write_real_sized_model as w, write_windowed_model as ww; w(Path('/tmp/wm/m7w'), 'mistral-7b', sliding_window=4096); ww(Path('/tmp/wm/d256w'), 1024, 256); w(Path('/tmp/wm/llama1b'), 'llama-3.2-1b')"
$PY tools/prebuild_gpu_tests.py --target sm_90a --only gpu --match sliding_window --match other_family
$PY tools/bench.py --build-only --target sm_90a --cases attention --attention-sizes 1000 --attention-heads 16/8 --contenders emmy,sdpa-cudnn \
  --variant q64=attention.block_q=64 --variant sk2=attention.split_kv=2 --variant kv64=attention.block_kv=64 --variant mma=attention.workers=wgmma --variant pers=attention.schedule=persistent
$PY tools/bench.py --build-only --target sm_90a --cases layer --model /tmp/wm/m7w --layer-sizes 8192 --contenders emmy,compile
$PY tools/bench.py --build-only --target sm_90a --cases layer --model /tmp/wm/d256w --layer-sizes 4096 --contenders emmy,compile
$PY tools/bench.py --build-only --target sm_90a --cases layer --layer-sizes 1500,2500 --contenders emmy,compile
$PY tools/bench.py --build-only --target sm_90a --cases layer --model /tmp/wm/llama1b --layer-sizes 1100,2500 --contenders emmy,compile
