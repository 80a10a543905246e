"""Raw readers for the offline text sources behind the built-in domains.

Each reader returns *units*: contiguous pieces of real text of at most a few thousand
characters (a group of paragraphs, functions, lines), in source order. Nothing here
downloads; every source is a file installed with Python or with a package.
"""

from __future__ import annotations

import bz2
import html
import importlib.util
import re
import sysconfig
from pathlib import Path

UNIT_CHARS = 2000  # target unit size: ~500 tokens of prose, a comfortable forward chunk


def package_dir(name: str) -> Path | None:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def pack_blocks(blocks: list[str], target: int = UNIT_CHARS, sep: str = "\n\n") -> list[str]:
    """Greedily join consecutive blocks into units of <= target chars (oversized blocks are cut by lines)."""
    pieces: list[str] = []
    for block in blocks:
        if len(block) <= 2 * target:
            pieces.append(block)
            continue
        cur: list[str] = []
        size = 0
        for line in block.split("\n"):
            if cur and size + len(line) + 1 > target:
                pieces.append("\n".join(cur))
                cur, size = [], 0
            cur.append(line)
            size += len(line) + 1
        if cur:
            pieces.append("\n".join(cur))
    units: list[str] = []
    cur_units: list[str] = []
    size = 0
    for piece in pieces:
        if cur_units and size + len(piece) + len(sep) > target:
            units.append(sep.join(cur_units))
            cur_units, size = [], 0
        cur_units.append(piece)
        size += len(piece) + len(sep)
    if cur_units:
        units.append(sep.join(cur_units))
    return [u for u in units if u.strip()]


def paragraph_units(text: str, target: int = UNIT_CHARS) -> list[str]:
    blocks = [b.strip("\n") for b in re.split(r"\n[ \t]*\n", text) if b.strip()]
    return pack_blocks(blocks, target)


def line_units(lines: list[str], target: int = UNIT_CHARS) -> list[str]:
    return pack_blocks([ln for ln in lines if ln.strip()], target, sep="\n")


# --------------------------------------------------------------------------- code
_SKIP_DIRS = {"test", "tests", "idle_test", "__pycache__", "site-packages"}


def stdlib_code_units(modules: tuple[str, ...]) -> list[str]:
    """Units from the standard-library sources of ``modules`` (packages or single modules)."""
    root = stdlib_dir()
    files: list[Path] = []
    for mod in modules:
        pkg = root / mod
        if pkg.is_dir():
            files.extend(
                p for p in sorted(pkg.rglob("*.py")) if not _SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])
            )
        elif (root / f"{mod}.py").is_file():
            files.append(root / f"{mod}.py")
    units: list[str] = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        units.extend(paragraph_units(text))
    return units


def stdlib_test_units(limit_chars: int = 1_500_000) -> list[str]:
    """Units from the regression tests in ``Lib/test`` (first files by name, up to a cap)."""
    root = stdlib_dir() / "test"
    units: list[str] = []
    total = 0
    for path in sorted(root.glob("test_*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        new = paragraph_units(text)
        units.extend(new)
        total += sum(map(len, new))
        if total >= limit_chars:
            break
    return units


# --------------------------------------------------------------------------- wikipedia
def _strip_nested(text: str, pattern: str) -> str:
    rx = re.compile(pattern, re.S)
    while True:
        new = rx.sub("", text)
        if new == text:
            return new
        text = new


def _link(match: re.Match[str]) -> str:
    inner = match.group(1)
    target = inner.split("|", 1)[0].strip().lower()
    if ":" in target and target.split(":", 1)[0] in {"file", "image", "category", "wikipedia", "wp"} | set():
        return ""
    if re.match(r"^[a-z\-]{2,12}:", target):  # interlanguage links
        return ""
    return inner.rsplit("|", 1)[-1]


def clean_wikitext(text: str) -> str:
    """Plain prose from MediaWiki markup (templates, tables, refs and files removed)."""
    text = html.unescape(text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"<ref[^>]*/>", "", text)
    text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
    text = _strip_nested(text, r"\{\{[^{}]*\}\}")
    text = _strip_nested(text, r"\{\|(?:(?!\{\|).)*?\|\}")
    link = re.compile(r"\[\[([^\[\]]*)\]\]")
    while True:
        new = link.sub(_link, text)
        if new == text:
            break
        text = new
    text = re.sub(r"\[https?://[^\s\]]+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"^=+\s*(.*?)\s*=+\s*$", r"\1", text, flags=re.M)
    text = re.sub(r"^[*#:;]+\s*", "", text, flags=re.M)
    text = re.sub(r"[ \t]+", " ", text)
    lines = [ln.strip() for ln in text.split("\n")]
    text = "\n".join(ln for ln in lines if not ln.startswith(("|", "!", "{", "}")))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


_WIKI_CACHE: dict[str, dict[str, str]] = {}


def wikipedia_articles() -> dict[str, str]:
    """Title -> cleaned text for the English Wikipedia sample shipped in gensim's test data."""
    if "en" not in _WIKI_CACHE:
        pkg = package_dir("gensim")
        if pkg is None:
            raise FileNotFoundError("gensim")
        path = pkg / "test" / "test_data" / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
        raw = bz2.open(path).read().decode("utf-8")
        pages = re.findall(r"<page>.*?<title>(.*?)</title>.*?<text[^>]*>(.*?)</text>", raw, re.S)
        _WIKI_CACHE["en"] = {
            html.unescape(title): clean_wikitext(body)
            for title, body in pages
            if not body.lstrip().upper().startswith("#REDIRECT")
        }
    return _WIKI_CACHE["en"]


def wiki_units(titles: tuple[str, ...]) -> list[str]:
    arts = wikipedia_articles()
    units: list[str] = []
    for title in titles:
        if title in arts:
            units.extend(paragraph_units(arts[title]))
    return units


# --------------------------------------------------------------------------- prose
def gensim_file(name: str) -> Path:
    pkg = package_dir("gensim")
    if pkg is None:
        raise FileNotFoundError("gensim")
    return pkg / "test" / "test_data" / name


def lee_news_units() -> list[str]:
    lines: list[str] = []
    for name in ("lee_background.cor", "lee.cor"):
        lines.extend(gensim_file(name).read_text(encoding="utf-8", errors="replace").split("\n"))
    return pack_blocks([ln.strip() for ln in lines if ln.strip()], sep="\n\n")


def review_units() -> list[str]:
    lines: list[str] = []
    for ln in gensim_file("pang_lee_polarity.cor").read_text(encoding="cp1252", errors="replace").split("\n"):
        ln = re.sub(r"^__label__\w+\s*", "", ln).strip()
        if ln:
            lines.append(ln)
    for ln in gensim_file("alldata-id-10.txt").read_text(encoding="utf-8", errors="replace").split("\n"):
        ln = re.sub(r"^_\*\d+\s*", "", ln).strip()
        if ln:
            lines.append(ln)
    return line_units(lines, target=500)  # small source: small units keep the split balanced


def analogy_units() -> list[str]:
    text = gensim_file("questions-words.txt").read_text(encoding="utf-8")
    return line_units(text.split("\n"))


def python_docs_units() -> list[str]:
    path = stdlib_dir() / "pydoc_data" / "topics.py"
    import ast

    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    topics: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            topics = ast.literal_eval(node.value)
    units: list[str] = []
    for key in sorted(topics):
        units.extend(paragraph_units(topics[key]))
    return units


_LICENSE_PACKAGES = (
    "torch",
    "numpy",
    "scipy",
    "transformers",
    "safetensors",
    "tqdm",
    "rich",
    "matplotlib",
    "rdkit",
    "gensim",
    "tokenizers",
    "accelerate",
    "peft",
    "huggingface_hub",
    "pillow",
    "sympy",
    "networkx",
    "jinja2",
    "pygments",
    "requests",
    "urllib3",
    "certifi",
    "idna",
    "packaging",
    "pyyaml",
    "regex",
    "fsspec",
    "filelock",
    "smart_open",
    "gguf",
    "psutil",
    "pydantic",
    "typer",
)


def license_units() -> list[str]:
    """License texts of the project's dependencies plus Python's own; exact duplicates once."""
    site = Path(sysconfig.get_paths()["purelib"])
    texts: list[str] = []
    seen: set[str] = set()
    candidates = [stdlib_dir() / "LICENSE.txt"]
    for dist in sorted(site.glob("*.dist-info")):
        name = dist.name.split("-")[0].lower()
        if name not in _LICENSE_PACKAGES:
            continue
        candidates.extend(
            sorted(
                p
                for p in dist.rglob("*")
                if p.is_file() and re.match(r"(LICEN[CS]E|COPYING|NOTICE|AUTHORS)", p.name, re.I)
            )
        )
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        key = re.sub(r"\s+", " ", text).strip()
        if key and key not in seen:
            seen.add(key)
            texts.append(text)
    units: list[str] = []
    for text in texts:
        units.extend(paragraph_units(text))
    return units


# --------------------------------------------------------------------------- SMILES
def nci_tpsa() -> list[tuple[str, float]]:
    """(SMILES, TPSA) for the 4,999 NCI molecules shipped with RDKit."""
    pkg = package_dir("rdkit")
    if pkg is None:
        raise FileNotFoundError("rdkit")
    rows: list[tuple[str, float]] = []
    for ln in (pkg / "Data" / "NCI" / "first_5k.tpsa.csv").read_text().split("\n"):
        if not ln.strip() or ln.startswith("#"):
            continue
        smi, _, val = ln.rpartition(",")
        try:
            rows.append((smi.strip(), float(val)))
        except ValueError:
            continue
    return rows


#: NCI properties computed by :func:`nci_properties` ("tpsa" is the value shipped in the file)
NCI_PROPERTIES = ("tpsa", "logp", "mw", "fsp3")


def nci_properties() -> list[tuple[str, dict[str, float]]]:
    """(SMILES, {tpsa, logp, mw, fsp3}) for the NCI molecules RDKit can parse (4,991 of 4,999 rows; 4,892 distinct).

    tpsa: the file's Daylight/Ertl value; logp: Crippen logP; mw: average molecular weight;
    fsp3: fraction of sp3 carbons (all from RDKit, imported here only: the other readers
    need its data files, not the library)."""
    rows = nci_tpsa()
    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import Crippen, Descriptors, rdMolDescriptors
    except ImportError:
        raise FileNotFoundError("rdkit") from None
    RDLogger.DisableLog("rdApp.*")  # the 8 unparseable molecules would each print a warning
    out: list[tuple[str, dict[str, float]]] = []
    for smi, tpsa in rows:
        mol = Chem.MolFromSmiles(smi)
        if mol is None:
            continue
        out.append(
            (
                smi,
                {
                    "tpsa": tpsa,
                    "logp": float(Crippen.MolLogP(mol)),
                    "mw": float(Descriptors.MolWt(mol)),
                    "fsp3": float(rdMolDescriptors.CalcFractionCSP3(mol)),
                },
            )
        )
    return out


def wehi_smiles() -> list[str]:
    pkg = package_dir("rdkit")
    if pkg is None:
        raise FileNotFoundError("rdkit")
    out: list[str] = []
    for ln in (pkg / "Data" / "Pains" / "test_data" / "wehi_mols.csv").read_text().split("\n"):
        if ln.strip():
            out.append(ln.split(",")[0].strip().strip('"'))
    return out


# --------------------------------------------------------------------------- numeric
def stock_units() -> list[str]:
    pkg = package_dir("matplotlib")
    if pkg is None:
        raise FileNotFoundError("matplotlib")
    units: list[str] = []
    for name in ("Stocks.csv", "msft.csv"):
        lines = (pkg / "mpl-data" / "sample_data" / name).read_text().split("\n")
        lines = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
        header, rows = lines[0], lines[1:]
        for u in line_units(rows, target=1500):
            units.append(header + "\n" + u)
    return units


def numpy_csv_units(subdir: str, pattern: str) -> list[str]:
    pkg = package_dir("numpy")
    if pkg is None:
        raise FileNotFoundError("numpy")
    units: list[str] = []
    for path in sorted((pkg / subdir).glob(pattern)):
        units.extend(line_units(path.read_text().split("\n"), target=1500))
    return units
