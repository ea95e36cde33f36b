"""The memory forms and their choice by nested leave-one-model-out, on synthetic rows."""

from __future__ import annotations

import random
import statistics
from types import SimpleNamespace

from dltsched.predictors.calibration import resources


def _rows(rnn_share: float, noise: float = 0.01, seed: int = 0) -> list[SimpleNamespace]:
    """Eight models, two rows each, measured as 1 GiB + reserve + rnn_share x recurrent reserve."""
    rng = random.Random(seed)
    out = []
    for i in range(8):
        for batch in (1, 2):
            reserved = 2000.0 * (i + 1) * batch
            rnn = 3000.0 * batch if i % 2 else 0.0
            f = {"reserved_mib": reserved, "rnn_reserve_mib": rnn, "weights_mib": 0.3 * reserved,
                 "activations_mib": 0.5 * reserved + rnn, "traced": 1.0}
            gmem = (1024.0 + reserved + rnn_share * rnn) * (1.0 + rng.gauss(0.0, noise))
            out.append(SimpleNamespace(model=f"m{i}", features=f, gmem_mib=gmem))
    return out


def _mape(apes: dict[str, list[float]]) -> float:
    return statistics.fmean(a for v in apes.values() for a in v)


def test_every_form_fits_and_predicts():
    rows = _rows(0.5)
    for form, free in resources.MEMORY_FORMS.items():
        params = resources.fit_memory(rows, form)
        assert set(free) <= set(params), form
        assert resources.memory_mib(params, rows[0].features) > 0.0
    assert resources.fit_memory(rows) == resources.fit_memory(rows, resources.MEMORY_FORM)


def test_nested_choice_finds_the_recurrent_term_when_it_is_there():
    rows = _rows(0.5)
    apes, picks = resources.memory_nested_lomo_apes(rows)
    assert set(picks) == {f"m{i}" for i in range(8)}
    # every form chosen prices the recurrent reserve: a share of it, or the graph's activations (which hold
    # it in these rows) scaled
    assert all("rnn" in resources.MEMORY_FORMS[f] or f == "graph" for f in picks.values()), picks
    without_rnn = _mape(resources.memory_lomo_apes(rows, "trace_context_only"))
    assert _mape(apes) < 3.0 < without_rnn


def test_nested_figure_is_no_better_than_the_best_form_on_the_same_rows():
    rows = _rows(0.0, noise=0.03, seed=3)
    apes, picks = resources.memory_nested_lomo_apes(rows)
    plain = {f: _mape(resources.memory_lomo_apes(rows, f)) for f in resources.MEMORY_FORMS}
    assert _mape(apes) >= min(plain.values()) - 1e-9
    assert plain["trace_uncalibrated"] > _mape(apes)
