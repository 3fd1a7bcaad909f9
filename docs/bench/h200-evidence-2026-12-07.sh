# Session 72, call 2: the attention GPU tests with the per-head float32 reference (first GPU run
# in that form), then the Qwen3 layer and attention cases against torch.compile and cuDNN on
# whatever card came (the issues' targets are stated for the H200), the rules' attention (persistent
# blocks from three waves whose K and V fit in L2, since session 72) beside the grid pinned.
# Logs in $OUT/pack.tgz; copy nothing else to $OUT (8 files come back at most).
. docs/bench/device-steps.sh  # install, logs, pack, step
export EMMY_HOME=/tmp/home
step attention-gpu 200 python3 -m pytest -q -p no:cacheprovider -n 6 -m gpu test/pytest/test_attention_gpu.py
step layer 200 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step attention 240 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --variant grid=attention.schedule=grid
