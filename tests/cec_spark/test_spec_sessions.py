"""``[aggregate].window = { kind = "session", gap = ... }`` (issue 31; no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cec.errors import SpecError
from cec.spec import dump_spec, parse_spec, parse_stored_spec
from cec.windows import SessionWindow
from tests.cec_spark.helpers import spec_text

CSV_SOURCE = 'kind = "csv"\npath = "items.csv"\ntime_field = "item_time"'


@pytest.mark.parametrize("gap,us", [('"30 seconds"', 30_000_000), ('"30s"', 30_000_000),
                                    ('"500ms"', 500_000), ("7", 7)])
def test_session_window_parses_and_round_trips(gap: str, us: int) -> None:
    spec = parse_spec(spec_text(CSV_SOURCE, window=f'{{ kind = "session", gap = {gap} }}'),
                      origin="s.toml", base=Path("/d"))
    assert spec.aggregate.window == SessionWindow(us)
    back = parse_stored_spec(dump_spec(spec), "run.toml")
    assert back.aggregate == spec.aggregate


@pytest.mark.parametrize("window,needle", [
    ('{ kind = "session" }', "[aggregate].window.gap: a session window needs a gap"),
    ('{ kind = "session", gap = "30s", slide = "5s" }',
     "[aggregate].window.slide: a session window has a gap, not a slide"),
    ('{ kind = "session", size = "30s" }',
     "[aggregate].window.size: a session window has a gap, not a size"),
    ('{ kind = "session", gap = "soon" }', "[aggregate].window.gap: 'soon' is not a positive"),
    ('{ kind = "session", gap = 0 }', "[aggregate].window.gap: 0 is not a positive"),
    ('{ kind = "time", size = "10s", gap = "1s" }',
     "[aggregate].window.gap: only a session window has a gap"),
    ('{ kind = "count", gap = 3 }', "[aggregate].window.gap: only a session window has a gap"),
    ('{ kind = "time" }', "[aggregate].window.size: a time window needs a size"),
])
def test_refused_combinations_are_named(window: str, needle: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(spec_text(CSV_SOURCE, window=window), origin="items.toml")
    assert needle in str(exc.value), str(exc.value)
