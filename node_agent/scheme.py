"""A coordinator URL of the wrong scheme, told apart and said in one line.

An ``https://`` URL at a coordinator that speaks plain HTTP (``sis serve`` on a
port of its own, with no TLS in front) gave no answer until the request's
timeout: the coordinator reads the TLS greeting as the start of an HTTP request
and waits for its end. The reverse, ``http://`` at a port that speaks TLS, gave
"Connection reset by peer" or a closed connection. Neither said what to check.

So when a request to a coordinator that has not yet answered anything fails
after connecting (a timeout, a TLS error that is not about the certificate, a
connection cut), the address is asked once, briefly, whether it speaks the other
scheme: for an ``https://`` URL a TLS handshake and, only where none completes,
a plain ``HEAD /``; for an ``http://`` one a TLS handshake alone. Neither sends the node's token, its enrolment secret, or any
body: the probe learns how the address answers and nothing else. When it
answers the other scheme, the failure's message says so ("the coordinator at
https://host:8080 did not answer TLS (it answers plain HTTP there): is it
http://host:8080?"). A coordinator that has answered once has the right scheme,
and is never probed again (``Client`` keeps that); nothing listening (connection
refused) or a host name no DNS knows is said as before (``protocol._why``).
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from urllib.parse import urlsplit, urlunsplit

import aiohttp

PROBE_S = 3.0       # the longest a probe waits, on top of the failure it explains
DEFAULT_PORTS = {"http": 80, "https": 443}
CUT_OFF = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)   # a connection made, then cut


def worth_probing(exc: BaseException) -> bool:
    """Whether ``exc`` may be the other scheme's answer: the connection was made (or the TLS
    handshake went wrong) and no HTTP answer came. A certificate error is TLS answering, and a
    connection refused or a host name unknown is nothing answering; a connection reset while it
    was being set up (the TLS handshake) is something answering, maybe the other scheme."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return False
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return True
    if isinstance(exc, aiohttp.ClientConnectorError):
        # A connection reset, aborted or cut during the TLS handshake is something answering: a
        # plain-HTTP coordinator (``sis serve``) closes a connection whose head is not in by
        # SIS_HEAD_TIMEOUT_S, and the TLS greeting it read as one, unread, makes the close a reset.
        return isinstance(exc.os_error, CUT_OFF)
    return isinstance(exc, (TimeoutError, aiohttp.ClientError, OSError))


def _other(url: str) -> tuple[str, str, int, str] | None:
    """(the other scheme, host, port, ``url`` in the other scheme with the same port), or None."""
    try:
        parts = urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    scheme = {"http": "https", "https": "http"}.get(parts.scheme.lower())
    if scheme is None or not parts.hostname or port is None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"
    return scheme, parts.hostname, port, urlunsplit((scheme, netloc, parts.path, "", ""))


async def _speaks_http(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` answers a plain HTTP request (a ``HEAD /``, no credentials)."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer.write(f"HEAD / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode("ascii", "replace"))
        return await asyncio.wait_for(reader.readexactly(5), timeout) == b"HTTP/"
    except (OSError, TimeoutError, asyncio.IncompleteReadError, UnicodeError):
        return False
    finally:
        if writer is not None:
            writer.close()


async def _speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake. Its certificate is not checked: nothing
    is sent over the connection, which is closed at once; the request itself checks it."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), timeout)
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), timeout)
    return True


async def other_scheme(url: str, timeout: float = PROBE_S) -> str | None:
    """The one line saying that ``url`` has the wrong scheme, when its address answers the
    other one; else None."""
    other = _other(url)
    if other is None:
        return None
    scheme, host, port, alternative = other
    if scheme == "http":
        # A port that completes a TLS handshake has the right scheme, whatever else it answers: a
        # proxy (nginx, Caddy, Traefik) answers plain HTTP on its TLS port too (a 400), and an https
        # coordinator behind one that was slow once was told to use http://host:443.
        if not await _speaks_tls(host, port, timeout) and await _speaks_http(host, port, timeout):
            return (f"the coordinator at {url} did not answer TLS (it answers plain HTTP there): "
                    f"is it {alternative}?")
    elif await _speaks_tls(host, port, timeout):
        return f"the coordinator at {url} answered in TLS, not plain HTTP: is it {alternative}?"
    return None
