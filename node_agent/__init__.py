"""The node agent: the program volunteers run to lend their NVIDIA GPU to street sweeps.

It enrols with a coordinator, leases jobs (data only), fetches the jobs' photos
from the street-photo provider, runs the sweep engine, and submits the results.
It never downloads or executes code.
"""
__version__ = "0.1.0"
