# Session 75, second call (same machine): the failing other-family cases again with their errors,
# the Q/K epilogue in the Qwen3 layer (qk, qkpp against split), deploy mode, few heads.
. docs/bench/device-steps.sh
export EMMY_HOME=$PWD/.emmy-cache
eval "$(grep '^PP=' docs/bench/h200-evidence-2026-12-07.sh)"
step families 60 python3 -m pytest -q -p no:cacheprovider -n 8 -m gpu test/pytest/test_gpu.py -k "other_family" -rf --tb=line
step qk-epilogue 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 512,3000,4096 --contenders emmy,compile --profile --variant qk=attention.fusion=epilogue --variant qkpp=attention.fusion=epilogue,$PP
step deploy 100 python3 tools/bench.py --target sm_90a --cases layer --layer-sizes 768,6000 --contenders emmy,emmy-prior,compile
step few-heads 90 python3 tools/bench.py --target sm_90a --cases attention --attention-sizes 512,1000,2000,3000 --attention-heads 4/4,8/8,2/2 --contenders emmy,sdpa-cudnn --variant s1=attention.split_kv=1
