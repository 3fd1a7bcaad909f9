# Run on the device machine from the repository root (carry .whl):
#   DEADLINE=200 bash docs/bench/slices-cols-bisect-2026-12-07.sh   (logs come back in $OUT/pack.tgz)
# (It ran while legality refused slices = cols, with the refusal lifted in the working tree; the
# kernels it measured were wrong for want of emmy::wgmma::settle: h100-slices-cols-cause-2026-12-07.log.)
# Which slices = cols o and down kernels are wrong: the bench checks each kernel against float32
# before timing it and prints "FAILED: relative error ..." for a wrong one. At 1100 tokens: v1
# 128 x 128 of two warpgroups over 32 k-steps (the failing shape), v2 the same over 16 k-steps of
# 128, v3 one warpgroup, v4 a 64-token wgmma N, v5 cp.async copies, v6 k split in two, v7
# persistent, v8 192 x 128 four stages deep, v9 64 x 64 of one warpgroup; then 192 x 128 and
# 128 x 128 at 3072 and 1024 tokens (no partial tile). r1 is the control: the same 128 x 128 tile
# with slices = rows (the same m64n128k16 wgmmas with the operands swapped).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH EMMY_HOME=${EMMY_HOME:-/tmp/emmy-home}
mkdir -p /tmp/logs
step() { local name=$1 limit=$2; shift 2; local left=$((${DEADLINE:-200} - $(date +%s) + T0)); [ $left -lt 15 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; timeout $limit "$@" > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; grep -o 'emmy:[a-z0-9]* *\(FAILED: relative error [0-9.e+-]*\|[0-9.]* us (err [0-9.e+-]*\)' /tmp/logs/$name.log | sed 's/  */ /g' | paste -sd';' ; tail -1 /tmp/logs/$name.log
  (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
O=o_proj_residual; D=down_proj_residual
t() { local s=""; for k in $O $D; do for x in "$@"; do s="$s,$k.$x"; done; done; echo "${s#,}"; }
C="slices=cols workers=wgmma_ws schedule=grid split_k=1"
step bisect-1100 90 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 1100 --contenders emmy --json /tmp/logs/b1100.json \
  --variant "r1=$(t slices=rows workers=wgmma_ws schedule=grid split_k=1 block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=tma)" \
  --variant "v1=$(t $C block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=tma)" \
  --variant "v2=$(t $C block_m=128 block_n=128 warps=8 block_k=128 stages=3 copy=tma)" \
  --variant "v3=$(t $C block_m=128 block_n=64 warps=4 block_k=64 stages=6 copy=tma)" \
  --variant "v4=$(t $C block_m=64 block_n=128 warps=8 block_k=64 stages=6 copy=tma)" \
  --variant "v5=$(t $C block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=cp_async)" \
  --variant "v6=$(t slices=cols workers=wgmma_ws schedule=grid block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=tma split_k=2 combine=kernel)" \
  --variant "v7=$(t slices=cols workers=wgmma_ws schedule=persistent split_k=1 block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=tma)" \
  --variant "v8=$(t $C block_m=192 block_n=128 warps=8 block_k=64 stages=4 copy=tma)" \
  --variant "v9=$(t $C block_m=64 block_n=64 warps=4 block_k=64 stages=8 copy=tma)"
step bisect-3072 60 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 3072,1024 --contenders emmy --json /tmp/logs/b3072.json \
  --variant "c192=$(t $C block_m=192 block_n=128 warps=8 block_k=64 stages=5 copy=tma)" \
  --variant "v1=$(t $C block_m=128 block_n=128 warps=8 block_k=64 stages=4 copy=tma)"
