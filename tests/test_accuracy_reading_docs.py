"""docs/accuracy_reading.py decides each claim of docs/accuracy.md's readings by its rule: a
copy of a record with numbers changed flips the claim (the blocks themselves are checked
against the records by tests/test_benchmark_docs.py)."""

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "benchmarks" / "results"
EST = ["estimator_accuracy.json", "estimator_accuracy_dense_srht.json"]
REF = ["accuracy_vs_reference.json", "accuracy_vs_reference_dense_srht.json"]


def _recs(names: list[str]) -> list[dict]:
    return [json.loads((RES / n).read_text()) for n in names]


def test_estimator_reading_follows_the_records():
    mod = docs_script("accuracy_reading")
    cur, old = _recs(EST)
    text = "\n".join(mod.estimator_lines([cur, old], EST))
    assert "Spearman +0.02, near 0" in text
    assert "fisher median |err| larger at 4 of 6 sketch sizes (256, 2,048, 4,096, 8,192)" in text
    assert "fisher Spearman lower at 256, 512, higher at 2,048" in text
    c2, o2 = copy.deepcopy(cur), copy.deepcopy(old)
    big = c2["metrics"]["K=49152"]["by_dim"]
    big["4096"]["coupling"]["spearman_mean"] = 0.6
    for m, v in big.items():  # the current default now has the smaller error everywhere, same Spearman
        v["fisher"]["median_abs_err_mean"] = o2["metrics"]["K=49152"]["by_dim"][m]["fisher"]["median_abs_err_mean"] / 2
        v["fisher"]["spearman_mean"] = o2["metrics"]["K=49152"]["by_dim"][m]["fisher"]["spearman_mean"]
        v["error"]["median_abs_err_mean"] = 0.01 * (int(m) / 256) ** -1.5
    text = "\n".join(mod.estimator_lines([c2, o2], EST))
    assert "Spearman +0.60, not near 0" in text
    assert "fisher median |err| larger at 0 of 6 sketch sizes (none)" in text
    assert "lower at none, higher at none, about equal (rule: |Δ| < 0.005) at 256, 512" in text
    assert "error -1.50 (about 1/√m, rule: within 0.15 of −0.5: fisher, activation)." in text


def test_reference_reading_flips():
    mod = docs_script("accuracy_reading")
    recs = _recs(REF)
    text = "\n".join(mod.reference_lines(recs, REF))
    assert text.count("on 3 of 3 alignments (fisher, activation, error;") == 2
    r2 = copy.deepcopy(recs[0])
    mean = r2["metrics"]["mean_over_seeds"]
    mean["updatescope"]["error"]["median_abs_err"] = mean["fishersketch"]["error"]["median_abs_err"]
    assert "on 2 of 3 alignments (fisher, activation;" in mod.reference_lines([r2], REF[:1])[0]


def test_reading_refuses_a_missing_record(capsys):
    mod = docs_script("accuracy_reading")
    assert mod.main(["--table", "benchmarks/results/no_such_record.json"]) == 2
    assert "no such record" in capsys.readouterr().err
