# Session 75, first call: the GPU cases of what sessions 74 and 75 built (sliding-window attention
# on Mistral-7B's layer, the layers of thirteen other families, the q/k/v epilogue that computes Q
# and K), then the evidence for issues 24-25: attention alone against cuDNN, the Qwen3 layer
# against torch.compile with each kernel's time, each projection against cuBLAS. Kernels prebuilt
# into .emmy-cache on a CPU machine (/tmp/pb75.sh in the session's note, and
# h200-evidence-2026-12-07-prebuild.sh); carry it with .whl.
. docs/bench/device-steps.sh  # install, logs, pack, step
export EMMY_HOME=$PWD/.emmy-cache
step new-gpu 120 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_gpu.py -k "sliding_window or other_family"
step qk-gpu 90 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_attention_gpu.py test/pytest/test_qk_epilogue.py -k "epilogue"
step ev-attention 150 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
step ev-layer 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step ev-proj 90 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas,compile --profile
