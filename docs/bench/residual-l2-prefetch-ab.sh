# Run on the device machine from the repository root (carry .whl):
#   bash docs/bench/residual-l2-prefetch-ab.sh        (about 7 minutes; logs in $OUT/pack.tgz)
# The residual's L2 prefetch, on top of this tree's branch-free epilogue (its residual loads all
# in flight at once, emmy::load_or), four trees each in its own process and kernel cache:
#   A  this tree
#   B  read-only-ldg-2026-12-07.patch: every load from an argument the kernel does not write goes
#      through ld.global.nc explicitly (emmy::ldg, ldg_or). nvcc infers it from `const
#      __restrict__` only while the pointer never reaches inline assembly, and the prefetch hands
#      it to one: built on the CPU, the prefetching kernels lost .nc on the epilogue's loads (plain
#      ld.global, which ptxas may not issue ahead of the stores) and fell from 91 to 74 registers
#      at 3000 tokens; with ldg, 91 again. B alone should time as A.
#   C  residual-l2-prefetch-2026-12-07.patch (B included): the thirty-first session's prefetch
#      (commits 984599a, 0e32f20: each consumer thread starts one of the tile's residual rows on
#      its way into L2 with a bulk prefetch), the k loop split in two around it instead of a branch
#      in it, two k-steps before the end;
#   D  the same eight k-steps before the end (6 MB of residual at 3000 tokens takes about 2 us to
#      come from memory; two k-steps are about 1.3);
#   E  the same 24 k-steps before the end (o: at its 8th of 32): the main loop reads A and B at
#      under a third of the memory's bandwidth, so the residual can come in beside them early.
# The projections alone at 512, 3000 (one wave) and 4096 tokens (where the old prefetch cost
# 6-23%), A B C D E twice, then the layer's GPU cases on E and D.
. docs/bench/ab-tree.sh docs/bench/read-only-ldg-2026-12-07.patch
tree() { rm -rf $1 && mkdir -p $1 && cp -r emmy tools test lit.cfg.py pyproject.toml golden $1/ && (cd $1 && git apply $2) > /tmp/logs/apply-$(basename $1).log 2>&1 || { echo "patch for $1 failed"; exit 1; }; }
sed 's/^+EPILOGUE_PREFETCH_STEPS = 2$/+EPILOGUE_PREFETCH_STEPS = 8/' docs/bench/residual-l2-prefetch-2026-12-07.patch > /tmp/pf8.patch
sed 's/^+EPILOGUE_PREFETCH_STEPS = 2$/+EPILOGUE_PREFETCH_STEPS = 24/' docs/bench/residual-l2-prefetch-2026-12-07.patch > /tmp/pf24.patch
C=/tmp/c; D=/tmp/d; E=/tmp/e
tree $C $A/docs/bench/residual-l2-prefetch-2026-12-07.patch
tree $D /tmp/pf8.patch
tree $E /tmp/pf24.patch
PROJ="python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas --profile"
for r in 1 2; do for t in $A $B $C $D $E; do step pf-$(basename $t)$r 80 $t $PROJ; done; done
step gpu-e 100 $E python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches" -x
step gpu-d 100 $D python3 -m pytest -q -p no:cacheprovider -m gpu test/pytest/test_gpu.py -k "layer_matches" -x
