"""Experiments: one small runner per reproduced claim, ``updatescope reproduce NAME``.

The registry below is the only list of experiments.  Each entry names its folder, a package
under ``updatescope.experiments`` that holds everything of that experiment: ``config.py`` (its
frozen, validated, torch-free config dataclass), ``runner.py`` (``run(config, out_dir: Path) ->
Result``), ``figures.py`` (its figures, from the record's numbers).  The folder's
``__init__.py`` names the config class as ``Config`` and a ``run`` that imports the runner
when called, so the package itself never imports torch.  Folders do not import each other;
what several share lives in the shared modules beside them (``configs``, ``heads``,
``scoring``, ``selection``, ``stats``, ``plotting``, ``caching``, ``groundtruth``).

:func:`configure` builds and validates a config from ``--quick``, ``--seed`` and ``--set``
before anything heavy is imported; :func:`run_experiment` runs it, writes the JSON record
atomically and only then draws the figures, so a missing plotting extra never loses a
finished run.  How to add one: docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from updatescope.constants import EXPERIMENT_SEED_LIMIT, check_seed
from updatescope.errors import InputError, MissingExtraError

__all__ = ["Experiment", "Result", "REGISTRY", "configure", "run_experiment"]


@dataclass
class Result:
    """What a runner returns: its numbers, and the figures to draw from them.

    ``config``: the settings the run used (``asdict`` of its config, plus anything it
    resolved, e.g. the domain list); ``figures``: file name -> function drawing that figure
    at a path (called after the record is written)."""

    name: str
    config: dict[str, Any]
    metrics: dict[str, Any]
    seconds: float
    figures: dict[str, Callable[[Path], Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """One registry line: the ``reproduce`` name, the folder (package under
    ``updatescope.experiments``) and a one-line summary.  ``config``: the folder's ``Config``
    class (a frozen dataclass with ``defaults(quick, seed)``), found there when not given
    (a name: that class of the folder's package, for a folder with two entries)."""

    name: str
    module: str
    summary: str
    config: type | str | None = None

    def __post_init__(self) -> None:
        if self.config is None or isinstance(self.config, str):
            object.__setattr__(self, "config", getattr(self.package(), self.config or "Config"))

    def package(self) -> Any:
        return importlib.import_module(f"updatescope.experiments.{self.module}")

    def runner(self) -> Callable[[Any, Path], Result]:
        return self.package().run


REGISTRY: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "estimator",
            "estimator",
            "sketch vs exact Fisher alignment on SmolLM2 streams and EfficientNet tasks (paper A)",
        ),
        Experiment(
            "source-selection",
            "source_selection",
            "rank 19 candidate domains per target against LoRA transfer (paper A)",
        ),
        Experiment(
            "verbalizer",
            "verbalizer",
            "fixed prompt, answer-word sets: activation-only methods are blind (paper A)",
        ),
        Experiment("coupling-dark", "coupling_dark", "class -> answer mappings only the coupling can see (paper A)"),
        Experiment("routing", "routing", "route requests among LoRA adapters: signatures vs embeddings and PEFT Arrow"),
        Experiment("mixtures", "mixtures", "mixture weights from signatures alone, judged by LoRA at one token budget"),
        Experiment(
            "interference",
            "interference",
            "train on A then B on the synthetic lab: which predictor tracks forgetting; plans vs random orders",
        ),
        Experiment(
            "interference-smollm2",
            "interference",
            "train on A then B with LoRA on SmolLM2 (domains, same-input mappings): predictors vs forgetting; plans",
            config="InterferenceLMConfig",
        ),
        Experiment("smiles", "smiles", "SMILES domains: alignment vs perplexity reduction (paper A)"),
        Experiment(
            "recovery",
            "recovery",
            "recovery after forgetting: capture, drift, rank, Krylov on the synthetic lab (paper B)",
        ),
        Experiment(
            "random-search",
            "random_search",
            "Best-of-N random search in subspaces of the synthetic lab (paper B)",
        ),
        Experiment(
            "network",
            "network",
            "head / block-diagonal / last-k sketches vs the exact full-network Fisher (paper A)",
        ),
        Experiment(
            "steering",
            "steering",
            "CAA vs the pushforward of one gradient step on true/false statements (paper B)",
        ),
        Experiment(
            "sentiment-steering",
            "sentiment_steering",
            "steer neutral news openings toward positive/negative: CAA, one-step pushforward, prompting",
        ),
        Experiment(
            "steering-shadow",
            "steering_shadow",
            "how much of a LoRA fine-tune's activation shadow CAA and one-step shifts span, vs random (paper B)",
        ),
        Experiment(
            "select",
            "select_evidence",
            "top-k documents of a mixed pool by each selector, judged by LoRA fine-tuning on them",
        ),
        Experiment(
            "lora-recovery",
            "lora_recovery",
            "recovery after forgetting with LoRA on SmolLM2: capture in LoRA and BA space (paper B)",
        ),
        Experiment(
            "network-selection",
            "network_selection",
            "LoRA-layer vs head sketch: which predicts the LoRA transfer of a source-selection record",
        ),
        Experiment(
            "llm-search",
            "llm_search",
            "Best-of-N random search around SmolLM2's weights: sigma window, gain vs N, prefix basis (paper B)",
        ),
        Experiment(
            "schedules",
            "schedules",
            "simultaneous multitask vs sequential specialisation: forgetting and recovery cost (paper B)",
        ),
    )
}


def configure(name: str, *, quick: bool = False, seed: int = 0, settings: Mapping[str, Any] | None = None) -> Any:
    """The validated config of experiment ``name``: its defaults for (quick, seed) with the
    ``--set`` settings applied.  InputError (one line) for an unknown name or bad setting."""
    from updatescope.experiments.settings import apply_settings

    if name not in REGISTRY:
        raise InputError(f"unknown experiment {name!r}; available: {', '.join(REGISTRY)}")
    check_seed(seed, "--seed", EXPERIMENT_SEED_LIMIT)
    config = REGISTRY[name].config.defaults(quick, seed)
    if settings:
        config = apply_settings(config, settings)
    return config


def _name_of(config: Any) -> Experiment:
    for exp in REGISTRY.values():
        if type(config) is exp.config:
            return exp
    raise InputError(f"no experiment takes a {type(config).__name__}")


def run_experiment(
    config: Any, out: str | Path, *, figures: bool = True, warn: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run the experiment ``config`` belongs to; write its record to ``out`` (JSON, atomic),
    then its figures beside it.  -> the record ``{"name", "config", "metrics", "env", "seconds"}``."""
    from updatescope.records import make_record, write_json_atomic

    exp = _name_of(config)
    out = Path(out)
    # made before the run (an unwritable place fails now, not after it), removed again if the
    # run fails and leaves it empty: a refused run writes nothing
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        result = exp.runner()(config, out.parent)
    except BaseException:
        for p in made:  # deepest first
            try:
                p.rmdir()
            except OSError:
                break
        raise
    metrics = {**result.metrics, "figures": list(result.figures)}
    record = make_record(result.name, result.config, metrics, result.seconds or time.perf_counter() - t0)
    write_json_atomic(record, out)
    if figures:
        for fname, draw in result.figures.items():
            try:
                draw(out.parent / fname)
            except MissingExtraError as exc:
                (warn or (lambda m: print(m, file=sys.stderr)))(f"updatescope: figures not drawn: {exc}")
                break
    return record


def config_record(config: Any, **resolved: Any) -> dict[str, Any]:
    """``asdict(config)`` with values the run resolved (e.g. the domain list) filled in."""
    return {**dataclasses.asdict(config), **resolved}
