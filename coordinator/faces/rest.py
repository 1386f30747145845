"""REST adapters generated from the tool registry.

Every family's routes come from ``Tool.routes`` and the family table:
``/earth{path}``, ``/legacy{path}`` and ``/public/v1/{cred}{path}``.
"""
from __future__ import annotations

from typing import Any

from coordinator.core.errors import BadParameter
from coordinator.core.families import FAMILIES
from coordinator.core.honesty import Answer
from coordinator.core.pipeline import RequestFacts, call_tool
from coordinator.core.registry import Tool, ToolRegistry, same_value
from coordinator.faces.http import BaseHandler, read_json_object


class ToolHandler(BaseHandler):
    def initialize(self, tool: Tool, family: str) -> None:
        self.tool = tool
        self.family = family
        heads = tool.method == "GET" and tool.safe
        self.methods = (tool.method, "HEAD", "OPTIONS") if heads else (tool.method, "OPTIONS")

    def set_default_headers(self) -> None:
        # Binds browsers only (SPEC.md, Authentication 9): an embed token's answers narrow it to the
        # token's origin (coordinator/core/access/policy.py embed_headers); nothing here authorises anything.
        super().set_default_headers()
        self.set_header("Access-Control-Allow-Origin", "*")
        self.set_header("Access-Control-Expose-Headers",
                        "RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After, X-Request-Id, ETag")

    def options(self, *args: str) -> None:
        """CORS preflight (a browser sending X-Api-Key asks first), and a plain OPTIONS's answer
        (``Allow``, RFC 9110 section 9.3.7)."""
        self.set_header("Allow", ", ".join(self.allowed_methods()))
        self.set_header("Access-Control-Allow-Methods", f"{self.tool.method}, OPTIONS")
        self.set_header("Access-Control-Allow-Headers", "X-Api-Key, Content-Type")
        self.set_header("Access-Control-Max-Age", "600")
        self.set_status(204)
        self.finish()

    def raw_params(self, path_values: dict[str, str]) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        for latin, values in self.request.query_arguments.items():
            name = latin.encode("latin-1").decode("utf-8", errors="replace")   # Tornado reads names as latin-1
            if len(values) > 1:
                raise BadParameter(f"'{name}' is given more than once", {"parameter": name})
            raw[name] = values[0].decode("utf-8", errors="replace")
        raw_body = self.body_bytes() if self.request.method == "POST" else b""
        if raw_body:
            for k, v in read_json_object(self.json_body(raw_body)).items():
                if k in raw and not same_value(raw[k], v):
                    raise BadParameter(f"'{k}' is given in both the query and the body, differently",
                                       {"parameter": k})
                raw[k] = v
        if "key" in raw and FAMILIES[self.family].credential_in_path:
            # Taken as the direct family takes it, a key here would be ignored and the call served as the
            # path's credential (anon, say) without a word.
            raise BadParameter("'key' is not a parameter here: on this family the credential is the path "
                               "segment after /public/v1/ (/public/v1/KEY/...)", {"parameter": "key"})
        raw.pop("key", None)  # an API key travels in the query but is not a tool parameter
        for k, v in path_values.items():
            if k in raw and raw[k] != v:
                # /earth/w/cg-bitcoin?id=cg-ethereum answered cg-bitcoin and dropped the query's id unsaid
                raise BadParameter(f"'{k}' is given in both the path and the query, differently", {"parameter": k})
            raw[k] = v
        return raw

    def request_facts(self, credential: str | None) -> RequestFacts:
        return RequestFacts(remote_ip=self.request.remote_ip, credential=credential, api_key=self.api_key(),
                            headers=self.request.headers,
                            base_url=f"{self.request.protocol}://{self.request.host}")

    async def _serve(self, *args: str) -> None:
        in_path = FAMILIES[self.family].credential_in_path
        credential = args[0] if in_path else None
        path_args = args[1:] if in_path else args
        path_params = [p.name for p in self.tool.params if p.location == "path"]
        raw = self.raw_params(dict(zip(path_params, path_args)))
        answer, ctx = await call_tool(self.application.services, self.tool, self.family,  # type: ignore[attr-defined]
                                      raw, self.request_facts(credential))
        for k, v in answer.headers.items():
            self.set_header(k, v)
        if not in_path:
            # A keyless answer is public and a keyed one differs (the plan's rows and caps): a shared cache
            # keyed on the URL alone handed the keyless copy to keyed callers, revoked keys included.
            self.add_header("Vary", "X-Api-Key")
        self.send_json(answer, answer.status, self.cache_control(answer, ctx.caller.keyless))

    def cache_control(self, answer: Answer, keyless: bool) -> str:
        if not answer.may_cache or self.tool.http_max_age_s <= 0:
            return "no-store"
        if keyless and not FAMILIES[self.family].credential_in_path:
            return f"public, max-age={self.tool.http_max_age_s}"
        return f"private, max-age={self.tool.http_max_age_s}"

    async def get(self, *args: str) -> None:
        await self._serve(*args)

    async def post(self, *args: str) -> None:
        await self._serve(*args)


def tool_path(tool: Tool, family: str) -> str:
    """The Tornado route pattern of a tool in a family (path parameters as groups)."""
    path = tool.routes[family]
    for p in tool.params:
        if p.location == "path":
            path = path.replace("{" + p.name + "}", r"([^/]+)")
    return FAMILIES[family].pattern + path


def tool_routes(registry: ToolRegistry) -> list[tuple[str, type, dict]]:
    """Routes with path parameters come after every literal route: Tornado takes the first
    match, and ``/earth/w/twin_earth`` (the twin) must win over ``/earth/w/{id}`` (widgets)."""
    routes = []
    for t in registry:
        for fam in t.families:
            routes.append((tool_path(t, fam) + "/?", ToolHandler, {"tool": t, "family": fam}))
    return sorted(routes, key=lambda r: any(p.location == "path" for p in r[2]["tool"].params))
