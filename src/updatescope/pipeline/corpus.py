"""A corpus: the documents of a run, where each came from, and how they are counted.

``Corpus`` is built once — from files (plain text, JSONL, tables) or from Python lists — and
validated before any model loads.  ``Corpus.tokenise`` turns it into ``Tokens``: every
document's token ids and the mask of its counted next-token targets, computed once and used
by every pass (head sketch, network sketch, document scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from updatescope.data.formats import Columns, is_table_input, read_table, to_examples
from updatescope.data.textfiles import read_document_rows
from updatescope.errors import InputError
from updatescope.inputs import check_inputs, check_string

__all__ = ["Corpus", "Tokens"]


@dataclass(frozen=True)
class Tokens:
    """A tokenised corpus.  ``ids[j]``: the token ids of entry j; ``masks[j]``: True where
    the prediction of that token (from the tokens before it) is counted; ``documents[j]``:
    the corpus document entry j came from.  Entries shorter than two tokens count nothing."""

    ids: list[list[int]]
    masks: list[list[bool]]
    documents: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    def counted(self) -> list[int]:
        """Counted targets per entry."""
        return [sum(m) if len(i) >= 2 else 0 for i, m in zip(self.ids, self.masks)]


@dataclass(frozen=True)
class Corpus:
    """Documents to sketch or score.

    - ``documents``: strings, or table rows (mappings) when ``columns`` names a layout;
    - ``columns``: ``data.formats.Columns`` for table rows; None for plain strings;
    - ``origin``: per document, ``(source, row)``: the file and its 0-based line (text,
      JSONL) or row (tables), so a document can be found again; ``("<list>", i)`` for lists;
    - ``description``: what the data was (file names), recorded in a signature's metadata.
    """

    documents: tuple[Any, ...]
    columns: Columns | None = None
    origin: tuple[tuple[str, int], ...] = ()
    description: str = ""

    def __post_init__(self) -> None:
        if not self.documents:
            raise InputError("no documents: the corpus is empty")
        if self.origin and len(self.origin) != len(self.documents):
            raise InputError(f"origin has {len(self.origin)} entries for {len(self.documents)} documents")
        if not self.origin:
            object.__setattr__(self, "origin", tuple(("<list>", i) for i in range(len(self.documents))))

    def __len__(self) -> int:
        return len(self.documents)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_files(cls, paths: Sequence[str | Path], columns: Columns | None = None, mode: str = "auto") -> Corpus:
        """Read and validate files.  Without a column layout and with no table among them,
        plain text and JSONL with a ``text`` field follow ``data.textfiles`` (one document per
        line, or blank-line separated paragraphs); otherwise every file is a table
        (``data.formats``).  Every path is checked, and duplicates refused, before any is read."""
        columns = columns or Columns()
        paths = list(paths)
        if not paths:
            raise InputError("no data files given")
        table = is_table_input(paths, columns)
        docs: list[Any] = []
        origin: list[tuple[str, int]] = []
        for path in check_inputs(paths, allow_dir=table):
            rows = list(enumerate(read_table(path, columns))) if table else read_document_rows(path, mode)
            docs.extend(doc for _, doc in rows)
            origin.extend((str(path), row) for row, _ in rows)
        return cls(tuple(docs), columns if table else None, tuple(origin), ",".join(Path(p).name for p in paths))

    @classmethod
    def from_texts(cls, texts: Sequence[Any], description: str = "") -> Corpus:
        """Strings, or lists of token ids (counted as they are, no special tokens added)."""
        texts = list(texts)
        for i, t in enumerate(texts):
            if isinstance(t, str):
                check_string(t, f"text {i}")
            elif not (isinstance(t, Sequence) and all(isinstance(v, int) and not isinstance(v, bool) for v in t)):
                raise InputError(f"text {i}: expected a string or a list of token ids, got {type(t).__name__}")
        return cls(tuple(texts), None, (), description)

    @classmethod
    def from_rows(cls, rows: Sequence[dict[str, Any]], columns: Columns, description: str = "") -> Corpus:
        """Table rows already in memory (validated like a table file's rows)."""
        return cls(tuple(rows), columns, (), description)

    # ------------------------------------------------------------------ views
    def text(self, i: int) -> str:
        """What a person reads of document i (for tables: the text, prompt or last user turn)."""
        doc = self.documents[i]
        if self.columns is None:
            return doc if isinstance(doc, str) else f"<{len(doc)} token ids>"
        c = self.columns
        if c.layout == "text":
            return doc[c.text or "text"]
        if c.layout == "prompt-completion":
            return doc[c.prompt] + doc[c.completion]
        return "\n".join(f"{t['role']}: {t['content']}" for t in doc[c.messages])

    def describe_columns(self) -> str | None:
        return None if self.columns is None else self.columns.describe()

    # ------------------------------------------------------------------ tokens
    def tokenise(self, tokenizer: Any, *, keep_empty: bool = False) -> Tokens:
        """Token ids and counted-target masks, each document tokenised once.

        ``keep_empty``: one entry per document, in order (what per-document scores need);
        otherwise documents with nothing to count are left out (their targets are none, so a
        sketch is the same either way, but its segmentation follows the entries)."""
        from updatescope.capture.chunks import target_mask, tokenize

        if self.columns is None:
            texts, positions = list(self.documents), None
            keep = range(len(texts))
        elif self.columns.layout == "text":
            name = self.columns.text or "text"
            keep = [i for i, r in enumerate(self.documents) if keep_empty or r[name].strip()]
            texts, positions = [self.documents[i][name] for i in keep], None
        else:
            texts, positions = to_examples(list(self.documents), self.columns, tokenizer, keep_empty=True)
            keep = [i for i, p in enumerate(positions) if keep_empty or p]
            texts, positions = [texts[i] for i in keep], [positions[i] for i in keep]
        ids, masks = [], []
        for j, t in enumerate(texts):
            x = tokenize(tokenizer, t, True, j)
            ids.append(x)
            masks.append(target_mask(len(x), None if positions is None else positions[j], j) if len(x) >= 2 else [])
        return Tokens(ids, masks, list(keep))
