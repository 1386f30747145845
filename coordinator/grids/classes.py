"""GEBCO's type identifier (TID) classes: how each cell's depth was obtained.

The TID grid gives every cell of the GEBCO grid a code (NERC vocabulary GGT, "GEBCO Grid
Source Data Type Identifier", and the TID file's own ``comment``): 0 land; 10-17 direct
measurements; 40-47 indirect (predicted or interpolated); 70-72 unknown. A depth is served
as ``measured`` only for the direct classes, ``estimated`` for the indirect ones, and
neither for land or the unknown classes, so that a predicted depth is never read as a
sounding. A code outside the table is unknown, named as such, never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass

LAND, MEASURED, ESTIMATED, UNKNOWN = "land", "measured", "estimated", "unknown"

NAMES: dict[int, str] = {
    0: "land",
    10: "singlebeam echo-sounder",
    11: "multibeam echo-sounder",
    12: "seismic",
    13: "isolated sounding",
    14: "ENC sounding",
    15: "bathymetric lidar",
    16: "optical light sensor",
    17: "combination of direct measurement methods",
    40: "predicted from satellite-derived gravity",
    41: "interpolated by a computer algorithm",
    42: "digital bathymetric contours from charts",
    43: "digital bathymetric contours from ENCs",
    44: "constrained by bathymetric soundings (gravity-guided interpolation)",
    45: "predicted from helicopter or flight-derived gravity",
    46: "estimated from the draft of a grounded iceberg",
    47: "indirect method (class 47)",
    70: "pre-generated grid of mixed sources",
    71: "unknown source",
    72: "steering points",
}


def basis(code: int) -> str:
    """``land``, ``measured``, ``estimated`` or ``unknown`` for a TID code."""
    if code == 0:
        return LAND
    if 10 <= code <= 17:
        return MEASURED
    if 40 <= code <= 47:
        return ESTIMATED
    return UNKNOWN


@dataclass(frozen=True)
class TidClass:
    code: int
    name: str
    basis: str

    def as_json(self) -> dict:
        return {"code": self.code, "name": self.name, "basis": self.basis}


def tid_class(code: int | None) -> TidClass | None:
    if code is None:
        return None
    code = int(code)
    return TidClass(code, NAMES.get(code, f"unrecognised type identifier {code}"), basis(code))
