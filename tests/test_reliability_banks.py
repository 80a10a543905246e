"""Banks keep the one-line promise and never answer silently wrong (through ``main(argv)``,
and subprocesses for concurrency):

  * two ``index build --append`` runs started together both keep their entry (the lock
    serialises them) and the bank opens with every entry;
  * the same signature twice (one build, another spelling of its path, a symlink, a
    byte-identical copy, appended again) is refused naming both;
  * a damaged bank file gives the undamaged answer or a one-line refusal naming the file,
    never another answer (a seeded random-damage property test over every bank file);
  * ``index dedup`` refuses a --tol or --screen that is not finite or out of range.
"""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from updatescope.cli import main
from updatescope.signatures.bank import open_bank
from updatescope.signatures.io import save_signature
from updatescope.sketch.fishersketch import FisherSketch

FILES = ("bank.json", "rows.jsonl", "vectors.f32", "state.f64")


def _refused(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("updatescope: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def _ok(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def _sig(path, seed, base=None):
    """A small signature; ``base`` given: a near-duplicate of that seed's data (same corpus,
    other noise), so dedup has something to find."""
    g = torch.Generator().manual_seed(base if base is not None else seed)
    a = torch.randn(40, 8, generator=g, dtype=torch.float64)
    e = torch.randn(40, 5, generator=g, dtype=torch.float64)
    if base is not None:
        g2 = torch.Generator().manual_seed(seed)
        a = a + 0.01 * torch.randn(40, 8, generator=g2, dtype=torch.float64)
    save_signature(FisherSketch(8, 5, 64, 0).update(a, e).signature(name=path.stem), path)
    return path


@pytest.fixture
def sigs(tmp_path):
    d = tmp_path / "sigs"
    d.mkdir()
    out = {f"s{i}": _sig(d / f"s{i}.safetensors", i) for i in range(5)}
    out["s0dup"] = _sig(d / "s0dup.safetensors", 100, base=0)
    return out


def test_concurrent_appends_keep_both_entries(tmp_path, sigs):
    """Two appends started together, a few rounds: each round ends with both entries (the
    lock serialises them) or one refused with one line, and the bank always opens."""
    bank = tmp_path / "bank"
    assert main(["index", "build", str(sigs["s0"]), "--out", str(bank)]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), *sys.path])}
    expected = {"s0"}
    for rnd in range(3):
        new = [_sig(tmp_path / f"r{rnd}{k}.safetensors", 1000 + 10 * rnd + k) for k in range(2)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "updatescope", "index", "build", str(p), "--out", str(bank), "--append"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p in new
        ]
        for p, proc in zip(new, procs):
            out, err = proc.communicate(timeout=300)
            if proc.returncode == 0:
                expected.add(p.stem)
            else:
                assert proc.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        b = open_bank(bank)
        assert set(b.names) == expected and len(b) == len(expected)
        b.verify_vectors()
        for i in range(len(b)):
            b.signature(i)  # every state row matches its checksum
    assert len(expected) == 7  # with the lock, no append had to be refused


def test_the_same_signature_twice_is_refused(tmp_path, sigs, capsys, monkeypatch):
    bank = tmp_path / "bank"
    s0 = sigs["s0"]
    link = tmp_path / "link.safetensors"
    link.symlink_to(s0)
    copy = tmp_path / "copy.safetensors"
    shutil.copyfile(s0, copy)
    monkeypatch.chdir(s0.parent)
    # within one build: the same path twice, ./x against an absolute path, a symlink, a copy
    for other in (s0, "./s0.safetensors", link, copy):
        err = _refused(capsys, "index", "build", s0, other, "--out", bank)
        assert "same signature" in err and "bit for bit" in err and "s0" in err, err
        assert not bank.exists()  # refused before anything was written
    # a folder and a file inside it
    err = _refused(capsys, "index", "build", s0.parent, s0, "--out", bank)
    assert "same signature" in err
    assert not bank.exists()
    # appended again, under every other spelling of its path: refused naming the entry
    _ok(capsys, "index", "build", s0, sigs["s1"], "--out", bank)
    for other in (s0, "./s0.safetensors", "../sigs/s0.safetensors", link, copy):
        err = _refused(capsys, "index", "build", other, "--out", bank, "--append")
        assert "same signature" in err and "'s0'" in err, err
    assert open_bank(bank).names == ["s0", "s1"]
    # a near-duplicate (other data, so another state) is a new entry, not a refused duplicate
    _ok(capsys, "index", "build", sigs["s0dup"], "--out", bank, "--append")
    assert len(open_bank(bank)) == 3


@pytest.mark.parametrize("tol", ["nan", "inf", "-inf", "-0.1", "1", "1e400"])
def test_dedup_refuses_tol_out_of_range(tmp_path, sigs, capsys, tol):
    bank = tmp_path / "bank"
    _ok(capsys, "index", "build", sigs["s0"], sigs["s1"], "--out", bank)
    err = _refused(capsys, "index", "dedup", bank, f"--tol={tol}")
    assert "--tol" in err
    for screen in ("nan", "inf", "0", "-1", "2"):
        assert "--screen" in _refused(capsys, "index", "dedup", bank, f"--screen={screen}")


def test_zeroed_vector_row_is_refused_not_answered(tmp_path, sigs, capsys):
    bank = tmp_path / "bank"
    _ok(capsys, "index", "build", *[sigs[f"s{i}"] for i in range(1, 5)], "--out", bank)
    argv = ["index", "query", bank, "--target", sigs["s0"], "--json"]
    _ok(capsys, *argv)
    m = open_bank(bank).config.sketch_dim
    with open(bank / "vectors.f32", "r+b") as fh:
        fh.seek(2 * m * 4)
        fh.write(bytes(m * 4))  # row 2 zeroed
    err = _refused(capsys, *argv)
    assert "vectors.f32" in err and "row 2" in err
    assert "vectors.f32" in _refused(capsys, "index", "dedup", bank)


def _damage(path, rng):
    """One random damage of ``path``: zeroed, flipped, overwritten, truncated or extended bytes."""
    data = bytearray(path.read_bytes())
    kind = rng.choice(["zero", "flip", "random", "truncate", "extend"])
    if kind == "extend" or not data:
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == "truncate":
        data = data[: rng.randrange(len(data))]
    else:
        start = rng.randrange(len(data))
        for i in range(start, min(len(data), start + rng.choice([1, 4, 8, 64, 4096]))):
            data[i] = 0 if kind == "zero" else data[i] ^ rng.randint(1, 255) if kind == "flip" else rng.randrange(256)
    path.write_bytes(bytes(data))
    return kind


def test_random_damage_gives_the_right_answer_or_one_line(tmp_path, sigs, capsys):
    """Property test (seeded, 60 trials): damage a random bank file at a random offset, length
    and kind; ``index query`` and ``index dedup`` then give exactly the undamaged answer or a
    one-line refusal (exit 2).  Both outcomes occur."""
    pristine = tmp_path / "pristine"
    _ok(capsys, "index", "build", *sigs.values(), "--out", pristine)
    target = _sig(tmp_path / "t.safetensors", 77, base=1)
    bank = tmp_path / "bank"
    shutil.copytree(pristine, bank)
    commands = (
        ["index", "query", bank, "--target", target, "--json", "--top", "3"],
        ["index", "dedup", bank, "--json"],
    )
    truth = [_ok(capsys, *argv) for argv in commands]
    assert json.loads(truth[1])["duplicates"]  # s0 and its near-duplicate: dedup has an answer to change
    rng = random.Random(0)
    outcomes = {"same": 0, "refused": 0}
    for _ in range(60):
        shutil.rmtree(bank)
        shutil.copytree(pristine, bank)
        name = rng.choice(FILES)
        kind = _damage(bank / name, rng)
        for argv, want in zip(commands, truth):
            rc = main([str(a) for a in argv])
            out, err = capsys.readouterr()
            if rc == 0:
                assert out == want, (name, kind, out)
                outcomes["same"] += 1
            else:
                assert rc == 2 and err.startswith("updatescope: error:") and err.count("\n") == 1, (name, kind, err)
                assert "Traceback" not in err and not out, err
                outcomes["refused"] += 1
    assert outcomes["same"] and outcomes["refused"] > 40, outcomes


def test_checksum_keys_inside_metadata_do_not_confuse_the_bank(tmp_path, capsys):
    """Row checksums are read without parsing the row: a signature whose own metadata holds
    keys of the same names still verifies against the row's real checksums."""
    g = torch.Generator().manual_seed(3)
    a, e = torch.randn(30, 8, generator=g, dtype=torch.float64), torch.randn(30, 5, generator=g, dtype=torch.float64)
    sig = FisherSketch(8, 5, 64, 0).update(a, e).signature(name="odd", sha256_vector="0" * 64, sha256_state="f" * 64)
    save_signature(sig, tmp_path / "odd.safetensors")
    other = _sig(tmp_path / "t.safetensors", 4)
    _ok(capsys, "index", "build", tmp_path / "odd.safetensors", "--out", tmp_path / "bank")
    out = json.loads(_ok(capsys, "index", "query", tmp_path / "bank", "--target", other, "--json"))
    assert [r["source"] for r in out["rows"]] == ["odd"]
    err = _refused(capsys, "index", "build", tmp_path / "odd.safetensors", "--out", tmp_path / "bank", "--append")
    assert "same signature" in err
