# Run on the device machine from the repository root (carry .whl, made by ../shared/device/prepare):
#   bash docs/bench/attention-row-sums-ab.sh      (about 8 minutes; logs come back in $OUT/pack.tgz)
# The patch attention-row-sums-by-wgmma-2026-12-06.patch (the warp-specialized attention's rows' sums
# of P from an m64n8k16 wgmma against a tile of ones, instead of an add per score in the softmax)
# against this tree: the attention GPU tests on the patched tree first, then attention alone,
# A B A B, each tree in its own process with its own kernel cache.
. docs/bench/ab-tree.sh docs/bench/attention-row-sums-by-wgmma-2026-12-06.patch
ATT="python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 2048,4096,8192,16384 --attention-heads 16/8,32/8,32/8/64 --contenders emmy,sdpa-cudnn"
step gputests-b 150 $B python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_attention_gpu.py -x
step att-a1 100 $A $ATT
step att-b1 100 $B $ATT
step att-a2 90 $A $ATT
step att-b2 90 $B $ATT
