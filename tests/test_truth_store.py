"""The truth store (a LoRA ground truth finished in several sittings, on other machines), the
ceiling over seeds and eval sequences, and the pre-registered natural-shift baselines and
verdicts, on a tiny random Llama and synthetic word domains."""

import hashlib
import math

import numpy as np
import pytest

from _tiny_lm import TINY_LORA, loader, reproduce
from updatescope.errors import InputError
from updatescope.experiments import heads, scoring
from updatescope.experiments import selection as source_selection
from updatescope.experiments.groundtruth import lora
from updatescope.experiments.source_selection import runner

VOCAB = {
    "a": "alpha beta gamma delta",
    "b": "one two three four",
    "c": "red green blue cyan",
    "d": "alpha two red four",
}
CFG = {
    "domains": ["dom_a", "dom_b", "dom_c", "dom_d"],
    "tokens": {"sketch": 40, "train": 40, "eval": 40},
    "sketch_dim": 64,
    "exact_n": 30,
    "baseline_n": 30,
    "gt_seeds": 2,
    "lora": TINY_LORA,
}
FINETUNE = lora.finetune_lora
#: timings differ between runs; every other number must not
TIMING = {"finetune_seconds", "method_seconds", "seconds"}


def _texts(salt_shift: int = 0):
    def texts(name, split, max_chars):
        words = VOCAB[name[-1]].split()
        salt = {"sketch": 0, "train": 1, "eval": 2}[split] + salt_shift
        return [" ".join(words[(i * 7 + j + salt) % 4] for j in range(20)) for i in range(4)]

    return texts


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=128))
    monkeypatch.setattr(source_selection, "load_texts", _texts())
    monkeypatch.setattr(source_selection, "family_of", lambda n: "fam_" + ("x" if n[-1] in "ab" else "y"))
    return tmp_path


class SittingEnds(Exception):
    """The end of a sitting in the middle of a run."""


def _fresh_machine(monkeypatch, tmp_path, name):
    """A new machine-local cache: nothing computed before is found there."""
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / f"cache_{name}"))


def _count_finetunes(monkeypatch, stop_after=None):
    calls = []
    real = FINETUNE

    def counted(*a, **kw):
        if stop_after is not None and len(calls) >= stop_after:
            raise SittingEnds
        calls.append(kw["seed"])
        return real(*a, **kw)

    monkeypatch.setattr(lora, "finetune_lora", counted)
    return calls


def _strip_timing(x):
    if isinstance(x, dict):
        return {k: _strip_timing(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_strip_timing(v) for v in x]
    return x


def test_interrupted_run_finishes_on_another_machine_with_the_same_numbers(tiny, monkeypatch):
    store = tiny / "store"
    _fresh_machine(monkeypatch, tiny, "reference")
    calls = _count_finetunes(monkeypatch)
    ref = reproduce("source-selection", tiny / "ref", CFG)
    assert len(calls) == 8  # 4 sources x 2 seeds

    # first sitting: one seed and one source of the next, then the sitting is cut off
    _fresh_machine(monkeypatch, tiny, "first")
    calls = _count_finetunes(monkeypatch, stop_after=5)
    with pytest.raises(SittingEnds):
        reproduce("source-selection", tiny / "first", {**CFG, "truth_store": str(store)})
    files = sorted(p.relative_to(store).as_posix() for p in store.rglob("*.json.gz"))
    # filed by ground-truth seed (0, then 1000): seed 0 whole, the first source of seed 1000
    assert files == [f"seed0/dom_{x}.json.gz" for x in "abcd"] + ["seed1000/dom_a.json.gz"]
    assert not list(store.rglob("*.tmp"))  # written atomically

    # second sitting on a machine without the caches: only the 3 missing fine-tunings run
    _fresh_machine(monkeypatch, tiny, "second")
    calls = _count_finetunes(monkeypatch)
    res = reproduce("source-selection", tiny / "second", {**CFG, "truth_store": str(store)})
    assert len(calls) == 3
    assert len(list(store.rglob("*.json.gz"))) == 8
    assert _strip_timing(res["metrics"]) == _strip_timing(ref["metrics"])
    assert res["metrics"]["ground_truth"]["transfer"] == ref["metrics"]["ground_truth"]["transfer"]

    # a third sitting has nothing left to fine-tune
    _fresh_machine(monkeypatch, tiny, "third")
    calls = _count_finetunes(monkeypatch)
    again = reproduce("source-selection", tiny / "third", {**CFG, "truth_store": str(store)})
    assert calls == [] and _strip_timing(again["metrics"]) == _strip_timing(ref["metrics"])


@pytest.mark.parametrize(
    "change, part",
    [
        ({"lora": {**CFG["lora"], "lr": 2e-2}}, "recipe.lr"),
        ({"tokens": {"sketch": 40, "train": 40, "eval": 30}}, "tokens.eval"),
        ("texts", "eval_text"),
    ],
)
def test_a_store_of_another_configuration_is_refused_naming_the_file(tiny, monkeypatch, change, part):
    store = tiny / "store"
    _fresh_machine(monkeypatch, tiny, "first")
    reproduce("source-selection", tiny / "first", {**CFG, "truth_store": str(store)})
    _fresh_machine(monkeypatch, tiny, "second")
    if change == "texts":
        monkeypatch.setattr(source_selection, "load_texts", _texts(salt_shift=1))
        change = {}
    with pytest.raises(InputError, match=rf"truth store: .*seed0.dom_a\.json\.gz .*{part}") as err:
        reproduce("source-selection", tiny / "second", {**CFG, **change, "truth_store": str(store)})
    assert "\n" not in str(err.value)


def test_truth_store_needs_a_lora_truth():
    from updatescope.experiments import configure

    with pytest.raises(InputError, match="truth_store"):
        configure("source-selection", settings={"truth_store": "x", "ground_truth": "head"})
    assert configure("source-selection", settings={"truth_store": "somewhere"}).truth_store == "somewhere"


def _sequences(n_seeds, targets, sources, n_seq, seed_sd, seq_sd, rng):
    """Per-sequence losses with a true source effect, seed noise per (seed, pair) and eval
    noise per sequence (the same for every seed: the eval sample is shared)."""
    tok = {t: [10] * n_seq for t in targets}
    base = {t: [30.0] * n_seq for t in targets}
    effect = {t: {s: 0.1 * i for i, s in enumerate(sources)} for t in targets}
    seq_noise = {t: {s: rng.normal(0, seq_sd, n_seq) for s in sources} for t in targets}
    by_seed = []
    for _ in range(n_seeds):
        tab = {}
        for t in targets:
            tab[t] = {}
            for s in sources:
                shift = effect[t][s] + rng.normal(0, seed_sd)
                tab[t][s] = [30.0 - 10 * shift + 10 * e for e in seq_noise[t][s]]
        by_seed.append(tab)
    mean = {t: {s: list(np.mean([b[t][s] for b in by_seed], 0)) for s in sources} for t in targets}
    return {"base": base, "tokens": tok, "loss": mean}, by_seed


def test_the_ceiling_counts_eval_noise_the_seed_ceiling_misses():
    rng = np.random.default_rng(0)
    targets, sources = [f"t{i}" for i in range(8)], [f"s{i}" for i in range(6)]
    # no eval noise, no seed noise: a perfect ceiling
    seq, by_seed = _sequences(3, targets, sources, 8, 0.0, 0.0, rng)
    c = scoring.seed_and_eval_ceiling(seq, by_seed)
    assert c["spearman"]["mean"] == pytest.approx(1.0) and c["top1"]["mean"] == pytest.approx(1.0)
    # eval noise only: every seed agrees exactly, so the seed-only ceiling is perfect, but the
    # ceiling over seeds and eval sequences is not
    seq, by_seed = _sequences(3, targets, sources, 8, 0.0, 0.4, rng)
    tables = []
    for tab in by_seed:
        tables.append(
            {
                t: {s: (sum(seq["base"][t]) - sum(v)) / sum(seq["tokens"][t]) for s, v in row.items()}
                for t, row in tab.items()
            }
        )
    mean_tab = {t: {s: float(np.mean([tb[t][s] for tb in tables])) for s in sources} for t in targets}
    gt = {
        "transfer": mean_tab,
        "transfer_se": {t: dict.fromkeys(sources, 0.0) for t in targets},
        "transfer_by_seed": tables,
        "eval_sequences": seq,
        "eval_sequences_by_seed": by_seed,
    }
    noise = scoring.truth_noise(gt)
    assert noise["ceiling_noise"] == "seeds and eval sequences"
    assert noise["ceiling_seeds_only"]["spearman"]["mean"] == pytest.approx(1.0)
    assert noise["ceiling"]["spearman"]["mean"] < 0.9
    # without per-seed sequences the ceiling stays the seed-only one, and says so
    old = scoring.truth_noise({k: v for k, v in gt.items() if k != "eval_sequences_by_seed"})
    assert old["ceiling_noise"] == "seeds" and "ceiling_seeds_only" not in old


def test_derived_baselines_by_hand():
    fams = {"x1": "smiles", "x2": "smiles_nci", "c1": "code", "c2": "code", "w1": "wiki"}
    names = list(fams)
    cka = {t: {s: 0.1 * (i + 1) for i, s in enumerate(names) if s != t} for t in names}
    act = {t: {s: 0.5 for s in names if s != t} for t in names}
    err = {t: {s: (0.2 if s == "w1" else 0.4) for s in names if s != t} for t in names}
    extra = runner.derived_scores(fams)({"fisher": cka, "cka": cka, "activation": act, "error": err})
    # one SMILES family: the two collections are one family, code stays code
    assert extra["family1"]["x1"] == {"x2": 1.0, "c1": 0.0, "c2": 0.0, "w1": 0.0}
    # family label first, CKA inside each group: for c1, c2 (same family) on top, then by CKA
    fc = extra["family_cka"]["c1"]
    assert sorted(fc, key=fc.get, reverse=True) == ["c2", "w1", "x2", "x1"]
    assert extra["product"]["c1"]["w1"] == pytest.approx(0.1) and extra["product"]["c1"]["x1"] == pytest.approx(0.2)
    assert "exact_product" not in extra


def test_tiny_run_reports_the_preregistered_verdicts(tiny, monkeypatch):
    _fresh_machine(monkeypatch, tiny, "one")
    res = reproduce("source-selection", tiny / "out", CFG)
    m = res["metrics"]
    assert res["config"]["preregistration_sha256"] == hashlib.sha256(runner.PREREG.read_bytes()).hexdigest()
    v = m["verdicts"]
    assert [r["comparison"] for r in v["primary"]] == [c[0] for c in runner.PRESPECIFIED]
    assert all(r["family_size"] == 4 and r["p_holm"] >= r["p"] for r in v["primary"])
    assert v["powered"] is False and v["n_full_eval_targets"] == 0
    assert v["statement"].startswith(("A_F beats", "error-only", "A_F does not beat"))
    for method in ("family1", "family_cka", "product", "exact_product"):
        assert method in m["scores"] and "top1" in m["summary"][method]
    for pair in ("fisher - error", "fisher - product", "fisher - family1", "fisher - family_cka"):
        assert m["paired"][pair]["spearman"]["n"] == 4
    noise = m["truth_noise"]
    assert noise["ceiling_noise"] == "seeds and eval sequences" and "ceiling_seeds_only" in noise
    assert len(m["ground_truth"]["eval_sequences_by_seed"]) == 2
    assert all(math.isfinite(r["p"]) for r in v["primary"])


@pytest.mark.parametrize("sign, word, start", [(1, "better", "A_F beats"), (-1, "worse", "error-only")])
def test_preregistered_statement_follows_the_first_comparison(sign, word, start):
    from updatescope.experiments.configs import SelectionConfig

    targets = [f"t{i}" for i in range(8)]

    def method(v):
        return {"spearman": {"per_target": dict.fromkeys(targets, v), "excluded": {}}}

    by = {"fisher": method(0.5), "error": method(0.5 - sign * 0.4), "product": method(0.5), "cka": method(0.5)}
    cfg = SelectionConfig.defaults(quick=True)
    v = runner.preregistered_verdicts(by, cfg, {t: 6400 if i < 3 else 400 for i, t in enumerate(targets)})
    first = v["primary"][0]
    # 8 differences of one sign: exact sign-flip p = 2 / 2^8, Holm over 4 comparisons
    assert first["p"] == pytest.approx(2 / 256) and first["p_holm"] == pytest.approx(4 * 2 / 256)
    assert first["word"] == word and v["statement"].startswith(start)
    assert [r["word"] for r in v["primary"][1:]] == ["no difference"] * 3  # ties, and family1 missing
    assert v["n_full_eval_targets"] == 3 and v["full_eval_targets"][0]["n_targets"] == 3
    assert v["powered"] is False


# ------------------------------------------------------------------ several processes, one store
def _sleeper():
    """A live process of this host that is not this one (a claimant that has not finished)."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _claim_of(proc_or_pid, **over):
    import socket
    import time

    from updatescope.experiments.groundtruth import store as st

    pid = proc_or_pid if isinstance(proc_or_pid, int) else proc_or_pid.pid
    return {"host": socket.gethostname(), "pid": pid, "start": st._process_start(pid), "time": time.time(), **over}


def _write_claim(store, source, seed, holder):
    import json

    path = store.claim_path(source, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(holder))
    return path


def test_claims_keep_one_computation_per_result(tmp_path):
    import json
    import os
    import time

    from updatescope.experiments.groundtruth.store import CLAIM_TTL, TruthStore

    store = TruthStore(tmp_path, {"model": "m"}, {"train": {"a": "x"}, "eval": {"a": "y"}})
    assert store.claim("a", 0) is None  # made
    path = store.claim_path("a", 0)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert store.claim("a", 0) is None  # already this process's
    store.release("a", 0)
    assert not path.exists()

    proc = _sleeper()
    try:
        _write_claim(store, "a", 0, _claim_of(proc))
        held = store.claim("a", 0)
        assert held is not None and str(proc.pid) in held  # a live process of this host keeps it
        store.release("a", 0)  # not ours: left alone
        assert path.exists()
    finally:
        proc.kill()
        proc.wait()
    assert store.claim("a", 0) is None  # its process is gone: taken over
    assert json.loads(path.read_text())["pid"] == os.getpid()
    store.release("a", 0)

    # a process id reused by another process (other start time) does not hold the claim
    _write_claim(store, "a", 0, _claim_of(os.getpid(), start="0"))
    assert store.claim("a", 0) is None
    store.release("a", 0)

    # another host: held until the claim is older than CLAIM_TTL
    _write_claim(store, "a", 0, {"host": "elsewhere", "pid": 1, "start": "1", "time": time.time()})
    assert "elsewhere" in (store.claim("a", 0) or "")
    _write_claim(store, "a", 0, {"host": "elsewhere", "pid": 1, "start": "1", "time": time.time() - CLAIM_TTL - 1})
    assert store.claim("a", 0) is None
    store.release("a", 0)

    # a claim with fields of the wrong type (not one this code writes) is abandoned
    for bad in ({"host": "elsewhere", "pid": "x", "time": "soon"}, {"host": "elsewhere", "pid": 1, "time": 1e300}):
        _write_claim(store, "a", 0, bad)
        assert store.claim("a", 0) is None
        store.release("a", 0)

    # an unreadable claim: being written while young, abandoned once old
    path.write_bytes(b"\xff{")
    assert store.claim("a", 0) == "a process writing its claim"
    old = time.time() - 120
    os.utime(path, (old, old))
    assert store.claim("a", 0) is None
    store.release("a", 0)
    assert not list(tmp_path.rglob("*.stale"))  # stale claims are moved aside, then removed


def test_claimed_looks_claims_looks_again_and_always_releases(tmp_path):
    from updatescope.experiments.groundtruth.store import TruthStore, settle

    store = TruthStore(tmp_path, {"model": "m"}, {})
    saved: dict[str, int] = {}
    got = store.claimed("a", 0, lambda: saved.get("a"), lambda: saved.setdefault("a", 7))
    assert got == (7, False, None) and not store.claim_path("a", 0).exists()
    assert store.claimed("a", 0, lambda: saved.get("a"), lambda: pytest.fail("computed twice")) == (7, True, None)

    looks = iter([None, 5])  # saved by another process between the first look and the claim
    got = store.claimed("b", 0, lambda: next(looks), lambda: pytest.fail("computed a saved result"))
    assert got == (5, True, None) and not store.claim_path("b", 0).exists()

    with pytest.raises(RuntimeError):  # a failed computation leaves no claim behind
        store.claimed("c", 0, lambda: None, lambda: (_ for _ in ()).throw(RuntimeError("stop")))
    assert not store.claim_path("c", 0).exists()

    proc = _sleeper()
    try:
        _write_claim(store, "d", 0, _claim_of(proc))
        got = store.claimed("d", 0, lambda: None, lambda: pytest.fail("computed a claimed result"))
        assert got.value is None and str(proc.pid) in got.holder
    finally:
        proc.kill()
        proc.wait()

    # settle: one pass, told what was passed over, then retries only those until done
    tries: dict[str, int] = {}
    passed: list[list[str]] = []

    def attempt(x: str, first: bool) -> bool:
        tries[x] = tries.get(x, 0) + 1
        assert first == (tries[x] == 1)
        return x != "late" or tries[x] == 3

    settle(["a", "late", "b"], attempt, lambda: 0.0, passed.append)
    assert tries == {"a": 1, "late": 3, "b": 1} and passed == [["late"]]


def test_two_processes_on_one_store_split_the_work(tiny, monkeypatch):
    """A result claimed by another live process is not fine-tuned again: the run goes on, then
    waits for it to appear in the store, and ends with the same numbers as a run alone."""
    import shutil
    import threading
    import time

    from updatescope.experiments.groundtruth.store import TruthStore

    ref_store = tiny / "ref_store"
    _fresh_machine(monkeypatch, tiny, "reference")
    ref = reproduce("source-selection", tiny / "ref", {**CFG, "truth_store": str(ref_store)})

    store_dir = tiny / "shared"
    claims = TruthStore(store_dir, {}, {})
    proc = _sleeper()
    claim = _write_claim(claims, "dom_b", 0, _claim_of(proc))
    monkeypatch.setattr(lora, "CLAIM_POLL", 0.05)

    def other_process():  # saves its result once the run has gone past it, then releases
        deadline = time.time() + 300
        while len(list((store_dir / "seed0").glob("*.json.gz"))) < 3 and time.time() < deadline:
            time.sleep(0.05)
        shutil.copy(ref_store / "seed0" / "dom_b.json.gz", store_dir / "seed0" / "dom_b.json.gz")
        claim.unlink()

    helper = threading.Thread(target=other_process)
    helper.start()
    try:
        _fresh_machine(monkeypatch, tiny, "shared")
        calls = _count_finetunes(monkeypatch)
        res = reproduce("source-selection", tiny / "run", {**CFG, "truth_store": str(store_dir)})
    finally:
        helper.join()
        proc.kill()
        proc.wait()
    assert len(calls) == 7  # 4 sources x 2 seeds, less the one the other process made
    assert _strip_timing(res["metrics"]) == _strip_timing(ref["metrics"])
    assert not list(store_dir.rglob("*.claim"))  # every claim released


def test_a_claim_whose_process_stopped_is_taken_over(tiny, monkeypatch):
    from updatescope.experiments.groundtruth.store import TruthStore

    store_dir = tiny / "store"
    proc = _sleeper()
    holder = _claim_of(proc)
    proc.kill()
    proc.wait()
    _write_claim(TruthStore(store_dir, {}, {}), "dom_c", 1000, holder)
    _fresh_machine(monkeypatch, tiny, "alone")
    calls = _count_finetunes(monkeypatch)
    reproduce("source-selection", tiny / "run", {**CFG, "truth_store": str(store_dir)})
    assert len(calls) == 8 and len(list(store_dir.rglob("*.json.gz"))) == 8
    assert not list(store_dir.rglob("*.claim"))
