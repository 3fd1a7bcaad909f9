# Run on the device machine from the repository root (carry .whl, made by ../shared/device/prepare):
#   bash docs/bench/uniform-warpgroup-ab.sh      (about 6 minutes; logs come back in $OUT/pack.tgz)
# The patch uniform-warpgroup-index-2026-12-07.patch (the contraction's warpgroup index broadcast
# from lane 0, so the wgmma descriptors computed from it can stay in uniform registers: the k loop's
# SASS moves each descriptor into a uniform register, R2UR, before every HGMMA) against this tree:
# the wgmma SASS checked for hazards and the contraction GPU cases on the patched tree first, then
# the projections alone against cuBLAS at 512, 3000 and 4096 tokens, A B A B, each tree in its own
# process with its own kernel cache.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PATH=/tmp/site/bin:$PATH
mkdir -p /tmp/logs
A=$PWD; B=/tmp/b
rm -rf $B && mkdir -p $B && cp -r emmy tools test lit.cfg.py pyproject.toml golden $B/
(cd $B && { git apply $A/docs/bench/uniform-warpgroup-index-2026-12-07.patch 2>/dev/null ||
            patch -p1 < $A/docs/bench/uniform-warpgroup-index-2026-12-07.patch; }) > /tmp/logs/apply.log 2>&1 || { echo "patch failed"; exit 1; }
step() { local name=$1 limit=$2 dir=$3; shift 3; local left=$((${DEADLINE:-590} - $(date +%s) + T0)); [ $left -lt 30 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; (cd $dir && EMMY_HOME=/tmp/home-$(basename $dir) PYTHONPATH=/tmp/site:$dir timeout $limit "$@") > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; tail -2 /tmp/logs/$name.log; (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
step nvcc-b 120 $B python3 -m pytest -q -p no:cacheprovider test/pytest/test_nvcc.py -k "accumulator or tensor_core"
step gputests-b 150 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches or slices_cols or as_exact" -x
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
step proj-a1 80 $A $PROJ
step proj-b1 80 $B $PROJ
step proj-a2 60 $A $PROJ
step proj-b2 60 $B $PROJ
