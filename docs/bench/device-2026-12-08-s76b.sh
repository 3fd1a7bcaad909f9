# Session 76, second call: sliding-window attention and thirteen other families' layers on the
# GPU; few heads, where the rules split the key blocks, against one part; layers at token counts
# no rule or golden entry was fitted at (the Qwen3 layer at 1500 and 2500 tokens, Llama-3.2-1B's
# at 1100 and 2500) against torch.compile. Kernels prebuilt by device-2026-12-08-s76-prebuild.sh.
. docs/bench/device-steps.sh
export EMMY_HOME=$PWD/.emmy-cache
step new-gpu 90 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_gpu.py -k "sliding_window or other_family"
# 16/8 heads at 1000 tokens, the one length where Emmy's attention was slower than cuDNN (1.03 on
# the H100): 128 query blocks, one wave, a critical path of 8 key blocks; the alternatives timed
step t1000 60 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 1000 --attention-heads 16/8 --contenders emmy,sdpa-cudnn --variant q64=attention.block_q=64 --variant sk2=attention.split_kv=2 --variant kv64=attention.block_kv=64 --variant mma=attention.workers=wgmma --variant pers=attention.schedule=persistent
step few-heads 90 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 512,1000,2000,3000 --attention-heads 4/4,8/8,2/2 --contenders emmy,sdpa-cudnn --variant s1=attention.split_kv=1
python3 -c "import sys; sys.path.insert(0, 'test/pytest'); from pathlib import Path; from tiny_models import write_real_sized_model as w; w(Path('/tmp/wm/llama1b'), 'llama-3.2-1b')"
step unseen-qwen3 130 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 1500,2500 --contenders emmy,compile
step unseen-llama 130 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/llama1b --layer-sizes 1100,2500 --contenders emmy,compile
