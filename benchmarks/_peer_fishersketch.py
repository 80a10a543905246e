"""Runs inside the peer venv (fishersketch==0.2.1 installed there only): times its torch
engine on the streams saved by speed_vs_reference.py.  Prints one JSON line."""

import json
import sys
import time

import numpy as np
import torch
from fishersketch.backend import FisherSketchGPU

path, reps = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(int(sys.argv[3]))
data = torch.load(path)
a, e = data["acts"], data["errors"]
n = a.shape[0]
splits = np.array(["A", "B"] * (n // 2) + ["A"] * (n % 2))
fs = FisherSketchGPU(dim_a=a.shape[1], dim_e=e.shape[1], sketch_dim=data["m"], device=str(a.device), seed=0)
fs.update_batch(0, a[:8], e[:8], splits[:8])  # warm-up (builds its projections)
times = []
for r in range(reps):
    t = time.perf_counter()
    fs.update_batch(1 + r, a, e, splits)
    times.append(time.perf_counter() - t)
print(json.dumps({"times": times, "n": n, "version": __import__("fishersketch").__version__}))
