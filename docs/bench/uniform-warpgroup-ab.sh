# Run on the device machine from the repository root (carry .whl, made by ../shared/device/prepare):
#   bash docs/bench/uniform-warpgroup-ab.sh   (as run on 2026-12-07, session 71: h100-uniform-warpgroup-ab-2026-12-07.log;
#   its last two steps looked for the kernel caches under /tmp/home-a and /tmp/home-b, where ab-tree.sh
#   names them after the folders, so they read nothing)
. docs/bench/ab-tree.sh docs/bench/uniform-warpgroup-index-2026-12-07.patch
(cd $A && EMMY_HOME=/tmp/home-a PYTHONPATH=/tmp/site:$A timeout 200 python3 -m pytest -q -p no:cacheprovider test/pytest/test_nvcc.py -k "accumulator or tensor_core" > /tmp/logs/nvcc-a.log 2>&1; echo "rc=$?" >> /tmp/logs/nvcc-a.log) &
(cd $B && EMMY_HOME=/tmp/home-b PYTHONPATH=/tmp/site:$B timeout 200 python3 -m pytest -q -p no:cacheprovider test/pytest/test_nvcc.py -k "accumulator or tensor_core" > /tmp/logs/nvcc-b.log 2>&1; echo "rc=$?" >> /tmp/logs/nvcc-b.log) &
wait
tail -3 /tmp/logs/nvcc-a.log /tmp/logs/nvcc-b.log
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
step proj-a1 90 $A $PROJ
step proj-b1 90 $B $PROJ
step proj-a2 60 $A $PROJ
step proj-b2 60 $B $PROJ
step hazards-ab 40 $A sh -c "python3 tools/kernel_checks/wgmma_hazards.py /tmp/home-a /tmp/home-b | tail -15"
step gputests-b 150 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches or slices_cols or as_exact" -x
step r2ur 40 $A sh -c 'for h in /tmp/home-a /tmp/home-b; do for c in $(ls -S $h/*/*.cubin $h/*.cubin 2>/dev/null | head -40); do cuobjdump -sass $c 2>/dev/null | awk -v h=$h -v c=$(basename $c) "/Function/{f=\$3} /R2UR/{r[f]++} /HGMMA/{g[f]++} END{for (k in g) print h, c, k, \"HGMMA\", g[k], \"R2UR\", r[k]+0}"; done; done'
