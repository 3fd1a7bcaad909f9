# Run on the device machine from the repository root (carry .whl, made by ../shared/device/prepare):
#   bash docs/bench/attention-row-sums-ab.sh      (about 8 minutes; logs come back in $OUT/pack.tgz)
# The patch attention-row-sums-by-wgmma-2026-12-06.patch (the warp-specialized attention's rows' sums
# of P from an m64n8k16 wgmma against a tile of ones, instead of an add per score in the softmax)
# against this tree: the attention GPU tests on the patched tree first, then attention alone,
# A B A B, each tree in its own process with its own kernel cache.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PATH=/tmp/site/bin:$PATH
mkdir -p /tmp/logs
A=$PWD; B=/tmp/b
rm -rf $B && mkdir -p $B && cp -r emmy tools test lit.cfg.py pyproject.toml golden $B/
(cd $B && { git apply $A/docs/bench/attention-row-sums-by-wgmma-2026-12-06.patch 2>/dev/null ||
            patch -p1 < $A/docs/bench/attention-row-sums-by-wgmma-2026-12-06.patch; }) > /tmp/logs/apply.log 2>&1 || { echo "patch failed"; exit 1; }
step() { local name=$1 limit=$2 dir=$3; shift 3; local left=$((${DEADLINE:-590} - $(date +%s) + T0)); [ $left -lt 30 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; (cd $dir && EMMY_HOME=/tmp/home-$(basename $dir) PYTHONPATH=/tmp/site:$dir timeout $limit "$@") > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; tail -2 /tmp/logs/$name.log; (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
ATT="python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 2048,4096,8192,16384 --attention-heads 16/8,32/8,32/8/64 --contenders emmy,sdpa-cudnn"
step gputests-b 150 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_attention_gpu.py -x
step att-a1 100 $A $ATT
step att-b1 100 $B $ATT
step att-a2 90 $A $ATT
step att-b2 90 $B $ATT
