"""Class vocabularies shared by the models, the synthetic scenes and the geometry, and the size priors."""
from __future__ import annotations

SEG_CLASSES: tuple[str, ...] = (
    "void", "sky", "road", "sidewalk", "kerb", "terrain", "building", "vegetation", "fence",
    "wires", "pole", "sign", "vehicle", "person", "gate", "entrance", "drainage",
)
SEG = {name: i for i, name in enumerate(SEG_CLASSES)}
# Classes lying on the ground plane: the ground-plane calibration cue reads these.
GROUND_CLASSES: tuple[str, ...] = ("road", "sidewalk", "kerb", "terrain", "drainage")

# Detector classes; index 0 is the background in torchvision's convention, so label i is DET_CLASSES[i - 1].
DET_CLASSES: tuple[str, ...] = ("car", "truck", "bus", "person", "pole", "sign", "gate", "entrance", "drainage")

# Size priors (length, width, height) in metres: nuScenes class means.  Widths vary by about
# +-0.15 m between fleets and with yaw; height does neither, so calibration reads heights.
SIZE_PRIORS: dict[str, tuple[float | None, float | None, float]] = {
    "car": (4.61, 1.95, 1.72),
    "truck": (6.74, 2.46, 2.73),
    "bus": (11.19, 2.94, 3.47),
    "person": (None, None, 1.76),
}
# Relative spread of the height prior per class: people vary more than vehicle fleets.
HEIGHT_PRIOR_SIGMA: dict[str, float] = {"car": 0.05, "truck": 0.08, "bus": 0.06, "person": 0.08}

# Which fact kind a detector label or a segmentation class feeds.
DET_FACT_KIND: dict[str, str] = {
    "pole": "poles", "sign": "signage", "gate": "gates", "entrance": "entrances", "drainage": "drainage",
}
SEG_FACT_KIND: dict[str, str] = {
    "road": "roadway", "kerb": "kerbs", "fence": "fences", "wires": "wires", "vegetation": "vegetation",
}

# Published models' classes onto the engine's (docs/engine.md, "Model slots").
# Cityscapes' 19 evaluation classes, in the trainId order its models output.  Cityscapes has no kerb (its
# sidewalk takes the kerb), no wires, gates, entrances or drains: a Cityscapes segmenter never outputs those.
CITYSCAPES_CLASSES: tuple[str, ...] = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign", "vegetation",
    "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle",
)
CITYSCAPES_TO_SEG: dict[str, str] = {
    "road": "road", "sidewalk": "sidewalk", "building": "building",
    "wall": "fence",            # a free-standing wall bounds the street as a fence does (the "fences" fact)
    "fence": "fence", "pole": "pole",
    "traffic light": "sign",    # mounted signal heads: for depth they are read as signs are (thin, on poles)
    "traffic sign": "sign", "vegetation": "vegetation", "terrain": "terrain", "sky": "sky",
    "person": "person", "rider": "person",
    "car": "vehicle", "truck": "vehicle", "bus": "vehicle", "train": "vehicle", "motorcycle": "vehicle",
    "bicycle": "vehicle",
}
# COCO's detection classes (torchvision's 91-entry list, index = the label a COCO detector outputs) that the
# engine uses.  Left out: bicycle and motorcycle (no size prior to calibrate on, and a car's would be wrong),
# train, traffic light (a signal, not the signage fact), fire hydrant, parking meter, bench, and the rest.
COCO_TO_DET: dict[str, str] = {
    "person": "person", "car": "car", "truck": "truck", "bus": "bus", "stop sign": "sign",
}
