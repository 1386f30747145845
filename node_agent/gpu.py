"""NVIDIA GPU detection, and why there is none when there is none.

Three witnesses, each optional, each asked apart so that one failing says
something about the machine instead of hiding the others:

- torch (``torch.cuda``): what the engine will actually use. Name, memory,
  compute capability; its CUDA build (``torch.version.cuda``) tells a CPU-only
  torch apart from a missing driver.
- NVML (``pynvml``, of the pip package ``nvidia-ml-py``, when installed): driver
  version and memory from the driver. Optional, and not in a compiled node app.
- ``nvidia-smi``: the same from the command the driver ships, where NVML's
  Python binding is absent.

The agent runs on the GPUs torch can use; the other two fill in the driver
version and make the "why not" message precise. A reason is said so that a
volunteer can act on it (install or restart the driver, install a CUDA build
of torch); the NVML binding's absence is none: nothing a volunteer installs
makes a GPU usable, and ``nvidia-smi`` answers the same.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Gpu:
    index: int
    name: str
    memory_mb: int
    compute_capability: str | None = None
    driver: str | None = None
    uuid: str | None = None
    source: str = "torch"

    def describe(self) -> str:
        cc = f", compute {self.compute_capability}" if self.compute_capability else ""
        drv = f", driver {self.driver}" if self.driver else ""
        return f"GPU {self.index}: {self.name}, {self.memory_mb / 1024:.1f} GiB{cc}{drv}"


@dataclass
class Detection:
    """What the witnesses saw: ``usable`` are the GPUs torch can run on; ``problems`` say why not."""

    usable: list[Gpu] = field(default_factory=list)
    seen_by_driver: list[Gpu] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torch_version: str | None = None
    torch_cuda: str | None = None
    driver: str | None = None

    def why_not(self) -> str:
        return "; ".join(self.problems) or "no NVIDIA GPU was found"

    def to_dict(self) -> dict[str, Any]:
        return {"usable": [g.__dict__ for g in self.usable], "seenByDriver": [g.__dict__ for g in self.seen_by_driver],
                "problems": self.problems, "torch": self.torch_version, "torchCuda": self.torch_cuda,
                "driver": self.driver}


def torch_probe() -> dict[str, Any]:
    """What torch sees; a dict so tests can hand in another machine's view."""
    try:
        import torch
    except ImportError as exc:
        return {"error": f"torch cannot be imported ({exc}); the engine needs it"}
    out: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda, "devices": []}
    if torch.version.cuda is None:
        return out
    try:
        available = torch.cuda.is_available()
        count = torch.cuda.device_count() if available else 0
    except Exception as exc:  # a broken driver install raises from inside CUDA initialisation
        out["error"] = f"CUDA initialisation failed: {exc}"
        return out
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        out["devices"].append({"index": i, "name": p.name, "memoryMb": p.total_memory // (1024 * 1024),
                               "cc": f"{p.major}.{p.minor}", "uuid": str(getattr(p, "uuid", "") or "") or None})
    return out


def nvml_probe() -> dict[str, Any]:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return {"absent": "NVML's Python binding (pip package nvidia-ml-py) is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"error": f"NVML cannot start ({exc}): is the NVIDIA driver installed?"}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            devices.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                            "memoryMb": pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024),
                            "cc": f"{major}.{minor}"})
        return {"driver": driver.decode() if isinstance(driver, bytes) else driver, "devices": devices}
    finally:
        pynvml.nvmlShutdown()


SMI_QUERY = "index,name,memory.total,driver_version,compute_cap,uuid"


def smi_path() -> str | None:
    """Where nvidia-smi is, or None. On Windows ``shutil.which`` looks in the current folder
    before PATH (Python before 3.12), so an nvidia-smi.exe in the folder the agent was started
    from (a downloads folder) would run in its place: the driver's own locations are taken
    first there (System32, where current drivers put it, then NVSMI, older drivers'), then
    PATH's absolute folders only."""
    if sys.platform != "win32":
        return shutil.which("nvidia-smi")
    folders = [os.path.join(os.environ.get("SystemRoot") or r"C:\Windows", "System32"),
               os.path.join(os.environ.get("ProgramFiles") or r"C:\Program Files", "NVIDIA Corporation", "NVSMI")]
    folders += [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and os.path.isabs(d)]
    for folder in folders:
        exe = os.path.join(folder, "nvidia-smi.exe")
        if os.path.isfile(exe):
            return exe
    return None


def smi_probe(runner: Callable[[list[str]], str] | None = None) -> dict[str, Any]:
    exe = smi_path()
    if runner is None:
        if exe is None:
            return {"absent": "nvidia-smi is not on PATH"}

        def runner(cmd: list[str]) -> str:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=True).stdout
    try:
        text = runner([exe or "nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"])
    except subprocess.CalledProcessError as exc:
        return {"error": f"nvidia-smi failed: {(exc.stderr or exc.stdout or '').strip() or exc}"}
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"nvidia-smi could not run: {exc}"}
    return parse_smi(text)


def parse_smi(text: str) -> dict[str, Any]:
    devices, driver = [], None
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            devices.append({"index": int(parts[0]), "name": parts[1], "memoryMb": int(float(parts[2])),
                            "cc": parts[4] if parts[4] not in ("", "[N/A]") else None,
                            "uuid": parts[5] if len(parts) > 5 else None})
        except ValueError:
            continue
        driver = parts[3] or driver
    return {"driver": driver, "devices": devices}


def detect(torch_view: dict[str, Any] | None = None, nvml_view: dict[str, Any] | None = None,
           smi_view: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Detection:
    """Ask each witness (or take the views given, for tests) and say what is usable and why not."""
    env = os.environ if env is None else env
    t = torch_probe() if torch_view is None else torch_view
    n = nvml_probe() if nvml_view is None else nvml_view
    s = smi_probe() if smi_view is None else smi_view
    det = Detection(torch_version=t.get("version"), torch_cuda=t.get("cuda"))
    driver_view = n if n.get("devices") is not None else s
    det.driver = n.get("driver") or s.get("driver")
    det.seen_by_driver = [Gpu(d["index"], d["name"], d["memoryMb"], d.get("cc"), det.driver, d.get("uuid"),
                              "nvml" if driver_view is n else "nvidia-smi")
                          for d in driver_view.get("devices") or []]
    for d in t.get("devices") or []:
        det.usable.append(Gpu(d["index"], d["name"], d["memoryMb"], d.get("cc"), det.driver, d.get("uuid")))
    if det.usable:
        return det
    # Nothing usable: say precisely what is missing, most fundamental first.
    if "error" in t and t.get("version") is None:
        det.problems.append(t["error"])
    elif t.get("cuda") is None:
        det.problems.append(f"torch {t.get('version')} is a CPU-only build (no CUDA); install a CUDA build of torch")
    elif "error" in t:
        det.problems.append(t["error"])
    else:
        det.problems.append(f"torch {t.get('version')} (CUDA {t.get('cuda')}) sees no CUDA device")
    if det.seen_by_driver:
        names = ", ".join(g.name for g in det.seen_by_driver)
        drv = f" {det.driver}" if det.driver else ""
        det.problems.append(f"the NVIDIA driver{drv} sees {names} but torch cannot use it: "
                            f"torch's CUDA {t.get('cuda')} may need a newer driver")
    else:
        det.problems += _driver_problems(n, s)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        det.problems.append(f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU")
    return det


def _driver_problems(nvml: dict[str, Any], smi: dict[str, Any]) -> list[str]:
    """Why the driver shows no GPU, from what NVML and nvidia-smi answered, each reason with
    what to do about it. nvidia-smi failing means a driver installed and not working; NVML
    failing alone may be no driver at all (its library comes with the driver)."""
    nvml_error = [nvml["error"]] if nvml.get("error") else []
    if smi.get("error"):
        return nvml_error + [smi["error"], "the NVIDIA driver is installed but does not answer: restart the "
                             "machine, and if that does not help, reinstall the NVIDIA driver"]
    if nvml.get("devices") == [] or smi.get("devices") == []:
        return ["the NVIDIA driver is installed and lists no GPU: is there an NVIDIA GPU in this machine, and is it "
                "enabled (a laptop's graphics switching, the firmware settings)?"]
    return nvml_error + ["no NVIDIA driver was found (nvidia-smi, which comes with the driver, is not on PATH): "
                         "install the NVIDIA driver for this GPU, from nvidia.com or your distribution's packages, "
                         "and restart the machine"]


def choose(det: Detection, wanted: list[int] | None) -> tuple[list[Gpu], list[str]]:
    """The GPUs to run on, and the problems with the choice (an index that does not exist)."""
    if wanted is None:
        return list(det.usable), []
    by_index = {g.index: g for g in det.usable}
    missing = [i for i in wanted if i not in by_index]
    problems = [f"GPU {i} was chosen but does not exist (usable: {sorted(by_index) or 'none'})" for i in missing]
    return [by_index[i] for i in wanted if i in by_index], problems


def apply_limits(gpus: list[Gpu], memory_fraction: float, cpu_threads: int) -> None:
    """Cap the engine's share of each chosen GPU's memory and the CPU threads beside it."""
    import torch

    torch.set_num_threads(max(1, cpu_threads))
    for g in gpus:
        torch.cuda.set_per_process_memory_fraction(memory_fraction, g.index)
