"""Credentials kept out of everything autotune writes: the database, logs, exports, reports.

A URL may carry credentials in its user-info part (``http://user:password@host``), in its
query (``?api_key=...``, a signed URL's signature) and in its fragment. :func:`redact_url`
replaces them with ``***`` (every query value: which parameters are secret is the server's
business, not autotune's), keeping what says where the URL leads (scheme, host, port, path,
parameter names); :func:`redact_text` does it to every URL inside a message. The real URL is
used only in memory, by the client that needs it (``autotune.backends.vllm``: the user-info
becomes the client's basic auth, the query its parameters, and :class:`RedactingFilter` keeps
them out of the request URLs httpx logs).

The store passes every text it writes through :func:`redact_text` (runs' options and errors,
trials' errors and metrics, recommendations' provenance): no credential in a URL reaches the
database, nor what is read from it (exports, reports, ``--format json``).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["HIDDEN", "RedactingFilter", "redact_text", "redact_url"]

#: What a hidden credential is replaced with.
HIDDEN = "***"

#: A URL inside free text: a scheme, ``://``, then anything up to a space or a quote.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def redact_url(url: str) -> str:
    """``url`` with its user-info, its query values and its fragment replaced by ``***``;
    unchanged when it carries none. A URL that cannot be parsed is hidden whole."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return HIDDEN
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        shown = f"[{host}]" if host and ":" in host else (host or "")
        netloc = f"{HIDDEN}@{shown}" + (f":{port}" if port is not None else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = (urlencode([(k, HIDDEN) for k, _ in pairs], safe="*") if pairs else HIDDEN)
    fragment = HIDDEN if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: _redact_match(m.group(0)), text)


def _redact_match(found: str) -> str:
    # punctuation that ends a sentence or closes a bracket is the text's, not the URL's
    url = found.rstrip(".,;:!?)]}")
    return redact_url(url) + found[len(url):]


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record's message through :func:`redact_text`
    (installed on the loggers of libraries that log request URLs, e.g. ``httpx``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
