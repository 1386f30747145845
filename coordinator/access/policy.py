"""Who may call what. The credentialed family takes the credential in the path.

The anonymous credential's literal is ``anon``: ``/public/v1/anon/events``.
It has kind ``anon``, plan ``anon`` and the anonymous scopes of SPEC.md.
"""
from __future__ import annotations

from ..context import Caller
from ..errors import Forbidden, Unauthorized
from ..registry import Tool
from . import plans

ANON_CREDENTIAL = "anon"


def client_ip(remote_ip: str | None) -> str:
    return remote_ip or "unknown"


def authorize(tool: Tool, family: str, remote_ip: str | None, credential: str | None) -> Caller:
    ip = client_ip(remote_ip)
    if family != "public":
        return Caller(ip=ip)
    if credential != ANON_CREDENTIAL:
        raise Unauthorized("the credential in the path is not valid", {"credential": "invalid"})
    caller = Caller(ip=ip, credential=credential, plan="anon", scopes=frozenset(plans.ANON_SCOPES))
    missing = [s for s in tool.scopes if s not in caller.scopes]
    if missing:
        raise Forbidden(f"this credential lacks the scope {missing[0]}", {"missingScopes": missing})
    return caller
