# Session 71, call 3 (H100): the GPU suite on HEAD from the kernels prebuilt on the CPU machine
# (.device/s71/home), the hazard checker over them, and per-instruction stall samples (Nsight
# Compute's source page) of the o projection at 3000 tokens: deploy, cols 192x128, cuBLAS.
. docs/bench/device-steps.sh  # install, logs, pack, step
export EMMY_HOME=$PWD/.device/s71/home
(timeout 240 python3 tools/kernel_checks/wgmma_hazards.py $EMMY_HOME > /tmp/logs/hazards.log 2>&1; echo "rc=$?" >> /tmp/logs/hazards.log) &
N=""; python3 -c "import xdist" 2>/dev/null && N="-n 12"
echo "xdist: $N" > /tmp/logs/gpu.log
timeout 300 python3 -m pytest -q -p no:cacheprovider $N -m gpu test/pytest >> /tmp/logs/gpu.log 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))" >> /tmp/logs/gpu.log
tail -n 4 /tmp/logs/gpu.log; wait; tail -n 3 /tmp/logs/hazards.log; pack
left=$((570 - $(date +%s) + T0)); [ $left -lt 60 ] && exit 0
export EMMY_HOME=/tmp/ncu-home T=3000
timeout 100 python3 docs/bench/projections-ncu.py > /tmp/logs/ncu-build.log 2>&1
left=$((570 - $(date +%s) + T0)); [ $left -lt 40 ] && { pack; exit 0; }
timeout $((left - 25)) ncu --clock-control none --kernel-name-base demangled --set full --import-source no \
  -k 'regex:^(o_proj_residual|nvjet)' -c 12 -o /tmp/r python3 docs/bench/projections-ncu.py > /tmp/logs/ncu-run.log 2>&1
echo "rc=$?" >> /tmp/logs/ncu-run.log; tail -n 3 /tmp/logs/ncu-run.log
ncu -i /tmp/r.ncu-rep --page source --csv --print-source sass > /tmp/logs/ncu-source.csv 2>&1
ncu -i /tmp/r.ncu-rep --page details --print-details all > /tmp/logs/ncu-details.txt 2>&1
ls -la /tmp/logs; pack
