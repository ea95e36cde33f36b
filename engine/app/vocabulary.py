"""One vocabulary of policy and backend names, parsed once here for every entry point: the command line
(``simulate``, ``batch``, ``solve``, ``bench``), experiment files, the service and the embedding API.

Backends decide one round:

- ``cpsat``, ``milp`` (Pyomo -> HiGHS), ``greedy`` (the formulation's heuristic): the formulation backends;
- ``greedy:<policy>``: a registered baseline policy decides the round (e.g. ``greedy:sjf``);
- ``auto``: ``cpsat`` for rounds of at most ``exact_max_jobs`` active jobs, else ``greedy``.

Policies run a whole simulation:

- a registered name (``fifo``, ``sjf``, ..., ``optimizing``, ``optimizing-nocoloc``, ``optimizing-nofreeze``);
- ``dltsched``: the optimizing policy; ``dltsched:<backend>`` or ``optimizing[-...]:<backend>``: an
  optimizing policy deciding its rounds on that backend (``dltsched:milp``, ``optimizing-nocoloc:greedy``);
- groups, where several policies are asked for: ``baselines``, ``papers``, ``all``.

Names are case-insensitive; a name not understood raises one :class:`ValidationError` line with the close
matches ("did you mean").
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dltsched.engine.app.registry import BASELINE_POLICIES, PAPER_POLICIES, options_for, policy_names
from dltsched.engine.domain.errors import ValidationError
from dltsched.formulations.backends import BACKENDS

__all__ = ["AUTO", "POLICY_GROUPS", "BackendChoice", "PolicyChoice", "backend_names", "expand_policies",
           "options_by_name", "parse_backend", "parse_policy"]

#: the backend that picks ``cpsat`` or ``greedy`` by the round's size
AUTO = "auto"
#: the policy that decides its rounds with a backend (``<policy>:<backend>``); ``dltsched`` names the first
OPTIMIZING_POLICIES: tuple[str, ...] = ("optimizing", "optimizing-nocoloc", "optimizing-nofreeze")
#: the short name of the optimizing policy
PROJECT_POLICY = "dltsched"
#: group name -> the policies it stands for, in table order
POLICY_GROUPS: dict[str, tuple[str, ...]] = {
    "baselines": BASELINE_POLICIES,
    "papers": PAPER_POLICIES,
    "all": (*BASELINE_POLICIES, *PAPER_POLICIES, "optimizing"),
}


def backend_names() -> tuple[str, ...]:
    """Every backend name, as help texts list them: the formulation backends, ``auto`` and
    ``greedy:<policy>``."""
    return (*BACKENDS, AUTO, "greedy:<policy>")


@dataclass(frozen=True, slots=True)
class BackendChoice:
    """A parsed backend name: ``name`` is a formulation backend or ``auto``; ``policy`` the baseline of
    ``greedy:<policy>`` (else ``None``). ``str()`` gives the canonical name back."""

    name: str
    policy: str | None = None

    def __str__(self) -> str:
        return f"greedy:{self.policy}" if self.policy else self.name

    @classmethod
    def baseline(cls, policy: str) -> BackendChoice:
        """The choice ``greedy:<policy>``: the registered baseline ``policy`` decides the round.

        Parameters
        ----------
        policy
            A registered policy name, as it is to appear in the plan's ``backend``.
        """
        return cls("greedy", policy)

    @property
    def auto(self) -> bool:
        """Whether the round's size picks the backend (``auto``; see :meth:`for_jobs`)."""
        return self.name == AUTO

    @property
    def exact(self) -> bool:
        """Whether the backend proves optimality (within the gap limit) on every round it decides."""
        return self.policy is None and self.name in BACKENDS and BACKENDS[self.name].exact

    def for_jobs(self, num_jobs: int, exact_max_jobs: int = 100) -> str:
        """The formulation backend deciding a round of ``num_jobs`` active jobs (``auto`` resolved); a
        ``greedy:<policy>`` choice has none (its policy decides) and gives ``greedy``."""
        if self.auto:
            return "cpsat" if num_jobs <= exact_max_jobs else "greedy"
        return self.name


def _unknown(field: str, text: str, known: Iterable[str], what: str = "") -> ValidationError:
    key = text.strip().lower()
    known = list(known)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    subject = what or repr(text[:60])
    return ValidationError(field, f"{subject} not understood; {hint}known: {', '.join(known)}")


def _policy_name(text: str, field: str, whole: str) -> str:
    key = text.strip().lower()
    if key not in policy_names():
        within = f"policy '{key[:60]}' in '{whole[:60]}'" if whole != text else ""
        raise _unknown(field, key, policy_names(), within)
    return key


def parse_backend(text: str | BackendChoice, field: str = "backend", within: str = "") -> BackendChoice:
    """The :class:`BackendChoice` of a backend name (see the module); a name not understood raises
    :class:`ValidationError` at ``field`` with the close matches (``within``: the policy name it came in)."""
    if isinstance(text, BackendChoice):
        return text
    if not isinstance(text, str):
        raise ValidationError(field, f"{type(text).__name__} not understood; a backend name such as cpsat")
    key = text.strip().lower()
    base, sep, policy = key.partition(":")
    if not sep:
        if key not in (*BACKENDS, AUTO):
            inside = f"backend '{key[:60]}' in '{within[:60]}'" if within else ""
            raise _unknown(field, text, backend_names(), inside)
        return BackendChoice(key)
    if base != "greedy" or not policy:
        raise _unknown(field, text, backend_names(), f"'{text[:60]}' (only greedy takes a policy, e.g. "
                       "greedy:sjf)")
    return BackendChoice.baseline(_policy_name(policy, field, text))


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    """A parsed policy name.

    Parameters
    ----------
    policy
        The registered policy.
    backend
        The backend an optimizing policy was named with (``dltsched:milp``; else ``None``).
    name
        What its results are called (default: ``policy``).
    project
        Whether it was named ``dltsched[:<backend>]``: the embedding API then decides with its configured
        solver.
    """

    policy: str
    backend: BackendChoice | None = None
    name: str = ""
    project: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.policy)

    def options(self) -> dict[str, Any]:
        """The policy options the name carries (``{"backend": "milp"}`` for ``dltsched:milp``)."""
        return {} if self.backend is None else {"backend": str(self.backend)}


def parse_policy(text: str | PolicyChoice, field: str = "policy") -> PolicyChoice:
    """The :class:`PolicyChoice` of one policy name (see the module; groups are :func:`expand_policies`'s);
    a name not understood raises :class:`ValidationError` at ``field`` with the close matches."""
    if isinstance(text, PolicyChoice):
        return text
    if not isinstance(text, str):
        raise ValidationError(field, f"{type(text).__name__} not understood; a policy name such as sjf")
    key = text.strip().lower()
    base, sep, backend = key.partition(":")
    known = (*policy_names(), PROJECT_POLICY, f"{PROJECT_POLICY}:<backend>")
    if base == PROJECT_POLICY:
        base_policy = "optimizing"
    elif base in policy_names():
        base_policy = base
    else:
        within = f"policy '{base[:60]}' in '{text[:60]}'" if sep else ""
        raise _unknown(field, base if sep else text, known, within)
    project = base == PROJECT_POLICY
    if not sep:
        return PolicyChoice(base_policy, None, key, project)
    if base_policy not in OPTIMIZING_POLICIES:
        raise ValidationError(field, f"'{text[:60]}' not understood: only the optimizing policies take a "
                              f"backend (dltsched:<backend>, e.g. dltsched:milp); give '{base}' alone")
    choice = parse_backend(backend, field, within=text)
    return PolicyChoice(base_policy, choice, f"{base}:{choice}", project)


def expand_policies(names: Iterable[str], field: str = "policy") -> list[PolicyChoice]:
    """Policy names with the groups (:data:`POLICY_GROUPS`) expanded, each parsed; the first name not
    understood raises :class:`ValidationError`."""
    out: list[PolicyChoice] = []
    for name in names:
        group = POLICY_GROUPS.get(name.strip().lower()) if isinstance(name, str) else None
        out.extend(parse_policy(n, field) for n in (group or (name,)))
    return out


def options_by_name(names: Sequence[str], options: Mapping[str, Any],
                    field: str = "policy") -> dict[str, dict[str, Any]]:
    """The options each named policy runs with: the ``options`` its registered policy takes
    (:func:`~dltsched.engine.app.registry.options_for`) and those its name carries (``dltsched:milp``: the
    backend). A backend both in the name and in ``options`` is refused, naming both."""
    choices = {name: parse_policy(name, field) for name in names}
    taken = options_for(list(dict.fromkeys(c.policy for c in choices.values())), options)
    out: dict[str, dict[str, Any]] = {}
    for name, choice in choices.items():
        carried = choice.options()
        if clash := sorted(set(carried) & set(taken[choice.policy])):
            raise ValidationError(f"option {clash[0]}", f"given both as an option and in the policy name "
                                  f"'{choice.name}'; give it once")
        out[name] = taken[choice.policy] | carried
    return out
