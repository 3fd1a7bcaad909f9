# Session 76, both calls in one (refused starts left too little device time for two), in order
# of need, what DEADLINE cuts coming last: sliding-window attention after the free path (only
# key blocks that cross the window's edge or the diagonal compute the mask; the 3-stage wgmma
# ring starts at the window too) and thirteen other families' layers on the GPU; 16/8 heads at
# 1000 tokens against its alternatives; Mistral-7B's layer at 8192 tokens with its window of
# 4096 (the forty-second session: attention 925 us windowed, 997 without) and a head-dim-256
# windowed layer (Gemma's local layers: the 3-stage ring); the evidence of issues 24-26 (attention
# against cuDNN, the Qwen3 layer and its projections, deploy mode);
# layers at token counts no rule or golden entry was fitted at.
# Kernels prebuilt by device-2026-12-08-s76-prebuild.sh.
. docs/bench/device-steps.sh
export EMMY_HOME=$PWD/.emmy-cache
python3 -c "import sys; sys.path.insert(0, 'test/pytest'); from pathlib import Path; from tiny_models import write_real_sized_model as w, write_windowed_model as ww; w(Path('/tmp/wm/m7w'), 'mistral-7b', sliding_window=4096); ww(Path('/tmp/wm/d256w'), 1024, 256); w(Path('/tmp/wm/llama1b'), 'llama-3.2-1b')"
step new-gpu 120 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_gpu.py -k "sliding_window or other_family"
step t1000 60 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 1000 --attention-heads 16/8 --contenders emmy,sdpa-cudnn --variant q64=attention.block_q=64 --variant sk2=attention.split_kv=2 --variant kv64=attention.block_kv=64 --variant mma=attention.workers=wgmma --variant pers=attention.schedule=persistent
step window-8192 150 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/m7w --layer-sizes 8192 --contenders emmy,compile --profile
step window-d256 100 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/d256w --layer-sizes 4096 --contenders emmy,compile --profile
step ev-attention 150 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 256,1000,2048,3000,4096,8192,16384,32768 --attention-heads 16/8,32/8 --contenders emmy,sdpa-cudnn
step ev-layer 120 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 32,512,3000,4096 --contenders emmy,eager,compile --profile
step ev-proj 100 python3 tools/bench.py --target sm_90a --cases projections --layer-sizes 512,3000,4096 --contenders emmy,cublas,compile --profile
step deploy 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 768,6000 --contenders emmy,emmy-prior,compile
step unseen-qwen3 130 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 1500,2500 --contenders emmy,compile
step unseen-llama 130 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/llama1b --layer-sizes 1100,2500 --contenders emmy,compile
