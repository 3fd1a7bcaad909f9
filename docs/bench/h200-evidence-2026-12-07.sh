# Session 74: the q/k/v epilogue that computes Q and K, then the H200 evidence for issues 24-26:
# attention alone against cuDNN from 256 to 32768 tokens (16/8 and 32/8 heads); the Qwen3 layer
# against torch.compile with each kernel's time; each projection against cuBLAS's bare product;
# few heads, where the rules split the key blocks (split_kv), against one part pinned; the layer in
# deploy mode and with the prior alone at token counts with no golden entry. Logs in $OUT/pack.tgz.
. docs/bench/device-steps.sh  # install, logs, pack, step
export EMMY_HOME=$PWD/.emmy-cache  # kernels prebuilt here (h200-evidence-2026-12-07-prebuild.sh)
# Q and K normalized and rotated in the q/k/v projection's epilogue (fusion = epilogue, a pin
# only since the fifteenth session measured it 2.2x slower than attention_prep's kernel apart),
# now with the branch on the head's operand around the epilogue's loop: its GPU cases, then the
# layer with it (qk), and with it in a pingpong q/k/v kernel (qkpp: one warpgroup's epilogue
# beside the other's main loop)
PP=rms_norm_qkv_proj.workers=wgmma_ws,rms_norm_qkv_proj.copy=tma,rms_norm_qkv_proj.schedule=persistent,rms_norm_qkv_proj.warps=8,rms_norm_qkv_proj.epilogue=pingpong,rms_norm_qkv_proj.block_m=64,rms_norm_qkv_proj.block_n=128,rms_norm_qkv_proj.stages=3
step qk-gpu 90 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_attention_gpu.py test/pytest/test_qk_epilogue.py -k "epilogue"
# Session 75 (no device either): sliding-window attention (Mistral-7B's layer, windows of 64 to 1000
# keys) and the layers of thirteen other families (tiny, 300 tokens) on the GPU for the first time
step new-gpu 90 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_gpu.py -k "sliding_window or other_family"
step qk-epilogue 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 512,3000,4096 --contenders emmy,compile --profile --variant qk=attention.fusion=epilogue --variant qkpp=attention.fusion=epilogue,$PP
step ev-attention 150 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
step ev-layer 120 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step ev-proj 100 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas,compile --profile
step few-heads 90 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 512,1000,2000,3000 --attention-heads 4/4,8/8,2/2 --contenders emmy,sdpa-cudnn --variant s1=attention.split_kv=1
step deploy 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 768,6000 --contenders emmy,emmy-prior,compile
