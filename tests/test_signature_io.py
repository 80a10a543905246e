"""Signature files: round trip, and one-line refusals of corrupt, truncated, foreign or newer files."""

import json

import pytest
import torch
from safetensors.torch import save_file

import updatescope as us


@pytest.fixture
def sig():
    g = torch.Generator().manual_seed(0)
    a, z = torch.randn(20, 5, generator=g), torch.randn(20, 8, generator=g)
    y = torch.randint(0, 8, (20,), generator=g)
    return us.FisherSketch(5, 8, sketch_dim=64, seed=4, fingerprint="f00d").update_logits(a, z, y).signature(data="toy")


def test_round_trip(sig, tmp_path):
    p = us.save_signature(sig, tmp_path / "s.safetensors")
    back = us.load_signature(p)
    assert back.config == sig.config
    assert (
        torch.equal(back.sums, sig.sums) and torch.equal(back.diag, sig.diag) and torch.equal(back.counts, sig.counts)
    )
    assert back.meta["data"] == "toy"
    assert list(tmp_path.iterdir()) == [p]  # no temporary left behind


def _one_line(exc):
    return "\n" not in str(exc.value)


def test_missing_empty_and_folder(tmp_path):
    with pytest.raises(us.SignatureFileError, match="not found") as e:
        us.load_signature(tmp_path / "nope.safetensors")
    assert _one_line(e)
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(us.SignatureFileError, match="empty"):
        us.load_signature(tmp_path / "empty.safetensors")
    with pytest.raises(us.SignatureFileError, match="folder"):
        us.load_signature(tmp_path)


def test_truncated_and_garbage(sig, tmp_path):
    p = us.save_signature(sig, tmp_path / "s.safetensors")
    data = p.read_bytes()
    (tmp_path / "t.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(us.SignatureFileError, match="corrupt, truncated") as e:
        us.load_signature(tmp_path / "t.safetensors")
    assert _one_line(e)
    (tmp_path / "g.safetensors").write_bytes(b"\x00\x01binary junk" * 50)
    with pytest.raises(us.SignatureFileError):
        us.load_signature(tmp_path / "g.safetensors")


def test_foreign_newer_and_tampered(sig, tmp_path):
    save_file({"w": torch.zeros(3)}, str(tmp_path / "foreign.safetensors"), metadata={"format": "pt"})
    with pytest.raises(us.SignatureFileError, match="not an updatescope signature"):
        us.load_signature(tmp_path / "foreign.safetensors")
    meta = {"format": "updatescope-signature", "format_version": "99", "config": json.dumps(sig.config.to_dict())}
    save_file(sig.state_dict(), str(tmp_path / "new.safetensors"), metadata=meta)
    with pytest.raises(us.SignatureFileError, match="newer"):
        us.load_signature(tmp_path / "new.safetensors")
    meta["format_version"] = "1"
    bad = sig.state_dict()
    bad["sums"] = bad["sums"][:, :, :32].contiguous()
    save_file(bad, str(tmp_path / "shape.safetensors"), metadata=meta)
    with pytest.raises(us.SignatureFileError, match="shape"):
        us.load_signature(tmp_path / "shape.safetensors")
    nan = sig.state_dict()
    nan["sums"][0, 0, 0] = float("nan")
    save_file(nan, str(tmp_path / "nan.safetensors"), metadata=meta)
    with pytest.raises(us.SignatureFileError, match="NaN"):
        us.load_signature(tmp_path / "nan.safetensors")


def test_incompatible_after_load(sig, tmp_path):
    other = us.FisherSketch(5, 8, sketch_dim=64, seed=5).update(torch.randn(4, 5), torch.randn(4, 8)).signature()
    us.save_signature(other, tmp_path / "o.safetensors")
    with pytest.raises(us.IncompatibleSignatureError, match="seed differs"):
        us.alignment(sig, us.load_signature(tmp_path / "o.safetensors"))
