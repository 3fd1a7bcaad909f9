# Sourced by the A/B scripts beside it, from the repository root on the device machine (carry .whl):
#   . docs/bench/ab-tree.sh docs/bench/SOME.patch
# A = this tree, B = a copy of it at /tmp/b with the patch applied (stops if it does not apply).
# Defines `step NAME LIMIT DIR COMMAND...`: COMMAND run in DIR with that tree's own kernel cache
# (/tmp/home-<dir>), within LIMIT seconds and what is left of DEADLINE (590 by default) since this
# was sourced; its output in /tmp/logs/NAME.log, all logs packed into $OUT/pack.tgz after each step.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PATH=/tmp/site/bin:$PATH
mkdir -p /tmp/logs
A=$PWD; B=/tmp/b
rm -rf $B && mkdir -p $B && cp -r emmy tools test lit.cfg.py pyproject.toml golden $B/
(cd $B && { git apply $A/$1 2>/dev/null || patch -p1 < $A/$1; }) > /tmp/logs/apply.log 2>&1 || { echo "patch failed"; exit 1; }
step() { local name=$1 limit=$2 dir=$3; shift 3; local left=$((${DEADLINE:-590} - $(date +%s) + T0)); [ $left -lt 30 ] && return; [ $limit -gt $left ] && limit=$left
  echo "== $name ($(date +%T), limit $limit)"; (cd $dir && EMMY_HOME=/tmp/home-$(basename $dir) PYTHONPATH=/tmp/site:$dir timeout $limit "$@") > /tmp/logs/$name.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/$name.log; tail -2 /tmp/logs/$name.log; (cd /tmp && tar czf /tmp/pack.tgz logs && cp /tmp/pack.tgz $OUT/pack.tgz.tmp && mv $OUT/pack.tgz.tmp $OUT/pack.tgz); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee /tmp/logs/card.txt
