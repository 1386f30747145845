"""coordinator.panels.freshness, the panels' one clock and age check: times read only with their
offset, ages in seconds, stale strictly past the threshold, unknown times unknown (never
current), and validity ending at its end."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from coordinator.panels import air_quality, coral, fires, freshness, marine
from coordinator.core.times import iso
from coordinator.panels.freshness import age, ended, parse_utc

T = datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("text, expected", [("2026-11-25T06:00:00Z", T), ("2026-11-25T13:00:00+07:00", T),
                                            ("2026-11-25T06:00:00", None), ("2026-11-25", None), ("soon", None),
                                            ("", None), (None, None), (1764050400, None)])
def test_times_are_read_only_with_their_offset(text, expected):
    assert parse_utc(text) == expected


def test_age_and_stale():
    h = timedelta(hours=1)
    assert age(T, T + h, h) == {"ageS": 3600, "stale": False}
    assert age(T, T + h + timedelta(seconds=1), h) == {"ageS": 3601, "stale": True}
    assert age(None, T, h) == {"ageS": None, "stale": None}


def test_a_time_ahead_of_the_clock_past_the_skew_has_an_unknown_age():
    h, skew = timedelta(hours=1), freshness.CLOCK_SKEW
    assert skew == timedelta(minutes=10)
    assert age(T + skew, T, h) == {"ageS": -600, "stale": False}          # a fast upstream clock
    assert age(T + skew + timedelta(seconds=1), T, h) == {"ageS": None, "stale": None}
    assert age(T + h, T, h) == {"ageS": None, "stale": None}               # was -3600, not stale: fresh
    assert freshness.ahead(T + h, T) and not freshness.ahead(T + skew, T) and not freshness.ahead(None, T)


def test_validity_ends_at_its_end():
    assert ended(T, T) is True and ended(T, T - timedelta(seconds=1)) is False and ended(None, T) is None


def test_instants_are_served_in_utc():
    assert iso(datetime(2026, 11, 25, 13, 0, tzinfo=timezone(timedelta(hours=7)))) == "2026-11-25T06:00:00Z"


def test_every_panel_with_timed_data_reads_the_one_clock():
    assert marine.utc_now is air_quality.utc_now is coral.utc_now is fires.utc_now is freshness.utc_now
    assert freshness.utc_now().tzinfo is timezone.utc
