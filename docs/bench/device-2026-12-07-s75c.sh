# Session 75, third call: Falcon's layer again (its forward in the device's transformers takes
# `alibi`), then sliding-window attention timed: Mistral-7B's layer at 8192 tokens with its
# v0.1 window of 4096 keys against the same layer without a window, Emmy and torch.compile
# (whose windowed module runs SDPA with the window's mask). Kernels prebuilt into .emmy-cache
# with the same model paths (the first lines below, then tools/bench.py --build-only).
. docs/bench/device-steps.sh
export EMMY_HOME=$PWD/.emmy-cache
python3 -c "import sys; sys.path.insert(0, 'test/pytest'); from pathlib import Path; from tiny_models import write_real_sized_model as w; w(Path('/tmp/wm/m7w'), 'mistral-7b', sliding_window=4096); w(Path('/tmp/wm/m7'), 'mistral-7b')"
step families 60 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_gpu.py -k "other_family and (falcon or gptj)" -rfs --tb=line
# 8 / 8 heads from 1500 to 2500 tokens, where the rules split no query block (critical path
# 11% shorter with 2 parts at 2000 tokens, under SPLIT_KV_MIN_GAIN) and cuDNN was 1.11x faster
step split-8-8 80 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 1500,2000,2500 --attention-heads 8/8 --contenders emmy,sdpa-cudnn --variant s2=attention.split_kv=2 --variant s3=attention.split_kv=3
step window-8192 150 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/m7w --layer-sizes 8192 --contenders emmy,compile --profile
step plain-8192 120 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/m7 --layer-sizes 8192 --contenders emmy,compile --profile
