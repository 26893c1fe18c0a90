"""A request body read whole only up to a bound: routes that take raw bytes (a spec, rows, a key line).

A declared Content-Length past the bound is refused before anything is read; a body sent without one
(chunked) is cut off as soon as it passes the bound, never held whole.
"""

from __future__ import annotations

from fastapi import Request

from firefeed.errors import PayloadTooLargeError


async def bounded_body(request: Request, cap: int, too_large: str) -> bytes:
    """The body, at most `cap` bytes; PayloadTooLargeError(`too_large`) (413) past it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise PayloadTooLargeError(too_large)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise PayloadTooLargeError(too_large)
    return bytes(body)
