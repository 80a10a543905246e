"""``routing``'s config: the adapter library, the requests, the LoRA recipe.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import (
    LoRAConfig,
    check_gt_seeds,
    check_names,
    check_positive,
    check_seed,
    check_sketch_dim,
    check_store_folder,
)
from updatescope.experiments.mapping_tasks import CLASSES, FAMILIES

#: one adapter per domain: code, encyclopaedic prose, news, reviews, legal text, molecules
LIBRARY = (
    "code_asyncio",
    "code_email",
    "code_xml",
    "code_unittest",
    "wiki_countries",
    "wiki_people",
    "wiki_life_science",
    "wiki_arts",
    "news_lee",
    "reviews",
    "licenses",
    "smiles_nci_tpsa_low",
)
#: domains with no adapter of their own: requests the library was not trained for
OUTSIDE = ("code_http", "wiki_space", "python_docs", "num_stocks")


@dataclass(frozen=True)
class CouplingDarkLibrary:
    """The coupling-dark library (``design="coupling_dark"``): per prompt family (``families``,
    cues of ``mapping_tasks.FAMILIES``), one LoRA adapter per mapping of the input ``classes``
    to the family's answer words, all trained on the same ``n_fit`` inputs per class; each
    adapter represented by the signature of its training rows (the answer counted).

    Requests: per mapping, ``queries_per_mapping`` held-out inputs; each posed as a few-shot
    prompt (``shots`` solved examples per class of the request's mapping, in random order,
    then the query) and as the input alone (the control).  Ground truth: the loss at the
    query's answer under every adapter."""

    families: tuple[str, ...] = tuple(FAMILIES)
    classes: tuple[str, ...] = ("python", "licence", "digits")
    n_fit: int = 32
    shots: int = 1
    shot_pool: int = 16
    queries_per_mapping: int = 12
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=40, batch=16)

    def __post_init__(self) -> None:
        check_positive(self, "n_fit", "shots", "shot_pool", "queries_per_mapping")
        if not self.families or len(set(self.families)) != len(self.families):
            raise InputError(f"coupling_dark.families must name distinct families, got {list(self.families)}")
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise InputError(f"unknown coupling_dark.families {unknown}; available: {', '.join(FAMILIES)}")
        bad = [c for c in self.classes if c not in CLASSES]
        if bad:
            raise InputError(f"unknown coupling_dark.classes {bad}; available: {', '.join(CLASSES)}")
        if len(set(self.classes)) != len(self.classes):
            raise InputError("coupling_dark.classes must be distinct")
        for f in self.families:
            if len(self.classes) % len(FAMILIES[f]):
                raise InputError(
                    f"coupling_dark: {len(self.classes)} classes cannot share the {len(FAMILIES[f])} answers "
                    f"of {f!r} evenly"
                )
        if self.shots > self.shot_pool:
            raise InputError(f"coupling_dark.shots ({self.shots}) exceeds coupling_dark.shot_pool ({self.shot_pool})")
        if self.shots >= self.n_fit:  # a training row's solved examples are the class's other training inputs
            raise InputError(f"coupling_dark.shots ({self.shots}) must be below coupling_dark.n_fit ({self.n_fit})")


@dataclass(frozen=True)
class RoutingConfig:
    """``routing``: a library of LoRA adapters, one per ``library`` domain (trained on its
    ``train`` split), each represented by the signature of its training documents; requests
    are held-out documents (``eval`` split, cut to ``request_tokens`` tokens) of the library's
    domains and of ``outside`` domains.  Ground truth: every request's loss under every
    adapter, per adapter-training seed (PREREGISTRATION.md beside this file)."""

    model: str = "smollm2"
    library: tuple[str, ...] = LIBRARY
    outside: tuple[str, ...] = OUTSIDE
    train_tokens: int = 4096
    requests_per_domain: int = 20
    request_tokens: int = 96
    sketch_dim: int = DEFAULT_SKETCH_DIM
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=30, batch=8)
    gt_seeds: int = 3
    arrow_top_k: int = 3
    n_boot: int = 2000
    seed: int = 0
    quick: bool = False
    #: "domains": the library of domain adapters; "coupling_dark": the coupling-dark library
    design: Literal["domains", "coupling_dark"] = "domains"
    coupling_dark: CouplingDarkLibrary = CouplingDarkLibrary()
    #: a folder where the ground truth is written as soon as it is measured and read back by a
    #: rerun of the same configuration (None: no store): per (seed, family) for the coupling-dark
    #: design; per seed, one file per adapter and one for the whole library, for the domains
    truth_store: str | None = None

    def __post_init__(self) -> None:
        check_store_folder(self.truth_store, "truth_store")
        check_gt_seeds(self.gt_seeds)
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_positive(self, "train_tokens", "requests_per_domain", "request_tokens", "arrow_top_k", "n_boot")
        check_names(self.library, "library", 2)
        check_names(self.outside, "outside", 0)
        both = set(self.library) & set(self.outside)
        if both:
            raise InputError(f"domains both in and outside the library: {sorted(both)}")
        if not self.arrow_top_k <= len(self.library):
            raise InputError(f"arrow_top_k ({self.arrow_top_k}) exceeds the library ({len(self.library)} adapters)")
        if self.design not in ("domains", "coupling_dark"):
            raise InputError(f"design must be 'domains' or 'coupling_dark', got {self.design!r}")
        if self.request_tokens < 8:
            raise InputError(f"request_tokens must be at least 8, got {self.request_tokens}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> RoutingConfig:
        if not quick:
            return cls(seed=seed)
        # quick: 6 adapters, 2 outside domains, 1 seed, short training: not powered
        return cls(
            library=("code_asyncio", "wiki_people", "news_lee", "reviews", "licenses", "smiles_nci_tpsa_low"),
            outside=("code_http", "wiki_space"),
            train_tokens=2048,
            requests_per_domain=8,
            lora=LoRAConfig(lr=1e-3, steps=20, batch=8),
            gt_seeds=1,
            n_boot=500,
            seed=seed,
            quick=True,
            coupling_dark=CouplingDarkLibrary(families=("Colour:",), n_fit=16, queries_per_mapping=8),
        )
