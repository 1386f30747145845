"""In --demo the engine installed beside the coordinator may take part; elsewhere only published builds."""
from __future__ import annotations

from pathlib import Path

import sweep_engine
from coordinator.core.settings import Settings
from coordinator.sweeps.validation import accepted_builds


def test_demo_accepts_the_local_engine_with_its_shipped_weights_and_production_does_not(tmp_path):
    shipped = Path(sweep_engine.__file__).resolve().parent / "default_weights" / "weights.json"
    local = sweep_engine.build_hash(shipped)
    common = dict(database_url=f"sqlite+aiosqlite:///{tmp_path}/s.db", manifests_dir=str(tmp_path))
    assert local in accepted_builds(Settings(demo=True, **common))
    assert local not in accepted_builds(Settings(demo=False, **common))
