"""``sis-engine``: measure one photo, write untrained weights for development, write synthetic photos.

    sis-engine measure PHOTO [--focal-px F] [--camera-height H] [--lat --lon --heading --pitch]
    sis-engine init-weights DIR [--seed N]
    sis-engine pin MANIFEST NAME PATH --architecture A --license L --provenance P
    sis-engine synth DIR [--seed N] [--count K]
    sis-engine settings

Settings not given as options come from ``SIS_ENGINE_*`` variables (``sis-engine settings`` lists them).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import SETTINGS, EngineConfig


def _config(args) -> EngineConfig:
    overrides = {k: v for k, v in (("weights_manifest", args.weights), ("backbone", args.backbone),
                                   ("detector", args.detector), ("device", args.device),
                                   ("min_score", args.min_score), ("depth_model", args.depth_model),
                                   ("segmenter", args.segmenter)) if v is not None}
    return EngineConfig.from_env(**overrides)


def _measure(args) -> int:
    from . import schema
    from .geometry import to_schema
    from .photos import PhotoError, decode, exif_metadata
    from .pipeline import Engine
    from .weights import WeightsError

    path = Path(args.photo)
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"sis-engine: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        engine = Engine(_config(args))
    except (WeightsError, RuntimeError) as exc:   # RuntimeError: --device cuda with no GPU, an unknown timm model
        print(f"sis-engine: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    try:
        image = decode(data, engine.device)
    except PhotoError as exc:
        print(f"sis-engine: {path}: {exc}", file=sys.stderr)
        return 2
    exif = exif_metadata(data)
    h, w = int(image.shape[-2]), int(image.shape[-1])
    photo = schema.PhotoRef(id=path.name, lon=args.lon, lat=args.lat, heading=args.heading, pitch=args.pitch,
                            captured_at="1970-01-01T00:00:00Z", camera_make=exif.get("make"),
                            camera_model=exif.get("model"), focal_mm=exif.get("focal_mm"), width=w, height=h,
                            url=f"http://localhost/{path.name}", license="unknown", provider="local file")
    try:
        schema.validate(photo)      # --lat 100 or --heading 400 measured, as a job's photo would not be
    except schema.SchemaError as exc:
        print(f"sis-engine: {exc}", file=sys.stderr)
        return 2
    if args.heading is None:
        print("sis-engine: no --heading: bearings are relative to the camera's forward direction", file=sys.stderr)
    focal_px = args.focal_px
    if focal_px is None and exif.get("focal_35mm") and not exif.get("focal_mm"):
        focal_px = exif["focal_35mm"] * max(w, h) / 36.0
    outs, _ = engine.infer([image])
    # The photo goes along, as a node's job gives it: the road mask's edges are checked against it.
    pm, evidence = engine.measure(photo, (w, h), outs[0], camera_height_m=args.camera_height, focal_px=focal_px,
                                  image=image)
    print(json.dumps(in_photo_pixels(to_schema(pm, evidence).to_dict(), (w, h), engine.frame), indent=2))
    return 0


def in_photo_pixels(measurement: dict, photo_size: tuple[int, int], frame: tuple[int, int]) -> dict:
    """The measurement with ``calibration.focalPx`` in the photo's own pixels, as a photographer or EXIF gives
    it, rather than in the frame the geometry read (``EngineConfig.input_width`` x ``input_height``); the
    evidence keeps the frame's figures and says which frame (``evidence.frame``)."""
    cal = measurement["calibration"]
    cal["focalPx"] = round(cal["focalPx"] * photo_size[0] / frame[0], 3)
    cal["evidence"]["frame"] = {"widthPx": frame[0], "heightPx": frame[1], "photoWidthPx": photo_size[0],
                                "photoHeightPx": photo_size[1],
                                "note": "focal lengths in this evidence are in the frame's pixels"}
    return measurement


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return v


def _init_weights(args) -> int:
    from .models import random_weights

    path = random_weights(_config(args), args.dir, seed=args.seed)
    print(f"{path}: UNTRAINED weights (seeded random init); facts from them are not meaningful")
    return 0


def _pin(args) -> int:
    from .weights import WeightsError, pin

    try:
        entry = pin(args.manifest, args.name, args.path, args.architecture, license=args.license,
                    provenance=args.provenance)
    except WeightsError as exc:
        print(f"sis-engine: {exc}", file=sys.stderr)
        return 2
    print(f"{args.manifest}: '{entry.name}' -> {entry.file} ({entry.architecture}), sha256 {entry.sha256}")
    return 0


def _synth(args) -> int:
    from .synth.provider import jpeg, synth_frames

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(synth_frames(args.seed, args.count, width=args.width, height=args.height)):
        (out / f"synth-{args.seed}-{i}.jpg").write_bytes(jpeg(frame))
        cam = frame.camera
        print(json.dumps({"file": f"synth-{args.seed}-{i}.jpg", "focalPx": cam.fx, "cameraHeightM": cam.height_m,
                          "lon": cam.lon, "lat": cam.lat, "heading": cam.heading_deg, "pitch": cam.pitch_deg,
                          "roadWidthM": frame.scene.street.road_width_m}))
    return 0


def _settings(args) -> int:
    for name, (default, help_) in SETTINGS.items():
        print(f"SIS_ENGINE_{name.upper():<22} {default!s:<40} {help_}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sis-engine", description="Sweep engine: street photos to street facts.")
    sub = p.add_subparsers(dest="command", required=True)

    def model_options(sp):
        sp.add_argument("--weights", help="weights manifest (else SIS_ENGINE_WEIGHTS_MANIFEST)")
        sp.add_argument("--backbone", help="timm encoder architecture")
        sp.add_argument("--detector", help="detector architecture (sis-centres, a torchvision one, or "
                                           "coco/<torchvision builder>)")
        sp.add_argument("--depth-model", help="depth slot: sis-dense or depth-anything-v2-metric-vits")
        sp.add_argument("--segmenter", help="segmentation slot: sis-dense or segformer-cityscapes")
        sp.add_argument("--device", help="auto, cpu, cuda")
        sp.add_argument("--min-score", type=float, help="ignore detections below this score")

    m = sub.add_parser("measure", help="measure one photo and print its measurements as JSON")
    m.add_argument("photo", help="path of a JPEG or PNG")
    m.add_argument("--focal-px", type=_positive, help="focal length in pixels (else EXIF, else 0.85 x larger side)")
    m.add_argument("--camera-height", type=_positive, help="camera height above the ground, metres")
    m.add_argument("--lat", type=float, default=0.0)
    m.add_argument("--lon", type=float, default=0.0)
    m.add_argument("--heading", type=float, help="degrees clockwise from north")
    m.add_argument("--pitch", type=float, help="degrees, positive up (else read from the ground)")
    model_options(m)
    m.set_defaults(run=_measure)

    w = sub.add_parser("init-weights", help="write UNTRAINED seeded-random weights and their manifest")
    w.add_argument("dir")
    w.add_argument("--seed", type=int, default=0)
    model_options(w)
    w.set_defaults(run=_init_weights)

    pn = sub.add_parser("pin", help="pin an operator's weights file or folder in a manifest by its sha256")
    pn.add_argument("manifest", help="the manifest (created when missing); the weights lie in its folder or below")
    pn.add_argument("name", help="entry: dense, depth, segmenter or detector")
    pn.add_argument("path", help="the file (a state dict) or folder (a transformers model)")
    pn.add_argument("--architecture", required=True, help="as docs/engine.md lists for the slot")
    pn.add_argument("--license", required=True)
    pn.add_argument("--provenance", required=True, help="where the file came from (URL, version)")
    pn.set_defaults(run=_pin)

    s = sub.add_parser("synth", help="write synthetic street photos (JPEG with EXIF) and their truth")
    s.add_argument("dir")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--count", type=int, default=1)
    s.add_argument("--width", type=int, default=640)
    s.add_argument("--height", type=int, default=480)
    s.set_defaults(run=_synth)

    sub.add_parser("settings", help="list the SIS_ENGINE_* settings").set_defaults(run=_settings)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except ModuleNotFoundError as exc:
        # `make run` installs the coordinator alone: the command is there, torch is not.
        if exc.name not in ("torch", "torchvision", "timm"):
            raise
        print(f"sis-engine: this installation has no sweep engine (no module {exc.name!r}): in a source "
              "checkout run `make install-full` (torch, torchvision and timm)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
