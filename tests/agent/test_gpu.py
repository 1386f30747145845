"""GPU detection says what is there, and exactly why nothing is usable when nothing is."""
from __future__ import annotations


from node_agent import cli, gpu

H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memoryMb": 81559, "cc": "9.0", "uuid": "GPU-1"}
SMI_TEXT = ("0, NVIDIA H100 80GB HBM3, 81559, 550.54.15, 9.0, GPU-aaa\n"
            "1, NVIDIA GeForce RTX 3060, 12288, 550.54.15, 8.6, GPU-bbb\n")


def test_nvidia_smi_output_is_read_into_gpus():
    view = gpu.parse_smi(SMI_TEXT)
    assert view["driver"] == "550.54.15"
    assert [(d["index"], d["name"], d["memoryMb"], d["cc"]) for d in view["devices"]] == [
        (0, "NVIDIA H100 80GB HBM3", 81559, "9.0"), (1, "NVIDIA GeForce RTX 3060", 12288, "8.6")]


def test_usable_gpus_carry_name_memory_compute_capability_and_driver():
    det = gpu.detect({"version": "2.5", "cuda": "12.4", "devices": [H100]}, {"absent": "no pynvml"},
                     gpu.parse_smi(SMI_TEXT), env={})
    assert det.usable[0].describe() == "GPU 0: NVIDIA H100 80GB HBM3, 79.6 GiB, compute 9.0, driver 550.54.15"
    assert det.problems == []


def test_a_cpu_only_torch_is_named_as_the_missing_piece():
    det = gpu.detect({"version": "2.5.0+cpu", "cuda": None, "devices": []}, {"absent": "no pynvml"},
                     gpu.parse_smi(SMI_TEXT), env={})
    assert not det.usable
    assert "torch 2.5.0+cpu is a CPU-only build (no CUDA)" in det.why_not()
    assert "driver 550.54.15 sees NVIDIA H100 80GB HBM3, NVIDIA GeForce RTX 3060" in det.why_not()


def test_no_driver_is_named_as_the_missing_piece():
    det = gpu.detect({"version": "2.5", "cuda": "12.4", "devices": []}, {"absent": "pynvml is not installed"},
                     {"absent": "nvidia-smi is not on PATH"}, env={"CUDA_VISIBLE_DEVICES": ""})
    why = det.why_not()
    assert "torch 2.5 (CUDA 12.4) sees no CUDA device" in why
    assert "no NVIDIA driver was found (nvidia-smi, which comes with the driver, is not on PATH): install the " \
           "NVIDIA driver for this GPU" in why
    assert "CUDA_VISIBLE_DEVICES='' hides every GPU" in why


def test_the_nvml_binding_missing_is_no_reason_a_volunteer_is_given():
    """"the NVML Python binding (pynvml) is not installed" was listed among the reasons: a
    volunteer of the compiled app can install no Python package, and nothing installed there
    makes a GPU usable (it is optional, and nvidia-smi answers the same)."""
    absent = {"absent": "NVML's Python binding (pip package nvidia-ml-py) is not installed"}
    for smi in ({"absent": "nvidia-smi is not on PATH"}, {"driver": "550.54.15", "devices": []},
                {"error": "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate"}):
        why = gpu.detect({"version": "2.5", "cuda": "12.4", "devices": []}, absent, smi, env={}).why_not()
        assert "pynvml" not in why and "NVML" not in why and "nvidia-ml-py" not in why
    assert "the NVIDIA driver is installed and lists no GPU" in gpu.detect(
        {"version": "2.5", "cuda": "12.4", "devices": []}, absent, {"driver": "550.54.15", "devices": []}, env={}).why_not()


def test_a_broken_driver_says_how_it_broke():
    det = gpu.detect({"version": "2.5", "cuda": "12.4", "devices": []},
                     {"error": "NVML cannot start (Driver Not Loaded): is the NVIDIA driver installed?"},
                     {"error": "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate"},
                     env={})
    assert "Driver Not Loaded" in det.why_not() and "couldn't communicate" in det.why_not()
    assert "the NVIDIA driver is installed but does not answer: restart the machine" in det.why_not()
    assert "no NVIDIA driver was found" not in det.why_not()     # it said so after nvidia-smi's own failure


def test_choosing_gpus_by_index_and_naming_one_that_does_not_exist():
    det = gpu.detect({"version": "2.5", "cuda": "12.4", "devices": [H100, {**H100, "index": 1, "name": "B"}]},
                     {"absent": ""}, {"absent": ""}, env={})
    chosen, problems = gpu.choose(det, [1])
    assert [g.name for g in chosen] == ["B"] and problems == []
    chosen, problems = gpu.choose(det, [3])
    assert problems == ["GPU 3 was chosen but does not exist (usable: [0, 1])"]


def test_this_machines_detection_runs_and_explains_itself():
    det = gpu.detect()
    assert det.usable or det.problems  # either a GPU, or a reason: never silence


def test_run_without_a_gpu_refuses_with_a_message_naming_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SIS_NODE_HOME", str(tmp_path))
    no_gpu = lambda: gpu.detect({"version": "2.5.0+cpu", "cuda": None, "devices": []},  # noqa: E731
                                {"absent": "pynvml is not installed"}, {"absent": "nvidia-smi is not on PATH"}, {})
    args = cli.build_parser().parse_args(["run", "--coordinator", "http://127.0.0.1:9"])
    assert cli.cmd_run(args, engine_factory=lambda d: None, detect=no_gpu) == cli.EXIT_NO_GPU
    err = capsys.readouterr().err
    assert "sis-node needs an NVIDIA GPU" in err and "CPU-only build" in err and "no NVIDIA driver was found" in err
    assert "--allow-cpu" in err


def test_allow_cpu_runs_and_says_so_in_the_device(tmp_path):
    from node_agent.config import Config
    no_gpu = lambda: gpu.detect({"version": "2.5.0+cpu", "cuda": None, "devices": []},  # noqa: E731
                                {"absent": "x"}, {"absent": "y"}, {})
    device, chosen, why = cli.choose_device(Config(), True, no_gpu)
    assert device.label.startswith("cpu (development run, --allow-cpu") and not device.on_gpu
    assert chosen is None and why is None
    device, _, why = cli.choose_device(Config(), False, no_gpu)
    assert device is None and "CPU-only build" in why


def test_a_chosen_gpu_becomes_the_device_and_the_engine_runs_on_it(monkeypatch):
    from node_agent.config import Config
    from node_agent import engine as engine_mod

    two = lambda: gpu.detect({"version": "2.5", "cuda": "12.4",  # noqa: E731
                              "devices": [H100, {**H100, "index": 1, "name": "NVIDIA L4", "cc": "8.9"}]},
                             {"absent": ""}, gpu.parse_smi(SMI_TEXT), {})
    device, chosen, why = cli.choose_device(Config(gpus="1"), False, two)
    assert device.on_gpu and device.label == "cuda:1 NVIDIA L4" and chosen.index == 1 and why is None
    assert "compute 8.9" in device.gpu_text
    device, _, why = cli.choose_device(Config(gpus="4"), True, two)
    assert not device.on_gpu and "GPU 4 was chosen but does not exist" in device.gpu_text

    seen = {}

    class FakeEngine:
        def __init__(self, config):
            seen["device"], seen["weights"] = config.device, config.weights_manifest
            seen["geometry workers"] = config.geometry_workers
            self.version, self.build = "0.1.0", "b"
    import sweep_engine.pipeline
    monkeypatch.setattr(sweep_engine.pipeline, "Engine", FakeEngine)
    monkeypatch.delenv("SIS_ENGINE_GEOMETRY_WORKERS", raising=False)
    gpu_device, _, _ = cli.choose_device(Config(gpus="1"), False, two)
    engine_mod.load_engine(gpu_device, "/w/weights.json")
    assert seen == {"device": "cuda:1", "weights": "/w/weights.json", "geometry workers": 0}
    # The CPU a volunteer gives beside the GPU: the job's thread and, for the rest, geometry processes;
    # on the CPU itself the networks take those threads, and an operator's own setting stands.
    engine_mod.load_engine(gpu_device, "/w/weights.json", cpu_threads=4)
    assert seen["geometry workers"] == 3
    engine_mod.load_engine(_cpu(), "/w/weights.json", cpu_threads=4)
    assert seen["geometry workers"] == 0
    monkeypatch.setenv("SIS_ENGINE_GEOMETRY_WORKERS", "2")
    engine_mod.load_engine(gpu_device, "/w/weights.json", cpu_threads=8)
    assert seen["geometry workers"] == 2


def test_unset_weights_mean_the_shipped_ones_and_bad_weights_say_what_is_missing(tmp_path, monkeypatch):
    from node_agent import engine as engine_mod
    from node_agent.engine import EngineMissing, load_engine
    from sweep_engine.config import DEFAULT_WEIGHTS_MANIFEST
    import pytest

    seen = {}
    monkeypatch.setattr(engine_mod, "EngineAdapter", lambda e: e)
    monkeypatch.setattr("sweep_engine.pipeline.Engine", lambda config: seen.setdefault("w", config.weights_manifest))
    load_engine(_cpu(), "")
    assert seen["w"] == DEFAULT_WEIGHTS_MANIFEST
    monkeypatch.undo()
    with pytest.raises(EngineMissing, match="the sweep engine cannot start: weights manifest .* does not exist"):
        load_engine(_cpu(), str(tmp_path / "nowhere.json"))



def test_an_installation_without_torch_is_told_how_to_get_the_engine(monkeypatch):
    """``make run`` installs the coordinator alone: ``sis-node run`` there names the command that adds
    the engine instead of failing on an import."""
    import sys

    import pytest

    from node_agent.engine import EngineMissing, load_engine
    monkeypatch.setitem(sys.modules, "sweep_engine.pipeline", None)     # as if torch were not installed
    with pytest.raises(EngineMissing, match=r"has no sweep engine .*make install-full"):
        load_engine(_cpu(), "")

def _cpu():
    from node_agent.loop import Device
    return Device("cpu (development run)", False, "none")


def test_memory_fraction_and_cpu_threads_are_applied_to_the_chosen_gpu(monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i: calls.append((f, i)))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(("threads", n)))
    g = gpu.Gpu(2, "NVIDIA L4", 23034, "8.9")
    gpu.apply_limits([g], 0.6, 1)
    assert calls == [("threads", 1), (0.6, 2)]
