"""Source adapters registered by name, and their settings resolved.

An adapter module declares its class with ``@register``; every module of the
``coordinator.sources`` package is imported by ``load_adapters`` so that adding
an upstream is adding its module (and its recorded samples beside it), with no
table to extend. Settings are nested under the adapter's name
(``SIS_SOURCES__<NAME>__...``) and checked against what it declares: an option
it does not take, or settings for a source that does not exist, stop start-up
with a line saying so rather than being ignored.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Iterable

from .base import Source, SourceConfig, env_name

if TYPE_CHECKING:  # pragma: no cover
    from coordinator.core.settings import Settings, SourceSettings

REGISTRY: dict[str, type[Source]] = {}
# packages whose modules hold adapters
_PACKAGES = ("coordinator.sources", "coordinator.panels", "coordinator.features", "coordinator.twin",
             "coordinator.fingerprint", "coordinator.widgets")


class SourceSettingsError(ValueError):
    """A source's settings are wrong (unknown source or option, unreadable key file)."""


def register(cls: type[Source]) -> type[Source]:
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise ValueError(f"two source adapters are named {cls.name!r}")
    REGISTRY[cls.name] = cls
    return cls


def load_adapters(packages: Iterable[str] = _PACKAGES) -> dict[str, type[Source]]:
    """The adapters declared in the modules of ``packages`` (imported here), by name."""
    packages = tuple(packages)
    for package in packages:
        pkg = importlib.import_module(package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.ispkg:
                importlib.import_module(f"{package}.{mod.name}")
    return {name: cls for name, cls in REGISTRY.items()
            if any(cls.__module__ == p or cls.__module__.startswith(p + ".") for p in packages)}


def config_for(cls: type[Source], settings: "Settings", *, base_url: str | None = None) -> SourceConfig:
    """The adapter's settings: what the operator set, else what the adapter declares.
    ``base_url`` overrides both (the demo upstream)."""
    own: SourceSettings | None = settings.sources.get(cls.name)
    extra = dict(own.model_extra or {}) if own is not None else {}
    unknown = cls.untaken(own)
    if unknown:
        takes = ", ".join(env_name(cls.name, o) for o in cls.setting_keys())
        raise SourceSettingsError(f"{env_name(cls.name, unknown[0])} is not a setting of source {cls.name!r} "
                                  f"(it takes {takes})")
    key = None
    if own is not None:
        if own.api_key is not None and own.api_key_file is not None:
            raise SourceSettingsError(f"set {env_name(cls.name, 'api_key')} or {env_name(cls.name, 'api_key_file')}, "
                                      "not both")
        if own.api_key is not None:
            key = own.api_key.get_secret_value()
        elif own.api_key_file is not None:
            try:
                key = own.api_key_file.read_text().strip()
            except OSError as exc:
                raise SourceSettingsError(f"{env_name(cls.name, 'api_key_file')}: cannot read "
                                          f"{own.api_key_file}: {exc.strerror or exc}") from None
    return SourceConfig(
        base_url=base_url or (own.base_url if own and own.base_url else cls.default_base_url),
        timeout_s=(own.timeout_s if own and own.timeout_s else None) or cls.default_timeout_s
        or settings.source_timeout_s,
        api_key=key or None,
        options={k: str(v) for k, v in extra.items()},
        key_setting=env_name(cls.name, "api_key"))


def make_source(cls: type[Source], settings: "Settings", *, demo_base_url: str | None = None) -> Source:
    base = f"{demo_base_url}/{cls.name}" if demo_base_url else None
    return cls(config_for(cls, settings, base_url=base), demo=demo_base_url is not None)


def check_settings(settings: "Settings", adapters: dict[str, type[Source]] | None = None) -> None:
    """Refuse settings for a source that does not exist, and any source's settings that its
    adapter does not take (``config_for``), before anything is started."""
    adapters = load_adapters() if adapters is None else adapters
    unknown = sorted(set(settings.sources) - set(adapters))
    if unknown:
        raise SourceSettingsError(f"SIS_SOURCES__{unknown[0].upper()}__... names no source; the sources are "
                                  f"{', '.join(sorted(adapters))}")
    for cls in adapters.values():
        config_for(cls, settings)


def source_settings_rows() -> Iterable[tuple[str, str, str]]:
    """(env name, default, help) of every source's settings, for `sis settings` and the docs."""
    for name, cls in sorted(load_adapters().items()):
        what = cls.description or cls.__name__
        yield env_name(name, "base_url"), repr(cls.default_base_url), f"Base URL of {what}."
        yield (env_name(name, "timeout_s"), repr(cls.default_timeout_s),
               f"Timeout of one request to {name} (None: SIS_SOURCE_TIMEOUT_S).")
        if cls.needs_key:
            yield (env_name(name, "api_key"), "None",
                   f"API key of {name} (or {env_name(name, 'api_key_file')}: a file holding it). Without it the "
                   "source answers degraded, naming this setting.")
        elif cls.takes_key:
            yield (env_name(name, "api_key"), "None",
                   f"API key of {name}, sent where set (or {env_name(name, 'api_key_file')}: a file holding it); "
                   "it works without one.")
        for opt, default in cls.options.items():
            yield env_name(name, opt), repr(default), f"Option {opt!r} of {name}."
