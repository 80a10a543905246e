"""Runs inside the peer venv (fishersketch==0.2.1 there only): sketches the saved task
streams with the peer's torch engine and prints its alignment matrices as one JSON line."""

import json
import sys

import numpy as np
import torch
from fishersketch.backend import FisherSketchGPU

path, m, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(int(sys.argv[4]))
data = torch.load(path)
tasks = data["tasks"]
fs = FisherSketchGPU(dim_a=tasks[0][0].shape[1], dim_e=tasks[0][1].shape[1], sketch_dim=m, device="cpu", seed=seed)
for tid, (a, e) in enumerate(tasks):
    n = a.shape[0]
    splits = np.array(["A", "B"] * (n // 2) + ["A"] * (n % 2))
    fs.update_batch(tid, a, e, splits)
res = fs.compute_all()
# The peer reports raw Gram matrices of mean embeddings; the alignments are their cosines.
out = {}
for k in ("S_ae", "S_a", "S_e"):
    s = np.asarray(res[k], dtype=float)
    d = np.sqrt(np.clip(np.diag(s), 1e-300, None))
    out[k] = (s / d[:, None] / d[None, :]).tolist()
print(json.dumps(out))
