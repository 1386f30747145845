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
