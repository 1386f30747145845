"""The engine: a job in, a result out.

    engine = Engine(EngineConfig(weights_manifest="weights/weights.json"))
    result = await engine.run_job(job)                 # schema.Job -> schema.Result
    result = engine.run_job_sync(job)                  # the same, from synchronous code

``run_job`` is a coroutine: fetching is asynchronous (bounded concurrency,
timeouts), and decoding, the networks and the geometry run in a worker thread
so that the caller's event loop (the node agent's lease heartbeats) stays
live.  ``fetch`` replaces the HTTP fetch (``async (url) -> bytes``).

Photos are batched through the networks (bf16 autocast on CUDA, float32 on
the CPU), then each photo goes through the pure-numpy geometry (calibration,
measurement), and the photos' measurements are aggregated into facts.  Every
job photo ends in ``measurements`` or in ``skipped`` with its reason; facts
outside the job's area are dropped, as the coordinator would refuse them (read
on the area's scale, continuous across the antimeridian: ``inside``).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from . import __version__, build_hash, schema
from .aggregate import PhotoMeasurement, aggregate
from .camera import camera_for_photo, unwrap_lon
from .config import EngineConfig
from .geometry import MODEL_DEPTH_SIGMA, PhotoGeometry
from .geometry_pool import GeometryPool
from .labels import DET_CLASSES
from .slots import Outputs, Slot, load_slots, prepare as prepare_slots, run as run_slots
from .photos import Fetch, PhotoError, decode, fetch_all, http_fetch


log = logging.getLogger(__name__)


@dataclass
class ModelOutput:
    """The networks' reading of one photo, at the configured input size (the frame the geometry reads)."""

    depth: np.ndarray       # (H, W) float32 metres
    seg: np.ndarray         # (H, W) uint8 indices into labels.SEG_CLASSES
    detections: list        # [(label, (x0, y0, x1, y1), score)]
    depth_focal_px: float | None = None  # the focal length (frame pixels) the depth's metres assume, if known
    focal_guess_px: float | None = None  # the focal length (frame pixels) the dense network reads in the photo


FOCAL_GUESS_ASPECT = 0.05   # log units: how far a photo's width / height may be from the frame's for the focal head


def depth_at_focal(out: ModelOutput, fy: float) -> tuple[np.ndarray, float | None]:
    """The output's depth for a photo of focal length ``fy`` (frame pixels), and the factor applied. A depth
    model trained for one camera (Depth Anything, a dense network trained with ``--canonical-focal``) reads an
    object at Z' that is at Z' x fy / f_model; a depth that is each photo's own comes back as it is (None)."""
    if not out.depth_focal_px:
        return out.depth, None
    k = fy / out.depth_focal_px
    return out.depth * np.float32(k), k


@dataclass
class Prepared:
    """One batch of photos resized for every slot: a float batch per (width, height) a slot reads."""

    tensors: dict
    n: int

    def __len__(self) -> int:
        return self.n


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def inside(lon: float, lat: float, polygon: dict, center_lon: float | None = None) -> bool:
    """Even-odd point-in-polygon on a GeoJSON Polygon (outer ring minus holes).

    A job's area runs on continuously from its centre's longitude (past 180 where it crosses the antimeridian,
    ``schema.Job``), while a point's longitude is in [-180, 180]: the point is first turned to lie within 180
    degrees of ``center_lon`` (the job's ``center_lon``; without it, the area's first corner), as the
    coordinator's validation reads it. So -179.9996 is tested as 180.0004 against an area 179.999 .. 180.0007.
    """
    rings = polygon["coordinates"]
    lon = float(unwrap_lon(lon, rings[0][0][0] if center_lon is None else center_lon))

    def in_ring(ring) -> bool:
        hit = False
        for (x0, y0), (x1, y1) in zip(ring, ring[1:]):
            if (y0 > lat) != (y1 > lat) and lon < x0 + (lat - y0) * (x1 - x0) / (y1 - y0):
                hit = not hit
        return hit
    return in_ring(rings[0]) and not any(in_ring(r) for r in rings[1:])


def at_size(image: torch.Tensor | np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A photo ((3, H, W) tensor or (H, W, 3) array) as an (h, w, 3) float array at ``size`` (h, w): the
    depth map's grid, on which the road edges are checked."""
    t = torch.from_numpy(np.array(image)) if isinstance(image, np.ndarray) else image
    if t.ndim == 3 and t.shape[0] != 3:
        t = t.permute(2, 0, 1)
    if tuple(t.shape[-2:]) != tuple(size):
        from torch.nn import functional as F
        t = F.interpolate(t[None].float(), size=tuple(size), mode="bilinear", antialias=True, align_corners=False)[0]
    return t.float().permute(1, 2, 0).cpu().numpy()


class Engine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.device = resolve_device(config.device)
        self.slots: list[Slot] = load_slots(config)
        for slot in self.slots:
            slot.module.to(self.device)
        self.weights = {slot.name: slot.entry for slot in self.slots}
        by_name = {slot.name: slot.module for slot in self.slots}
        self.dense, self.detector = by_name.get("dense"), by_name["detector"]  # the sis-dense network, if used
        self.build = build_hash(config.weights_manifest)
        self.depth_sigma = MODEL_DEPTH_SIGMA  # depth from a network, for calibration to weigh (None: exact)
        self.version = __version__
        self.geometry_pool = GeometryPool(config.geometry_workers)

    def close(self) -> None:
        """Stop the geometry's worker processes, if any (``geometry_workers``)."""
        self.geometry_pool.close()

    @property
    def device_text(self) -> str:
        if self.device.type == "cuda":
            name = torch.cuda.get_device_name(self.device)
            return f"{self.device} {name}, torch {torch.__version__}" + (", bf16 autocast" if self.config.bf16 else "")
        return f"cpu, {torch.get_num_threads()} threads, torch {torch.__version__}, float32"

    def _autocast(self):
        if self.device.type == "cuda" and self.config.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def frame(self) -> tuple[int, int]:
        """(width, height) of the frame the geometry reads; each slot's output is brought to it."""
        return self.config.input_width, self.config.input_height

    def prepare(self, images: list[torch.Tensor]) -> Prepared:
        """uint8 (3, H, W) images of any size -> a float batch at each slot's input size, on the device, each
        resized from the photo itself (a slot that reads more pixels than the frame gets them)."""
        return Prepared(prepare_slots(images, [s.size for s in self.slots], self.device), len(images))

    def forward(self, batch: Prepared) -> list[ModelOutput]:
        """Every slot over one prepared batch."""
        with torch.inference_mode(), self._autocast():
            out = run_slots(self.slots, batch.tensors, self.frame, sync=self._sync)
        return self.to_outputs(out)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def to_outputs(self, out: Outputs) -> list[ModelOutput]:
        """The slots' outputs (``slots.run``) as numpy depth, class indices and labelled boxes, per photo."""
        depth = out.depth.float().cpu().numpy()
        seg = out.seg.to(torch.uint8).cpu().numpy()
        guesses = ([None] * len(out.detections) if out.focal_guess_px is None
                   else out.focal_guess_px.float().cpu().tolist())
        outs = []
        for i, d in enumerate(out.detections):
            boxes, labels, scores = (d[k].float().cpu().numpy() if k != "labels" else d[k].cpu().numpy()
                                     for k in ("boxes", "labels", "scores"))
            found = [(DET_CLASSES[int(lab) - 1], tuple(float(c) for c in box), float(sc))
                     for box, lab, sc in zip(boxes, labels, scores) if 1 <= int(lab) <= len(DET_CLASSES)]
            outs.append(ModelOutput(depth=depth[i], seg=seg[i], detections=found, depth_focal_px=out.depth_focal_px,
                                    focal_guess_px=guesses[i]))
        return outs

    def infer(self, images: list[torch.Tensor]) -> tuple[list[ModelOutput], float]:
        """Outputs for every image, batched; and the seconds spent in the networks."""
        outs, spent = [], 0.0
        for start in range(0, len(images), self.config.batch_size):
            batch = self.prepare(images[start:start + self.config.batch_size])
            t = time.perf_counter()
            outs.extend(self.forward(batch))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            spent += time.perf_counter() - t
        return outs, spent

    def measure(self, photo: schema.PhotoRef, image_size: tuple[int, int], out: ModelOutput,
                camera_height_m: float | None = None, focal_px: float | None = None,
                image: torch.Tensor | np.ndarray | None = None, *, focal_basis: str | None = None,
                height_basis: str | None = None):
        """One photo's geometry from the networks' output: ``(PhotoMeasurement, evidence)``.

        ``image``: the decoded photo ((3, H, W) tensor or (H, W, 3) array, any size), for the road edges'
        check against the photo's own lines (``road_edges``); without it the road mask is taken as it is.
        ``focal_basis`` / ``height_basis``: the basis of a given ``focal_px`` / ``camera_height_m`` where it is
        not ``measured`` (the benchmark's metadata given as an assumption the calibration may move)."""
        return self.geometry(photo, image_size, out, camera_height_m, focal_px, image, focal_basis=focal_basis,
                             height_basis=height_basis).measure()

    def geometry(self, photo: schema.PhotoRef, image_size: tuple[int, int], out: ModelOutput,
                 camera_height_m: float | None = None, focal_px: float | None = None,
                 image: torch.Tensor | np.ndarray | None = None, *, focal_basis: str | None = None,
                 height_basis: str | None = None) -> PhotoGeometry:
        """What ``measure`` measures, prepared: the photo's camera from its metadata, the depth at its focal
        length, the photo on the depth map's grid (``geometry.PhotoGeometry``)."""
        w0, h0 = image_size
        ref = dataclasses.replace(photo, width=w0, height=h0)
        cam = camera_for_photo(ref, self.config.input_width, self.config.input_height, focal_px=focal_px,
                               camera_height_m=camera_height_m or self.config.camera_height_m)
        cam = cam.with_(focal_basis=focal_basis or cam.focal_basis, height_basis=height_basis or cam.height_basis)
        guess = self.focal_guess(out, w0 / h0)
        guessed = focal_px is None and cam.focal_basis == "assumed" and guess is not None
        if guessed:
            # No focal length in the metadata: the dense network's own reading of it (its focal head) stands in
            # for the generic prior, an assumption held by its own error (calibrate.NETWORK_FOCAL_SIGMA). Without
            # it, a depth trained for one focal length would be read as if every photo had that one.
            cam = cam.with_focal(cam.fx * guess / cam.fy)
        # Any other assumed focal length is left to calibration, which solves it against the depth as the model
        # gives it.
        use_focal = cam.focal_basis == "measured" or guessed
        depth, rescale = depth_at_focal(out, cam.fy) if use_focal else (out.depth, None)
        evidence: dict = {}
        if out.depth_focal_px:
            evidence.update(depthModelFocalPx=out.depth_focal_px, depthRescale=rescale)
        if guessed:
            evidence["note"] = ("focal length not in the metadata: the depth network's reading of it is the prior "
                                "the scene was solved with; absolute distances rest on that reading")
        elif out.focal_guess_px and guess is None:
            evidence["focalGuessUnused"] = (f"the photo's shape ({w0}x{h0}) is not the frame's, and the depth "
                                            "network's focal head was trained on the frame's: its reading is not used")
        return PhotoGeometry(photo.id, photo.captured_at, cam, depth, out.seg, out.detections,
                             min_score=self.config.min_score, depth_sigma=self.depth_sigma,
                             image=None if image is None else at_size(image, out.depth.shape),
                             focal_guess_px=guess, focal_from_network=guessed, evidence=evidence)

    def focal_guess(self, out: ModelOutput, aspect: float) -> float | None:
        """The dense network's reading of the photo's focal length (frame pixels, vertical), where it is to be
        used: only for a photo of the frame's shape (within ``FOCAL_GUESS_ASPECT``, log units). The head was
        trained on photos of that shape; one of another is stretched into the frame unevenly, and what the head
        makes of that is unknown."""
        frame_aspect = self.config.input_width / self.config.input_height
        if not out.focal_guess_px or abs(math.log(aspect / frame_aspect)) > FOCAL_GUESS_ASPECT:
            return None
        return out.focal_guess_px

    def _process(self, job: schema.Job, photos: list[schema.PhotoRef], raw: dict, skipped: list):
        images, kept = [], []
        for p in photos:
            data = raw[p.id]
            try:
                if isinstance(data, PhotoError):
                    raise data
                images.append(decode(data, self.device))
                kept.append(p)
            except PhotoError as exc:
                skipped.append(schema.Skipped(photo_id=p.id, reason=str(exc)))
        height = job.params.get("cameraHeightM") if isinstance(job.params.get("cameraHeightM"), (int, float)) \
            else None
        # Each batch's photos go to the geometry (``geometry_pool``: worker processes, or this thread at the
        # end) as soon as the networks have read them, so the next batch's forward pass overlaps their geometry.
        pending, infer_s = [], 0.0
        for start in range(0, len(images), self.config.batch_size):
            outs, spent = self.infer(images[start:start + self.config.batch_size])
            infer_s += spent
            for p, img, out in zip(kept[start:], images[start:], outs):
                try:
                    g = self.geometry(p, (img.shape[-1], img.shape[-2]), out, camera_height_m=height, image=img)
                except Exception as exc:
                    self._measure_failed(p, exc, skipped)
                    continue
                pending.append((p, g, self.geometry_pool.submit(g, (p.width, p.height))))
        pms: list[PhotoMeasurement] = []
        measurements = []
        for p, g, started in pending:
            try:
                pm, measurement = self.geometry_pool.result(started, g, (p.width, p.height))
            except Exception as exc:  # one photo's degenerate output must not cost the job its other photos
                self._measure_failed(p, exc, skipped)
                continue
            pms.append(pm)
            measurements.append(measurement)
        facts = [f for f in aggregate(pms, origin=(job.center_lon, job.center_lat))
                 if inside(f.lon, f.lat, job.area, job.center_lon)]
        return measurements, facts, infer_s

    @staticmethod
    def _measure_failed(photo: schema.PhotoRef, exc: Exception, skipped: list) -> None:
        log.error("measuring photo %s failed", photo.id, exc_info=exc)
        skipped.append(schema.Skipped(photo_id=photo.id, reason=f"measurement failed: {type(exc).__name__}: "
                                                                f"{str(exc)[:200]}"))

    async def run_job(self, job: schema.Job, fetch: Fetch | None = None, node_id: str = "local") -> schema.Result:
        t0 = time.perf_counter()
        cfg = self.config
        skipped: list[schema.Skipped] = []
        photos = []
        for p in job.photos:
            if p.heading is None:
                skipped.append(schema.Skipped(photo_id=p.id, reason="no heading: objects cannot be georeferenced"))
            else:
                photos.append(p)
        raw = await fetch_all({p.id: p.url for p in photos}, fetch or http_fetch(cfg.fetch_timeout_s,
                                                                                  cfg.max_photo_bytes),
                              concurrency=cfg.fetch_concurrency, timeout_s=cfg.fetch_timeout_s)
        fetch_s = time.perf_counter() - t0
        measurements, facts, infer_s = await asyncio.get_running_loop().run_in_executor(
            None, self._process, job, photos, raw, skipped)
        order = {p.id: i for i, p in enumerate(job.photos)}
        skipped.sort(key=lambda s: order[s.photo_id])
        result = schema.Result(job_id=job.job_id, node_id=node_id, engine_version=self.version,
                               engine_build=self.build, facts=facts, measurements=measurements,
                               timings=schema.Timings(fetch_s=round(fetch_s, 4), infer_s=round(infer_s, 4),
                                                      total_s=round(time.perf_counter() - t0, 4)),
                               device=self.device_text, skipped=skipped)
        schema.validate(result)
        return result

    def run_job_sync(self, job: schema.Job, fetch: Fetch | None = None, node_id: str = "local") -> schema.Result:
        return asyncio.run(self.run_job(job, fetch=fetch, node_id=node_id))
