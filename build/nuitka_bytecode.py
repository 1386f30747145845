"""Nuitka user plugin for the node-app build: compile our own code to C, keep
third-party packages as bytecode inside the binary.

Why: compiling torch, sympy, numpy and the rest to C produced about 4,600 C
files and took well over an hour on a 2-core builder, for no gain (the work
happens in torch's native kernels, not in its Python). As bytecode they are
still inside the signed binary: the agent never loads code from outside it.
`node_agent`, `sweep_engine` and the launcher stay compiled.

Only modules of packages installed in site-packages are demoted. Everything else
is left to Nuitka's own decision: the standard library, our code, and the modules
Nuitka makes itself (a package's "-preLoad"/"-postLoad" triggers, a copy of the
main program for multiprocessing), which it cannot handle as bytecode.
"""
import functools
import sysconfig
from pathlib import Path

from nuitka.plugins.PluginBase import NuitkaPluginBase

COMPILED = ("node_agent", "sweep_engine", "sis_node_launcher", "__main__")
import nuitka  # noqa: E402

# Nuitka is installed beside the project's dependencies (`make node-app` puts it in the
# same environment); sysconfig does not see a virtual environment under Nuitka's -S.
SITE = tuple({str(Path(nuitka.__file__).resolve().parents[1]),
              *(str(Path(p).resolve()) for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]))})


@functools.cache
def _installed(top: str) -> bool:
    """Whether the top-level package or module ``top`` lies in site-packages. Looked up on
    the file system: Nuitka runs with ``-S``, so site-packages is not on its ``sys.path``."""
    for site in SITE:
        base = Path(site)
        if (base / top / "__init__.py").is_file() or (base / f"{top}.py").is_file():
            return True
        if (base / top).is_dir() and any((base / top).glob("*.py")):      # a namespace package
            return True
        if any(base.glob(f"{top}.*.so")) or any(base.glob(f"{top}.*.pyd")):
            return True
    return False


class SisNodeBytecode(NuitkaPluginBase):
    plugin_name = "sis-node-bytecode"
    plugin_desc = "Compile the agent and engine to C, third-party packages as bytecode."

    @staticmethod
    def isAlwaysEnabled():
        return True

    def decideCompilation(self, module_name):
        if module_name.hasOneOfNamespaces(COMPILED):
            return "compiled"
        if module_name.isFakeModuleName():
            return None
        top = str(module_name).split(".")[0]
        return "bytecode" if _installed(top) else None
