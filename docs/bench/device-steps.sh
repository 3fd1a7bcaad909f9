# What a device call's script does first (source it from the repository root): the carried
# wheels installed, a log folder with the card's name, and two helpers. `pack` puts every log into
# $OUT/pack.tgz (one file: $OUT brings back at most 8); `step NAME LIMIT CMD...` runs CMD under
# `timeout` into /tmp/logs/NAME.log, its exit status and the wall time so far appended, at most
# LIMIT seconds and never past DEADLINE (default 585) seconds from the start, then packs.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
pack() { (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
step() { local name=$1 limit=$2; shift 2; local left=$((${DEADLINE:-585} - $(date +%s) + T0)); [ $left -lt 30 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; timeout $limit "$@" > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; tail -n 3 /tmp/logs/$name.log; pack; }
