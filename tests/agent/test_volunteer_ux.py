"""What a new volunteer following docs/node-agent.md meets: a coordinator gone away backed
off from (not asked every second), an https:// URL at a plain-HTTP coordinator that cuts the
TLS greeting off, a full disk said as one, and settings' typos said with their fix."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import re

import pytest

import node_agent.files as files
from node_agent import cli
from node_agent import config as config_mod
from node_agent.protocol import Client, Unreachable

from .support import FakeEngine, make_agent, port_of, start_sweep_coordinator, stop_sweep_coordinator, take_down


def _retries(caplog) -> list[tuple[float, int]]:
    out = []
    for r in caplog.records:
        m = re.search(r"retrying in ([0-9.]+) s \(attempt (\d+)\)", r.getMessage())
        if m:
            out.append((float(m.group(1)), int(m.group(2))))
    return out


async def test_a_coordinator_gone_away_with_nothing_spooled_is_backed_off_from(coord, tmp_path, caplog):
    """With nothing spooled, each turn's (empty) submission of the spool reset the backoff, so
    the lease that failed next was always attempt 1: a retry every 1-2 s, forever."""
    caplog.set_level(logging.INFO, logger="sis.node")
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), idle_poll_s=0.1)
    task = asyncio.create_task(agent.run())
    try:
        await agent.wait_until(lambda: agent.identity is not None and agent._idle_said, 20)  # enrolled, no work
        await take_down(coord)
        for _ in range(200):
            if len(_retries(caplog)) >= 6 or task.done():
                break
            await asyncio.sleep(0.05)
        agent.request_stop()
        agent.request_stop()
        await asyncio.wait_for(task, 20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    retries = _retries(caplog)[:6]
    assert [attempt for _, attempt in retries] == [1, 2, 3, 4, 5, 6], retries
    # Base 0.1 s, cap 0.8 s (support.agent_config), equal jitter: each delay in [cap/2, cap].
    for (delay, attempt) in retries:
        cap = min(0.8, 0.1 * 2 ** (attempt - 1))
        assert cap / 2 - 0.051 <= delay <= cap + 0.051, (attempt, delay)
    assert retries[-1][0] >= 0.4 - 0.051      # the later ones at the cap's range, not 1-2 base delays


async def test_an_https_url_at_a_coordinator_that_resets_the_tls_greeting_asks_whether_it_is_http(
        sqlite_url, photos):
    """``sis serve`` closes a connection whose head is not in within SIS_HEAD_TIMEOUT_S; the TLS
    greeting it read as a head is unread then, so the close is a reset, and aiohttp says
    ClientConnectorError(ConnectionResetError): that was taken for nothing listening, and the
    volunteer told "connection reset" with no hint of the scheme."""
    coord = await start_sweep_coordinator(sqlite_url, photos, head_timeout_s=0.3)
    try:
        port = port_of(coord)
        async with Client(f"https://127.0.0.1:{port}", timeout_s=10) as client:
            with pytest.raises(Unreachable) as err:
                await client.enrol({})
    finally:
        await stop_sweep_coordinator(coord)
    assert err.value.message == (f"the coordinator at https://127.0.0.1:{port} did not answer TLS (it answers plain "
                                 f"HTTP there): is it http://127.0.0.1:{port}?")


def _full(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_pause_on_a_full_disk_says_to_free_space_not_to_move_the_data_folder(tmp_path, monkeypatch, capsys):
    """It said "cannot be written (No space left on device): give SIS_NODE_HOME a folder this user
    can write": another folder is no answer to a full disk. ENOSPC is faked at os.write, as in
    test_host_disk_full.py."""
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    monkeypatch.setattr(files.os, "write", _full)
    assert cli.main(["pause"]) == 2
    err = capsys.readouterr().err
    assert err == (f"sis-node: the data folder {tmp_path} cannot be written (No space left on device; free some "
                   f"space)\n")
    assert not (tmp_path / "paused.json").exists()


def test_a_folder_that_cannot_be_made_on_a_full_disk_says_to_free_space(tmp_path, monkeypatch):
    monkeypatch.setattr(config_mod.Path, "mkdir", _full)
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.Paths(tmp_path / "c", tmp_path / "d").ensure()
    assert str(err.value) == f"the folder {tmp_path / 'c'} cannot be made (No space left on device; free some space)"


def test_a_data_folder_refused_still_says_to_give_sis_node_home_another(tmp_path, monkeypatch, capsys):
    def refused(*_a, **_k):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    monkeypatch.setattr(files.os, "write", refused)
    assert cli.main(["pause"]) == 2
    assert capsys.readouterr().err == (f"sis-node: the data folder {tmp_path} cannot be written (Permission denied): "
                                       f"give SIS_NODE_HOME a folder this user can write\n")


# ---- settings' typos --------------------------------------------------------------------

def test_an_unknown_setting_in_node_toml_names_the_closest_one(tmp_path):
    p = config_mod.Paths(tmp_path, tmp_path)
    (tmp_path / "node.toml").write_text("cpu_busy_percnt = 50\n")
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.load(p, env={})
    assert str(err.value) == (f"{tmp_path / 'node.toml'}: unknown setting 'cpu_busy_percnt'; "
                              f"did you mean 'cpu_busy_percent'?")


def test_an_unknown_sis_node_variable_is_warned_of_with_the_closest_name(tmp_path, monkeypatch, caplog):
    """The same typo that stops the run in node.toml was ignored without a word in the environment."""
    monkeypatch.setattr(config_mod, "_warned_env", set())
    caplog.set_level(logging.WARNING, logger="sis.node")
    p = config_mod.Paths(tmp_path, tmp_path)
    env = {"SIS_NODE_CPU_BUSY_PERCNT": "50", "SIS_NODE_XYZZY": "1",
           # read, and no warning: the agent's own, a setting, and the coordinator's node_* settings
           "SIS_NODE_HOME": str(tmp_path), "SIS_NODE_ENROL_SECRET": "s", "SIS_NODE_CPU_THREADS": "2",
           "SIS_NODE_ENROL_PER_MINUTE": "5", "SIS_NODE_IP_PER_MINUTE": "5", "SIS_NODE_PER_MINUTE": "5"}
    cfg = config_mod.load(p, env=env)
    assert cfg.cpu_busy_percent == 70.0 and cfg.cpu_threads == 2
    assert [r.getMessage() for r in caplog.records] == [
        "the environment variable SIS_NODE_CPU_BUSY_PERCNT is not a sis-node setting and is ignored; "
        "did you mean SIS_NODE_CPU_BUSY_PERCENT?",
        "the environment variable SIS_NODE_XYZZY is not a sis-node setting and is ignored "
        "(`sis-node settings` lists them)"]
    config_mod.load(p, env=env)
    assert len(caplog.records) == 2             # once a process


def test_the_coordinators_node_settings_are_not_taken_for_typos():
    """A machine running the coordinator and the agent (the demo) sets SIS_NODE_ENROL_SECRET and
    its kin for the coordinator (SIS_ + its node_* settings)."""
    from coordinator.core.settings import Settings

    theirs = {f"SIS_{name.upper()}" for name in Settings.model_fields if name.startswith("node_")}
    assert theirs and theirs <= config_mod.ENV_OTHERS


@pytest.mark.parametrize("text, needle", [
    ("cpu_busy_percent = '70%'\n", "cpu_busy_percent: '70%' is not a number"),
    ("cpu_threads = 'many'\n", "cpu_threads: 'many' is not a whole number"),
    ("coordinator = http://127.0.0.1:8080\n",
     "Invalid value (at line 1, column 15) (text needs quotes: coordinator = \"https://sis.example.org\")"),
])
def test_a_value_of_the_wrong_kind_says_what_it_should_be(tmp_path, text, needle):
    p = config_mod.Paths(tmp_path, tmp_path)
    (tmp_path / "node.toml").write_text(text)
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.load(p, env={})
    assert needle in str(err.value)


async def test_the_acknowledged_line_reads_as_words_and_counts_one_job(coord, tmp_path, caplog):
    from .support import request_sweep

    caplog.set_level(logging.INFO, logger="sis.node")
    await request_sweep(coord)
    agent = make_agent(tmp_path / "a", coord.base_url, FakeEngine(), max_jobs=1)
    assert await asyncio.wait_for(agent.run(), 60) == 0
    lines = [r.getMessage() for r in caplog.records if " acknowledged" in r.getMessage()]
    assert len(lines) == 1, lines
    assert re.fullmatch(r"result of \S+ acknowledged: the coordinator holds it as \w+, and the job as \w+; "
                        r"contribution: 1 job", lines[0]), lines[0]
