# Session 73, call 1: split_kv (a query block's key blocks in parts, merged by the last) on the GPU:
# its GPU test cases (per-head float32 reference, NaN-filled outputs), then the attention alone at
# short lengths with 2, 3 and 4 parts pinned against one (the warp-specialized kernel, grid, two
# consumers, 128 x 128 tiles) and the rules' kernel, cuDNN in the same run; the Qwen3 layer at 512
# and 1000 tokens with the split pinned. Logs in $OUT/pack.tgz.
. docs/bench/device-steps.sh  # install, logs, pack, step
WS=attention.workers=wgmma_ws,attention.copy=tma,attention.block_q=128,attention.warps=8,attention.block_kv=128,attention.stages=2,attention.schedule=grid
V2="--variant s1=$WS,attention.split_kv=1 --variant s2=$WS,attention.split_kv=2"
V="$V2 --variant s3=$WS,attention.split_kv=3 --variant s4=$WS,attention.split_kv=4"
L="--variant s2=$WS,attention.fusion=split,attention.split_kv=2 --variant s3=$WS,attention.fusion=split,attention.split_kv=3"
export EMMY_HOME=$PWD/.emmy-cache  # the kernels prebuilt here (tools/prebuild_gpu_tests.py, tools/bench.py --build-only)
step split-gpu 150 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_attention_gpu.py -k "split_kv"
step att16 150 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,512,1000 --attention-heads 16/8 --contenders emmy,sdpa-cudnn $V
step layer 130 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 512,1000 --contenders emmy,compile --profile $L
step att32 90 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 512 --attention-heads 32/8 --contenders emmy,sdpa-cudnn $V
step att32b 60 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 1000 --attention-heads 32/8 --contenders emmy,sdpa-cudnn $V2
# then the evidence of session 72's script, as far as the call's time goes (the rules' kernels)
step ev-layer 150 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step ev-attention 240 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
