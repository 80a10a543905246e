#!/usr/bin/env bash
# One-command device check: same code on CUDA, same numbers (and NCCL ranks with 2+ GPUs).
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
# The CLI on one GPU: a CUDA sketch of a tiny local model equals the CPU sketch to float32
# rounding, and (with two or more GPUs) torchrun over NCCL gives the single-GPU file.
"$PY" - <<'PYEOF'
import subprocess, sys, tempfile, torch
from pathlib import Path
sys.path.insert(0, "tests")
from test_cli import _save_tiny
from test_distributed import write_docs
from updatescope.cli import main
from updatescope.signatures.io import load_signature
tmp = Path(tempfile.mkdtemp())
model, data = _save_tiny(tmp / "tiny", 0), write_docs(tmp / "docs.jsonl", 37, 40, seed=0)
outs = {}
for dev in ("cpu", "cuda"):
    outs[dev] = tmp / f"{dev}.safetensors"
    assert main(["sketch", "--model", str(model), "--data", str(data), "--out", str(outs[dev]), "--quiet",
                 "--sketch-dim", "256", "--max-tokens", "500", "--device", dev]) == 0
c, g = load_signature(outs["cpu"]), load_signature(outs["cuda"])
err = float((c.sums - g.sums).abs().max() / c.sums.abs().max())
print(f"cli sketch cpu vs cuda: max rel diff {err:.2e}")
assert c.count == g.count and err < 1e-4
if torch.cuda.device_count() >= 2:
    two = tmp / "nccl.safetensors"
    subprocess.run(["torchrun", "--nproc-per-node", "2", "-m", "updatescope", "sketch", "--model", str(model),
                    "--data", str(data), "--out", str(two), "--quiet", "--sketch-dim", "256", "--max-tokens", "500",
                    "--device", "cuda"], check=True)
    n = load_signature(two)
    err = float((n.sums - g.sums).abs().max() / g.sums.abs().max())
    print(f"torchrun 2 GPUs (NCCL) vs 1 GPU: max rel diff {err:.2e}")
    assert n.count == g.count and err < 1e-4
else:
    print("one GPU: the NCCL case needs two, skipped")
PYEOF
"$PY" benchmarks/speed_vs_memory_floor.py --device cuda --n 256 --out "$OUT/speed_vs_memory_floor_cuda.json"
"$PY" benchmarks/speed_vs_forward.py --device cuda --tokens 8192 --out "$OUT/speed_vs_forward_cuda.json"
