"""The garbage collector paused for a round: nested blocks restore it as the outermost found it."""

from __future__ import annotations

import gc

import pytest

from dltsched.formulations.gcpause import gc_paused


def test_nested_blocks_restore_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block does not re-enable it
    assert gc.isenabled()


def test_an_error_inside_restores_it() -> None:
    with pytest.raises(ValueError, match="boom"), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
