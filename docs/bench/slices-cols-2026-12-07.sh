# Run on the device machine from the repository root (carry .whl; EMMY_HOME is a fresh kernel cache there;
# its first run gave wrong cols results, fixed by emmy::wgmma::settle: h100-slices-cols-settled-2026-12-07.log):
#   DEADLINE=560 bash docs/bench/slices-cols-2026-12-07.sh   (logs come back in $OUT/pack.tgz)
# slices=cols on the GPU: correctness (pairs of blocks along n included), then the o and down
# projections against cuBLAS with cols tiles, alone and in pairs sharing A (cuBLAS's 2x1), q/k/v
# and gate/up with cols tiles (cuBLAS's 256 x 128: 256 features by 128 tokens), then 512 tokens
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH EMMY_HOME=${EMMY_HOME:-/tmp/emmy-home}
mkdir -p /tmp/logs
step() { local name=$1 limit=$2; shift 2; local left=$((${DEADLINE:-560} - $(date +%s) + T0)); [ $left -lt 15 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; timeout $limit "$@" > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; tail -4 /tmp/logs/$name.log
  (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
step cols-tests 150 python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k slices_cols
O=o_proj_residual; D=down_proj_residual
t() { local s=""; for k in $O $D; do for x in "$@"; do s="$s,$k.$x"; done; done; echo "${s#,}"; }
C="slices=cols warps=8 split_k=1 copy=tma workers=wgmma_ws"
step proj-3000 170 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 3000,4096 --contenders emmy,cublas --profile --json /tmp/logs/proj-3000.json \
  --variant "c192=$(t $C block_m=192 block_n=128 stages=5 schedule=grid)" \
  --variant "c192x2=$(t $C block_m=192 block_n=128 stages=5 schedule=grid cluster=2 group_m=1)" \
  --variant "c256x2=$(t $C block_m=256 block_n=128 stages=4 schedule=grid cluster=2 group_m=1)" \
  --variant "c192p=$(t $C block_m=192 block_n=128 stages=5 schedule=persistent)" \
  --variant "r192=$(t block_m=192 block_n=128 warps=12 split_k=1 stages=5 schedule=grid copy=tma workers=wgmma_ws)"
Q=rms_norm_qkv_proj; G=rms_norm_gate_up_proj_silu
u() { local ks=$1; shift; local s=""; for k in $ks; do for x in "$@"; do s="$s,$k.$x"; done; done; echo "${s#,}"; }
F="$C fusion=split"
step proj-qg 150 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 3000,4096 --contenders emmy,cublas --profile --json /tmp/logs/proj-qg.json \
  --variant "q128=$(u "$Q $G" $F block_m=128 block_n=128 stages=6 schedule=grid)" \
  --variant "q128p=$(u "$Q $G" $F block_m=128 block_n=128 stages=6 schedule=persistent)" \
  --variant "q256=$(u $Q $F block_m=256 block_n=128 stages=4 schedule=grid)"
step proj-512 100 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512 --contenders emmy,cublas --profile --json /tmp/logs/proj-512.json \
  --variant "c64=$(t slices=cols block_m=64 block_n=64 warps=4 split_k=1 stages=8 schedule=grid copy=tma workers=wgmma_ws)" \
  --variant "c64x2=$(t slices=cols block_m=64 block_n=64 warps=4 split_k=1 stages=8 schedule=grid copy=tma workers=wgmma_ws cluster=2 group_m=1)" \
  --variant "c64x2d=$(t slices=cols block_m=64 block_n=64 warps=4 split_k=1 stages=12 schedule=grid copy=tma workers=wgmma_ws cluster=2 group_m=1)"
