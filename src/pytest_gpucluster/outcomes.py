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

from typing import NoReturn

NOT_APPLICABLE = "not applicable: "
COULD_NOT_JUDGE = "could not judge: "


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
    for prefix in ("Skipped: ", NOT_APPLICABLE):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text
