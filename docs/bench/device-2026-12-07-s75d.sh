# Session 75, fourth call: layers at token counts no rule or golden entry was fitted at, built on
# the device: the Qwen3 layer at 1500 and 2500 tokens, Llama-3.2-1B's layer at 1100 and 2500,
# Emmy (deploy mode) against torch.compile.
. docs/bench/device-steps.sh
export EMMY_HOME=$PWD/.emmy-cache
python3 -c "import sys; sys.path.insert(0, 'test/pytest'); from pathlib import Path; from tiny_models import write_real_sized_model as w; w(Path('/tmp/wm/llama1b'), 'llama-3.2-1b')"
step unseen-qwen3 130 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 1500,2500 --contenders emmy,compile
step unseen-llama 130 python3 tools/bench.py --target sm_90a --cases layer --model /tmp/wm/llama1b --layer-sizes 1100,2500 --contenders emmy,compile
