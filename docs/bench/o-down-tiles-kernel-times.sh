# Run on the device machine from the repository root (carry .whl, made by ../shared/device/prepare):
#   bash docs/bench/o-down-tiles-kernel-times.sh      (about 4 minutes; logs come back in $OUT/pack.tgz)
# 1. every projection of the Qwen3 layer at 512, 3000 and 4096 tokens with --profile: the time inside the kernels
#    beside the replay's (is Emmy's 512-token gap to cuBLAS between launches, as Nsight Compute suggested?);
# 2. cuBLAS's tile for o and down at 3000 and 4096 tokens. Its kernel (nvjet_sm90_tst_128x192_64x5_2x1) is named
#    in cuBLAS's column-major terms: 128 output features by 192 tokens, 128 blocks at 3000 tokens, which in Emmy's
#    terms is block_m = 192 (tokens, three 64-row warpgroup slices, warps = 12) by block_n = 128, 5 deep (t192m,
#    and persistent: t192mp). Also Emmy's 128 x 192 (the transposed tile: 144 blocks at 3000 tokens) under its
#    schedules: grid 5 deep, persistent, persistent in pingpong, pairs of blocks.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
mkdir -p /tmp/logs
step() { local name=$1 limit=$2; shift 2; echo "== $name ($(date +%T))"; timeout $limit "$@" > /tmp/logs/$name.log 2>&1; echo "rc=$?" >> /tmp/logs/$name.log; tail -2 /tmp/logs/$name.log; (cd /tmp && tar czf $OUT/pack.tgz logs); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
O=o_proj_residual; D=down_proj_residual
t() { local s=""; for k in $O $D; do for x in "$@"; do s="$s,$k.$x"; done; done; echo "${s#,}"; }
step proj 150 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 \
  --contenders emmy,cublas,compile --profile --json /tmp/logs/proj.json
step tiles 200 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 3000,4096 --contenders emmy,cublas --profile \
  --variant "t192m=$(t block_m=192 block_n=128 warps=12 split_k=1 stages=5)" \
  --variant "t192mp=$(t block_m=192 block_n=128 warps=12 split_k=1 schedule=persistent)" \
  --variant "t192=$(t block_m=128 block_n=192 warps=8 split_k=1 stages=5)" \
  --variant "t192p=$(t block_m=128 block_n=192 warps=8 split_k=1 schedule=persistent)" \
  --variant "t192pp=$(t block_m=128 block_n=192 warps=8 split_k=1 schedule=persistent epilogue=pingpong)" \
  --variant "t192c2=$(t block_m=128 block_n=192 warps=8 split_k=1 stages=5 cluster=2 group_m=2)"
