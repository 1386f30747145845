"""The client IP that per-IP limits and embed visitors are counted by.

It is the socket's peer address, unless that peer is a configured trusted
proxy (``SIS_TRUSTED_PROXIES``): then it is read from the proxy's header
(``SIS_CLIENT_IP_HEADER``). In ``X-Forwarded-For`` each hop appends the
address it received from, so the rightmost address that is not itself a
trusted proxy is the first one nobody could forge; the leftmost is whatever
the client chose to send. A header from a peer that is not a trusted proxy
is ignored.
"""
from __future__ import annotations

import functools
import ipaddress
from typing import Mapping

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_proxies(text: str) -> tuple[Network, ...]:
    nets = []
    for part in text.split(","):
        part = part.strip()
        if part:
            nets.append(ipaddress.ip_network(part, strict=False))
    return tuple(nets)


@functools.lru_cache(maxsize=65536)
def _addr(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    elif text.count(":") == 1:          # IPv4 with a port
        text = text.split(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class ClientIp:
    def __init__(self, trusted_proxies: str = "", header: str = "X-Forwarded-For") -> None:
        self.proxies = parse_proxies(trusted_proxies)
        self.header = header

    def _trusted(self, addr) -> bool:  # noqa: ANN001
        return addr is not None and any(addr in n for n in self.proxies)

    def is_proxy(self, ip: str) -> bool:
        """Whether the socket address ``ip`` is one of the trusted proxies."""
        return self._trusted(_addr(ip))

    def resolve(self, remote_ip: str | None, headers: Mapping[str, str]) -> str:
        peer = _addr(remote_ip or "")
        if peer is None:
            return remote_ip or "unknown"
        if not self.proxies or not self._trusted(peer):
            return str(peer)
        value = headers.get(self.header)
        if value is None:   # a plain dict from a non-HTTP face: match the name without case
            value = next((v for k, v in headers.items() if k.lower() == self.header.lower()), None)
        if not value:
            return str(peer)
        if self.header.lower() != "x-forwarded-for":
            got = _addr(value)
            return str(got) if got is not None else str(peer)
        hops = [h for h in value.split(",") if h.strip()]
        for hop in reversed(hops):
            a = _addr(hop)
            if a is None:
                return str(peer)     # a malformed hop: believe nothing left of it
            if not self._trusted(a):
                return str(a)
        return str(peer)
