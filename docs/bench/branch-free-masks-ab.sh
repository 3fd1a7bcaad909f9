# Run on the device machine from the repository root (carry .whl and a kernel cache prebuilt on the
# CPU machine: EMMY_HOME=$PWD/.device/s71/home2 python3 tools/prebuild_gpu_tests.py --target sm_90a):
#   H=.device/s71/home2 bash docs/bench/branch-free-masks-ab.sh
# Masked loads and stores without branches (emmy::load_or, emmy::store_if) in this tree (A) against
# the tree before them (B: this tree with branch-free-masks-before-2026-12-07.patch applied). The
# GPU suite on A, the wgmma hazard checker over its kernels, then the projections alone at 512, 3000
# and 4096 tokens A B A B, and at 3000 three more rounds A B. As run on 2026-12-07 (session 71, two
# calls; h100-branch-free-masks-2026-12-07.log).
. docs/bench/ab-tree.sh docs/bench/branch-free-masks-before-2026-12-07.patch
H=$A/${H:-.device/s71/home2}
(cd $A && PYTHONPATH=/tmp/site:$A timeout 150 python3 tools/kernel_checks/wgmma_hazards.py $H > /tmp/logs/hazards.log 2>&1; echo "rc=$?" >> /tmp/logs/hazards.log) &
N=""; python3 -c "import xdist" 2>/dev/null && N="-n 10"
step gpu 240 $A env EMMY_HOME=$H python3 -m pytest -q -p no:cacheprovider $N -m gpu test/pytest
wait; tail -n 3 /tmp/logs/hazards.log
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
step proj-a1 90 $A $PROJ
step proj-b1 90 $B $PROJ
step proj-a2 60 $A $PROJ
step proj-b2 60 $B $PROJ
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 3000 --contenders emmy,cublas"
for r in 1 2 3; do step p3000-a$r 40 $A $PROJ; step p3000-b$r 40 $B $PROJ; done
