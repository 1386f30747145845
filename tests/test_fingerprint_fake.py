"""A fake vision-language model server for the fingerprint's tests and bench, and the tests
that hold it to the real request and response formats (UPSTREAMS.md §2.5).

``FakeModel`` is a Tornado app on loopback serving ``POST /v1/chat/completions`` as the
OpenAI-compatible servers do. It checks a request as the strictest of them would: a
``model`` it serves (else 404, as Ollama), one user message whose content holds a text part
and ``image_url`` parts that are ``data:image/{jpeg|jpg|png|webp};base64,`` URLs of real
images (else 400 "invalid image input", as Ollama; ``accept_urls`` admits http(s) URLs, as
vLLM fetches them), ``response_format`` of type ``json_schema`` with a schema, and the
bearer key when it has one (else 401). It answers in the envelope of the recorded sample
(``coordinator/fingerprint/samples/vlm/chat/completions.json``) with the content and
``finish_reason`` a test sets, after ``latency_s`` or once ``hold`` is set. It reads no
image: it is not a model, and its answers are what the test says.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import io
import json
import re
from typing import Any

import pytest
import tornado.web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from coordinator.demo.upstream import LoopbackServer
from coordinator.fingerprint.vlm import VisionModel

SAMPLE = json.loads((VisionModel.samples_dir() / "chat" / "completions.json").read_text())
DATA_URL = re.compile(r"^data:image/(jpeg|jpg|png|webp);base64,(.+)$", re.S)


def sample_content() -> dict[str, Any]:
    """The recorded answer's content: a reading of three photos."""
    return json.loads(SAMPLE["choices"][0]["message"]["content"])


def check_request(body: Any, accept_urls: bool) -> str | None:
    """Why a real server would refuse this request (400), or None."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "model is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict) \
            or messages[-1].get("role") != "user" or not isinstance(messages[-1].get("content"), list):
        return "messages must end with a user message whose content is a list of parts"
    parts = messages[-1]["content"]
    if not any(p.get("type") == "text" and isinstance(p.get("text"), str) for p in parts):
        return "a text part is required"
    images = [p for p in parts if p.get("type") == "image_url"]
    if not images:
        return "no image"
    for part in images:
        ref = part.get("image_url")
        url = ref.get("url") if isinstance(ref, dict) else ref
        if not isinstance(url, str):
            return "invalid image input"
        if url.startswith(("http://", "https://")) and accept_urls:
            continue
        m = DATA_URL.match(url)
        if not m:
            return "invalid image input"
        try:
            from PIL import Image
            Image.open(io.BytesIO(base64.b64decode(m.group(2), validate=True))).verify()
        except (binascii.Error, OSError, ValueError):
            return "invalid image input"
    fmt = body.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" \
            or not isinstance((fmt.get("json_schema") or {}).get("schema"), dict):
        return "response_format must be json_schema with a schema"
    return None


class _Completions(tornado.web.RequestHandler):
    def initialize(self, fake: "FakeModel") -> None:
        self.fake = fake
        self.gone = False

    def on_connection_close(self) -> None:
        self.gone = True

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self.set_status(status)
        self.finish({"error": {"message": message, "type": kind}})

    async def post(self) -> None:
        fake = self.fake
        if fake.api_key and self.request.headers.get("Authorization") != f"Bearer {fake.api_key}":
            return self._error(401, "invalid api key", "authentication_error")
        try:
            body = json.loads(self.request.body)
        except ValueError:
            return self._error(400, "invalid JSON body")
        problem = check_request(body, fake.accept_urls)
        if problem:
            return self._error(400, problem)
        if body["model"] != fake.model:
            return self._error(404, f'model "{body["model"]}" not found, try pulling it first', "api_error")
        fake.requests.append(body)
        fake.arrived.set()
        if fake.hold is not None:
            await fake.hold.wait()
        if fake.latency_s:
            await asyncio.sleep(fake.latency_s)
        if self.gone:
            return
        if fake.fail is not None:
            self.set_status(fake.fail[0])
            self.finish(fake.fail[1])
            return
        doc = copy.deepcopy(SAMPLE)
        doc["model"] = fake.model
        choice = doc["choices"][0]
        choice["message"]["content"] = fake.reply if isinstance(fake.reply, str) else json.dumps(fake.reply)
        choice["finish_reason"] = fake.finish_reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(doc))


class FakeModel(LoopbackServer):
    def __init__(self, model: str = "fake-vlm", *, latency_s: float = 0.0, api_key: str | None = None,
                 accept_urls: bool = False) -> None:
        self.model = model
        self.latency_s = latency_s
        self.api_key = api_key
        self.accept_urls = accept_urls
        self.reply: Any = sample_content()          # a dict is sent as JSON; a str as it is
        self.finish_reason = "stop"
        self.fail: tuple[int, Any] | None = None    # (status, body) to answer instead
        self.hold: asyncio.Event | None = None
        self.arrived = asyncio.Event()
        self.requests: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def app(self) -> tornado.web.Application:
        return tornado.web.Application([(r"/v1/chat/completions", _Completions, {"fake": self})])


def vlm_settings(model: FakeModel, **extra: Any) -> dict[str, Any]:
    """The coordinator's settings of the ``vlm`` source pointed at ``model``."""
    return {"vlm": {"base_url": model.base_url, "model": model.model, "timeout_s": 3, **extra}}


# ---- the fake held to the formats ----------------------------------------------------------

@pytest.fixture
async def fake():
    m = await FakeModel(api_key="k1").start()
    yield m
    await m.stop()


def _png() -> str:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _request(images: list[Any], **over: Any) -> dict[str, Any]:
    body = {"model": "fake-vlm", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is here?"}, *({"type": "image_url", "image_url": i} for i in images)]}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        "max_tokens": 100, "temperature": 0}
    body.update(over)
    return body


async def _post(fake: FakeModel, body: Any, key: str | None = "k1") -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    r = await AsyncHTTPClient().fetch(HTTPRequest(fake.base_url + "/chat/completions", method="POST",
                                                  body=json.dumps(body), headers=headers), raise_error=False)
    return r.code, json.loads(r.body)


async def test_the_fake_answers_in_the_recorded_envelope(fake):
    status, doc = await _post(fake, _request([{"url": _png()}]))
    assert status == 200 and set(doc) == set(SAMPLE)
    assert doc["choices"][0]["finish_reason"] == "stop" and doc["usage"]["total_tokens"] == 3321
    assert json.loads(doc["choices"][0]["message"]["content"]) == sample_content()
    assert doc["model"] == "fake-vlm"


@pytest.mark.parametrize("image, why", [
    ({"url": "https://photos.example/1.jpg"}, "invalid image input"),        # Ollama takes no URL
    ({"url": "data:image/gif;base64,R0lGODlhAQABAAAAACw="}, "invalid image input"),
    ({"url": "data:image/png;base64,not-base64!"}, "invalid image input"),
    ({"url": "data:image/png;base64," + base64.b64encode(b"not an image").decode()}, "invalid image input"),
])
async def test_the_fake_refuses_images_a_real_server_refuses(fake, image, why):
    status, doc = await _post(fake, _request([image]))
    assert status == 400 and doc["error"]["message"] == why


async def test_the_fake_refuses_a_wrong_model_key_or_format(fake):
    assert (await _post(fake, _request([_png()]), key="wrong"))[0] == 401
    status, doc = await _post(fake, _request([_png()], model="llava"))
    assert status == 404 and "not found" in doc["error"]["message"]
    status, _ = await _post(fake, _request([_png()], response_format={"type": "json_object"}))
    assert status == 400
    assert fake.requests == []          # a refused request is not one the model answered
