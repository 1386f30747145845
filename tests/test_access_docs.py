"""docs/access.md is kept honest: it names every access setting, every refusal
reason and status the code gives, the anonymous literal and the headers."""
from __future__ import annotations

import re
from pathlib import Path

from coordinator.core.access import meter, policy
from coordinator.core.access.policy import ANON_CREDENTIAL
from coordinator.core.settings import Settings
from coordinator.core.access import tools as access_tools

DOC = (Path(__file__).resolve().parents[1] / "docs" / "access.md").read_text()
ACCESS_SETTINGS = ("redis_url", "rate_limit_prefix", "trusted_proxies", "client_ip_header", "embed_ttl_s",
                   "embed_budget", "access_cache_s", "bench_unlimited")


def test_every_access_setting_is_documented_with_its_default():
    for name in ACCESS_SETTINGS:
        assert name in Settings.model_fields
        assert f"`SIS_{name.upper()}`" in DOC, name
        default = Settings.model_fields[name].default
        row = next(line for line in DOC.splitlines() if line.startswith(f"| `SIS_{name.upper()}`"))
        shown = (str(default).lower() if isinstance(default, bool) else str(int(default)) if isinstance(default, float)
                 else str(default) or "empty")
        assert shown in row, name


def test_every_refusal_reason_and_limit_name_in_the_code_is_documented():
    sources = "".join(Path(m.__file__).read_text() for m in (policy, meter, access_tools))
    reasons = set(re.findall(r'"reason": "([a-z_]+)"', sources)) | set(re.findall(r'invalid\("([a-z_]+)"', sources))
    limits = set(re.findall(r'Counter\([^()]*"(\w+)"\)', sources)) | set(re.findall(r'_too_many\(w, "(\w+)"', sources))
    assert {"perDay", "perMonth", "embedBudget", "embedLoadsPerDay", "perMinute", "failedCredentialsPerMinute"} <= limits
    assert {"malformed", "expired", "embed_budget_exhausted", "not_renewable"} <= reasons
    for word in reasons | limits | {"unknown", "revoked"}:
        assert f"`{word}`" in DOC or f'"{word}"' in DOC, word


def test_the_anonymous_literal_statuses_and_headers_are_documented():
    assert f"The anonymous credential's literal is `{ANON_CREDENTIAL}`" in DOC
    for text in ("| 401 |", "| 403 |", "| 429 |", "| 400 |", "| 409 |", "When Redis is down", "RateLimit-Limit",
                 "RateLimit-Remaining", "RateLimit-Reset", "Retry-After", "frame-ancestors",
                 "Access-Control-Allow-Origin", "Cache-Control: private"):
        assert text in DOC, text
