"""What ``sis`` says about the settings it was given, in the operator's terms.

A setting comes from a flag (``--port``), the environment (``SIS_PORT``) or the file
named by ``SIS_CONFIG`` (``port = 9090``); a value that is refused is named where it
was written, in one line without the validator's wording, and a name that is no
setting is told with the setting closest to it (``difflib``). ``SIS_`` variables that
name no setting are warned of, not refused: a shared environment may hold other
programs' (the node agent's ``SIS_NODE_*``, the engine's ``SIS_ENGINE_*``, the test
suite's ``SIS_TEST_*``...), which are left alone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import os
import tomllib
from typing import Any, Iterable, Mapping

from .settings import MOVED, Settings, SettingsError

# The flags of `sis` that set a setting, by field.
FLAGS = {"host": "--host", "port": "--port", "database_url": "--database", "demo": "--demo"}

# Other programs of this repository read SIS_ variables of their own: the node agent
# (node_agent/config.py: SIS_NODE_<NAME>, SIS_NODE_HOME), the sweep engine
# (sweep_engine/config.py: SIS_ENGINE_<NAME>), the test suite and the CI (SIS_TEST_*,
# SIS_FUZZ_*, SIS_CHROMIUM), the benchmarks (SIS_BENCH_*) and the manifest signer
# (build/manifest.py: SIS_MANIFEST_KEY). SIS_CONFIG is read by the coordinator itself.
FOREIGN_PREFIXES = ("SIS_NODE_", "SIS_ENGINE_", "SIS_TEST_", "SIS_BENCH_", "SIS_FUZZ_")
FOREIGN_NAMES = frozenset({"SIS_CONFIG", "SIS_CHROMIUM", "SIS_MANIFEST_KEY"})
# A name under the node agent's or the engine's prefix that neither program reads is
# still warned of when it is this close to a coordinator setting (SIS_NODE_ENROL_SECRT).
FOREIGN_CLOSE = 0.9

_SECRET_WORDS = ("key", "secret", "password", "token")


def closest(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return found[0] if found else None


def setting_env_names() -> set[str]:
    return {f"SIS_{name.upper()}" for name in Settings.model_fields}


# ---- where a setting was written ----

def config_path() -> str | None:
    return os.environ.get("SIS_CONFIG") or None


def config_data() -> dict[str, Any]:
    """The SIS_CONFIG file's table, {} when there is none or it cannot be read (``load``
    has refused such a file already)."""
    path = config_path()
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, ValueError):
        return {}


def _env_get(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The environment's value of ``name``, whatever its case (the settings read it so)."""
    environ = os.environ if environ is None else environ
    upper = name.upper()
    for key, value in environ.items():
        if key.upper() == upper:
            return value
    return None


def _in_file(data: Mapping[str, Any], loc: tuple) -> tuple[bool, Any]:
    node: Any = data
    for part in loc:
        if not isinstance(node, Mapping):
            return False, None
        match = next((k for k in node if str(k).lower() == str(part).lower()), None)
        if match is None:
            return False, None
        node = node[match]
    return True, node


def _file_key(loc: tuple) -> str:
    """A setting as the TOML file writes it: ``port``, ``[sources.usgs] feed``."""
    parts = [str(p) for p in loc]
    if len(parts) > 1:
        return f"[{'.'.join(parts[:-1])}] {parts[-1]}"
    return parts[0]


def _show(value: Any, loc: tuple) -> str:
    if any(w in str(p).lower() for p in loc for w in _SECRET_WORDS):
        return "(value not shown)"
    if isinstance(value, str) and str(loc[-1]).lower().endswith("url") and "@" in value:
        # a URL's user information holds its password (redis://:pw@host, postgresql://u:pw@host)
        head, _, host = value.rpartition("@")
        value = (head.split("://", 1)[0] + "://" if "://" in head else "") + "***@" + host
    if isinstance(value, str):
        return value if value and " " not in value else repr(value)
    if value is None or isinstance(value, (bool, int, float)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return "(a table)" if isinstance(value, Mapping) else repr(value)


def where(loc: tuple, flags: Mapping[str, Any], input_: Any = None) -> str:
    """The setting at ``loc`` named as the operator wrote it, with the value written."""
    loc = tuple(loc)
    field = str(loc[0]) if loc else ""
    if len(loc) == 1 and flags.get(field) is not None and field in FLAGS:
        value = flags[field]
        return FLAGS[field] if value is True else f"{FLAGS[field]} {_show(value, loc)}"
    env = "SIS_" + "__".join(str(p).upper() for p in loc)
    value = _env_get(env)
    if value is not None:
        return f"{env}={_show(value, loc)}"
    found, value = _in_file(config_data(), loc)
    if found:
        return f"{config_path()}: {_file_key(loc)} = {_show(value, loc)}"
    return f"{env}={_show(input_, loc)}" if input_ is not None else env


# ---- a refused value in one line ----

def _num(v: Any) -> Any:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _problem(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = {k: _num(v) for k, v in (err.get("ctx") or {}).items()}
    said = {
        "less_than_equal": lambda: f"must be at most {ctx.get('le')}",
        "less_than": lambda: f"must be less than {ctx.get('lt')}",
        "greater_than_equal": lambda: f"must be at least {ctx.get('ge')}",
        "greater_than": lambda: f"must be more than {ctx.get('gt')}",
        "int_parsing": lambda: "must be a whole number",
        "int_from_float": lambda: "must be a whole number",
        "int_type": lambda: "must be a whole number",
        "float_parsing": lambda: "must be a number",
        "float_type": lambda: "must be a number",
        "bool_parsing": lambda: "must be true or false",
        "bool_type": lambda: "must be true or false",
        "string_type": lambda: "must be text",
        "string_too_long": lambda: f"must be at most {ctx.get('max_length')} characters",
        "string_pattern_mismatch": lambda: "is not of the form this setting takes (`sis settings` describes it)",
        "dict_type": lambda: "must be a table of settings",
        "model_type": lambda: "must be a table of settings",
        "mapping_type": lambda: "must be a table of settings",
        "path_type": lambda: "must be a file path",
    }.get(kind)
    if said is not None:
        return said()
    if kind == "value_error" and ctx.get("error") is not None:
        return str(ctx["error"])
    msg = str(err.get("msg", "is not valid"))
    msg = msg.removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def explain(exc: Any, flags: Mapping[str, Any]) -> str:
    """One line for the first error of a pydantic ``ValidationError`` raised by ``load``."""
    err = exc.errors()[0]
    loc = tuple(err.get("loc") or ())
    if err.get("type") == "extra_forbidden":
        # Only the SIS_CONFIG file (or code calling ``load`` with a wrong keyword) brings a
        # name that is no setting: the environment source reads setting names alone.
        names = list(Settings.model_fields)
        key = str(loc[-1]) if loc else "?"
        near = closest(key.lower(), names)
        hint = f" (did you mean {near}?)" if near else " (`sis settings` lists them, as SIS_<NAME>)"
        path = config_path()
        found, _ = _in_file(config_data(), loc)
        if path and found:
            return f"{path}: {_file_key(loc)} is not a setting{hint}"
        return f"{key} is not a setting{hint}"
    return f"{where(loc, flags, err.get('input'))}: {_problem(err)}"


# ---- sources: their settings named as written ----

def _source_in_env(name: str) -> bool:
    prefix = f"SIS_SOURCES__{name.upper()}__"
    return any(k.upper().startswith(prefix) for k in os.environ)


def source_problem(settings: Settings, adapters: Mapping[str, Any]) -> str | None:
    """One line for settings of a source that does not exist, or a key a source does not
    take, named as written (``SIS_SOURCES__USGS__FEEDS``, or ``[sources.usgs] feeds`` in the
    SIS_CONFIG file) with the closest name and what the source takes; None when all is well.
    ``sources.registry.check_settings`` checks the same after it (key files, both ways of a
    key) for every caller."""
    path = config_path()
    for name in sorted(settings.sources):
        if name in adapters:
            continue
        near = closest(name, adapters)
        every = ", ".join(sorted(adapters))
        if _source_in_env(name) or not path:
            hint = f" (did you mean SIS_SOURCES__{near.upper()}__...?)" if near else ""
            return f"SIS_SOURCES__{name.upper()}__... names no source{hint}; the sources are {every}"
        hint = f" (did you mean [sources.{near}]?)" if near else ""
        return f"{path}: [sources.{name}] names no source{hint}; the sources are {every}"
    for name in sorted(settings.sources):
        cls = adapters[name]
        own = settings.sources[name]
        takes = cls.setting_keys()
        for key in cls.untaken(own):
            env = f"SIS_SOURCES__{name.upper()}__{key.upper()}"
            if _env_get(env) is not None or not path:
                near = closest(key.lower(), takes)
                hint = f" (did you mean SIS_SOURCES__{name.upper()}__{near.upper()}?)" if near else ""
                every = ", ".join(f"SIS_SOURCES__{name.upper()}__{k.upper()}" for k in takes)
                return f"{env} is not a setting of source {name!r}{hint}; it takes {every}"
            near = closest(key.lower(), takes)
            hint = f" (did you mean {near}?)" if near else ""
            return (f"{path}: [sources.{name}] {key} is not a setting of source {name!r}{hint}; "
                    f"it takes {', '.join(takes)}")
    return None


# ---- SIS_ variables that name no setting ----

def _foreign_known() -> set[str]:
    """The variables the node agent and the engine read, where they are installed beside
    the coordinator (each is left out of a coordinator-only install)."""
    known: set[str] = {"SIS_NODE_HOME"}
    for module, name, prefix in (("node_agent.config", "Config", "SIS_NODE_"),
                                 ("sweep_engine.config", "EngineConfig", "SIS_ENGINE_")):
        with contextlib.suppress(ImportError):
            config = getattr(importlib.import_module(module), name)
            known |= {f"{prefix}{f.name.upper()}" for f in dataclasses.fields(config)}
    return known


def unknown_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per ``SIS_`` variable of the environment that is no setting of the
    coordinator and no other program's, with the closest setting's name. Source settings
    (``SIS_SOURCES__...``) and the moved names of earlier releases are refused elsewhere."""
    environ = os.environ if environ is None else environ
    settings = setting_env_names()
    names = {n.removeprefix("SIS_"): n for n in settings | {"SIS_CONFIG"}}     # compared without the prefix

    def nearest(name: str, cutoff: float = 0.6) -> str | None:
        head, nested, rest = name.partition("__")
        if nested:          # SIS_SOURCE__GDACS__BASE_URL: the nested settings are SIS_SOURCES's
            near = closest(head.removeprefix("SIS_"), names, cutoff)
            return f"{names[near]}__{rest}" if near == "SOURCES" else None
        near = closest(name.removeprefix("SIS_"), names, cutoff)
        return names[near] if near else None

    foreign_known: set[str] | None = None
    lines = []
    for key in sorted(environ):
        name = key.upper()
        if not name.startswith("SIS_") or name in settings or name in FOREIGN_NAMES or name in MOVED:
            continue
        if name.startswith("SIS_SOURCES__"):
            continue
        if name.startswith(FOREIGN_PREFIXES):
            if not name.startswith(("SIS_NODE_", "SIS_ENGINE_")):
                continue
            foreign_known = _foreign_known() if foreign_known is None else foreign_known
            near = nearest(name, FOREIGN_CLOSE)
            if name in foreign_known or near is None:
                continue
            lines.append(f"{key} is not a setting of the coordinator and is ignored (did you mean {near}?)")
            continue
        near = nearest(name)
        hint = f" (did you mean {near}?)" if near else " (`sis settings` lists the settings)"
        lines.append(f"{key} is not a setting and is ignored{hint}")
    return lines

