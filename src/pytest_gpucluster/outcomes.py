"""What a check can end in besides pass and fail: *not applicable*, and a warning.

A check is **not applicable** when the cluster the profile describes has nothing for it to measure
(one GPU per node: no intra-node collective; no InfiniBand expected: no port to read). It is
reported as such (``n/a`` in the terminal, the report and the results), never as a pass and never
as a required check that did not run. In pytest it is a skip whose reason starts with
``NOT_APPLICABLE``; every reader of results tells the two apart by that prefix.

A check **could not judge** when thresholds.toml has no bound for what it measured: the
measurement is kept (status ``unjudged``) and the check is skipped with a reason starting with
``COULD_NOT_JUDGE`` that names the file, the set and the metric. A missing reference number is not
a fault of the cluster: the run is INCOMPLETE, never REJECTED for it.

A **warning** raised by a check (``GpuClusterWarning`` and its subclasses) is recorded on the
check in the results and the report, and the run's verdict counts it.
"""

from __future__ import annotations

import re
from typing import Literal, NoReturn

NOT_APPLICABLE = "not applicable: "
COULD_NOT_JUDGE = "could not judge: "
NOT_JUDGED = "not judged: "

# A check's outcome, decided once (``decide``) from what pytest reported and what the check
# recorded: judged (pass, warn, fail; an expected failure, a strict unexpected pass), not
# applicable to the profile, not judged (skipped, could not judge, stopped by the suite's own
# error), stopped by a fault outside the nodes, or interrupted before it ended.
Outcome = Literal["pass", "warn", "fail", "xfail", "xpass", "n/a", "not_judged", "fault", "interrupted"]
JUDGED_BAD: frozenset[str] = frozenset({"fail", "xpass"})
UNJUDGED: frozenset[str] = frozenset({"not_judged", "fault", "interrupted"})


def decide(*, outcome: str, message: str, warned: bool, harness_error: bool, fault: bool) -> Outcome:
    """The outcome of one check: ``outcome`` is pytest's (``passed``, ``failed``, ``skipped``,
    ``error``, ``xfailed``, ``xpassed``, or ``unknown``/``interrupted`` for a check the run never
    ended), ``message`` its skip reason, ``warned`` whether it recorded a warning or a value past a
    warn line, ``harness_error`` whether it ended in an exception that is no judgement and no
    answer of the cluster, ``fault`` whether a fault outside the nodes stopped it."""
    if outcome in ("unknown", "interrupted"):
        return "interrupted"
    if fault:
        return "fault"
    if outcome == "passed":
        return "warn" if warned else "pass"
    if outcome == "skipped":
        return "n/a" if is_not_applicable(message) else "not_judged"
    if outcome == "xfailed":
        return "xfail"
    if outcome == "xpassed":
        return "xpass"
    return "not_judged" if harness_error else "fail"


class GpuClusterWarning(UserWarning):
    """A finding that does not fail a check but that the customer must see (device cgroups off,
    ECC unsupported, a PCIe link below its generation)."""


class ThresholdWarning(GpuClusterWarning):
    """A measurement between the warn and the fail line: the check passes, the report shows amber."""


def not_applicable(reason: str) -> NoReturn:
    """End the running check as not applicable, saying why (``reason`` names the node or the
    profile key that makes it so)."""
    import pytest

    raise pytest.skip.Exception(NOT_APPLICABLE + reason, _use_item_location=True)


def failed(reason: str) -> NoReturn:
    """End the running check as failed with ``reason`` and no traceback: for the code that runs a
    check's jobs (``run/areas``), which finds before or after a job that the check cannot go on
    (a pair of jobs that cannot run at once, no node that trained) and imports no pytest."""
    import pytest

    raise pytest.fail.Exception(reason, pytrace=False)


def is_not_applicable(message: str) -> bool:
    """Whether a skip reason (``Skipped: `` prefix allowed) says the check does not apply."""
    text = str(message).strip()
    if text.startswith("Skipped: "):
        text = text[len("Skipped: ") :]
    return text.startswith(NOT_APPLICABLE)


def reason_of(message: str) -> str:
    """A skip reason without pytest's and this module's prefixes."""
    text = str(message).strip()
    for prefix in ("Skipped: ", NOT_APPLICABLE, NOT_JUDGED):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def first_line(text: str) -> str:
    """The first non-empty line of ``text``, without pytest's ``Failed: `` / ``Skipped: `` prefix
    and without this plugin's exception path (``pytest_gpucluster.errors.NodeLostError: ``): the
    sentence after it names the job and the node."""
    for line in str(text).splitlines():
        if line.strip():
            line = re.sub(r"^(Failed|Skipped|XFailed): ", "", line.strip())
            return re.sub(r"^pytest_gpucluster(\.\w+)*\.\w+: ", "", line)
    return ""
