"""`updatescope merge`: shard signatures merge into the signature of the whole stream
(halves exact, sums to float64 rounding), with compatibility checks and one-line errors."""

import torch

from updatescope.cli import main
from updatescope.signatures.io import load_signature, save_signature
from updatescope.sketch.fishersketch import FisherSketch


def _stream(n, seed, d=8, k=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(n, k, generator=g, dtype=torch.float64)


def _sig(a, e, seed=0, **meta):
    return FisherSketch(8, 5, 64, seed).update(a, e).signature(**meta)


def test_merge_equals_whole_stream(tmp_path, capsys):
    a, e = _stream(41, 0)
    cuts = [0, 7, 20, 41]  # odd first shard: the second shard's halves must swap
    paths = []
    for i in range(3):
        p = tmp_path / f"s{i}.safetensors"
        save_signature(_sig(a[cuts[i] : cuts[i + 1]], e[cuts[i] : cuts[i + 1]], data=f"part{i}", model="m"), p)
        paths.append(str(p))
    out = tmp_path / "all.safetensors"
    assert main(["merge", *paths, "--out", str(out)]) == 0
    merged, whole = load_signature(out), _sig(a, e)
    assert torch.equal(merged.counts, whole.counts)
    torch.testing.assert_close(merged.sums, whole.sums, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(merged.diag, whole.diag, rtol=1e-12, atol=1e-12)
    assert merged.meta["tokens"] == "41" and merged.meta["data"] == "part0,part1,part2"
    assert merged.meta["model"] == "m" and merged.meta["name"] == "all"
    # negative control: a shard alone is not the whole
    assert not torch.allclose(load_signature(paths[0]).sums, whole.sums)
    assert "41 tokens from 3 signatures" in capsys.readouterr().out


def test_merge_refuses_bad_input(tmp_path, capsys):
    a, e = _stream(10, 1)
    p0, p1, p2 = (tmp_path / f"{n}.safetensors" for n in ("a", "b", "c"))
    save_signature(_sig(a[:5], e[:5]), p0)
    save_signature(_sig(a[5:], e[5:]), p1)
    save_signature(_sig(a, e, seed=1), p2)
    cases = [
        (["merge", str(p0), str(p1), "--out", str(p1)], "also an input"),
        (["merge", str(p0), str(p0), "--out", str(tmp_path / "x.safetensors")], "given twice"),
        (["merge", str(p0), "--out", str(tmp_path / "x.safetensors")], "at least two"),
        (["merge", str(p0), str(p2), "--out", str(tmp_path / "x.safetensors")], "seed differs"),
        (
            ["merge", str(p0), str(tmp_path / "missing.safetensors"), "--out", str(tmp_path / "x.safetensors")],
            "not found",
        ),
    ]
    for argv, needle in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.safetensors").exists()
    assert load_signature(p1).count == 5  # the input named as output was not touched


def test_merge_refuses_a_hard_link_to_the_same_file(tmp_path, capsys):
    import os

    from updatescope.cli import main
    from updatescope.signatures.io import save_signature
    from updatescope.sketch.fishersketch import FisherSketch

    sig = FisherSketch(4, 6, 64, 0).update(torch.randn(10, 4), torch.randn(10, 6)).signature()
    p = save_signature(sig, tmp_path / "a.safetensors")
    link = tmp_path / "b.safetensors"
    os.link(p, link)  # another path, same inode: the same tokens twice
    rc = main(["merge", str(p), str(link), "--out", str(tmp_path / "m.safetensors")])
    err = capsys.readouterr().err
    assert rc == 2 and "given twice" in err and err.count("\n") == 1
    assert not (tmp_path / "m.safetensors").exists()
