"""A check of the road mask's edges against the photo's own lines, independent of the segmentation.

A straight road's edges are lines on the ground parallel to its direction: in
the image they run to one vanishing point on the horizon, and with the
calibrated camera (height, pitch, focal length) each image line through that
point is one lateral offset on the ground, in metres. So:

1. Sobel gradients of the photo (grey, at the models' input size, box-smoothed
   twice so that texture fades); the strongest tenth below the horizon are
   edge pixels.
2. The vanishing point: each edge pixel's line (perpendicular to its
   gradient) is extended to the horizon; of the votes' strongest peaks, the
   one whose lines on the ground (step 3) are sharpest is the road's
   vanishing point (road edges, markings, verge bands: all parallel to the
   road, all through it). No class mask enters.
3. Edge pixels whose line points at the vanishing point are placed on the
   ground plane and binned by lateral offset: the peaks are the lines along
   the road (its edges, lane lines, a verge's far side).
4. The road mask's two edges (their median lateral offsets) should each lie
   on such a line, within ``EDGE_TOLERANCE_M`` (or 4 % of the width). A mask
   that labels a sidewalk or a grass verge as road ends where the image
   shows no line. One edge unsupported is flagged (``agrees`` False); both
   unsupported rejects the mask (``rejects``): on exact masks of both
   renderers the check found the vanishing point or an edge's line wrong in
   one photo in seven, so one missing line alone is not proof.
5. A line is not enough either: a mask that labels one lane as sidewalk ends
   on the centre line, or on a kerb it predicts there, and the check above
   finds that line. So each edge's ground just beyond it is compared with the
   road just inside it, row by row (bands sized by the row's road width in
   pixels; each band's median colour, so that a lane line in it does not
   count): where beyond looks like inside (a contrast under
   ``CONTINUES_CONTRAST``) the road goes on past the mask's edge, and the
   width is withheld. On the independent renderer's validation seeds (2000,
   3000, 4000: 180 plain roads, 166 widths read, 2026-11-26) this caught 13
   of the 14 widths read 35-51 % short, and 2 of the 126 read within 10 %;
   with each band's mean colour instead, 9 of the 14 (a centre line inside
   a band moves its mean).

Pure numpy. At 256 x 192 on a 2-core development machine (2026-11-27) the check takes about 6 ms a
photo (41 ms before the search placed each edge pixel on the ground once and scored each of its steps'
candidates in one pass, ``_supports``; the same vanishing points and lines to the last digit on 153
photos of both renderers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .camera import Camera

EDGE_TOLERANCE_M = 0.35
EDGE_TOLERANCE_REL = 0.04
STRONG_QUANTILE = 0.90       # edge pixels: the strongest tenth of gradients below the horizon
ALIGN_DEG = 5.0              # an edge pixel's line must point at the vanishing point within this
BIN_M = 0.05
PEAK_SHARE = 0.05            # a line: a peak holding at least this share of the strongest one's support
VP_CANDIDATES = 5
SMOOTH_PASSES = 2
PROMINENCE = 1.0             # a line's support against the median support within PROMINENCE_WINDOW_M of it
PROMINENCE_WINDOW_M = 1.0
RANGE_M = (3.0, 40.0)        # ground distances read
CONTINUES_CONTRAST = 0.8     # beyond an edge looks like the road inside it below this (step 5)
BAND_GAP = 0.04              # the bands compared: this far from the edge, this wide, in the row's road width
BAND_WIDTH = 0.15
MIN_BAND_ROWS = 3
_BINS = np.arange(-30.0, 30.0 + BIN_M, BIN_M)   # the lateral offsets lines are binned by, and their centres
_CENTRES = (_BINS[:-1] + _BINS[1:]) / 2


@dataclass
class EdgeCheck:
    agrees: bool | None                # both edges on lines; None: not checked (too few edges, no vanishing point)
    rejects: bool = False              # neither edge on a line: the mask is not the road's
    vanishing_u: float | None = None
    lines_m: list[float] = field(default_factory=list)   # lateral offsets of the lines found, metres
    mask_edges_m: tuple[float, float] | None = None
    supported: tuple[bool, bool] | None = None
    contrast_beyond: tuple[float | None, float | None] | None = None   # step 5, left and right; None: not read
    reason: str = ""

    def evidence(self) -> dict:
        return {"agrees": self.agrees, "rejected": self.rejects, "vanishingPointU": self.vanishing_u,
                "linesM": [round(x, 3) for x in self.lines_m[:12]],
                "maskEdgesM": list(self.mask_edges_m) if self.mask_edges_m else None,
                "supported": list(self.supported) if self.supported else None,
                "contrastBeyond": ([None if c is None else round(c, 2) for c in self.contrast_beyond]
                                   if self.contrast_beyond else None),
                "reason": self.reason}


def to_grey(image: np.ndarray) -> np.ndarray:
    """(H, W, 3) or (3, H, W) uint8/float RGB, or (H, W) grey, as float32 grey."""
    x = np.asarray(image, np.float32)
    if x.ndim == 3 and x.shape[0] == 3 and x.shape[-1] != 3:
        x = x.transpose(1, 2, 0)
    return x @ np.array([0.299, 0.587, 0.114], np.float32) if x.ndim == 3 else x


def sobel(grey: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sobel derivatives along u (columns) and v (rows); the border is left zero."""
    g = np.pad(grey, 1, mode="edge")
    gx = (g[:-2, 2:] + 2 * g[1:-1, 2:] + g[2:, 2:]) - (g[:-2, :-2] + 2 * g[1:-1, :-2] + g[2:, :-2])
    gy = (g[2:, :-2] + 2 * g[2:, 1:-1] + g[2:, 2:]) - (g[:-2, :-2] + 2 * g[:-2, 1:-1] + g[:-2, 2:])
    gx[[0, -1], :] = gx[:, [0, -1]] = 0.0
    gy[[0, -1], :] = gy[:, [0, -1]] = 0.0
    return gx, gy


def smooth(grey: np.ndarray, passes: int) -> np.ndarray:
    """Box-filtered 3 x 3, ``passes`` times (near a Gaussian of about a pixel for two): a texture's
    gradients fade, an edge between two surfaces stays."""
    g = grey
    for _ in range(passes):
        p = np.pad(g, 1, mode="edge")
        g = sum(p[i:i + g.shape[0], j:j + g.shape[1]] for i in range(3) for j in range(3)) / 9.0
    return g


@dataclass
class EdgePixels:
    """A photo's edge pixels below the horizon (``_edge_pixels``), with what the vanishing point's search
    reads of them some thirty times a photo made once: each one's edge direction, and where its ray meets
    the ground."""
    cam: Camera
    u: np.ndarray     # pixel centres
    v: np.ndarray
    gx: np.ndarray    # Sobel gradient along u and v, and its magnitude
    gy: np.ndarray
    mag: np.ndarray
    vh: float         # the horizon's row

    @cached_property
    def direction(self) -> np.ndarray:
        """Each edge's direction, perpendicular to its gradient ((n, 2): du, dv)."""
        return np.stack([-self.gy, self.gx], axis=1)

    @cached_property
    def direction_len(self) -> np.ndarray:
        return np.linalg.norm(self.direction, axis=1)

    @cached_property
    def ground(self) -> np.ndarray:
        """Where each pixel's ray meets the ground plane (ENU; NaN at or above the horizon)."""
        return self.cam.ground_points(self.u, self.v)


def _edge_pixels(cam: Camera, grey: np.ndarray) -> EdgePixels | None:
    h, w = grey.shape
    gx, gy = sobel(smooth(grey, SMOOTH_PASSES))
    mag = np.hypot(gx, gy)
    vh = cam.horizon_v()
    below = np.zeros_like(mag, bool)
    below[max(0, int(math.ceil(vh + 2))):, :] = True
    if below.sum() < 50:
        return None
    thr = np.quantile(mag[below], STRONG_QUANTILE)
    vs, us = np.nonzero(below & (mag > max(thr, 1e-3)))
    return EdgePixels(cam, us + 0.5, vs + 0.5, gx[vs, us], gy[vs, us], mag[vs, us], vh)


def vanishing_u(cam: Camera, grey: np.ndarray, px=None) -> float | None:
    """u of the road's vanishing point on the horizon, from the photo's edge lines alone (``px``: the photo's
    ``_edge_pixels``, when already found)."""
    px = _edge_pixels(cam, grey) if px is None else px
    if px is None:
        return None
    u, v, mag, vh = px.u, px.v, px.mag, px.vh
    du, dv = px.direction.T
    steep = np.abs(dv) > 0.25 * px.direction_len        # lines near horizontal say little about where they meet
    if steep.sum() < 20:
        return None
    uh = u[steep] + du[steep] * (vh - v[steep]) / dv[steep]
    w = cam.width
    hist, edges = np.histogram(uh, bins=3 * w, range=(-w, 2 * w), weights=mag[steep])
    hist = np.convolve(hist, np.ones(5) / 5, mode="same")
    peaks = [i for i in range(1, len(hist) - 1) if hist[i] >= hist[i - 1] and hist[i] > hist[i + 1] and hist[i] > 0]
    peaks = sorted(peaks, key=lambda i: -hist[i])[:VP_CANDIDATES]
    if not peaks:
        return None
    # Facades, vehicles and texture vote too: of the strongest candidates, the road's vanishing point is
    # the one whose lines on the ground are sharpest (most support in their three strongest lines).
    centres = (edges[:-1] + edges[1:]) / 2
    best = float(_sharpest(cam, px, centres[peaks]))
    # Then refined where the lines are sharpest: an edge's direction from its gradient is good to a few
    # degrees, and extended to the horizon it lands several pixels off (on plain scenes 6-12 px at 256 px,
    # always to the same side); a wrong vanishing point smears each line over several offsets.
    for span, step in ((16.0, 2.0), (2.0, 0.5)):
        best = float(_sharpest(cam, px, np.arange(best - span, best + span + step / 2, step)))
    return best


def _sharpest(cam: Camera, px: EdgePixels, us: np.ndarray) -> float:
    """Of the vanishing points ``us`` (the first, on a tie), the one whose lines along the road are sharpest:
    the most support in its three strongest lines."""
    hists, enough, _ = _supports(cam, px, us)
    rows, cols = _peaks(hists)
    support = hists[rows, cols]
    order = np.lexsort((-support, rows))                  # by row, each row's strongest first
    rank = np.arange(len(order)) - np.searchsorted(rows[order], rows[order])
    top = order[rank < 3]
    sharp = np.bincount(rows[top], support[top], minlength=len(us)) * enough
    return us[int(np.argmax(sharp))]


def lines_along(cam: Camera, grey: np.ndarray, u_vp: float, px=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lateral offsets (metres, right of the camera across the road) of the ground lines running to the
    vanishing point, and their support; also the road's direction (ENU unit vector)."""
    px = _edge_pixels(cam, grey) if px is None else px
    if px is None:
        return np.empty(0), np.empty(0), _along(cam, np.array([u_vp]))[0]
    hists, (enough,), (along,) = _supports(cam, px, np.array([u_vp]))
    if not enough:
        return np.empty(0), np.empty(0), along
    _, peaks = _peaks(hists)
    return _CENTRES[peaks], hists[0, peaks], along


def _along(cam: Camera, us: np.ndarray) -> np.ndarray:
    """The road's direction on the ground (ENU unit vectors) for vanishing points at ``us`` on the horizon."""
    rays = cam.rays_cam(us, np.full(len(us), cam.horizon_v())) @ cam.rotation().T
    return rays[:, :2] / np.linalg.norm(rays[:, :2], axis=1, keepdims=True)


def _supports(cam: Camera, px: EdgePixels, us: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each vanishing point in ``us``: the support of each lateral offset (``_BINS``) from the edge
    pixels whose line points at it, whether at least ten do (too few say nothing), and the road's direction.
    All in one pass over the photo's edge pixels: the search asks for up to seventeen at a time."""
    along = _along(cam, us)
    normal = np.stack([along[:, 1], -along[:, 0]], axis=1)      # to the right of the road's direction
    to_u = us[:, None] - px.u                                    # (k, n): from each pixel to each vanishing point
    to_v = px.vh - px.v
    (du, dv), d_len = px.direction.T, px.direction_len
    cos = np.abs(to_u * du + to_v * dv) / (np.sqrt(to_u * to_u + to_v * to_v) * d_len + 1e-9)
    ground = px.ground[:, :2]
    fwd, lat = along @ ground.T, normal @ ground.T
    keep = (cos > math.cos(math.radians(ALIGN_DEG))) & np.isfinite(lat) & (fwd >= RANGE_M[0]) & (fwd <= RANGE_M[1])
    # A line far off reaches fewer rows; each pixel weighs its ground footprint along the road instead.
    weight = px.mag * np.clip(fwd / 10.0, 0.3, 3.0)
    n = len(_CENTRES)
    rows, lat = np.nonzero(keep)[0], lat[keep]
    i = np.searchsorted(_BINS, lat, side="right") - 1    # as np.histogram bins them, without its sort
    i[lat == _BINS[-1]] = n - 1
    inside = (i >= 0) & (i < n)
    hists = np.bincount(rows[inside] * n + i[inside], weight[keep][inside], minlength=len(us) * n)
    kernel = np.array([1, 2, 3, 2, 1]) / 9.0
    hists = np.stack([np.convolve(h, kernel, mode="same") for h in hists.reshape(len(us), n)])
    return hists, keep.sum(1) >= 10, along


def _peaks(hists: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lines in support histograms (one a row), as (row, offset bin) pairs: local maxima holding
    ``PEAK_SHARE`` of their row's strongest that stand out of what is around them (a textured verge spreads
    its support over every offset); the median around is read only at the local maxima."""
    inner = hists[:, 1:-1]
    rows, cols = np.nonzero((inner >= hists[:, :-2]) & (inner > hists[:, 2:])
                            & (inner >= PEAK_SHARE * hists.max(axis=1, keepdims=True)))
    cols = cols + 1
    half = int(round(PROMINENCE_WINDOW_M / BIN_M))
    padded = np.pad(hists, ((0, 0), (half, half)), mode="edge")
    around = np.median(padded[rows[:, None], cols[:, None] + np.arange(2 * half + 1)], axis=1)
    strong = hists[rows, cols] >= PROMINENCE * around
    return rows[strong], cols[strong]


def contrast_beyond(image: np.ndarray, rows_px: np.ndarray) -> tuple[float | None, float | None]:
    """Per mask edge (left, right): how unlike the road just inside it the ground just beyond it looks.

    ``image``: the photo on the mask's grid ((h, w, 3) or (h, w)); ``rows_px``: the rows the width was read
    on (v, u where the road starts, u where it ends; ``measure.RoadWidthEstimate.rows_px``). On each row a
    band ``BAND_WIDTH`` of the road's width wide, ``BAND_GAP`` from the edge, inside and beyond (rows where
    a band is narrower than a pixel, or beyond leaves the frame, are skipped), each read as its median
    colour; the figure is the distance between the two bands' median colours over rows, over how much the
    inside band's colour varies from row to row (plus one grey level). None where fewer than
    ``MIN_BAND_ROWS`` rows could be read."""
    img = np.asarray(image, np.float32)
    img = img[..., None] if img.ndim == 2 else img
    h, w = img.shape[:2]
    rows = np.asarray(rows_px, np.float64)
    span = rows[:, 2] - rows[:, 1]
    gap, band = np.round(BAND_GAP * span).astype(int), np.round(BAND_WIDTH * span).astype(int)
    y = rows[:, 0].astype(int)
    out: list[float | None] = []
    for side in (0, 1):
        edge = np.round(rows[:, 1 + side]).astype(int)
        ins, bey = (edge + gap, edge - gap - band) if side == 0 else (edge - gap - band, edge + gap)
        ok = (band >= 1) & (y >= 0) & (y < h) & (np.minimum(ins, bey) >= 0) & (np.maximum(ins, bey) + band <= w)
        if ok.sum() < MIN_BAND_ROWS:
            out.append(None)
            continue
        ins_a, bey_a = (_band_medians(img, y[ok], start, band[ok]) for start in (ins[ok], bey[ok]))
        centre = np.median(ins_a, 0)
        spread = float(np.median(np.linalg.norm(ins_a - centre, axis=1))) + 1.0
        out.append(float(np.linalg.norm(centre - np.median(bey_a, 0))) / spread)
    return out[0], out[1]


def _band_medians(img: np.ndarray, y: np.ndarray, start: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Each row's band (row ``y``, columns ``start`` to ``start + width``) as its median colour, all rows in
    one call: the bands, padded to the widest, gathered into one array (a Python loop over rows took three
    to four times as long, some 4 ms a photo here)."""
    k = np.arange(width.max())
    vals = img[y[:, None], start[:, None] + np.minimum(k[None, :], width[:, None] - 1)].astype(np.float64)
    # Padded with infinity, which sorts after every value: each row's middle values are where its band's
    # own are (``np.nanmedian`` on NaN padding took a tenth of a photo's geometry).
    vals[k >= width[:, None]] = np.inf
    vals.sort(axis=1)
    r, c = np.arange(len(y))[:, None], np.arange(vals.shape[2])
    return (vals[r, ((width - 1) // 2)[:, None], c] + vals[r, (width // 2)[:, None], c]) / 2


def check(cam: Camera, grey: np.ndarray | None, left: np.ndarray, right: np.ndarray,
          image: np.ndarray | None = None, rows_px: np.ndarray | None = None) -> EdgeCheck:
    """Whether the road mask's edge points (ENU, left and right, from ``measure.road_width``) lie on lines
    the photo itself shows along the road; with the photo in colour (``image``, on the mask's grid) and the
    rows read (``rows_px``), also whether the road goes on past either edge (step 5)."""
    if grey is None:
        return EdgeCheck(agrees=None, reason="no image to check against")
    contrast = contrast_beyond(image, rows_px) if image is not None and rows_px is not None and len(rows_px) else None
    goes_on = [s for s, c in zip(("left", "right"), contrast or ()) if c is not None and c < CONTINUES_CONTRAST]
    if goes_on:
        return EdgeCheck(agrees=False, rejects=True, contrast_beyond=contrast,
                         reason="the road goes on past the mask's " + " and ".join(goes_on) + " edge: the ground "
                                "beyond looks like the road inside (a lane taken for sidewalk?)")
    px = _edge_pixels(cam, grey)
    u_vp = vanishing_u(cam, grey, px) if px is not None else None
    if u_vp is None:
        return EdgeCheck(agrees=None, contrast_beyond=contrast,
                         reason="too few edges below the horizon for a vanishing point")
    lines, _, along = lines_along(cam, grey, u_vp, px)
    if not len(lines):
        return EdgeCheck(agrees=None, vanishing_u=u_vp, contrast_beyond=contrast,
                         reason="no line along the road found")
    normal = np.array([along[1], -along[0]])
    xl, xr = float(np.median(left @ normal)), float(np.median(right @ normal))
    tol = max(EDGE_TOLERANCE_M, EDGE_TOLERANCE_REL * abs(xr - xl))
    sup = (bool(np.min(np.abs(lines - xl)) <= tol), bool(np.min(np.abs(lines - xr)) <= tol))
    agrees = all(sup)
    reason = "" if agrees else (
        "the road mask's " + " and ".join(s for s, ok in zip(("left", "right"), sup) if not ok)
        + " edge lies on no line the photo shows along the road: a verge or sidewalk taken for road?")
    return EdgeCheck(agrees=agrees, rejects=not any(sup), vanishing_u=u_vp, lines_m=[float(x) for x in lines],
                     mask_edges_m=(round(xl, 3), round(xr, 3)), supported=sup, contrast_beyond=contrast,
                     reason=reason)
