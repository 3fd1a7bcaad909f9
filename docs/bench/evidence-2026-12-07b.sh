# Session 73, call 1: the Qwen3 layer and attention cases against torch.compile and cuDNN on
# whatever card came (the issues' targets are stated for the H200), the rules' attention (persistent
# blocks from three waves whose K and V fit in L2, since session 72) beside the grid pinned.
# Logs in $OUT/pack.tgz; copy nothing else to $OUT (8 files come back at most).
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD EMMY_HOME=/tmp/home
mkdir -p /tmp/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
pack() { (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
step() { local name=$1 limit=$2; shift 2; local left=$((${DEADLINE:-585} - $(date +%s) + T0)); [ $left -lt 30 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; timeout $limit "$@" > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; tail -n 3 /tmp/logs/$name.log; pack; }
step layer 200 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step attention 240 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --variant grid=attention.schedule=grid
