"""The whole pipeline on the CPU: synthetic photos from a loopback fake provider, configured weights.

The weights here are UNTRAINED (seeded random init written to a tmp dir with
its sha256 in a tmp manifest): these tests prove the plumbing, the refusals
and the wire format, not accuracy — the geometry tests do that.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import pickle

import numpy as np
import pytest
import torch

from sweep_engine import build_hash, geometry_pool, schema
from sweep_engine.camera import lonlat_offset
from sweep_engine.config import EngineConfig
from sweep_engine.geometry import PhotoGeometry
from sweep_engine.geometry_pool import GeometryPool
from sweep_engine.models import random_weights
from sweep_engine.pipeline import Engine, inside
from sweep_engine.synth.provider import FakeProvider, jpeg, job_for, synth_frames
from sweep_engine.weights import WeightsError, manifest_digest, sha256_bytes

TINY = dict(backbone="mobilenetv3_small_100", detector="ssdlite320_mobilenet_v3_large", batch_size=4,
            fetch_timeout_s=2.0)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return random_weights(EngineConfig(**TINY), tmp_path_factory.mktemp("weights"), seed=7)


@pytest.fixture(scope="module")
def engine(manifest):
    return Engine(EngineConfig(**TINY, weights_manifest=str(manifest)))


@pytest.fixture(scope="module")
def frames():
    return synth_frames(seed=2, n=6)


@pytest.fixture
async def provider(frames):
    p = FakeProvider({f"p{i}": jpeg(f) for i, f in enumerate(frames)})
    await p.start()
    yield p
    await p.stop()


async def test_a_job_runs_end_to_end_on_the_cpu_into_a_valid_result(engine, manifest, frames, provider):
    job = job_for(frames, provider.base_url)
    result = await engine.run_job(job, node_id="node-a")
    again = schema.Result.from_json(result.to_json())  # what the coordinator will parse
    assert again.job_id == "job-1" and again.node_id == "node-a"
    assert [m.photo_id for m in again.measurements] == [p.id for p in job.photos] and not again.skipped
    assert again.engine_build == build_hash(manifest) and again.engine_version == "0.1.0"
    assert again.device.startswith("cpu")
    t = again.timings
    assert 0 < t.fetch_s < t.total_s and 0 < t.infer_s < t.total_s
    assert provider.requests == len(frames)
    for m in again.measurements:
        assert m.calibration.scale_trust in ("high", "low", "unknown")
        assert m.calibration.focal_basis in ("measured", "assumed")
    for f in again.facts:
        assert inside(f.lon, f.lat, job.area) and set(f.source) <= {p.id for p in job.photos}
        assert schema.bound_violations(f) == []


async def test_junk_detections_from_untrained_weights_still_make_a_valid_result(manifest, frames, provider):
    engine = Engine(EngineConfig(**TINY, weights_manifest=str(manifest), min_score=0.0))
    result = await engine.run_job(job_for(frames[:2], provider.base_url))
    schema.validate(result)
    assert sum(len(m.objects) for m in result.measurements) > 0  # boxes went through the geometry


async def test_photos_that_cannot_be_read_are_skipped_with_their_reason(engine, frames, provider):
    provider.photos["bad"] = b"not an image"
    provider.delays["p1"] = 5.0
    job = job_for(frames[:3], provider.base_url)
    job.photos[2].heading = None
    extra = [schema.PhotoRef.from_dict({**job.photos[0].to_dict(), "id": pid,
                                        "url": f"{provider.base_url}/photos/{pid}.jpg"})
             for pid in ("gone", "bad")]
    job.photos.extend(extra)
    result = await engine.run_job(job)
    reasons = {s.photo_id: s.reason for s in result.skipped}
    assert [m.photo_id for m in result.measurements] == ["p0"]
    assert reasons["p1"].startswith("fetch timed out")
    assert reasons["p2"].startswith("no heading")
    assert reasons["gone"] == "fetch failed: HTTP 404"
    assert reasons["bad"].startswith("undecodable image")


@pytest.fixture(params=[0, 2], ids=["in the job's thread", "in 2 worker processes"])
def geometry_workers(engine, request):
    """The module's engine with its geometry measured as ``geometry_workers`` says, for one test."""
    own = engine.geometry_pool
    engine.geometry_pool = GeometryPool(request.param)
    yield request.param
    engine.geometry_pool.close()
    engine.geometry_pool = own


async def test_a_photo_whose_measurement_fails_is_skipped_and_the_rest_are_kept(engine, frames, provider, caplog,
                                                                                geometry_workers):
    real = engine.geometry

    def geometry(photo, *a, **k):  # p1's class map cut short: its geometry fails, wherever it runs
        g = real(photo, *a, **k)
        return dataclasses.replace(g, seg=g.seg[:5]) if photo.id == "p1" else g

    engine.geometry = geometry
    try:
        result = await engine.run_job(job_for(frames[:3], provider.base_url))
    finally:
        del engine.geometry
    assert [m.photo_id for m in result.measurements] == ["p0", "p2"]
    assert [s.photo_id for s in result.skipped] == ["p1"]
    assert result.skipped[0].reason.startswith("measurement failed: ValueError: ")
    assert "measuring photo p1 failed" in caplog.text


async def test_worker_processes_measure_a_job_as_its_own_thread_does(engine, frames, provider, geometry_workers):
    job = job_for(frames, provider.base_url)
    result = await engine.run_job(job)
    engine.geometry_pool.close()
    engine.geometry_pool = GeometryPool(0)
    alone = await engine.run_job(job)
    assert [m.to_dict() for m in result.measurements] == [m.to_dict() for m in alone.measurements]
    assert [f.to_dict() for f in result.facts] == [f.to_dict() for f in alone.facts] and result.facts


def _truth_geometries(n: int) -> list[PhotoGeometry]:
    """Photos' geometry inputs from synthetic frames' exact depth, classes and boxes."""
    return [PhotoGeometry(f"f{i}", "2025-06-01T10:00:00Z", f.camera, f.depth, f.seg, f.detections(),
                          min_score=0.5, depth_sigma=None, image=f.rgb)
            for i, f in enumerate(synth_frames(seed=4, n=n))]


def test_photos_a_dying_worker_held_are_measured_in_the_callers_thread(caplog):
    photos = _truth_geometries(8) * 3
    size = (256, 192)
    pool = GeometryPool(1)
    try:
        started = [pool.submit(g, size) for g in photos]
        for child in multiprocessing.active_children():   # the worker, still starting or at its first photos
            child.kill()
        got = [pool.result(s, g, size) for s, g in zip(started, photos)]
    finally:
        pool.close()
    want = [geometry_pool.measure(g, size) for g in photos]
    assert [m.to_dict() for _, m in got] == [m.to_dict() for _, m in want]
    assert "a geometry worker process died" in caplog.text


def test_a_broken_pools_late_photos_do_not_stop_the_workers_started_after_it(caplog):
    photos = _truth_geometries(4)
    size = (256, 192)
    pool = GeometryPool(1)
    try:
        first = [pool.submit(g, size) for g in photos]
        for child in multiprocessing.active_children():
            child.kill()
        pool.result(first[0], photos[0], size)          # finds the pool broken
        second = [pool.submit(g, size) for g in photos]  # a new pool, as the next batch would start
        late = [pool.result(s, g, size) for s, g in zip(first[1:], photos[1:])]
        assert pool._pool is not None and second[0].pool is pool._pool
        again = [pool.result(s, g, size) for s, g in zip(second, photos)]
    finally:
        pool.close()
    want = [geometry_pool.measure(g, size)[1].to_dict() for g in photos]
    assert [m.to_dict() for _, m in late] == want[1:] and [m.to_dict() for _, m in again] == want
    assert caplog.text.count("a geometry worker process died") == 1


async def test_the_event_loop_stays_live_while_the_networks_run(engine, frames, provider):
    ticks = 0

    async def heartbeat():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    result = await engine.run_job(job_for(frames, provider.base_url))
    beat.cancel()
    assert ticks >= 0.5 * result.timings.infer_s / 0.01


def test_a_corrupted_weights_file_is_refused(manifest, tmp_path):
    doc = json.loads(manifest.read_text())
    for entry in doc["weights"]:
        (tmp_path / entry["file"]).write_bytes((manifest.parent / entry["file"]).read_bytes())
    (tmp_path / "weights.json").write_text(json.dumps(doc))
    data = bytearray((tmp_path / "dense.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "dense.pt").write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="sha256 .* the manifest pins .*refusing"):
        Engine(EngineConfig(**TINY, weights_manifest=str(tmp_path / "weights.json")))


def test_missing_weights_are_a_clear_error(manifest, tmp_path):
    with pytest.raises(WeightsError, match="no weights manifest configured"):
        Engine(EngineConfig(**TINY, weights_manifest=None))
    with pytest.raises(WeightsError, match="does not exist"):
        Engine(EngineConfig(**TINY, weights_manifest=str(tmp_path / "none.json")))
    doc = json.loads(manifest.read_text())
    (tmp_path / "weights.json").write_text(json.dumps(doc))  # the manifest without its files
    with pytest.raises(WeightsError, match=r"weights file .*dense\.pt does not exist"):
        Engine(EngineConfig(**TINY, weights_manifest=str(tmp_path / "weights.json")))


def test_weights_for_another_architecture_are_refused(manifest):
    with pytest.raises(WeightsError, match="are for sis-dense/mobilenetv3_small_100.*configured for"):
        Engine(EngineConfig(**{**TINY, "backbone": "resnet10t"}, weights_manifest=str(manifest)))


def test_a_pinned_file_that_is_not_plain_tensors_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))
    data = pickle.dumps({"w": Payload()}, protocol=2)
    (tmp_path / "dense.pt").write_bytes(data)
    (tmp_path / "weights.json").write_text(json.dumps({"manifestVersion": 1, "weights": [{
        "name": "dense", "file": "dense.pt", "architecture": "sis-dense/mobilenetv3_small_100/c64/k17/f0.8",
        "sha256": sha256_bytes(data), "license": "none", "provenance": "hostile", "trained": False}]}))
    with pytest.raises(WeightsError, match="not a plain state dict"):
        Engine(EngineConfig(**TINY, weights_manifest=str(tmp_path / "weights.json")))


def test_build_hash_and_weights_digest_name_the_weights(manifest, tmp_path):
    other = random_weights(EngineConfig(**TINY), tmp_path, seed=8)
    assert build_hash(manifest) != build_hash(other) != build_hash()
    assert len(build_hash()) == 64
    assert manifest_digest(manifest) == sha256_bytes(manifest.read_bytes()) != manifest_digest(other)


def test_models_are_built_untrained_and_never_from_a_hub(tmp_path):
    """Building every configured architecture opens no connection (the loopback guard would fail it)."""
    path = random_weights(EngineConfig(**{**TINY, "detector": "fasterrcnn_mobilenet_v3_large_320_fpn",
                                          "backbone": "resnet10t"}), tmp_path, seed=1)
    assert all(not w["trained"] and "untrained" in w["provenance"] for w in json.loads(path.read_text())["weights"])


def test_the_loopback_guard_refuses_the_internet():
    import socket
    with pytest.raises(AssertionError, match="tests stay on loopback"):
        socket.create_connection(("203.0.113.1", 80), timeout=0.1)


async def test_with_exact_network_outputs_the_pipeline_places_facts_where_the_street_has_them(engine, provider):
    """The networks replaced by an oracle giving the synthetic truth at the input size.

    What remains is everything around them — fetch, decode, intrinsics from the
    photo's metadata scaled to the input size, calibration, measurement,
    georeferencing, aggregation — and it must land the facts on the street.
    Through calibration at a 256 px input the road width is held to 2 % per
    photo, not 1 %: a car 16 px tall reads 4 % tall, and calibration moves the
    focal length by up to ~1.2 % on such a frame.
    """
    from sweep_engine.pipeline import ModelOutput
    from sweep_engine.synth import drive, render, street_scene
    from sweep_engine.synth.provider import jpeg, job_for

    scene = street_scene(3, width=640, height=480, road_azimuth_deg=30.0)
    big = [render(s) for s in drive(scene, 5, spacing_m=3.0)]
    cfg = engine.config
    small = [render(f.scene.moved(width=cfg.input_width, height=cfg.input_height,
                                  focal_px=f.scene.focal_px * cfg.input_width / 640)) for f in big]
    provider.photos.update({f"p{i}": jpeg(f) for i, f in enumerate(big)})
    queue = list(small)

    def oracle(batch):
        frames, queue[:] = queue[:len(batch)], queue[len(batch):]
        return [ModelOutput(depth=f.depth, seg=f.seg, detections=f.detections()) for f in frames]

    real = engine.forward
    engine.forward = oracle
    try:
        result = await engine.run_job(job_for(big, provider.base_url))
    finally:
        engine.forward = real
    assert all(m.calibration.scale_trust == "high" for m in result.measurements)
    for m in result.measurements:
        assert m.road_width is None or abs(m.road_width.width_m / scene.street.road_width_m - 1) < 0.02
    roads = [f for f in result.facts if f.kind == "roadway"]
    assert roads and all(abs(f.value["widthM"] / scene.street.road_width_m - 1) < 0.015 for f in roads)
    poles = [b for b in scene.boxes if b.det == "pole"]
    pole_facts = [f for f in result.facts if f.kind == "poles"]
    assert len(pole_facts) == len(poles)
    for box in poles:
        lon, lat = scene.street.to_lonlat(*box.centre)
        e, n = lonlat_offset(lon, lat, [f.lon for f in pole_facts], [f.lat for f in pole_facts])
        assert min(np.hypot(e, n)) < 0.5
