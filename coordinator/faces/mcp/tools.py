"""The registry seen as MCP tools: what ``tools/list`` publishes for a family and
how ``tools/call`` turns the one call path's outcome into a result or an error.

``tools/call`` goes through ``invoke.call_tool`` like every REST route, so
validation, access and limits are the REST ones. What differs is only the
writing back:

- ``BadParameter`` (from validation or the tool) -> JSON-RPC -32602, with the
  REST error's code, message and details in ``data``;
- access errors (401, 403, 429) -> a JSON-RPC error whose code is the REST
  status and whose ``data`` is the REST error, answered with that HTTP status;
- any other ``ServiceError`` the tool raises -> ``isError: true`` with the REST
  error body, so an agent can read it and correct itself;
- any other exception -> ``isError: true`` with a safe message and a request
  id; the stack trace goes to the log only.

A degraded ``Answer`` is a successful result: its ``health`` says degraded.

The list entries come from the declarations: the input schema with the parameters' MCP
defaults (``Param.mcp_default``, which the call applies to an absent argument: the widget
manifest answers a page here, the full set on REST), the hints the tool declares or derives
(``Tool.annotations``), and for a tool that needs a key, where the key goes on MCP. An argument
no parameter declares is refused before the access check, so that a key passed as an argument
is told so rather than met with "needs a key".
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping

from coordinator.core.errors import (ECHO_MAX, BadParameter, Forbidden, RateLimited, ServiceError, Unauthorized,
                                     bounded, error_body)
from coordinator.core.pipeline import RequestFacts, call_tool
from coordinator.faces.openapi import HEALTH_SCHEMA
from coordinator.core.registry import Tool, ToolRegistry
from coordinator.faces.http import dumps
from coordinator.faces.mcp.protocol import INVALID_PARAMS, RpcError

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.services import Services

log = logging.getLogger("sis.mcp")

# The result shape every tool shares, inlined (no $ref: an MCP client resolves
# nothing outside the schema itself). A tool may declare a tighter one.
ANSWER_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["caveats"],
    "properties": {
        "caveats": {"type": "array", "items": {"type": "string"}},
        "health": HEALTH_SCHEMA,
    },
}

ACCESS_ERRORS = (Unauthorized, Forbidden, RateLimited)


def mcp_tools(registry: ToolRegistry, family: str) -> list[Tool]:
    """The tools a family's MCP endpoint offers: declared ``mcp=True`` and routed in that family."""
    return [t for t in registry.in_family(family) if t.mcp]


def output_schema(tool: Tool) -> dict[str, Any]:
    return tool.output_schema or ANSWER_OUTPUT_SCHEMA


# Said of a tool that needs a key: an agent reading "the key parameter" passed it as an argument,
# which no tool declares (it is refused as unknown, before the access check).
KEY_ON_MCP = ("On MCP the key travels in the X-Api-Key header or as ?key= on the MCP endpoint URL, "
              "never as a tool argument.")


def description(tool: Tool, family: str) -> str:
    """The family's description; for a tool that needs a key, how an MCP client sends one."""
    text = tool.description_for(family)
    return text if tool.keyless else f"{text} {KEY_ON_MCP}"


def descriptor(tool: Tool, family: str) -> dict[str, Any]:
    """One ``tools/list`` entry, from the declaration alone (its MCP defaults and hints included)."""
    return {
        "name": tool.name,
        "title": tool.title,
        "description": description(tool, family),
        "inputSchema": tool.input_schema(mcp=True),
        "outputSchema": output_schema(tool),
        "annotations": {"title": tool.title, **tool.annotations()},
    }


def find_tool(registry: ToolRegistry, family: str, name: Any) -> Tool:
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "tools/call needs params.name, the name of a tool",
                       {"code": "bad_parameter", "message": "tools/call needs params.name, the name of a tool",
                        "details": {}, "status": 400})
    tool = registry.get(name)
    if tool is None or not tool.mcp or family not in tool.routes:
        shown = bounded(name, ECHO_MAX)
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {shown}",
                       {"code": "unknown_tool", "message": f"no tool named {shown!r} in this family",
                        "details": {"tool": shown, "family": family,
                                    "tools": [t.name for t in mcp_tools(registry, family)]},
                        "status": 400})
    return tool


def service_error_data(exc: ServiceError) -> dict[str, Any]:
    return {**error_body(exc.code, exc.message, exc.details)["error"], "status": exc.status}


def text_result(body: dict[str, Any], *, is_error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": dumps(body)}], "structuredContent": body, "isError": is_error}


# The first protocol version whose tools/call answers refused arguments as a tool result (SEP-1303).
ARGUMENTS_AS_RESULTS_SINCE = "2025-11-25"


def arguments_refused_as_results(version: str | None) -> bool:
    """Whether a client at ``version`` (the MCP-Protocol-Version header) is told of refused
    arguments in a tool result (``isError``) rather than a JSON-RPC -32602: since 2025-11-25
    (SEP-1303) the protocol asks so, because a client hands protocol errors to its application
    and only tool results to the model, which then cannot see why and correct its call. Versions
    are dates, so they compare as text; a client that sends none is taken as an early one."""
    return version is not None and version >= ARGUMENTS_AS_RESULTS_SINCE


def refuse_unknown(tool: Tool, arguments: Mapping[str, Any]) -> None:
    if "key" in arguments and tool.param("key") is None:
        raise BadParameter(f"'key' is not a parameter of {tool.name}: {KEY_ON_MCP}",
                           {"parameter": "key", "allowed": sorted(p.name for p in tool.params)})
    tool.refuse_unknown(arguments)


async def call(services: "Services", registry: ToolRegistry, family: str, params: Mapping[str, Any],
               facts: RequestFacts, request_id: str, *, arguments_as_results: bool = False) -> dict[str, Any]:
    """``tools/call``: the CallToolResult fields, or an ``RpcError`` raised. ``arguments_as_results``:
    refused arguments are a tool result with ``isError`` (``arguments_refused_as_results``)."""
    tool = find_tool(registry, family, params.get("name"))
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "arguments must be an object",
                       {"code": "bad_parameter", "message": "arguments must be an object", "details": {},
                        "status": 400})
    try:
        # An argument the tool does not declare is refused before the access check: the key passed as
        # an argument met "needs a key" (a 401), which hid that the argument is no parameter at all.
        refuse_unknown(tool, arguments)
        answer, _ctx = await call_tool(services, tool, family, {**tool.mcp_defaults(), **arguments}, facts)
    except BadParameter as exc:
        if arguments_as_results:
            return text_result(error_body(exc.code, exc.message, exc.details), is_error=True)
        raise RpcError(INVALID_PARAMS, exc.message, service_error_data(exc)) from None
    except ACCESS_ERRORS as exc:
        raise RpcError(exc.status, exc.message, service_error_data(exc), status=exc.status,
                       headers=exc.headers) from None
    except ServiceError as exc:
        if exc.status >= 500:
            log.warning("mcp %s: tool %s answered %s: %s", request_id, tool.name, exc.code, exc.message)
        return text_result(error_body(exc.code, exc.message, exc.details), is_error=True)
    except Exception:
        log.exception("mcp %s: tool %s failed", request_id, tool.name)
        return text_result(error_body("internal_error", "the tool failed to answer this call; it has been logged",
                                      {"requestId": request_id}), is_error=True)
    return text_result(answer.body(), is_error=False)
