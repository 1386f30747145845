"""The faces: thin adapters that turn HTTP (REST of each family, OpenAPI) and MCP
requests into pipeline calls and write the answers back. They hold no domain logic:
a tool cannot drift between its REST route and its MCP face."""
