"""The one HTTP call every control request goes through (health, model list, version, flush, /metrics, the accuracy
probe): a monotonic total deadline, a byte cap, and no redirect followed.

The deadline covers everything from connecting to the last byte of the body: it is an ``asyncio.timeout`` around the
whole exchange, and the clock (``time.monotonic()``) is also checked between the body's reads, so a server that
drips one byte a second, in its headers or its body, cannot extend it (a per-read socket timeout would be reset by
every byte). The body is read in pieces and the call stops at ``max_bytes``. A 3xx is returned as the answer
(``Answer.location`` says where it pointed): an Authorization header never goes to a host the server names. No proxy
is taken from the environment (``trust_env=False``, aiohttp's default): a request goes to the URL it names.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass

import aiohttp

#: How the errors of :func:`request` start (a caller's record keeps the text: the cause is named).
DEADLINE_PASSED = "deadline passed:"
TOO_LARGE = "response larger than"


class HttpLimitError(Exception):
    """A control call broke one of its bounds (its deadline or its byte cap); the message names which."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status, its body (at most the call's ``max_bytes``) and, for a redirect, where it pointed
    (not followed)."""

    status: int
    body: bytes
    location: str | None = None

    @property
    def redirect(self) -> bool:
        return 300 <= self.status < 400

    def text(self) -> str:
        return self.body.decode(errors="replace")


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n // 2**10} KiB" if n % 2**10 == 0 else f"{n} bytes"


async def request(
    method: str,
    url: str,
    *,
    deadline_s: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    session: aiohttp.ClientSession | None = None,
) -> Answer:
    """``method url`` within ``deadline_s`` seconds in all, reading at most ``max_bytes`` of the body; no redirect is
    followed. Raises :class:`HttpLimitError` (deadline or size, named), or aiohttp's ``ClientError`` / ``OSError`` when
    the server cannot be reached or drops the connection. ``session``: an open one to reuse (else one of its own)."""
    end = time.monotonic() + deadline_s

    async def exchange(s: aiohttp.ClientSession) -> Answer:
        async with s.request(method, url, headers=headers or {}, data=data, allow_redirects=False) as resp:
            parts: list[bytes] = []
            got = 0
            while True:
                if time.monotonic() > end:
                    raise TimeoutError
                part = await resp.content.readany()
                if not part:
                    break
                got += len(part)
                if got > max_bytes:
                    raise HttpLimitError(f"{TOO_LARGE} {_size(max_bytes)}: {method} {url} (the rest was not read)")
                parts.append(part)
            return Answer(resp.status, b"".join(parts), resp.headers.get("Location"))

    try:
        async with asyncio.timeout(deadline_s):
            if session is not None:
                return await exchange(session)
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), trust_env=False) as own:
                return await exchange(own)
    except TimeoutError:
        raise HttpLimitError(
            f"{DEADLINE_PASSED} no complete answer to {method} {url} within {deadline_s:g} s"
        ) from None


def call(
    method: str,
    url: str,
    *,
    deadline_s: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> Answer:
    """:func:`request` from synchronous code (in a thread of its own when the caller's thread runs an event loop, as
    a notebook kernel's does)."""
    coro = request(method, url, deadline_s=deadline_s, max_bytes=max_bytes, headers=headers, data=data)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
