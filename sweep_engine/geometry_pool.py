"""Photos' geometry in worker processes, beside the networks.

On a GPU the networks read a photo in a millisecond or two and the geometry (calibration, road width
and its edge check, objects) takes several on one CPU core: a job's time is the geometry's. It is
numpy on small arrays, bound by the interpreter, so threads do not run it side by side (two threads
on two cores measured slower than one); processes do. Each photo's ``geometry.PhotoGeometry`` (a few
hundred kilobytes of arrays) goes to a worker as soon as its batch leaves the networks, so the next
batch's forward pass and the workers' geometry overlap.

Workers are started with ``spawn`` (a process forked from one holding a CUDA context is unsafe) and
import only numpy and the geometry's modules, not torch. A worker that dies (killed, out of memory)
breaks the pool: the photos it held are measured again in the job's own thread, and the next photos
submitted start a new pool, so a job never loses a photo to it.
"""
from __future__ import annotations

import logging
import multiprocessing
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from . import schema
from .aggregate import PhotoMeasurement
from .geometry import PhotoGeometry, to_schema

log = logging.getLogger(__name__)


def measure(g: PhotoGeometry, image_size: tuple[int, int]) -> tuple[PhotoMeasurement, schema.Measurement]:
    """One photo's measurement and its wire form (``image_size``: the photo's size as its provider lists it)."""
    pm, evidence = g.measure()
    return pm, to_schema(pm, evidence, image_size=image_size)


class GeometryPool:
    """``workers`` processes measuring photos; with 0 every photo is measured in the caller's thread."""

    def __init__(self, workers: int):
        self.workers = max(0, int(workers))
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, g: PhotoGeometry, image_size: tuple[int, int]) -> Future | None:
        """``measure(g, image_size)`` started in a worker; None without workers (``result`` measures it)."""
        if not self.workers:
            return None
        try:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
                log.info("measuring photos' geometry in %d worker process%s", self.workers,
                         "es" if self.workers > 1 else "")
            started = self._pool.submit(measure, g, image_size)
        except BrokenProcessPool as exc:
            self._broken(self._pool, exc)
            return None
        started.pool = self._pool   # which pool broke, if its worker dies: not one started since
        return started

    def result(self, pending: Future | None, g: PhotoGeometry, image_size: tuple[int, int]):
        """``measure(g, image_size)``: a worker's, or measured here where there was none or it died with the
        photo (its own exceptions are raised as they are)."""
        if pending is not None:
            try:
                return pending.result()
            except (BrokenProcessPool, CancelledError) as exc:   # cancelled: its pool was shut down as broken
                self._broken(pending.pool, exc)
        return measure(g, image_size)

    def _broken(self, pool: ProcessPoolExecutor | None, exc: BaseException) -> None:
        if pool is not None and pool is self._pool:
            log.warning("a geometry worker process died (%s); the photos it held are measured in the job's own "
                        "thread, and new workers start for the next photos", exc)
            pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
