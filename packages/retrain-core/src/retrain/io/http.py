"""Every HTTP request retrain makes is bounded twice: a whole-request deadline and a size cap.

A `timeout=` in urllib, http.client or httpx bounds each wait on the socket, not the request: a
server that drips its reply a byte per wait keeps a request going for as long as it likes, and
a reply read whole has no size limit, so an endless body holds the run. Here:

- `request` (the standard library's http.client, for core and for any client that wants a
  plain synchronous request) arms a watchdog that shuts the socket down when the deadline
  passes, so connecting, TLS, sending, the status line, the headers and the body all fall
  within `deadline_s`; a reply whose Content-Length, or whose bytes as they arrive, pass
  `max_bytes` fails at once. Redirects are followed only when asked (`max_redirects`), and a
  redirect to another origin carries none of the caller's headers (an API key stays with the
  host it was meant for).
- `read_capped` / `aread_capped` cap a streamed body for clients that read with their own
  library (httpx); such a client bounds its whole request with `asyncio.timeout` or
  `Deadline.check`.
- `shut_after` bounds a server's wait on one connection the same way (a client that drips its
  request must not hold a thread).

Name resolution is outside the deadline (getaddrinfo cannot be interrupted); everything after
it is inside. The failures are `HttpFailure`s (an OSError): `DeadlineExceeded` (also a
TimeoutError), `ReplyTooLarge`, or one that says the server could not be reached; a reply with
any status is a `Reply`, the caller judges the status.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO
from urllib.parse import urljoin, urlsplit

CHUNK = 64 * 1024
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: headers a redirect to another origin keeps (nothing that could carry a credential)
PORTABLE_HEADERS = frozenset({"accept", "accept-encoding", "user-agent", "content-type"})


class HttpFailure(OSError):
    """No usable reply from `url`; the message names the URL and never a header's value."""

    def __init__(self, message: str, url: str) -> None:
        super().__init__(message)
        self.url = url

    def __str__(self) -> str:
        return str(self.args[0])


class DeadlineExceeded(HttpFailure, TimeoutError):
    """The whole request (connection to last byte) ran past its deadline."""


class ReplyTooLarge(HttpFailure):
    """The reply's body is larger than the caller's cap."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]  # lower-cased names
    body: bytes
    url: str  # where the reply came from (after redirects)
    size: int = 0  # bytes of the body (written to `into`, when one was given)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class Deadline:
    """A monotonic deadline `seconds` from now; `check` raises DeadlineExceeded once it passed."""

    seconds: float
    url: str = ""
    at: float = field(init=False)

    def __post_init__(self) -> None:
        self.at = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.at - time.monotonic()

    def check(self) -> float:
        left = self.left()
        if left <= 0:
            raise self.exceeded()
        return left

    def exceeded(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"no complete reply from {self.url} within {self.seconds:g} s", self.url)


def too_large(url: str, limit: int, declared: int | None = None) -> ReplyTooLarge:
    said = f" (it declares {declared} bytes)" if declared is not None else ""
    return ReplyTooLarge(f"the reply from {url} is larger than {_size(limit)}{said}", url)


def read_capped(chunks: Iterable[bytes], limit: int, url: str, deadline: Deadline | None = None) -> bytes:
    """The concatenated chunks; ReplyTooLarge past `limit` bytes, DeadlineExceeded past
    `deadline` (checked as each chunk arrives)."""
    out, size = bytearray(), 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(url, limit)
        out += chunk
        if deadline is not None:
            deadline.check()
    return bytes(out)


async def aread_capped(chunks: AsyncIterable[bytes], limit: int, url: str) -> bytes:
    """`read_capped` for an async stream; the caller's `asyncio.timeout` bounds it in time."""
    out, size = bytearray(), 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(url, limit)
        out += chunk
    return bytes(out)


def request(method: str, url: str, *, deadline_s: float, max_bytes: int, body: bytes | None = None,
            headers: Mapping[str, str] | None = None, max_redirects: int = 0,
            into: BinaryIO | None = None) -> Reply:
    """One HTTP(S) request, finished within `deadline_s` (redirects included) or failed.

    The body comes back in `Reply.body`, or is written to `into` (then `Reply.body` is empty
    and `Reply.size` counts what was written); either way at most `max_bytes` of it."""
    deadline = Deadline(deadline_s, url)
    sent = dict(headers or {})
    for hop in range(max_redirects + 1):
        deadline.url = url
        follow = hop < max_redirects
        reply = _exchange(method, url, body, sent, deadline, max_bytes, into, follow=follow)
        location = reply.header("location")
        if not (follow and reply.status in REDIRECTS and location):
            return reply
        target = urljoin(url, location)
        if _origin(target) != _origin(url):
            sent = {k: v for k, v in sent.items() if k.lower() in PORTABLE_HEADERS}
        if reply.status == 303 or (reply.status in (301, 302) and method == "POST"):
            method, body = "GET", None
        url = target
    raise AssertionError("unreachable")


def _exchange(method: str, url: str, body: bytes | None, headers: Mapping[str, str], deadline: Deadline,
              max_bytes: int, into: BinaryIO | None, *, follow: bool) -> Reply:
    conn = _connection(url, deadline)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    watchdog = _Watchdog(conn, deadline.check())
    try:
        conn.request(method, path, body=body, headers=dict(headers))
        resp = conn.getresponse()
        found = {k.lower(): v for k, v in resp.getheaders()}
        if follow and resp.status in REDIRECTS and found.get("location"):
            return Reply(resp.status, found, b"", url)
        declared = _length(found.get("content-length"))
        if declared is not None and declared > max_bytes:
            raise too_large(url, max_bytes, declared)
        data, size = _body(resp, url, max_bytes, into)
        if watchdog.fired:  # the shut socket reads as an early end of the body
            raise deadline.exceeded()
        bodiless = method == "HEAD" or resp.status in (204, 304) or resp.status < 200
        if declared is not None and size < declared and not bodiless:
            raise HttpFailure(f"{url}: {_reason(http.client.IncompleteRead(b'', declared - size))}", url)
        return Reply(resp.status, found, data, url, size)
    except HttpFailure:
        raise
    except (OSError, http.client.HTTPException) as exc:
        if watchdog.fired or isinstance(exc, TimeoutError):
            raise deadline.exceeded() from None
        raise HttpFailure(f"{url}: {_reason(exc)}", url) from None
    finally:
        watchdog.cancel()
        conn.close()


def _body(resp: http.client.HTTPResponse, url: str, limit: int, into: BinaryIO | None) -> tuple[bytes, int]:
    out, size = bytearray(), 0
    while chunk := resp.read(CHUNK):
        size += len(chunk)
        if size > limit:
            raise too_large(url, limit)
        if into is not None:
            into.write(chunk)
        else:
            out += chunk
    return bytes(out), size


def _connection(url: str, deadline: Deadline) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise HttpFailure(f"{url!r} is not a valid URL (its port is not a number from 1 to 65535)", url) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpFailure(f"{url!r} is not an http:// or https:// URL", url)
    timeout = deadline.check()
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, port, timeout=timeout,
                                           context=ssl.create_default_context())
    return http.client.HTTPConnection(parts.hostname, port, timeout=timeout)


class _Watchdog:
    """Shuts the connection's socket down after `seconds`, which wakes a blocked read or write."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.conn, self.fired = conn, False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self.timer.cancel()


def shut_after(sock: socket.socket, seconds: float) -> threading.Timer:
    """A started timer that shuts `sock` down after `seconds` (cancel it when done): a server's
    whole-request deadline for one connection."""
    def fire() -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def check_url(value: str, schemes: Iterable[str] = ("http", "https")) -> str | None:
    """None when `value` is a URL a client can ask (one of `schemes`, a host, a port from 1 to
    65535 when one is given, no whitespace); else why not, as a phrase."""
    allowed = tuple(schemes)
    if not value or value != value.strip() or any(ch.isspace() for ch in value):
        return "is not a URL (it is empty or holds whitespace)"
    parts = urlsplit(value)
    if parts.scheme not in allowed:
        named = [s + "://" for s in allowed]
        listed = ", ".join(named[:-1]) + " or " + named[-1] if len(named) > 1 else named[0]
        article = "an" if listed[0] in "aehiou" else "a"  # an http://, a ray://
        return f"must be {article} {listed} URL"
    if not parts.hostname:
        return "names no host"
    try:
        port = parts.port
    except ValueError:
        return "has a port that is not a number from 1 to 65535"
    if port == 0:
        return "has port 0, which no server listens on"
    return None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _length(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without a reply"
    if isinstance(exc, http.client.IncompleteRead):
        return "the server closed the connection in the middle of its reply"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or exc})"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror or exc})"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return str(text)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
