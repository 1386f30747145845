"""Nuitka user plugin for the node-app build: compile our own code to C, keep
third-party packages as bytecode inside the binary.

Why: compiling torch, sympy, numpy and the rest to C produced about 4,600 C
files and took well over an hour on a 2-core builder, for no gain (the work
happens in torch's native kernels, not in its Python). As bytecode they are
still inside the signed binary: the agent never loads code from outside it.
`node_agent`, `sweep_engine` and the launcher stay compiled.
"""
from nuitka.plugins.PluginBase import NuitkaPluginBase

COMPILED = ("node_agent", "sweep_engine", "sis_node_launcher", "__main__")


class SisNodeBytecode(NuitkaPluginBase):
    plugin_name = "sis-node-bytecode"
    plugin_desc = "Compile the agent and engine to C, third-party packages as bytecode."

    @staticmethod
    def isAlwaysEnabled():
        return True

    def decideCompilation(self, module_name):
        if module_name.hasOneOfNamespaces(COMPILED):
            return "compiled"
        return "bytecode"
