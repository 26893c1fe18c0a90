"""What of an alert's URL may be shown (the API, the page, logs): its host, never its path or query.

A webhook URL often carries its token in the path or query (Slack, Teams, most chat hooks), so anyone who
reads it can post alerts that look like FireFeed's. Logs are read by more people than the secrets are.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def target_host(url: str) -> str:
    """`host` or `host:port` of an alert URL (`[v6]:port` for an IPv6 address)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return ""
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def without_url(text: str, url: str) -> str:
    """`text` (an error a transport wrote, which may quote the URL) with the URL replaced by its host."""
    return text.replace(url, target_host(url))
