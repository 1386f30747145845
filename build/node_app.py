"""Build the node agent with Nuitka: one file per platform, the sweep engine and
its weights compiled in, then record each artefact's size and sha256.

    make node-app                       # Linux, on a Linux builder
    python build/node_app.py [--out build/out] [--jobs N]

On a Windows builder (Python 3.11+, a C compiler Nuitka accepts, e.g. MSVC or
its own MinGW download) run the same script from a checkout with the project
installed: `py -m pip install -e .[engine,build]` then `py build\\node_app.py`.
Nothing here downloads at run time; Nuitka itself may fetch its MinGW/ccache
on Windows when told to (`--assume-yes-for-downloads`), which this script does
not pass.

Decisions (see docs/node-app.md): torch's JIT is disabled in the build
(`torch-disable-jit=yes`: the engine runs eager PyTorch and never scripts); our code
is compiled and third-party packages are kept as bytecode (build/nuitka_bytecode.py);
tensorboard, benchmark and elastic-training packages and our training code are left out.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Left out of the binary: nothing the agent runs imports them. (torch 2.15 imports
# torch._dynamo, torch._inductor, torch.testing and torch.onnx when it is imported, and
# torchvision and timm their datasets and readers, so those must stay in.)
LEAVE_OUT = [
    "torch.utils.tensorboard", "torch.distributed.elastic", "torch.utils.benchmark",
    "sweep_engine.train", "pytest", "IPython", "matplotlib", "pandas", "tkinter",
    # The SegFormer segmentation slot's library: its lazy tree of some 400 model families
    # kept Nuitka's pass busy for over 38 minutes on two cores and is not needed by the
    # shipped weights; in the binary that slot says it is not carried (WITHOUT, below).
    "transformers",
    # A test library torch.testing may import, and the Hugging Face hub's Xet download
    # client: the agent neither tests nor downloads.
    "hypothesis", "hf_xet",
]
# What a binary cannot do because of LEAVE_OUT, as its --version and the manifest say it.
WITHOUT = ["the SegFormer segmentation slot (transformers is not carried)"]

# Libraries of the torch and nvidia wheels left out of the payload: no library in torch or
# the nvidia wheels names them (a grep of each soname over every shared object of both finds
# only the file itself), so nothing the engine runs can load them. docs/node-app.md says
# what was checked for each; cuDNN's sub-libraries, CUPTI's profiling hosts and nvshmem's
# transports stay in, since only a GPU run could show them unused.
LEAVE_OUT_DLLS = [
    "*libcusolverMg.so*",       # multi-GPU dense solver (114 MB)
    "*libcheckpoint.so*",       # CUDA checkpoint/restore of whole processes
    "*libnvblas.so*",           # drop-in BLAS for CPU programs that offloads to cuBLAS
    "*libcufftw.so*",           # FFTW-compatible wrapper of cuFFT
    "*libpcsamplingutil.so*",   # CUPTI's PC-sampling helper (profiling)
    "*libnvtx3interop.so*",     # NVTX v3 interop shim (profiling annotations)
    "torch/bin/protoc*",        # the protobuf compiler, if taken as an executable
    # Second copies (1.25 GB unpacked, the build report showed each library twice): Nuitka
    # copies what torchvision's kernels (_C_stable.so, RPATH $ORIGIN:$ORIGIN/..) need to the
    # top folder beside torch's own copies in torch/lib; torch is imported first, and the
    # loader then finds these sonames already loaded. libnccl is kept at the top folder, the
    # first entry of libtorch_cuda.so's RPATH that holds it, not in nvidia/nccl/lib.
    "libtorch_cuda.so", "libtorch_cpu.so", "libtorch_nvshmem.so", "libc10.so", "libgomp.so.1",
    "nvidia/nccl/lib/libnccl.so*",
]
# Files that are not run at all: C/C++ headers (nothing compiles at run time: the JIT is
# off and torch.compile is never used), static libraries, and the protobuf compiler in
# torch/bin. torch_shm_manager stays: import torch checks that it exists (a build without
# it stopped at "Unable to find torch_shm_manager" in make node-app-check).
LEAVE_OUT_FILES = [
    "torch/include", "nvidia/*/include/*", "nvidia/*/*/include/*", "*.a", "torch/bin/protoc*",
    "torch/share/cmake", "*.h", "*.hpp", "*.cuh",
]


def artefact_name() -> str:
    system = {"Linux": "linux", "Windows": "windows", "Darwin": "macos"}[platform.system()]
    arch = {"x86_64": "x86_64", "AMD64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine()]
    return f"sis-node-{system}-{arch}" + (".exe" if system == "windows" else "")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def payload_hash() -> str:
    """What decides the payload besides our sources: what is left out and every installed
    distribution's version. In the unpack folder's name, so that a rebuild of the same
    sources with another payload never starts from a stale unpacked copy."""
    from importlib.metadata import distributions
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())
    doc = json.dumps([LEAVE_OUT, LEAVE_OUT_DLLS, LEAVE_OUT_FILES, installed])
    return hashlib.sha256(doc.encode()).hexdigest()


def nuitka_command(out: Path, name: str, jobs: int, cache_tag: str, launcher: Path) -> list[str]:
    """The Nuitka command line that builds the artefact ``name`` into ``out``."""
    return [
        sys.executable, "-m", "nuitka", "--standalone", "--onefile", f"--jobs={jobs}",
        f"--output-dir={out}", f"--output-filename={name}", "--remove-output",
        "--include-package=node_agent", "--include-package=sweep_engine",
        "--include-package-data=sweep_engine", "--include-package-data=node_agent",
        "--module-parameter=torch-disable-jit=yes",
        # A module left out raises ImportError when imported, as it would in Python, so that
        # torch's optional imports (triton, which Nuitka's torch configuration leaves out)
        # fall back as torch intends, instead of a hard error at import torch.
        "--no-deployment-flag=excluded-module-usage",
        f"--user-package-configuration-file={ROOT / 'build' / 'nuitka-package.config.yml'}",
        # Our code compiled, third-party packages as bytecode (see build/nuitka_bytecode.py).
        f"--user-plugin={ROOT / 'build' / 'nuitka_bytecode.py'}",
        # The payload is mostly torch's CUDA libraries (about 4 GB): zstd level 3
        # (--low-memory) packs it in about a minute where the default level 22 takes hours.
        "--low-memory",
        # Nuitka's onefile bootstrap, on Ctrl-C or a SIGTERM, gives the agent 5 s by default
        # (--onefile-child-grace-time=5000) and then kills it, so the first signal's "finish
        # the current job" would be cut short. No bound fits: a job takes as long as its photos
        # take on the node (minutes on a CPU), and the agent itself decides when to stop (a
        # second signal stops it at once); what supervises it bounds the wait (systemd's
        # TimeoutStopSec, Windows' shutdown), see docs/node-agent.md#stopping.
        "--onefile-child-grace-time=infinity",
        # Unpack once per release into the user's cache, not on every start. Not in a folder
        # named sis-node: Nuitka's {CACHE_DIR} is %LOCALAPPDATA% on Windows, where the agent's
        # data folder is %LOCALAPPDATA%\sis-node (node_agent/config.py).
        f"--onefile-tempdir-spec={{CACHE_DIR}}/sis-node-app/{cache_tag}",
        *(f"--nofollow-import-to={m}" for m in LEAVE_OUT),
        *(f"--noinclude-dlls={m}" for m in LEAVE_OUT_DLLS),
        *(f"--noinclude-data-files={m}" for m in LEAVE_OUT_FILES),
        # What went into the payload, file by file (docs/node-app.md's tables come from it).
        f"--report={out / (name + '.report.xml')}",
        str(launcher),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "out"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = artefact_name()
    import sweep_engine
    from node_agent import __version__, build_info
    for left in (sweep_engine.BUILD_ID_FILE, build_info.BUILD_INFO_FILE):
        if left.exists():
            sys.exit(f"{left} exists (left by an interrupted build?): remove it and build again")
    # From the sources and this environment, before BUILD_ID exists.
    info = {**build_info.collect(), "without": WITHOUT}
    engine_build, engine_source = info["engine"]["build"], info["engine"]["source"]
    cache_tag = f"{__version__}-{engine_build[:12]}-{payload_hash()[:8]}"
    launcher = out / "sis_node_launcher.py"
    # Guarded: Nuitka runs a copy of this module as __parents_main__ in each process that
    # multiprocessing spawns (the engine's geometry workers), ending in its own spawn_main; an
    # unguarded main() would parse the worker's emptied argv as the agent's command line and exit.
    launcher.write_text('import sys\nif __name__ == "__main__":\n    from node_agent.cli import main\n'
                        '    sys.exit(main())\n')
    cmd = nuitka_command(out, name, args.jobs, cache_tag, launcher)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    print("building", name, "with", " ".join(cmd[3:]), flush=True)
    t0 = time.time()
    # The binary has no engine sources to hash: it reads the build id written here from them,
    # and what it carries (weights, backends) for --version from BUILD_INFO.json.
    sweep_engine.BUILD_ID_FILE.write_text(engine_source + "\n")
    build_info.BUILD_INFO_FILE.write_text(json.dumps(info, indent=1) + "\n")
    try:
        subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    finally:
        sweep_engine.BUILD_ID_FILE.unlink()    # the checkout goes on working both out itself
        build_info.BUILD_INFO_FILE.unlink()
    took = time.time() - t0
    art = out / name
    record = {"file": name, "platform": platform.system().lower(), "arch": platform.machine(),
              "size": art.stat().st_size, "sha256": sha256(art), "agentVersion": __version__,
              "engineBuild": engine_build, **{k: info[k] for k in ("weights", "backends", "without")},
              "buildSeconds": round(took)}
    (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
