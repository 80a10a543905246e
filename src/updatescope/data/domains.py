"""Built-in real text domains, built offline from files that ship with Python and packages.

Families and sources (all read from disk, nothing downloaded):
  code     Python standard-library sources of the running interpreter, by module family
  wiki     English Wikipedia articles (the 2017 dump sample in gensim's test data), cleaned
           of markup and grouped by topic
  prose    Lee news corpus, movie-review sentences, Python reference documentation
           (``pydoc_data``), dependency licence texts, word-analogy lists
  smiles   NCI molecules shipped with RDKit binned by TPSA (3 domains); WEHI screening
           molecules by element class x upper/lower half of N+O atom count (6)
  smiles_nci  one collection only (for the within-collection SMILES experiment): the NCI
           molecules split by a hash of their SMILES into 4 disjoint quarters, one per
           property (TPSA, Crippen logP, molecular weight, fraction sp3 carbons), each
           quarter cut into exact terciles of its property (q1 lowest): 12 disjoint domains
  numeric  stock price tables (matplotlib sample data), NumPy floating-point validation
           vectors (hex), NumPy random-generator test vectors

Units and splits. Every source is cut into *units*: contiguous pieces of about 2,000
characters (paragraphs, functions, groups of lines). Each unit goes to exactly one split by
a hash of its text: ``train`` 40%, ``sketch`` 30%, ``eval`` 30%. Hence the splits are
disjoint (identical text always lands in the same split), deterministic, independent of
load order, and stable when a source gains or loses other units. Within a split, units are
returned in hash order, so any ``max_chars`` prefix is a spread-out sample of the domain
rather than its first file. Contents depend only on the installed versions of Python and
of the packages (gensim, rdkit, matplotlib, numpy): see ``domain_digest``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from updatescope.data import _sources as src
from updatescope.errors import InputError, MissingExtraError

__all__ = [
    "DomainInfo",
    "SPLITS",
    "check_known_domains",
    "list_domains",
    "load_domain",
    "domain_digest",
    "demo_domains",
]

SPLITS = {"train": (0, 40), "sketch": (40, 70), "eval": (70, 100)}  # hash percentiles


@dataclass(frozen=True)
class DomainInfo:
    name: str
    family: str  # code | wiki | prose | smiles | smiles_nci | numeric
    source: str  # where the text comes from, for reports
    package: str | None = None  # package that must be installed (None: the stdlib)


_CODE = {
    "asyncio": ("asyncio",),
    "email": ("email", "mailbox", "smtplib", "imaplib", "poplib", "mimetypes", "quopri", "base64"),
    "xml": ("xml", "xmlrpc", "html", "_markupbase"),
    "http": ("http", "urllib", "wsgiref", "socketserver", "ftplib", "socket", "ssl", "ipaddress"),
    "unittest": ("unittest", "doctest"),
    "idlelib": ("idlelib",),
    "tkinter": ("tkinter", "turtle", "turtledemo"),
    "concurrency": ("multiprocessing", "concurrent", "threading", "queue", "sched"),
    "importlib": ("importlib", "pkgutil", "zipimport", "runpy", "modulefinder", "py_compile", "compileall"),
    "numbers": ("_pydecimal", "fractions", "statistics", "random", "numbers", "colorsys"),
    "text": ("re", "string", "textwrap", "difflib", "argparse", "optparse", "shlex", "pprint", "gettext"),
}

_WIKI = {
    "countries": (
        "Algeria",
        "Andorra",
        "Angola",
        "Demographics of Angola",
        "Politics of Angola",
        "Economy of Angola",
        "Angolan Armed Forces",
        "Foreign relations of Angola",
        "Afghanistan",
        "Albania",
        "Azerbaijan",
        "Aruba",
        "Asia",
    ),
    "regions": ("Alabama", "Alaska", "Alberta", "Atlantic Ocean"),
    "people": (
        "Abraham Lincoln",
        "Aristotle",
        "Ayn Rand",
        "Albert Einstein",
        "Aldous Huxley",
        "Andre Agassi",
        "Arthur Schopenhauer",
        "Andrei Tarkovsky",
        "Albert Sidney Johnston",
        "Alain Connes",
        "Allan Dwan",
        "List of anthropologists",
    ),
    "life_science": (
        "Amphibian",
        "Algae",
        "Aardvark",
        "Aardwolf",
        "Actinopterygii",
        "Anatomy",
        "Autism",
        "Agnostida",
        "Agriculture",
        "Agricultural science",
    ),
    "physical_science": (
        "Alkali metal",
        "Alkane",
        "Acid",
        "Atomic number",
        "Albedo",
        "Ampere",
        "International Atomic Time",
        "Asphalt",
        "Alchemy",
    ),
    "space": ("Apollo 11", "Apollo 8", "Astronaut", "Amateur astronomy", "Astronomer"),
    "society": (
        "Anarchism",
        "Altruism",
        "Allah",
        "Anthropology",
        "Abortion",
        "Ambiguity",
        "Apollo",
        "Achilles",
        "Aikido",
    ),
    "us_history_law": (
        "American Revolutionary War",
        "Articles of Confederation",
        "Appellate procedure in the United States",
        "Appellate court",
        "Arraignment",
        "America the Beautiful",
        "American Football Conference",
    ),
    "arts": (
        "Academy Awards",
        "Academy Award for Best Production Design",
        "Animation",
        "An American in Paris",
        "Animal Farm",
        "A Modest Proposal",
        "Art",
        "Actrius",
        "Animalia (book)",
        "List of Atlas Shrugged characters",
        "Adventure",
    ),
    "tech_math": (
        "Algorithm",
        "Arithmetic mean",
        "Analysis of variance",
        "ASCII",
        "Abacus",
        "American National Standards Institute",
        "Alphabet",
        "A",
        "Assistive technology",
        "Android (robot)",
    ),
}

# TPSA bins (square angstroms) chosen near the terciles of the NCI set
_TPSA_BINS = {"tpsa_low": (0.0, 35.0), "tpsa_mid": (35.0, 70.0), "tpsa_high": (70.0, 1e9)}


def _smiles_units(mols: list[str]) -> list[str]:
    # one molecule per line, ~12 molecules per unit (small units keep the hash split balanced):
    # a .smi-like document with context
    return src.line_units(mols, target=500)


def _nci(lo: float, hi: float) -> list[str]:
    return _smiles_units([s for s, v in src.nci_tpsa() if lo <= v < hi])


@lru_cache(maxsize=1)
def _nci_partition() -> dict[tuple[str, int], tuple[str, ...]]:
    """(property, tercile 1..3) -> molecules; every NCI molecule in exactly one cell.

    The property a molecule is binned by is chosen by a hash of its SMILES (not by its
    value), so the four quarters are exchangeable samples of NCI and bins of different
    properties share no molecule: no source can train on a target's eval molecules."""
    quarters: dict[str, list[tuple[float, str, str]]] = {p: [] for p in src.NCI_PROPERTIES}
    seen: set[str] = set()
    for smi, props in src.nci_properties():
        if smi in seen:  # ~100 SMILES occur twice in the file: keep one, or a bin could hold it in two splits
            continue
        seen.add(smi)
        digest = hashlib.sha256(smi.encode()).hexdigest()
        prop = src.NCI_PROPERTIES[int(digest[:8], 16) % len(src.NCI_PROPERTIES)]
        quarters[prop].append((props[prop], digest, smi))
    out: dict[tuple[str, int], tuple[str, ...]] = {}
    for prop, rows in quarters.items():
        rows.sort()  # exact terciles by (value, hash) rank: ties (e.g. fsp3 = 0) cannot unbalance them
        cuts = [len(rows) * k // 3 for k in range(4)]
        for k in range(3):
            out[(prop, k + 1)] = tuple(smi for _, _, smi in rows[cuts[k] : cuts[k + 1]])
    return out


def _nci_bin(prop: str, k: int) -> list[str]:
    # a tuple is sorted by value: restore a value-independent order before cutting units
    mols = sorted(_nci_partition()[(prop, k)], key=lambda m: hashlib.sha256(m.encode()).hexdigest())
    # ~400 molecules per bin: units of ~7 molecules (half the usual) give ~30-90 units per
    # bin, so the hash split stays near 40/30/30 (at ~12 per unit train shares fell to ~30%)
    return src.line_units(mols, target=250)


def _polar_atoms(smiles: str) -> int:
    # N and O atoms (aromatic or not), a string-level stand-in for polarity; "Na"/"Nb" are rare
    return sum(
        1 for i, ch in enumerate(smiles) if ch in "NOno" and smiles[i + 1 : i + 2] not in {"a", "b", "e", "i", "p", "s"}
    )


def _wehi(kind: str, polar: bool) -> list[str]:
    """WEHI molecules by element class, then the upper or lower half by N+O atom count."""

    def halogen(s: str) -> bool:
        return "Cl" in s or "Br" in s or "F" in s or "I" in s

    def sulfur(s: str) -> bool:
        return "S" in s.replace("Si", "") or "s" in s.replace("se", "")

    mols = src.wehi_smiles()
    if kind == "halogen":
        mols = [m for m in mols if halogen(m)]
    elif kind == "sulfur":
        mols = [m for m in mols if sulfur(m) and not halogen(m)]
    else:
        mols = [m for m in mols if not halogen(m) and not sulfur(m)]
    # exact halves by (N+O count, text hash) rank, so ties at the median cannot unbalance them
    ranked = sorted(mols, key=lambda m: (_polar_atoms(m), hashlib.sha256(m.encode()).hexdigest()))
    upper = set(ranked[len(ranked) // 2 :])
    return _smiles_units([m for m in mols if (m in upper) == polar])


def _registry() -> dict[str, tuple[DomainInfo, Callable[[], list[str]]]]:
    reg: dict[str, tuple[DomainInfo, Callable[[], list[str]]]] = {}

    def add(info: DomainInfo, build: Callable[[], list[str]]) -> None:
        reg[info.name] = (info, build)

    for key, mods in _CODE.items():
        add(
            DomainInfo(f"code_{key}", "code", "Python stdlib: " + ", ".join(mods)),
            lambda mods=mods: src.stdlib_code_units(mods),
        )
    add(DomainInfo("code_tests", "code", "Python stdlib regression tests (Lib/test)"), src.stdlib_test_units)
    for key, titles in _WIKI.items():
        add(
            DomainInfo(
                f"wiki_{key}", "wiki", f"English Wikipedia sample (gensim test data): {len(titles)} articles", "gensim"
            ),
            lambda titles=titles: src.wiki_units(titles),
        )
    add(DomainInfo("news_lee", "prose", "Lee news corpus (gensim test data)", "gensim"), src.lee_news_units)
    add(
        DomainInfo("reviews", "prose", "movie-review sentences, Pang-Lee polarity + IMDB sample (gensim)", "gensim"),
        src.review_units,
    )
    add(
        DomainInfo("analogies", "prose", "word-analogy questions (gensim questions-words.txt)", "gensim"),
        src.analogy_units,
    )
    add(DomainInfo("python_docs", "prose", "Python language reference topics (pydoc_data)"), src.python_docs_units)
    add(DomainInfo("licenses", "prose", "licence texts of Python and of the dependencies"), src.license_units)
    for key, (lo, hi) in _TPSA_BINS.items():
        add(
            DomainInfo(f"smiles_nci_{key}", "smiles", f"NCI molecules (RDKit data), TPSA in [{lo:g}, {hi:g})", "rdkit"),
            lambda lo=lo, hi=hi: _nci(lo, hi),
        )
    for kind in ("halogen", "sulfur", "plain"):
        for polar in (True, False):
            tag = "polar" if polar else "apolar"
            add(
                DomainInfo(
                    f"smiles_wehi_{kind}_{tag}",
                    "smiles",
                    f"WEHI screening molecules (RDKit PAINS data): {kind}, "
                    f"{'upper' if polar else 'lower'} half by N+O atom count",
                    "rdkit",
                ),
                lambda kind=kind, polar=polar: _wehi(kind, polar),
            )
    for prop in src.NCI_PROPERTIES:
        for k in (1, 2, 3):
            add(
                DomainInfo(
                    f"smiles_nci_{prop}_q{k}",
                    "smiles_nci",
                    f"NCI molecules (RDKit data), hash quarter binned by {prop}, tercile {k} of 3",
                    "rdkit",
                ),
                lambda prop=prop, k=k: _nci_bin(prop, k),
            )
    add(
        DomainInfo("num_stocks", "numeric", "monthly stock prices (matplotlib sample data)", "matplotlib"),
        src.stock_units,
    )
    add(
        DomainInfo("num_float_vectors", "numeric", "NumPy umath validation vectors (hex floats)"),
        lambda: src.numpy_csv_units("_core/tests/data", "umath-validation-set-*.csv"),
    )
    add(
        DomainInfo("num_rng_vectors", "numeric", "NumPy bit-generator test vectors"),
        lambda: src.numpy_csv_units("random/tests/data", "*.csv"),
    )
    return reg


@lru_cache(maxsize=1)
def _reg() -> dict[str, tuple[DomainInfo, Callable[[], list[str]]]]:
    return _registry()


def list_domains(family: str | None = None) -> list[DomainInfo]:
    """All built-in domains (or one family's), in a fixed order."""
    infos = [info for info, _ in _reg().values()]
    if family is not None:
        infos = [i for i in infos if i.family == family]
        if not infos:
            families = sorted({i.family for i, _ in _reg().values()})
            raise InputError(f"unknown domain family {family!r}: choose one of {', '.join(families)}")
    return infos


def check_known_domains(names: Iterable[str]) -> None:
    """One line naming every name that is not a built-in domain (InputError), before any work."""
    known = {d.name for d in list_domains()}
    unknown = [d for d in names if d not in known]
    if unknown:
        raise InputError(f"unknown domains {unknown}: see `updatescope domains`")


def _bucket(text: str) -> tuple[int, str]:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return int(digest[:8], 16) % 100, digest


@lru_cache(maxsize=64)
def _split_units(name: str) -> dict[str, tuple[str, ...]]:
    info, build = _reg()[name]
    try:
        units = build()
    except FileNotFoundError as exc:
        raise MissingExtraError(str(exc) or (info.package or "?"), "data") from None
    out: dict[str, list[tuple[str, str]]] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    for unit in units:
        pct, digest = _bucket(unit)
        if digest in seen:
            continue
        seen.add(digest)
        for split, (lo, hi) in SPLITS.items():
            if lo <= pct < hi:
                out[split].append((digest, unit))
    return {s: tuple(u for _, u in sorted(v)) for s, v in out.items()}


def load_domain(name: str, split: str = "sketch", max_chars: int | None = None) -> list[str]:
    """Documents of one domain split (hash order; see the module docstring).

    ``max_chars`` keeps whole documents while the running total stays within the cap (the
    first document is cut if it alone exceeds it), so smaller caps give prefixes of larger ones.
    """
    if name not in _reg():
        raise InputError(f"unknown domain {name!r}: see updatescope.data.list_domains()")
    if split not in SPLITS:
        raise InputError(f"unknown split {split!r}: choose one of {', '.join(SPLITS)}")
    docs = list(_split_units(name)[split])
    if max_chars is None:
        return docs
    if max_chars <= 0:
        raise InputError(f"max_chars must be positive, got {max_chars}")
    out: list[str] = []
    total = 0
    for doc in docs:
        if total + len(doc) > max_chars:
            if not out:
                out.append(doc[:max_chars])
            break
        out.append(doc)
        total += len(doc)
    return out


def domain_digest(name: str, split: str = "sketch") -> str:
    """Short sha256 of a split's documents: records exactly which text a result used."""
    h = hashlib.sha256()
    for doc in load_domain(name, split):
        h.update(hashlib.sha256(doc.encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()[:16]


# Demo: 8 small domains from 4 families. Characters per family are set so each domain is
# about 2,500 SmolLM2 tokens (prose ~4.3 chars/token, code ~3.3, SMILES and digits ~2.2).
_DEMO = {
    "code_email": 8000,
    "code_asyncio": 8000,
    "wiki_people": 10500,
    "wiki_life_science": 10500,
    "news_lee": 10500,
    "python_docs": 10000,
    "smiles_nci_tpsa_low": 5500,
    "smiles_nci_tpsa_high": 5500,
    "num_stocks": 5000,
}


def demo_domains(split: str = "sketch", scale: float = 1.0) -> dict[str, list[str]]:
    """Small real domains for the demo: name -> documents (~2,500 tokens each at scale 1)."""
    return {name: load_domain(name, split, max_chars=int(chars * scale)) for name, chars in _DEMO.items()}
