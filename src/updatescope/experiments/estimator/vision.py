"""Image-classifier tasks for the experiment runners: EfficientNet-lite0 on real photographs.

- ``load_model``: the classifier every vision runner calls (tests monkeypatch it with a tiny
  random network whose last layer is an ``nn.Linear``).
- ``capture_pool``: head inputs of a *pool* of augmented views of the built-in photographs
  (``updatescope.data.images``), one forward pass shared by every task, cached on disk under
  ``$UPDATESCOPE_CACHE/experiments`` (key = model fingerprint + photo files + view recipe).
  Logits are not cached: they are ``acts @ W.T + b``.
- ``task_specs`` / ``make_tasks``: many classification tasks over that pool.  A task is a
  subset of the photographs, ``n`` of their views drawn without replacement, and a *label
  map* (the class observed for each view).  Label maps, chosen so that pairs of tasks range
  from sharing both activation and error geometry to sharing neither:

  ======== =====================================================================
  top1     the model's own top-1 ImageNet class (small errors, what it already fits)
  rank     the model's k-th ranked class, k in {2, 3, 5} (plausible but wrong)
  photo    one fixed ImageNet class per photograph, drawn at random (a new task the
           photos define: "this group of images is class c")
  permuted π(top-1) for a random permutation π of the 1,000 classes (the model's
           partition of the images, with other names)
  coarse   top-1 mapped through a random partition of the classes into G groups,
           G in {5, 20, 100}, each group named by one member (a coarsened label set)
  mix      λ% of the photographs (the first in a random order drawn from the map seed)
           take their "photo" class, the others the model's top-1 class: with λ on a
           grid and every mix task on the same photographs, the pairs interpolate from
           identical (same λ) to the top1-vs-photo contrast, so the exact A_F of the
           pairs spans its range (``task_specs(spanning=...)``)
  ======== =====================================================================

  The random maps (class per photo, π, the partition) are drawn from ``map_seed`` in
  {0, 1, 2}, shared by the tasks of one rule that draw the same map seed: such tasks agree
  on how views are labelled but see different photographs.  Errors are
  ``softmax(W a + b) − onehot(y)``, exactly as everywhere else.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.experiments.caching import cache_key, cached
from updatescope.experiments.heads import logits_of

RULES = ("top1", "rank", "photo", "permuted", "coarse")
MIX = "mix"  # the interpolating rule; used by the spanning tasks only, never cycled
RANKS = (2, 3, 5)
GROUPS = (5, 20, 100)
MAP_SEEDS = 3


def load_model() -> Any:
    """EfficientNet-lite0, eval mode, channels-last (faster convolutions on CPU).  Monkeypatched in tests."""
    from updatescope.models.efficientnet import load_efficientnet_lite0

    return load_efficientnet_lite0().to(memory_format=torch.channels_last)


def preprocess(images: np.ndarray) -> Tensor:
    """(b, H, W, 3) uint8 -> (b, 3, 224, 224) model input (mean = std = 0.5), channels-last."""
    from updatescope.models.efficientnet import efficientnet_preprocess

    return efficientnet_preprocess(torch.from_numpy(images)).contiguous(memory_format=torch.channels_last)


def fingerprint(model: Any) -> str:
    from updatescope.models.hf import head_fingerprint

    return head_fingerprint(model)


def capture_pool(
    model: Any,
    fp: str,
    photos: Sequence[str],
    per_photo: int,
    *,
    seed: int = 0,
    size: int = 224,
    batch: int = 32,
    use_cache: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict[str, Tensor]:
    """{"acts": (N, d) float32, "photo": (N,) int64}: head inputs of ``per_photo`` views of each
    photograph (photo-major order, N = len(photos) · per_photo).  Cached by (fingerprint,
    photo names and file contents, per_photo, seed, size): a second call is a file read.
    """
    from updatescope.capture.classifier import capture_classifier
    from updatescope.data import images

    def build() -> dict[str, Tensor]:
        pix = [images.load_photo(p) for p in photos]
        owners: list[Tensor] = []
        t0 = time.perf_counter()
        total = len(photos) * per_photo

        def batches() -> Any:
            for imgs, owner in images.view_batches(pix, per_photo, seed=seed, size=size, batch=batch):
                owners.append(torch.from_numpy(owner))
                yield preprocess(imgs), torch.zeros(len(owner), dtype=torch.long)

        acts = []
        for a, _logits, _y in capture_classifier(model, batches(), progress=False, desc="views"):
            acts.append(a.float().cpu())
            done = sum(x.shape[0] for x in acts)
            if log and (len(acts) % 25 == 0 or done == total):
                rate = done / (time.perf_counter() - t0)
                log(f"views {done}/{total} ({rate:.1f} images/s)")
        return {"acts": torch.cat(acts), "photo": torch.cat(owners)}

    key = cache_key("vision-pool-v1", fp, list(photos), images.photos_digest(photos), per_photo, seed, size)
    return cached("vision", key, build, use_cache=use_cache)


@dataclass(frozen=True)
class TaskSpec:
    name: str
    photos: tuple[int, ...]  # indices into the pool's photographs
    rule: str  # one of RULES
    param: int  # k for "rank", G for "coarse", else 0
    map_seed: int  # seed of the rule's random map (photo classes, π, partition)
    n: int  # views per task


def task_specs(n_tasks: int, n_photos: int, per_photo: int, n: int, seed: int = 0, spanning: int = 0) -> list[TaskSpec]:
    """``n_tasks`` task definitions; rules cycle through :data:`RULES` so each is used evenly.

    A task takes k photographs, k uniform in [k_min, min(2·k_min, n_photos)] with
    k_min = ceil(n / per_photo) (enough views for n distinct ones).  ``spanning`` more
    tasks (named ``sNN_mixP``) use the ``mix`` rule with λ = 0, …, 100% on an even grid,
    all on one set of min(2·k_min, n_photos) photographs and one map seed.
    """
    k_min = math.ceil(n / per_photo)
    if n < 2 or n_tasks < 1 or k_min > n_photos:
        raise InputError(
            f"cannot build {n_tasks} tasks of n={n} from {n_photos} photos x {per_photo} views "
            f"(need n >= 2 and n <= {n_photos * per_photo})"
        )
    rng = np.random.default_rng([seed, 0x7A5C])
    specs = []
    for t in range(n_tasks):
        rule = RULES[t % len(RULES)]
        k = int(rng.integers(k_min, min(2 * k_min, n_photos) + 1))
        photos = tuple(sorted(int(i) for i in rng.choice(n_photos, size=k, replace=False)))
        param = int(rng.choice(RANKS)) if rule == "rank" else int(rng.choice(GROUPS)) if rule == "coarse" else 0
        map_seed = int(rng.integers(0, MAP_SEEDS)) if rule in ("photo", "permuted", "coarse") else 0
        tag = f"{rule}{param}" if param else rule
        name = f"t{t:02d}_{tag}" + (f"_m{map_seed}" if rule in ("photo", "permuted", "coarse") else "")
        specs.append(TaskSpec(name, photos, rule, param, map_seed, n))
    if spanning == 1 or spanning < 0:
        raise InputError(f"spanning tasks need a grid of at least 2 (or 0 for none), got {spanning}")
    if spanning:
        k = min(2 * k_min, n_photos)
        photos = tuple(sorted(int(i) for i in rng.choice(n_photos, size=k, replace=False)))
        for i in range(spanning):
            pct = round(100 * i / (spanning - 1))
            specs.append(TaskSpec(f"s{i:02d}_mix{pct}", photos, MIX, pct, 0, n))
    return specs


def label_map(spec: TaskSpec, logits: Tensor, photo: Tensor, n_photos: int, seed: int = 0) -> Tensor:
    """Labels (n,) int64 of one task's views from their logits (n, K) and photo ids (n,)."""
    if spec.rule not in RULES and spec.rule != MIX:
        raise InputError(f"unknown label rule {spec.rule!r}; known: {', '.join((*RULES, MIX))}")
    k = logits.shape[1]
    top1 = logits.argmax(1)
    if spec.rule == MIX:  # nested over λ: the relabelled photographs of λ are among those of any larger λ
        rng = np.random.default_rng([seed, len(RULES), spec.map_seed])
        classes = torch.from_numpy(rng.choice(k, size=n_photos, replace=False))
        order = rng.permutation(len(spec.photos))
        cut = round(spec.param / 100 * len(spec.photos))
        chosen = torch.tensor([spec.photos[j] for j in order[:cut]], dtype=torch.long)
        return torch.where(torch.isin(photo, chosen), classes[photo], top1)
    rng = np.random.default_rng([seed, RULES.index(spec.rule), spec.map_seed])
    if spec.rule == "top1":
        return top1
    if spec.rule == "rank":
        return torch.topk(logits, spec.param, dim=1).indices[:, spec.param - 1]
    if spec.rule == "photo":
        classes = torch.from_numpy(rng.choice(k, size=n_photos, replace=False))
        return classes[photo]
    if spec.rule == "permuted":
        return torch.from_numpy(rng.permutation(k))[top1]
    # coarse
    order = torch.from_numpy(rng.permutation(k))  # class order[i] falls in group i % G
    group = torch.empty(k, dtype=torch.long)
    group[order] = torch.arange(k) % spec.param
    return order[: spec.param][group[top1]]  # each group named by its first member


def make_tasks(
    pool: Mapping[str, Tensor], w0: Tensor, b0: Tensor | None, specs: Sequence[TaskSpec], n_photos: int, seed: int = 0
) -> tuple[dict[str, dict[str, Tensor]], dict[str, Any]]:
    """-> ({name: {"acts" (n, d), "labels" (n,)}}, {name: description}).

    Views are drawn from the task's photographs without replacement by a generator seeded
    by (seed, task index); the description records the rule, the photographs, the number
    of distinct labels and the fraction of labels equal to the model's top-1 class.
    """
    tasks, info = {}, {}
    photo = pool["photo"]
    for t, spec in enumerate(specs):
        rows = torch.nonzero(torch.isin(photo, torch.tensor(spec.photos)), as_tuple=True)[0]
        if rows.numel() < spec.n:
            raise InputError(f"task {spec.name}: {rows.numel()} views of its photos, need {spec.n}")
        g = torch.Generator().manual_seed(int(np.random.default_rng([seed, t]).integers(2**62)))
        rows = rows[torch.randperm(rows.numel(), generator=g)[: spec.n]].sort().values
        acts = pool["acts"][rows]
        z = logits_of(w0, b0, acts)
        y = label_map(spec, z, photo[rows], n_photos, seed)
        tasks[spec.name] = {"acts": acts, "labels": y}
        info[spec.name] = {
            **asdict(spec),
            "labels_distinct": int(y.unique().numel()),
            "agree_top1": float((y == z.argmax(1)).float().mean()),
        }
    return tasks, info


def speed_streams(
    pool: Mapping[str, Tensor], w0: Tensor, b0: Tensor | None, n: int, n_photos: int, seed: int = 0
) -> tuple[list[dict[str, Tensor]], int]:
    """Two streams of ``n`` views for the timing: pool rows [0, n) labelled by the model's
    top-1 class and rows [n, 2n) labelled by a class per photograph (rows wrap around a
    pool smaller than 2n; the cost does not depend on which rows).  -> (streams, distinct rows)."""
    total = pool["acts"].shape[0]
    out = []
    for s, rule in enumerate(("top1", "photo")):
        rows = torch.arange(s * n, (s + 1) * n) % total
        acts = pool["acts"][rows]
        spec = TaskSpec(f"speed_{rule}", (), rule, 0, 0, n)
        y = label_map(spec, logits_of(w0, b0, acts), pool["photo"][rows], n_photos, seed)
        out.append({"acts": acts, "labels": y})
    return out, min(total, 2 * n)
