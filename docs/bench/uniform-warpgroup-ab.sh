# Run on the device machine from the repository root (carry .whl, made by ../shared/device/prepare):
#   bash docs/bench/uniform-warpgroup-ab.sh      (about 6 minutes; logs come back in $OUT/pack.tgz)
# The patch uniform-warpgroup-index-2026-12-07.patch (the contraction's warpgroup index broadcast
# from lane 0, so the wgmma descriptors computed from it can stay in uniform registers: the k loop's
# SASS moves each descriptor into a uniform register, R2UR, before every HGMMA) against this tree:
# the wgmma SASS checked for hazards and the contraction GPU cases on the patched tree first, then
# the projections alone against cuBLAS at 512, 3000 and 4096 tokens, A B A B, each tree in its own
# process with its own kernel cache.
. docs/bench/ab-tree.sh docs/bench/uniform-warpgroup-index-2026-12-07.patch
step nvcc-b 120 $B python3 -m pytest -q -p no:cacheprovider test/pytest/test_nvcc.py -k "accumulator or tensor_core"
step gputests-b 150 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches or slices_cols or as_exact" -x
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
step proj-a1 80 $A $PROJ
step proj-b1 80 $B $PROJ
step proj-a2 60 $A $PROJ
step proj-b2 60 $B $PROJ
