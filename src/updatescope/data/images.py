"""Real photographs shipped inside installed packages, and deterministic augmented views.

Nothing here downloads.  The photographs are files inside the wheels of
``scikit-image`` (``skimage/data/*``: the files the wheel itself contains, never the ones
``skimage.data`` fetches on demand) and ``matplotlib`` (``mpl-data/sample_data``).  They
are read with Pillow without importing either package.  Synthetic test patterns
(chessboards, phantom, logos, colour wheels) are left out: every entry of :data:`PHOTOS`
is a photograph or a scanned/micrograph image of a real object.

Views.  A classifier task needs many images; twenty photographs give them as random
views, the standard training augmentation of ImageNet models: a random resized crop
(area 10–100 % of the photo, aspect ratio 3/4–4/3, log-uniform), a horizontal flip with
probability 1/2, and colour jitter (brightness, contrast and saturation factors uniform
in [0.7, 1.3]), resized to ``size`` × ``size`` with Pillow's antialiased bilinear filter.
View ``j`` of photo ``i`` is drawn from its own generator seeded by ``(seed, i, j)``, so
it is the same whatever the batch or pool size it is generated in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from updatescope.data._sources import package_dir
from updatescope.errors import InputError, MissingExtraError

__all__ = ["PHOTOS", "photo_names", "photo_path", "load_photo", "make_view", "view", "view_batches", "photos_digest"]

# name -> (package, path inside the package folder, extra that installs the package)
PHOTOS: dict[str, tuple[str, str, str]] = {
    "astronaut": ("skimage", "data/astronaut.png", "data"),
    "brick": ("skimage", "data/brick.png", "data"),
    "camera": ("skimage", "data/camera.png", "data"),
    "cell": ("skimage", "data/cell.png", "data"),
    "chelsea": ("skimage", "data/chelsea.png", "data"),
    "clock_motion": ("skimage", "data/clock_motion.png", "data"),
    "coffee": ("skimage", "data/coffee.png", "data"),
    "coins": ("skimage", "data/coins.png", "data"),
    "grass": ("skimage", "data/grass.png", "data"),
    "gravel": ("skimage", "data/gravel.png", "data"),
    "hubble_deep_field": ("skimage", "data/hubble_deep_field.jpg", "data"),
    "ihc": ("skimage", "data/ihc.png", "data"),
    "moon": ("skimage", "data/moon.png", "data"),
    "motorcycle_left": ("skimage", "data/motorcycle_left.png", "data"),
    "motorcycle_right": ("skimage", "data/motorcycle_right.png", "data"),
    "page": ("skimage", "data/page.png", "data"),
    "retina": ("skimage", "data/retina.jpg", "data"),
    "rocket": ("skimage", "data/rocket.jpg", "data"),
    "text": ("skimage", "data/text.png", "data"),
    "grace_hopper": ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg", "report"),
}
_PIP_NAME = {"skimage": "scikit-image", "matplotlib": "matplotlib"}

SCALE = (0.1, 1.0)  # crop area as a fraction of the photo
RATIO = (3 / 4, 4 / 3)  # crop aspect ratio (width / height), drawn log-uniformly
JITTER = 0.3  # brightness, contrast, saturation factors in [1 - JITTER, 1 + JITTER]


def photo_names() -> list[str]:
    """Names of the built-in photographs, in a fixed order."""
    return list(PHOTOS)


def photo_path(name: str) -> Path:
    """The file behind a photograph name; raises if its package is not installed."""
    if name not in PHOTOS:
        raise InputError(f"unknown photo {name!r}; available: {', '.join(PHOTOS)}")
    package, rel, extra = PHOTOS[name]
    root = package_dir(package)
    if root is None:
        raise MissingExtraError(_PIP_NAME[package], extra)
    path = root / rel
    if not path.is_file():
        raise InputError(f"photo {name!r}: {rel} is missing from the installed {_PIP_NAME[package]}")
    return path


def load_photo(name: str) -> np.ndarray:
    """A photograph as (H, W, 3) uint8 RGB (grey images replicated, alpha dropped)."""
    from PIL import Image

    with Image.open(photo_path(name)) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


def photos_digest(names: Sequence[str]) -> str:
    """Short hash of the photographs' file contents (a cache key that sees a changed file)."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode())
        h.update(photo_path(name).read_bytes())
    return h.hexdigest()[:16]


def make_view(photo: np.ndarray, rng: np.random.Generator, size: int = 224) -> np.ndarray:
    """One augmented view of ``photo`` (H, W, 3) uint8 -> (size, size, 3) uint8.

    Random resized crop, horizontal flip, colour jitter (see the module docstring); all
    randomness comes from ``rng``, drawn in a fixed order.
    """
    from PIL import Image

    if photo.ndim != 3 or photo.shape[2] != 3 or photo.dtype != np.uint8:
        raise InputError(f"photo must be (H, W, 3) uint8, got {photo.shape} {photo.dtype}")
    h, w = photo.shape[:2]
    # crop box: up to 10 tries at the drawn area/ratio, else the largest centred square
    for _ in range(10):
        area = h * w * rng.uniform(*SCALE)
        ratio = float(np.exp(rng.uniform(np.log(RATIO[0]), np.log(RATIO[1]))))
        cw, ch = int(round(np.sqrt(area * ratio))), int(round(np.sqrt(area / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            break
    else:
        cw = ch = min(h, w)
        x0, y0 = (w - cw) // 2, (h - ch) // 2
    flip = bool(rng.random() < 0.5)
    bright, contrast, sat = rng.uniform(1 - JITTER, 1 + JITTER, size=3)
    img = Image.fromarray(photo).resize((size, size), Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    x = np.asarray(img, dtype=np.float32)
    if flip:
        x = x[:, ::-1]
    x = x * bright
    luma = np.array([0.299, 0.587, 0.114], dtype=np.float32)  # ITU-R 601
    mean = float((x @ luma).mean())
    x = mean + contrast * (x - mean)
    grey = (x @ luma)[..., None]
    x = grey + sat * (x - grey)
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def view(photos: Sequence[np.ndarray], photo: int, index: int, *, seed: int = 0, size: int = 224) -> np.ndarray:
    """View ``index`` of ``photos[photo]``, (size, size, 3) uint8, from generator (seed, photo, index)."""
    return make_view(photos[photo], np.random.default_rng([seed, photo, index]), size)


def view_batches(
    photos: Sequence[np.ndarray], per_photo: int, *, seed: int = 0, size: int = 224, batch: int = 32
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """All ``len(photos) * per_photo`` views in photo-major order, ``batch`` at a time.

    -> (images (b, size, size, 3) uint8, photo index (b,) int64) per batch.
    """
    if per_photo < 1 or batch < 1 or not photos:
        raise InputError(f"need photos, per_photo >= 1 and batch >= 1 (got {len(photos)}, {per_photo}, {batch})")
    order = [(i, j) for i in range(len(photos)) for j in range(per_photo)]
    for s in range(0, len(order), batch):
        chunk = order[s : s + batch]
        imgs = np.stack([view(photos, i, j, seed=seed, size=size) for i, j in chunk])
        yield imgs, np.array([i for i, _ in chunk], dtype=np.int64)
