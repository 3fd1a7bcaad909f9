# Session 76, first call (the H200, when lent): the evidence for issues 24-26 on the card the
# issues name. Attention alone against cuDNN from 256 to 32768 tokens (16/8 and 32/8 heads); the
# Qwen3 layer against eager and torch.compile with each kernel's time; each projection against
# cuBLAS's bare product; the layer in deploy mode and with the prior alone at token counts with no
# golden entry. Kernels prebuilt by device-2026-12-08-s76-prebuild.sh. Logs in $OUT/pack.tgz.
. docs/bench/device-steps.sh
export EMMY_HOME=$PWD/.emmy-cache
step ev-attention 150 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
step ev-layer 120 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step ev-proj 100 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas,compile --profile
step deploy 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 768,6000 --contenders emmy,emmy-prior,compile
