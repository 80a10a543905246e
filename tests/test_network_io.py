"""Network signature files: round trip, deterministic bytes, one-line refusal of bad files."""

from __future__ import annotations

import json

import pytest
import torch

import updatescope as us
from updatescope.errors import InputError, SignatureFileError
from updatescope.network import (
    NetworkConfig,
    NetworkSketch,
    load_network_signature,
    network_alignment,
    save_network_signature,
)

LAYERS = (("blocks.0.fc", 5, 3), ("lm_head", 3, 4))


def _data(seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    return {
        name: (torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(n, k, generator=g, dtype=torch.float64))
        for name, d, k in LAYERS
    }


@pytest.fixture
def sk():
    return NetworkSketch(NetworkConfig(LAYERS, 32, 3)).update(_data(0, 9))


def test_round_trip_and_deterministic_bytes(sk, tmp_path):
    p1 = save_network_signature(sk, tmp_path / "a.safetensors", model="tiny", data="x.txt")
    p2 = save_network_signature(sk, tmp_path / "b.safetensors", data="x.txt", model="tiny")
    assert p1.read_bytes() == p2.read_bytes()
    back = load_network_signature(p1)
    assert back.config == sk.config and back.count == sk.count == 9
    assert back.meta == {"model": "tiny", "data": "x.txt"}
    for k in ("sums", "diag", "counts"):
        assert torch.equal(back.state_dict()[k], sk.state_dict()[k])
    # one entry per layer, the layer names in the metadata
    from safetensors import safe_open

    with safe_open(str(p1), framework="pt") as fh:
        keys, meta = set(fh.keys()), fh.metadata()
    assert {"layer.0000.sums", "layer.0001.sums", "full.sums", "counts"} <= keys
    assert json.loads(meta["layers"]) == ["blocks.0.fc", "lm_head"]
    # save -> load -> update equals update without the round trip (odd count: half parity kept)
    more = _data(1, 4)
    a, b = back.update(more), NetworkSketch(sk.config).update(_data(0, 9)).update(more)
    assert torch.equal(a.state_dict()["sums"], b.state_dict()["sums"])
    other = NetworkSketch(sk.config).update(_data(2, 8))
    assert str(network_alignment(a, other).as_dict()) == str(network_alignment(b, other).as_dict())  # NaN-safe
    # a different state gives different bytes (negative control)
    save_network_signature(other, tmp_path / "c.safetensors", model="tiny", data="x.txt")
    assert (tmp_path / "c.safetensors").read_bytes() != p1.read_bytes()


def test_refuses_corrupt_foreign_and_edited_files(sk, tmp_path):
    p = save_network_signature(sk, tmp_path / "a.safetensors")
    raw = bytearray(p.read_bytes())
    raw[-3] ^= 0xFF  # flip bits in the tensor data
    (tmp_path / "flip.safetensors").write_bytes(bytes(raw))
    with pytest.raises(SignatureFileError, match="checksum"):
        load_network_signature(tmp_path / "flip.safetensors")
    (tmp_path / "trunc.safetensors").write_bytes(p.read_bytes()[:-20])
    with pytest.raises(SignatureFileError, match="corrupt"):
        load_network_signature(tmp_path / "trunc.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a file at all")
    with pytest.raises(SignatureFileError):
        load_network_signature(tmp_path / "junk.safetensors")
    with pytest.raises(SignatureFileError, match="not found"):
        load_network_signature(tmp_path / "missing.safetensors")
    # a head signature is refused with a hint, and a network signature by the head loader
    head = us.FisherSketch(5, 8, sketch_dim=32, seed=0).update(torch.randn(4, 5), torch.randn(4, 8)).signature()
    us.save_signature(head, tmp_path / "head.safetensors")
    with pytest.raises(SignatureFileError, match="head signature"):
        load_network_signature(tmp_path / "head.safetensors")
    with pytest.raises(SignatureFileError, match="not an updatescope signature"):
        us.load_signature(p)
    # edited metadata (layer renamed): the checksum covers the config
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(p), framework="pt") as fh:
        meta, tensors = dict(fh.metadata()), {k: fh.get_tensor(k) for k in fh.keys()}
    meta["config"] = meta["config"].replace("lm_head", "lm_hexd")
    meta["layers"] = meta["layers"].replace("lm_head", "lm_hexd")
    save_file(tensors, str(tmp_path / "edit.safetensors"), metadata=meta)
    with pytest.raises(SignatureFileError, match="checksum"):
        load_network_signature(tmp_path / "edit.safetensors")
    meta2 = dict(meta, layers='["x"]')
    save_file(tensors, str(tmp_path / "names.safetensors"), metadata=meta2)
    with pytest.raises(SignatureFileError, match="layer list"):
        load_network_signature(tmp_path / "names.safetensors")
    # every message is one line
    for name in ("flip", "trunc", "junk"):
        with pytest.raises(SignatureFileError) as exc:
            load_network_signature(tmp_path / f"{name}.safetensors")
        assert "\n" not in str(exc.value)


def test_refuses_empty_and_missing_folder(tmp_path):
    empty = NetworkSketch(NetworkConfig(LAYERS, 32, 3))
    with pytest.raises(InputError, match="empty"):
        save_network_signature(empty, tmp_path / "e.safetensors")
    full = NetworkSketch(NetworkConfig(LAYERS, 32, 3)).update(_data(0, 3))
    with pytest.raises(InputError, match="folder"):
        save_network_signature(full, tmp_path / "nope" / "e.safetensors")
