#!/usr/bin/env bash
# One-command device check (issue 4, target 5): same code on CUDA, same figures.
# Skips cleanly (exit 0) when no CUDA device is visible.  Run from the repository root:
#   bash benchmarks/gpu_check.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA device, skipped"; exit 0
fi
OUT=${OUT:-benchmarks/results}
"$PY" -m pytest -q tests/test_fast_paths.py tests/test_sketch_core.py tests/test_workspace.py -m "not slow"
# CPU and GPU bases must agree: same seed -> same features (float32 tolerance).
"$PY" - <<'PYEOF'
import torch, updatescope as us
from updatescope.sketch.fishersketch import features
for d, k in ((576, 49152), (4096, 128256)):
    cfg = us.SketchConfig(d, k, 4096, 0)
    a, e = torch.randn(16, d), torch.randn(16, k)
    c, g = features(cfg, a, e), features(cfg, a.cuda(), e.cuda()).cpu()
    err = float((c - g).abs().max() / c.abs().max())
    print(f"cpu vs cuda features d={d} K={k}: max rel diff {err:.2e}")
    assert err < 1e-4
PYEOF
"$PY" benchmarks/speed_vs_memory_floor.py --device cuda --n 256 --out "$OUT/speed_vs_memory_floor_cuda.json"
"$PY" benchmarks/speed_vs_forward.py --device cuda --tokens 8192 --out "$OUT/speed_vs_forward_cuda.json"
