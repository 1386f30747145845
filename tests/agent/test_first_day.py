"""A volunteer's first-day mistakes: a wrong coordinator URL (nothing listening, a host name
no one knows, a path that is not the coordinator's base) or enrolment secret is one line
saying what to check, and the URL is kept in node.toml only once enrolment there succeeded."""
from __future__ import annotations

import asyncio
import os
import ssl
import sys
from pathlib import Path

import pytest

from node_agent import identity
from node_agent.config import Paths, load
from node_agent.protocol import Client, Refused, Unreachable
from tests.support import free_port

from .support import (FakeEngine, make_agent, port_of, request_sweep, start_sweep_coordinator,
                      stop_sweep_coordinator)

ROOT = Path(__file__).resolve().parents[2]


async def test_nothing_listening_at_the_url_says_to_check_its_host_and_port():
    """It said "Connect call failed ('127.0.0.1', 9)"."""
    port = free_port()
    async with Client(f"http://127.0.0.1:{port}", timeout_s=5) as client:
        with pytest.raises(Unreachable) as err:
            await client.enrol({})
    assert err.value.message == (f"http://127.0.0.1:{port} unreachable: nothing answers at 127.0.0.1:{port} "
                                 "(connection refused): check the coordinator URL's host and port, and that the "
                                 "coordinator runs")


async def test_a_host_name_no_one_knows_says_to_check_the_urls_spelling():
    """It said "Name or service not known". (.invalid is never a host: RFC 6761.)"""
    async with Client("http://sis.example.invalid", timeout_s=10) as client:
        with pytest.raises(Unreachable) as err:
            await client.enrol({})
    assert err.value.message.startswith("http://sis.example.invalid unreachable: the host name sis.example.invalid "
                                        "is not known (")
    assert err.value.message.endswith("): check the coordinator URL's spelling, and this machine's internet connection")


@pytest.mark.parametrize("path", ["/node/v1", "/sis", "/node/v1/"])
async def test_a_url_with_a_path_says_the_url_is_the_coordinators_base_address(coord, tmp_path, path):
    """It said "enrol: the coordinator answered 404: no such path: /node/v1/node/v1/enrol"."""
    agent = make_agent(tmp_path / "a", coord.base_url + path, FakeEngine())
    assert await asyncio.wait_for(agent.run(), 20) == 2
    said = agent.status.doc["lastError"]
    assert said.startswith(f"enrolment refused: {coord.base_url + path} has no node protocol (it answered 404 at "
                           f"{path.rstrip('/')}/node/v1/enrol): the coordinator URL is its base address, such as "
                           "https://sis.example.org, without /node/v1 or any other path")
    assert said.endswith(f"; did you mean {coord.base_url}?")


async def test_a_web_server_that_is_no_coordinator_says_so(photos, tmp_path):
    agent = make_agent(tmp_path / "a", f"http://127.0.0.1:{photos.port}", FakeEngine())
    assert await asyncio.wait_for(agent.run(), 20) == 2
    assert agent.status.doc["lastError"].startswith(f"enrolment refused: http://127.0.0.1:{photos.port} has no node "
                                                    "protocol (it answered 404 at /node/v1/enrol)")


async def test_a_wrong_enrolment_secret_says_to_check_the_secret_file(sqlite_url, photos, tmp_path):
    coord = await start_sweep_coordinator(sqlite_url, photos, node_enrol_secret="s3cret")
    try:
        agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine())
        agent.enrol_secret = "s3cret?"
        assert await asyncio.wait_for(agent.run(), 20) == 2
    finally:
        await stop_sweep_coordinator(coord)
    assert agent.status.doc["lastError"] == (
        f"enrolment refused: {coord.base_url} did not take the enrolment secret given: check that the file of "
        "--enrol-secret-file (or SIS_NODE_ENROL_SECRET) holds exactly the secret its operators gave")


async def _sis_node_run(home: Path, *args: str) -> tuple[int, str]:
    """``sis-node run`` as a volunteer runs it (its engine a test one), to its end: (status, output)."""
    env = {**os.environ, "SIS_NODE_HOME": str(home), "SIS_NODE_CPU_BUSY_PERCENT": "0", "SIS_NODE_IDLE_POLL_S": "0.3",
           "SIS_NODE_PAUSE_WHEN_USER_ACTIVE": "false", "SIS_NODE_PAUSE_ON_BATTERY": "false",
           "SIS_NODE_CHECK_UPDATES": "false", "SIS_TEST_HOLD": str(home / "no-hold"),
           "SIS_TEST_STARTED": str(home / "started"), "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "tests.agent.agent_proc", "run", "--allow-cpu",
                                                *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode()


async def test_the_coordinator_url_is_kept_in_node_toml_only_once_enrolment_there_succeeded(coord, tmp_path):
    """It was kept before enrolment: a typo stayed, and every later ``sis-node run`` went on asking it."""
    await request_sweep(coord)
    home = tmp_path / "a"
    home.mkdir()
    paths = Paths(home, home)
    code, out = await _sis_node_run(home, "--coordinator", coord.base_url + "/node/v1", "--max-jobs", "1")
    assert code == 2 and "did you mean" in out, out
    assert not paths.config_file.exists()
    code, out = await _sis_node_run(home, "--coordinator", coord.base_url, "--max-jobs", "1")
    assert code == 0, out
    assert load(paths, env={}).coordinator == coord.base_url
    code, out = await _sis_node_run(home, "--coordinator", coord.base_url + "/sis", "--max-jobs", "1")
    assert code == 2, out
    assert load(paths, env={}).coordinator == coord.base_url      # the typo did not replace it
    code, out = await _sis_node_run(home, "--max-jobs", "1")       # and a plain run goes where it worked
    assert code == 0, out
    assert identity.load(paths.identity_file, coord.base_url).enrolled


@pytest.mark.parametrize("content, why", [
    (b"s3cret\n# from the operators' mail\n", "holds more than the secret on one line"),
    ("s3cret".encode("utf-16"), "is not UTF-8 text: save it as UTF-8")])
def test_an_enrolment_secret_file_it_cannot_send_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys,
                                                                             content, why):
    """A second line went into the X-Enrol-Secret header: aiohttp's ValueError ("header
    injection") came out as a traceback; a UTF-16 file (Notepad) as a UnicodeDecodeError."""
    from node_agent import cli

    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    (tmp_path / "secret.txt").write_bytes(content)
    args = cli.build_parser().parse_args(["run", "--coordinator", "http://127.0.0.1:9", "--allow-cpu",
                                          "--enrol-secret-file", str(tmp_path / "secret.txt")])
    assert cli.cmd_run(args, engine_factory=lambda d: FakeEngine()) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"sis-node: the enrolment secret file {tmp_path / 'secret.txt'} ") and why in err
    assert len(err.strip().splitlines()) == 1


async def test_a_failed_enrolment_does_not_become_the_coordinator_used_last(coord, tmp_path, monkeypatch, capsys):
    """The mistyped URL was recorded as the one used last before enrolment was tried: ``sis-node
    status`` said "not enrolled at <the typo>" (on a first run too), and an earlier agent's spool
    was taken as the typo's."""
    from node_agent import cli

    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path / "a"))
    typo = coord.base_url + "/node/v1"
    assert await asyncio.wait_for(make_agent(tmp_path / "a", typo, FakeEngine()).run(), 20) == 2
    assert identity.load(tmp_path / "a" / "identity.json").coordinator == ""
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "node:         not enrolled yet (run `sis-node run --coordinator URL`)" in out and "not enrolled at" not in out

    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), max_jobs=1)
    task = asyncio.create_task(agent.run())
    await agent.wait_until(lambda: agent.status.doc.get("state") == "idle", 60)
    agent.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    node_id = identity.load(tmp_path / "a" / "identity.json").node_id
    assert await asyncio.wait_for(make_agent(tmp_path / "a", typo, FakeEngine()).run(), 20) == 2
    last = identity.load(tmp_path / "a" / "identity.json")
    assert (last.coordinator, last.node_id) == (coord.base_url, node_id)
    assert cli.main(["status"]) == 0
    assert f"node:         {node_id} at {coord.base_url}" in capsys.readouterr().out


def _self_signed(folder: Path) -> ssl.SSLContext:
    """A server's TLS context with a certificate for 127.0.0.1 signed by itself."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context


async def test_an_https_url_at_a_plain_http_coordinator_asks_whether_it_is_http(coord):
    """It waited for the request's timeout and said "no answer within 30 s" (``sis serve``
    reads the TLS greeting as the start of a request, and waits for its end)."""
    port = port_of(coord)
    async with Client(f"https://127.0.0.1:{port}", timeout_s=2) as client:
        with pytest.raises(Unreachable) as err:
            await client.enrol({})
    assert err.value.message == (f"the coordinator at https://127.0.0.1:{port} did not answer TLS (it answers plain "
                                 f"HTTP there): is it http://127.0.0.1:{port}?")


async def test_an_http_url_at_a_tls_coordinator_asks_whether_it_is_https(coord, tmp_path):
    """It said "Connection reset by peer"."""
    from tornado.httpserver import HTTPServer

    from coordinator.faces.app import make_app

    port = free_port()
    server = HTTPServer(make_app(coord.services), ssl_options=_self_signed(tmp_path))
    server.listen(port, "127.0.0.1")
    try:
        async with Client(f"http://127.0.0.1:{port}", timeout_s=5) as client:
            with pytest.raises(Unreachable) as err:
                await client.enrol({})
    finally:
        server.stop()
    assert err.value.message == (f"the coordinator at http://127.0.0.1:{port} answered in TLS, not plain HTTP: "
                                 f"is it https://127.0.0.1:{port}?")


async def test_a_coordinator_that_answered_once_is_not_probed_for_its_scheme(coord):
    """Its scheme is right: a failure later on (a busy coordinator's timeout) is said as it is."""
    async with Client(coord.base_url, timeout_s=2) as client:
        with pytest.raises(Refused):
            await client.lease()                # 401 without a token: an answer
        client.base_url = f"https://127.0.0.1:{port_of(coord)}"     # what would be probed, had it not answered
        with pytest.raises(Unreachable) as err:
            await client.lease()
    assert err.value.message == f"https://127.0.0.1:{port_of(coord)} unreachable: no answer within 2 s"


async def test_an_https_coordinator_behind_a_proxy_that_answers_plain_http_too_is_not_told_to_use_http(tmp_path):
    """nginx, Caddy or Traefik answer a plain request on their TLS port with a 400: the probe
    took that for a plain-HTTP coordinator and told a real https one, slow once, to use
    http://host:443 (the token in clear). A port that completes a TLS handshake is right."""
    import socket
    import threading

    from node_agent import scheme

    context = _self_signed(tmp_path)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def one(conn: socket.socket) -> None:          # one port, as a proxy: TLS, or plain HTTP answered 400
        with conn:
            conn.settimeout(5)
            try:
                if conn.recv(1, socket.MSG_PEEK) == b"\x16":
                    with context.wrap_socket(conn, server_side=True) as tls:
                        tls.recv(4096)                 # the handshake done: nothing is asked of it here
                else:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        assert await scheme.other_scheme(f"https://127.0.0.1:{port}", timeout=2) is None
    finally:
        stop.set()
        listener.close()
