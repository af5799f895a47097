"""The x-rankd-affinity request header: requests for one query carry the same value, so that a
balancer hashing on it sends them to the same rankd, whose caches hold that query's work
(docs/deploy.md, "A fleet"). The value: lowercase hex of the first 8 bytes of SHA-256 over the
query's UTF-8 text, or over query_ids in decimal separated by single spaces. Standard library only.
"""
import hashlib

HEADER = "x-rankd-affinity"


def affinity_key(query="", query_ids=None):
    """The header's value for a query text, or for a prefix given as token ids."""
    text = " ".join(str(i) for i in query_ids) if query_ids else query
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
