python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD EMMY_HOME=$PWD/.emmy-cache
K=rms_norm_gate_up_proj_silu
for n in mistral-7b llama-3.2-1b; do
python3 -c "
import sys; sys.path.insert(0,'test/pytest')
from tiny_models import write_real_sized_model; from pathlib import Path
write_real_sized_model(Path('/tmp/real/$n'), '$n')"
timeout 200 python3 tools/bench.py --cases layer --layer-sizes 512,4096 --model /tmp/real/$n --contenders compile,emmy --profile --variant grid=$K.schedule=grid --variant s5=$K.stages=5 --variant fused=$K.fusion=fused --variant c2=$K.cluster=2 --variant stag=$K.epilogue=staggered --json $OUT/$n-gateup.json > $OUT/$n-gateup.log 2>&1
grep "^| \|rms_norm_gate_up_proj_silu$\|kernels, each" $OUT/$n-gateup.log
done
