"""Settings and where the agent keeps its files."""
from __future__ import annotations

from pathlib import Path

import pytest

from node_agent import config as c

ROOT = Path(__file__).resolve().parents[2]


def test_files_live_in_each_platforms_own_folders():
    linux = c.paths({"HOME": "/home/v"}, "linux")
    assert linux.config_file == Path("/home/v/.config/sis-node/node.toml")
    assert linux.identity_file == Path("/home/v/.local/share/sis-node/identity.json")
    xdg = c.paths({"HOME": "/home/v", "XDG_CONFIG_HOME": "/cfg", "XDG_DATA_HOME": "/data"}, "linux")
    assert xdg.config_dir == Path("/cfg/sis-node") and xdg.data_dir == Path("/data/sis-node")
    win = c.paths({"USERPROFILE": r"C:\Users\v", "APPDATA": r"C:\Users\v\AppData\Roaming",
                   "LOCALAPPDATA": r"C:\Users\v\AppData\Local"}, "win32")
    assert win.config_dir == Path(r"C:\Users\v\AppData\Roaming") / "sis-node"
    assert win.data_dir == Path(r"C:\Users\v\AppData\Local") / "sis-node"
    mac = c.paths({"HOME": "/Users/v"}, "darwin")
    assert mac.config_dir == Path("/Users/v/Library/Application Support/sis-node")


def test_sis_node_home_puts_everything_in_one_folder():
    p = c.paths({"SIS_NODE_HOME": "/tmp/x", "HOME": "/home/v"}, "linux")
    assert p.config_file == Path("/tmp/x/node.toml") and p.spool_dir == Path("/tmp/x/spool")


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path):
    p = c.Paths(tmp_path, tmp_path)
    p.config_file.write_text('coordinator = "http://file"\ngpu_memory_fraction = 0.5\ncpu_threads = 3\n')
    cfg = c.load(p, env={"SIS_NODE_CPU_THREADS": "2", "SIS_NODE_PAUSE_ON_BATTERY": "no"},
                 coordinator="http://flag")
    assert cfg.coordinator == "http://flag"
    assert cfg.cpu_threads == 2 and cfg.pause_on_battery is False
    assert cfg.gpu_memory_fraction == 0.5
    assert cfg.heartbeat_interval_s == c.Config().heartbeat_interval_s


@pytest.mark.parametrize("text,needle", [
    ("gpu_memory_fracton = 0.5\n", "unknown setting 'gpu_memory_fracton'"),
    ("gpu_memory_fraction = 3.0\n", "gpu_memory_fraction: 3.0 is outside 0.05-1.0"),
    ('gpus = "first"\n', "gpus: 'first' is neither 'all' nor a list of GPU indices"),
    ('cpu_threads = "many"\n', "cpu_threads: 'many' is not a whole number"),
    ("photo_concurrency = 64\n", "photo_concurrency: 64 is outside 1-16"),
    ('coordinator = "ftp://x"\n', "is not an http(s) URL"),
    ("coordinator = \n", "node.toml"),
    ('log_level = "verbose"\n', "log_level: 'verbose' is not one of DEBUG, INFO, WARNING, ERROR"),
])
def test_a_bad_setting_is_refused_with_its_name(tmp_path, text, needle):
    p = c.Paths(tmp_path, tmp_path)
    p.config_file.write_text(text)
    with pytest.raises(c.ConfigError) as err:
        c.load(p, env={})
    assert needle in str(err.value)


def test_saving_a_setting_keeps_the_others(tmp_path):
    p = c.Paths(tmp_path, tmp_path)
    p.config_file.write_text('gpus = "0,2"\n')
    c.save_setting(p, "coordinator", 'http://a"b')
    cfg = c.load(p, env={})
    assert cfg.gpus == "0,2" and cfg.coordinator == 'http://a"b'
    assert cfg.gpu_indices() == [0, 2]


def test_every_setting_is_documented():
    text = (ROOT / "docs" / "node-agent.md").read_text()
    for name, _, _ in c.Config.help_table():
        assert f"`{name}`" in text, f"{name} is not in docs/node-agent.md"
        assert f"`SIS_NODE_{name.upper()}`" in text, f"SIS_NODE_{name.upper()} is not in docs/node-agent.md"


def _home(tmp_path, content: bytes) -> c.Paths:
    p = c.paths({"SIS_NODE_HOME": str(tmp_path)}, "linux").ensure()
    p.config_file.write_bytes(content)
    return p


@pytest.mark.parametrize("encoding", ["utf-16", "cp1252"])
def test_a_config_file_that_is_not_utf8_says_so(tmp_path, encoding):
    """A UnicodeDecodeError traceback: Notepad saves UTF-16 ("Unicode") or the ANSI code page."""
    p = _home(tmp_path, 'name = "Bücherwurm"\n'.encode(encoding))
    for read in (lambda: c.load(p, env={}), lambda: c.save_setting(p, "coordinator", "https://c.example")):
        with pytest.raises(c.ConfigError) as err:
            read()
        assert str(err.value) == f"{p.config_file} is not UTF-8 text: save it as UTF-8"


def test_a_utf8_bom_is_no_setting(tmp_path):
    """It was "Invalid statement (at line 1, column 1)"."""
    p = _home(tmp_path, b'\xef\xbb\xbfcoordinator = "https://c.example"\n')
    assert c.load(p, env={}).coordinator == "https://c.example"
    c.save_setting(p, "name", "n1")
    assert c.load(p, env={}).name == "n1"


@pytest.mark.parametrize("path", [r"C:\Users\me\w.json", r"C:\me\w.json"])
def test_a_windows_path_in_double_quotes_gets_a_hint(tmp_path, path):
    p = _home(tmp_path, f'engine_weights = "{path}"\n'.encode())
    with pytest.raises(c.ConfigError) as err:
        c.load(p, env={})
    assert str(err.value).startswith(f"{p.config_file}: ")
    assert str(err.value).endswith("(a Windows path in double quotes needs \\\\ or 'single quotes')")
    p.config_file.write_text(f"engine_weights = '{path}'\n")
    assert c.load(p, env={}).engine_weights == path
