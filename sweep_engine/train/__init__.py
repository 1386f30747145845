"""Training of the engine's networks on generated scenes: ``python -m sweep_engine.train --help``.

- ``data``: varied synthetic samples with exact truth, deterministic in (seed, index);
- ``augment``: roll, lighting, textures, blur, noise, rain, JPEG;
- ``loop``: the training run, its log and checkpoints, and the weights manifest it writes.
"""
