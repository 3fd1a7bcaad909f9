# Run on the device machine (Firecracker: ncu reads the counters there) from the repository root,
# carrying .whl:   bash docs/bench/projections-ncu.sh   (the report comes back in $OUT/ncu-T.txt)
# Nsight Compute over docs/bench/projections-ncu.py: Emmy's o and down kernels at T tokens (deploy
# answer, slices = cols 192 x 128 alone and in pairs) and cuBLAS's GEMM for the same products, the third launch of
# each (the first two warm the caches), clocks left alone (METHOD.md).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH EMMY_HOME=${EMMY_HOME:-/tmp/emmy-home}
T=${T:-3000}
T=$T timeout 120 python3 docs/bench/projections-ncu.py   # builds the kernels outside the profiler
T=$T timeout 400 ncu --clock-control none --kernel-name-base demangled \
  -k 'regex:^(o_proj_residual|down_proj_residual|nvjet|sm90|cutlass|void cutlass)' \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --print-units base python3 docs/bench/projections-ncu.py > $OUT/ncu-$T.txt 2>&1
echo "rc=$?"; grep -c "Section: GPU Speed Of Light" $OUT/ncu-$T.txt; tail -5 $OUT/ncu-$T.txt
