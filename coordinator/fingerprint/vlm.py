"""The vision-language model, asked through the OpenAI-compatible chat API that local model
servers speak (vLLM, Ollama, llama.cpp server; UPSTREAMS.md §2.5).

It is a ``Source`` so that it is configured, reported and faked like every upstream:
``SIS_SOURCES__VLM__BASE_URL`` is the API root with its ``/v1`` (``http://gpu-box:8000/v1``
for vLLM, ``http://localhost:11434/v1`` for Ollama), ``__MODEL`` the served model's name,
``__TIMEOUT_S`` how long one answer may take, ``__API_KEY`` or ``__API_KEY_FILE`` a bearer
token where the server wants one (local servers mostly do not). Its own options:
``__MAX_PHOTOS`` (images in one request: vLLM admits one per prompt unless started with
``--limit-mm-per-prompt``), ``__IMAGES`` (``data``: the photo's bytes inline as a base64
``data:`` URL, the only form Ollama takes; ``url``: the photo's URL at the provider, for a
server that fetches it itself) and ``__MAX_TOKENS``.

One question is one request: ``POST {base}/chat/completions`` with one user message (the
prompt, then the photos as ``image_url`` parts), structured output by JSON schema
(``response_format`` ``json_schema``: vLLM, Ollama and llama.cpp server all constrain
decoding to it; Ollama reads only ``json_schema.schema``) and temperature 0 (Ollama's
default is 1.0).

An answer is used only whole: HTTP 200, ``finish_reason`` ``"stop"`` (``"length"`` means the
JSON was cut off), content that parses as JSON and fits the schema that was asked for.
Anything else is a ``SourceError`` that says which, so the tool answers degraded and
uncached; a partial or malformed answer is never repaired into figures.

The sample ``samples/vlm/chat/completions.json`` is a response in vLLM's format (the fields
its OpenAI-compatible server writes, UPSTREAMS.md §2.5) constructed for this project, not a
recording of a model; the tests' fake model server answers in its envelope.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import jsonschema
import orjson
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.simple_httpclient import HTTPTimeoutError

from coordinator.sources.base import USER_AGENT, Query, Source, SourceConfig, SourceError, send
from coordinator.sources.registry import SourceSettingsError, env_name, register

IMAGE_MODES = ("data", "url")


@dataclass(frozen=True)
class Question:
    """What is asked: the prompt, the images (``data:`` or ``http(s):`` URLs, in the order
    the prompt numbers them) and the JSON schema the answer must fit."""

    prompt: str
    images: tuple[str, ...]
    schema: dict[str, Any]
    name: str = "answer"


@register
class VisionModel(Source[dict]):
    name = "vlm"
    label = "vision-language model"
    license = "n/a"
    default_base_url = ""                  # none: a model server is the operator's to name
    default_timeout_s = 45.0
    takes_key = True                       # a hosted server's bearer token; a local one needs none
    options = {"model": "", "max_photos": "3", "images": "data", "max_tokens": "1200"}
    description = ("an OpenAI-compatible chat API serving a vision-language model (vLLM, Ollama, llama.cpp "
                   "server), with its /v1: {base}/chat/completions; empty: no model, the fingerprint says so")

    def __init__(self, config: SourceConfig, *, demo: bool = False) -> None:
        super().__init__(config, demo=demo)
        self.model = str(self.option("model")).strip()
        self.images = str(self.option("images")).strip().lower()
        if self.images not in IMAGE_MODES:
            raise SourceSettingsError(f"{env_name(self.name, 'images')} must be one of {', '.join(IMAGE_MODES)}")
        self.max_photos = self._whole("max_photos", 1, 16)
        self.max_tokens = self._whole("max_tokens", 64, 32768)

    def _whole(self, option: str, lo: int, hi: int) -> int:
        raw = str(self.option(option)).strip()
        if not raw.isdigit() or not lo <= int(raw) <= hi:
            raise SourceSettingsError(f"{env_name(self.name, option)} must be a whole number from {lo} to {hi}")
        return int(raw)

    @property
    def unconfigured(self) -> str | None:
        """Why no model can be asked, or None when one can."""
        if self.demo:
            return ("demo mode runs no vision-language model: a fake one would invent figures, so none is "
                    "asked (set SIS_SOURCES__VLM__BASE_URL and __MODEL outside demo mode)")
        if not self.base_url:
            return f"no vision-language model is configured: set {env_name(self.name, 'base_url')} and __MODEL"
        if not self.model:
            return f"no model is named for the configured server: set {env_name(self.name, 'model')}"
        return None

    def request_body(self, q: Question) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": q.prompt}]
        content += [{"type": "image_url", "image_url": {"url": url}} for url in q.images]
        return {"model": self.model, "messages": [{"role": "user", "content": content}],
                "response_format": {"type": "json_schema", "json_schema": {"name": q.name, "schema": q.schema}},
                "max_tokens": self.max_tokens, "temperature": 0}

    async def fetch(self, query: Query) -> list[dict]:
        """One answer: ``query.params["question"]`` is the ``Question``; the record is
        ``{content, model, usage, elapsedS}`` with ``content`` the parsed, schema-checked JSON."""
        q: Question = query.params["question"]
        started = time.perf_counter()
        doc = await self._post(self.request_body(q))
        content, model, usage = parse_completion(doc, q.schema)
        return [{"content": content, "model": model or self.model, "usage": usage,
                 "elapsedS": round(time.perf_counter() - started, 3)}]

    async def _post(self, body: dict[str, Any]) -> Any:
        headers = {"User-Agent": USER_AGENT, "Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = HTTPRequest(self.url("/chat/completions"), method="POST", body=orjson.dumps(body), headers=headers,
                          connect_timeout=self.timeout_s, request_timeout=self.timeout_s)
        try:
            resp = await send(req, self.timeout_s, self)       # the upstream client, in one of this source's slots
        except HTTPTimeoutError:
            raise SourceError(f"timed out: no answer within {self.timeout_s:g} s "
                              f"({env_name(self.name, 'timeout_s')})") from None
        except HTTPClientError as exc:
            raise SourceError(f"unreachable: {exc}") from None
        except OSError as exc:
            raise SourceError(f"unreachable: {exc.strerror or exc}") from None
        if resp.code == 599:
            raise SourceError(f"unreachable: {resp.error}")
        if resp.code != 200:
            raise SourceError(f"HTTP {resp.code}: {error_message(resp.body or b'')}")
        try:
            return json.loads(resp.body or b"")
        except ValueError:
            raise SourceError("the server's answer is not JSON (not an OpenAI-compatible chat API?)") from None


def error_message(body: bytes) -> str:
    """The message of an error answer: ``{"error": {"message"}}`` (OpenAI, Ollama, newer
    vLLM) or ``{"object": "error", "message"}`` (older vLLM), else the start of the text."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body[:200].decode("utf-8", "replace").strip() or "no message"
    if isinstance(doc, dict):
        err = doc.get("error")
        msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else doc.get("message")
        if isinstance(msg, str) and msg:
            return msg[:300]
    return "no message"


def parse_completion(doc: Any, schema: dict[str, Any]) -> tuple[Any, str | None, dict[str, Any] | None]:
    """(content as JSON, model, usage) of a chat completion, or SourceError saying why the
    answer cannot be used. The envelope's odd shapes (no ``choices``, a message without
    content) raise KeyError/TypeError, which ``Source.read`` reports as unparseable."""
    choice = doc["choices"][0]
    finish = choice.get("finish_reason")
    if finish == "length":
        raise SourceError('the answer was cut off (finish_reason "length"): its JSON is incomplete; '
                          "SIS_SOURCES__VLM__MAX_TOKENS may be too small")
    if finish != "stop":
        raise SourceError(f'the answer did not end normally (finish_reason {json.dumps(finish)})')
    text = choice["message"]["content"]
    if not isinstance(text, str) or not text.strip():
        raise SourceError("the answer has no content")
    try:
        content = json.loads(text)
    except ValueError as exc:
        raise SourceError(f"the answer is not valid JSON ({exc.msg} at char {exc.pos})") from None
    problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(content))
    if problem is not None:
        where = "/".join(str(p) for p in problem.absolute_path) or "(top)"
        raise SourceError(f"the answer does not fit the schema asked for: at {where}: {problem.message[:200]}")
    usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else None
    return content, doc.get("model") if isinstance(doc.get("model"), str) else None, usage
