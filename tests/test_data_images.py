"""Built-in photographs: real files from installed wheels, deterministic augmented views."""

import numpy as np
import pytest

from updatescope.data import images
from updatescope.errors import InputError


def test_every_photo_is_a_real_image_file():
    names = images.photo_names()
    assert len(names) == 20 and len(set(names)) == 20
    sizes = set()
    for name in names:
        path = images.photo_path(name)
        head = path.read_bytes()[:8]
        assert head.startswith(b"\x89PNG") or head.startswith(b"\xff\xd8"), name  # PNG or JPEG magic
        x = images.load_photo(name)
        assert x.dtype == np.uint8 and x.ndim == 3 and x.shape[2] == 3 and min(x.shape[:2]) >= 150, name
        # a photograph has many grey levels, not a flat or two-tone pattern
        assert np.unique(x[..., 0]).size > 50 and x.std() > 10, name
        sizes.add(x.shape)
    assert len(sizes) > 5  # different files, not one image repeated


def test_known_content():
    # the portrait is colour, the camera man is grey replicated to RGB
    hopper = images.load_photo("grace_hopper")
    cam = images.load_photo("camera")
    assert hopper.shape == (600, 512, 3) and not np.array_equal(hopper[..., 0], hopper[..., 2])
    assert cam.shape == (512, 512, 3) and np.array_equal(cam[..., 0], cam[..., 2])


def test_unknown_photo_and_bad_input():
    with pytest.raises(InputError, match="unknown photo 'nope'"):
        images.photo_path("nope")
    with pytest.raises(InputError, match="uint8"):
        images.make_view(np.zeros((10, 10), np.uint8), np.random.default_rng(0))
    with pytest.raises(InputError, match="per_photo"):
        next(images.view_batches([np.zeros((8, 8, 3), np.uint8)], 0))


def test_views_shape_dtype_determinism():
    photos = [images.load_photo(n) for n in ("astronaut", "coins", "rocket")]
    batches = list(images.view_batches(photos, 4, seed=3, size=64, batch=5))
    x = np.concatenate([b for b, _ in batches])
    owner = np.concatenate([o for _, o in batches])
    assert [b.shape[0] for b, _ in batches] == [5, 5, 2]
    assert x.shape == (12, 64, 64, 3) and x.dtype == np.uint8
    assert owner.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    # same seed -> same views, whatever the batch size; view j of photo i is addressable
    again = np.concatenate([b for b, _ in images.view_batches(photos, 4, seed=3, size=64, batch=32)])
    assert np.array_equal(x, again)
    assert np.array_equal(x[6], images.view(photos, 1, 2, seed=3, size=64))
    # another seed -> other views; views of one photo differ from each other
    other = np.concatenate([b for b, _ in images.view_batches(photos, 4, seed=4, size=64)])
    assert not np.array_equal(x, other)
    assert not np.array_equal(x[0], x[1])
    # a view is a crop of its photo: the coin views are grey, the astronaut's are not
    assert all(np.array_equal(v[..., 0], v[..., 1]) for v in x[4:8])
    assert not any(np.array_equal(v[..., 0], v[..., 2]) for v in x[:4])
