# Run on the device machine from the repository root (carry .whl):
#   bash docs/bench/residual-l2-prefetch-ab.sh        (about 2 minutes; logs in $OUT/pack.tgz)
# The thirty-first session's residual prefetch (each consumer thread starts one of the tile's
# residual rows on its way into L2, two k-steps before the end of the k loop:
# residual-l2-prefetch-2026-12-07.patch, its commits 984599a and 0e32f20 brought onto this tree)
# against this tree, where the epilogue's residual loads are now all in flight at once
# (emmy::load_or): reverted then because the serial loads gained little from L2, it may pay now
# that the epilogue waits once, on memory. The o and down projections at 3000 tokens (one wave),
# 4096 and 512 (where the prefetch cost 6-23% before), A B A B.
. docs/bench/ab-tree.sh docs/bench/residual-l2-prefetch-2026-12-07.patch
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
step pf-a1 90 $A $PROJ
step pf-b1 90 $B $PROJ
step pf-a2 60 $A $PROJ
step pf-b2 60 $B $PROJ
step gpu-b 150 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches" -x
