"""Corpora: the user's text files and built-in real domains built offline."""

from updatescope.data.domains import DomainInfo, demo_domains, domain_digest, list_domains, load_domain
from updatescope.data.textfiles import read_corpus, read_documents

__all__ = [
    "DomainInfo",
    "demo_domains",
    "domain_digest",
    "list_domains",
    "load_domain",
    "read_corpus",
    "read_documents",
]
