"""Gridded data loaded as files and read in windows: the GEBCO bathymetry grid and its
type-identifier grid, served as a point's depth, a profile along a path and statistics
under a ring (docs/bathymetry.md). A global 15 arc-second grid is some 3.7 billion cells,
so nothing here ever reads a grid whole: answers read the window, or the tiles, they need."""
