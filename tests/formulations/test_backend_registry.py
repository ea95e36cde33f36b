"""The one registry of backends, the one termination mapping and the one round model they all read."""

from __future__ import annotations

import warnings

import pytest

from dltsched.formulations import RoundOptions, solve_problem
from dltsched.formulations.backends import (
    BACKENDS,
    EXACT_BACKENDS,
    REGISTRY,
    Backend,
    BackendOutcome,
    SolveParams,
    backend_names,
    get_backend,
    register,
)
from dltsched.formulations.backends.base import Stop, termination
from dltsched.formulations.candidates import build_candidates
from dltsched.formulations.model import RoundModel
from dltsched.formulations.result import Termination
from dltsched.formulations.testing import Tables, checked, job, make_round


def _round(objective: str = "jct"):  # noqa: ANN202
    # a (weight 2) alone = 2.0; with b at speeds 0.8 / 0.6: 2 * 0.8 + 0.6 = 2.2 -> share the one GPU
    tables = Tables(step_s={"a": [1.0], "b": [1.0]}, speeds={("a", "b"): [0.8, 0.6]})
    return make_round(tables, [("v100", 1)], [job("a", weight=2.0), job("b")],
                      options=RoundOptions(objective=objective, relative_gap=0.0))


def test_every_name_comes_from_the_registry() -> None:
    assert list(BACKENDS) == list(REGISTRY) == list(backend_names())
    assert backend_names(aliases=False) == ("cpsat", "highs", "pyomo", "greedy", "decomposed")
    assert EXACT_BACKENDS == backend_names(exact=True, aliases=False) == ("cpsat", "highs", "pyomo")
    assert backend_names(exact=False) == ("greedy", "decomposed")
    assert all(BACKENDS[name].available() for name in backend_names())


def test_milp_is_the_pyomo_backend_under_its_former_name() -> None:
    assert get_backend("milp") is get_backend("pyomo")
    problem = _round()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # its meaning did not change: no warning
        result = solve_problem(problem, "milp")
    assert result.plan.backend == "milp" and result.plan.status == "optimal"
    assert checked(problem, result) == pytest.approx(2.2)


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"backend: 'cp-sat' not understood; one of cpsat, highs, pyomo"):
        solve_problem(_round(), "cp-sat")


def test_a_taken_name_is_refused() -> None:
    class Other(Backend):
        name = "other-greedy"
        aliases = ("greedy",)
        exact = False

        def solve(self, model: RoundModel, params: SolveParams) -> BackendOutcome:
            return BackendOutcome((), Termination.NOT_RUN, None, 0.0, 0.0)

    with pytest.raises(ValueError, match="backend name 'greedy' is taken"):
        register(Other)
    assert "other-greedy" not in REGISTRY
    assert type(get_backend("greedy")).__name__ == "Greedy"


@pytest.mark.parametrize(("stop", "incumbent", "bound", "gap", "tolerance", "expected"), [
    (Stop.CONVERGED, 10.0, 10.0, None, 0.0, Termination.OPTIMAL),
    (Stop.CONVERGED, 10.0, 10.5, None, 0.0, Termination.GAP_LIMIT),  # stopped on the gap limit
    (Stop.CONVERGED, 10.0, 10.4, None, 0.5, Termination.OPTIMAL),  # CP-SAT: integer-scaled, within 0.5
    (Stop.CONVERGED, 1e6, 1e6 + 1.0, 1e-10, 0.0, Termination.OPTIMAL),  # HiGHS's own relative gap closes it
    (Stop.CONVERGED, None, 10.0, None, 0.0, Termination.GAP_LIMIT),  # no incumbent value: not proven
    (Stop.TIME_LIMIT, 10.0, 12.0, None, 0.0, Termination.TIME_LIMIT),
    (Stop.INFEASIBLE, None, None, None, 0.0, Termination.INFEASIBLE),
    (Stop.OTHER, None, None, None, 0.0, Termination.ERROR),
])
def test_one_termination_mapping(stop: Stop, incumbent: float | None, bound: float | None, gap: float | None,
                                 tolerance: float, expected: Termination) -> None:
    assert termination(stop, incumbent, bound, gap=gap, tolerance=tolerance) == expected


def test_the_makespan_rows_are_stated_once_and_read_by_every_backend(backend: str) -> None:
    # makespan: one column M after the candidates, one row "M >= the job's completion" per job (a and b)
    problem = _round("makespan")
    model = RoundModel(build_candidates(problem))
    assert model.makespan_column == model.num_candidates == model.num_columns - 1
    assert [r.job for r in model.makespan_rows] == [0, 1]
    rows = model.linear_rows()
    assert sum(model.makespan_column in r.cols for r in rows) == 2
    outcome = get_backend(backend).solve(model, SolveParams(30.0))
    assert outcome.selected is not None and outcome.termination == Termination.OPTIMAL
    result = solve_problem(problem, backend)
    assert checked(problem, result) == pytest.approx(result.plan.objective)


def test_redundant_rows_are_marked_not_dropped() -> None:
    # one GPU of one type: the type row (a, b, ab on 1 GPU: 3 > 1) binds; two GPUs with k=1: one-GPU
    # candidates a, b use at most 2 = the type's GPUs, so that row cannot bind
    problem = make_round(Tables(step_s={"a": [1.0], "b": [1.0]}), [("v100", 2)], [job("a"), job("b")],
                         options=RoundOptions(max_jobs_per_gpu=1))
    model = RoundModel(build_candidates(problem))
    assert [r.redundant for r in model.rows if not r.at_most_one] == [True]
    assert model.linear_rows(redundant=True) == list(model.rows) and model.linear_rows() == [
        r for r in model.rows if not r.redundant]


def test_cpsat_with_the_hint_repeats_and_reaches_the_same_optimum() -> None:
    from dltsched.formulations.backends.cpsat import CpSat

    problem = _round()
    cset = build_candidates(problem)
    greedy = get_backend("greedy").solve(RoundModel(cset), SolveParams(5.0)).selected
    assert greedy is not None

    class HintedCpSat(CpSat):
        use_hint = True

    hinted = [HintedCpSat().solve(RoundModel(cset), SolveParams(5.0, greedy)) for _ in range(2)]
    plain = CpSat().solve(RoundModel(cset), SolveParams(5.0, greedy))
    assert hinted[0].selected == hinted[1].selected
    assert hinted[0].termination == plain.termination == Termination.OPTIMAL
    from dltsched.formulations.candidates import objective_of

    best = objective_of(cset, plain.selected or ())
    assert objective_of(cset, hinted[0].selected or ()) == pytest.approx(best)


@pytest.mark.parametrize("module", ["dltsched.formulations.backends.cpsat",
                                    "dltsched.formulations.backends.milp", "dltsched.formulations.decompose",
                                    "dltsched.formulations.backends.highs_direct",
                                    "dltsched.formulations.solve:solve_greedy"])
def test_former_module_entry_points_warn_and_still_solve(module: str) -> None:
    import importlib

    path, _, attr = module.partition(":")
    solve = getattr(importlib.import_module(path), attr or "solve")
    cset = build_candidates(_round())
    with pytest.warns(DeprecationWarning, match="deprecated"):
        outcome = solve(cset, time_limit_s=5.0, hint=[])
    assert outcome.selected is not None


def test_the_former_rows_module_warns_and_gives_the_models_rows() -> None:
    from dltsched.formulations.backends import rows

    cset = build_candidates(_round("makespan"))
    model = RoundModel(cset)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert rows.model_rows(cset, every_type_row=False) == [r for r in model.rows if not r.redundant]
    with pytest.warns(DeprecationWarning, match="deprecated"):
        saved = rows.saved_by_placing(cset, 1)
    assert saved == list(model.makespan_rows[1].as_row(model.num_candidates).coefs[:-1])
