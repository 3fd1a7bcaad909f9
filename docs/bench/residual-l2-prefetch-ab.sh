# Run on the device machine from the repository root (carry .whl):
#   bash docs/bench/residual-l2-prefetch-ab.sh        (about 5 minutes; logs in $OUT/pack.tgz)
# The thirty-first session's residual prefetch (each consumer thread starts one of the tile's
# residual rows on its way into L2 with a bulk prefetch: residual-l2-prefetch-2026-12-07.patch,
# its commits 984599a and 0e32f20 brought onto this tree) against this tree, where the epilogue's
# residual loads are now all in flight at once (emmy::load_or). Reverted then because the serial
# loads gained little from L2; it may pay now that the epilogue waits once, on memory (6 MB at
# 3000 tokens, about 2 us of the o projection's 1.06x of cuBLAS). B prefetches two k-steps
# before the end of the k loop (as then), C eight (the rows have longer to arrive). The o and
# down projections at 512, 3000 (one wave) and 4096 tokens (where B's prefetch cost 6-23%
# before), A B C A B C, then the layer's GPU cases on the faster of B and C.
. docs/bench/ab-tree.sh docs/bench/residual-l2-prefetch-2026-12-07.patch
C=/tmp/c
rm -rf $C && mkdir -p $C && cp -r emmy tools test lit.cfg.py pyproject.toml golden $C/
sed 's/^+EPILOGUE_PREFETCH_STEPS = 2$/+EPILOGUE_PREFETCH_STEPS = 8/' docs/bench/residual-l2-prefetch-2026-12-07.patch > /tmp/pf8.patch
(cd $C && git apply /tmp/pf8.patch) > /tmp/logs/apply-c.log 2>&1 || { echo "patch C failed"; exit 1; }
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
step pf-a1 90 $A $PROJ
step pf-b1 90 $B $PROJ
step pf-c1 90 $C $PROJ
step pf-a2 50 $A $PROJ
step pf-b2 50 $B $PROJ
step pf-c2 50 $C $PROJ
step gpu-b 100 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches" -x
step gpu-c 100 $C python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches" -x
