"""``sis-engine``: measure a photo, refuse without weights, list settings."""
from __future__ import annotations

import json

import pytest

from sweep_engine import schema
from sweep_engine.cli import main
from sweep_engine.config import SETTINGS, EngineConfig
from sweep_engine.models import random_weights

TINY = ["--backbone", "mobilenetv3_small_100", "--detector", "ssdlite320_mobilenet_v3_large"]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    cfg = EngineConfig(backbone="mobilenetv3_small_100", detector="ssdlite320_mobilenet_v3_large")
    return random_weights(cfg, tmp_path_factory.mktemp("w"), seed=3)


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    assert main(["synth", str(out), "--seed", "4", "--width", "320", "--height", "240"]) == 0
    return out / "synth-4-0.jpg"


def test_measure_prints_the_photos_measurement_as_wire_json(manifest, photo, capsys):
    capsys.readouterr()
    code = main(["measure", str(photo), "--weights", str(manifest), *TINY, "--focal-px", "300",
                 "--camera-height", "1.6", "--lat", "52.5", "--lon", "13.4", "--heading", "90", "--pitch", "0"])
    assert code == 0
    m = schema.Measurement.from_json(capsys.readouterr().out)
    assert m.photo_id == "synth-4-0.jpg"
    ev = m.calibration.evidence
    # The given focal, scaled from 320 px to the 256 px model input, is the prior calibration starts from.
    assert ev["focalPx"]["prior"] == pytest.approx(300 * 256 / 320) and ev["focalPx"]["priorBasis"] == "measured"
    assert ev["cameraHeightM"]["prior"] == 1.6 and ev["cameraHeightM"]["priorBasis"] == "measured"


def test_measure_reads_the_focal_length_from_exif(manifest, photo, capsys):
    capsys.readouterr()
    assert main(["measure", str(photo), "--weights", str(manifest), *TINY]) == 0
    captured = capsys.readouterr()
    ev = schema.Measurement.from_json(captured.out).calibration.evidence
    assert ev["focalPx"]["priorBasis"] == "measured"  # EXIF focal x GoPro sensor width
    assert ev["focalPx"]["prior"] == pytest.approx(0.8 * 320 * 256 / 320, rel=1e-3)
    assert "no --heading" in captured.err



def test_measure_checks_the_road_edges_against_the_photo_as_a_node_does(tmp_path, capsys):
    """With the shipped weights on a plain road of the independent renderer: the width is read and its
    mask's edges are checked against the photo (``roadEdges`` in the evidence), as in a node's job."""
    from PIL import Image

    from sweep_engine.heldout import plain_road, render_plain
    sc = plain_road(200000003)
    path = tmp_path / "road.jpg"
    Image.fromarray(render_plain(sc).rgb).save(path, quality=92)
    capsys.readouterr()
    assert main(["measure", str(path), "--focal-px", f"{sc.focal_px}", "--camera-height", f"{sc.camera_height_m}",
                 "--pitch", f"{sc.pitch_deg}", "--heading", "0"]) == 0
    m = schema.Measurement.from_json(capsys.readouterr().out)
    assert m.road_width is not None and m.road_width.width_m == pytest.approx(sc.road_width_m, rel=0.1)
    edges = m.calibration.evidence["roadEdges"]
    assert edges["rejected"] is False and len(edges["contrastBeyond"]) == 2

def test_measure_without_weights_is_a_clear_error(photo, capsys, monkeypatch):
    monkeypatch.setenv("SIS_ENGINE_WEIGHTS_MANIFEST", "")  # none: the shipped default is opted out of
    assert main(["measure", str(photo), *TINY]) == 2
    assert "no weights manifest configured" in capsys.readouterr().err


def test_settings_lists_every_setting_with_its_help(capsys):
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    for name, (_, help_) in SETTINGS.items():
        assert f"SIS_ENGINE_{name.upper()}" in out and help_ in out


def test_settings_are_read_from_the_environment():
    cfg = EngineConfig.from_env({"SIS_ENGINE_BATCH_SIZE": "16", "SIS_ENGINE_BF16": "false",
                                 "SIS_ENGINE_CAMERA_HEIGHT_M": "2.1", "SIS_ENGINE_BACKBONE": "resnet10t"})
    assert (cfg.batch_size, cfg.bf16, cfg.camera_height_m, cfg.backbone) == (16, False, 2.1, "resnet10t")


def test_a_photo_is_measured_as_its_exif_orientation_shows_it(tmp_path, capsys):
    """A phone's portrait photo is stored turned a quarter with an orientation tag: measured as stored, the
    plain road's width came out a third of the truth with the verdict high; turned as shown, it reads true."""
    from PIL import Image

    from sweep_engine.heldout import plain_road, render_plain
    sc = plain_road(200000003)
    path = tmp_path / "turned.jpg"
    upright = Image.fromarray(render_plain(sc).rgb)
    exif = upright.getexif()
    exif[0x0112] = 6                                      # "rotate 90 CW to display": stored turned CCW
    upright.transpose(Image.Transpose.ROTATE_90).save(path, quality=92, exif=exif)
    capsys.readouterr()
    assert main(["measure", str(path), "--focal-px", f"{sc.focal_px}", "--camera-height", f"{sc.camera_height_m}",
                 "--pitch", f"{sc.pitch_deg}", "--heading", "0"]) == 0
    m = schema.Measurement.from_json(capsys.readouterr().out)
    frame = m.calibration.evidence["frame"]
    assert (frame["photoWidthPx"], frame["photoHeightPx"]) == upright.size
    assert m.road_width is not None and m.road_width.width_m == pytest.approx(sc.road_width_m, rel=0.1)


def test_photos_that_cannot_be_measured_are_refused_with_a_reason(tmp_path, monkeypatch):
    import io

    import torch
    from PIL import Image
    from PIL.TiffImagePlugin import IFDRational

    from sweep_engine.photos import PhotoError, decode, exif_metadata

    def jpeg(size, **kw) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", size, (90, 90, 90)).save(buf, "JPEG", **kw)
        return buf.getvalue()

    cpu = torch.device("cpu")
    with pytest.raises(PhotoError, match=r"too small to measure: 8 x 8 px"):
        decode(jpeg((8, 8)), cpu)
    with pytest.raises(PhotoError, match="undecodable image: not a format Pillow reads"):
        decode(b"not an image at all", cpu)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)    # a 'decompression bomb' at 2x the bound
    with pytest.raises(PhotoError, match="image too large to decode"):
        decode(jpeg((100, 100)), cpu)
    monkeypatch.undo()
    for focal in (IFDRational(1, 0), IFDRational(100000, 1), 0):
        img = Image.new("RGB", (120, 80))
        exif = img.getexif()
        exif.get_ifd(0x8769)[0x920A] = focal
        exif[0x0112] = 8
        buf = io.BytesIO()
        img.save(buf, "JPEG", exif=exif)
        meta = exif_metadata(buf.getvalue())
        assert "focal_mm" not in meta and (meta["width"], meta["height"]) == (80, 120)


@pytest.mark.parametrize("args, said", [
    (["--focal-px", "-500"], "must be a positive number"),
    (["--camera-height", "0"], "must be a positive number"),
])
def test_measure_refuses_impossible_options_in_one_line(photo, args, said, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["measure", str(photo), *args])
    assert stop.value.code == 2 and said in capsys.readouterr().err


def test_measure_checks_the_photo_as_a_job_would_and_names_a_missing_gpu(manifest, photo, capsys):
    import torch

    capsys.readouterr()
    assert main(["measure", str(photo), "--weights", str(manifest), *TINY, "--lat", "100"]) == 2
    assert "lat: must be within [-90, 90]" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["measure", str(photo), "--weights", str(manifest), *TINY, "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("sis-engine: ") and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_without_the_engine_installed_a_command_says_what_to_install(photo, capsys, monkeypatch):
    """`make run` installs the coordinator alone: sis-engine is there, torch is not, and a traceback ending in
    ModuleNotFoundError was all it said."""
    import builtins

    real = builtins.__import__

    def no_torch(name, *args, **kw):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real(name, *args, **kw)

    import sys as _sys
    for mod in [m for m in _sys.modules if m.startswith("sweep_engine.") and m not in ("sweep_engine.cli",
                                                                                         "sweep_engine.config")]:
        monkeypatch.delitem(_sys.modules, mod)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert main(["measure", str(photo)]) == 2
    assert "make install-full" in capsys.readouterr().err
