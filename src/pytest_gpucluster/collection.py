"""What the session does while pytest collects: every per-node check parametrised by the tested
nodes, the checks the profile gives nothing to measure ended as not applicable and those that
cannot run now as skipped (each with its reason), the tests that read what every other job left
behind moved last, and the selection (the required set and what ``-k``/``-m``/``--deselect`` left
out) recorded; under pytest-xdist each worker hands its view of the selection to the controller.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpucluster.outcomes import NOT_APPLICABLE
from pytest_gpucluster.plan import last_order
from pytest_gpucluster.plan.selection import Needs, Selection, alone, cannot_run, not_applicable, plan_selection
from pytest_gpucluster.results import codec
from pytest_gpucluster.run.items import declared_not_applicable, defines_check, is_check, needs_of, requests_of

if TYPE_CHECKING:
    from pytest_gpucluster.session import GpuClusterSession


class CollectionHooks:
    """The collection hooks of one run's session."""

    def __init__(self, session: GpuClusterSession) -> None:
        self.session = session
        self._collected: list[Needs] = []  # every collected check's needs, before deselection
        self.selection: Selection | None = None

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Acceptance checks taking ``node`` run once per tested node; the test id is the node
        name. A test that is no check keeps its own ``node`` fixture."""
        if "node" in metafunc.fixturenames and defines_check(metafunc):
            nodes = list(self.session.nodes) or ([] if self.session.excluded_nodes else ["no-usable-node"])
            params = [pytest.param(n, id=n) for n in nodes]
            params += [
                pytest.param(n, id=n, marks=pytest.mark.skip(reason=f"{n} is excluded: Slurm reports it {why}"))
                for n, why in self.session.excluded_nodes.items()
            ]
            metafunc.parametrize("node", params)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Before ``-k``/``-m``/``--deselect`` take their pick: mark every acceptance check
        ``multinode`` (the whole acceptance of a multi-node cluster), end the checks that do not
        apply to the profile as not applicable and those that cannot run now as skipped, each
        with the reason (a check of a usable node against others none of which is usable is not
        applicable to it: ``selection.alone``), and remember every check's needs for the required
        set. Tests that use a job that ``runs_last`` move to the end of the run
        (``plan.last_order``)."""
        self._collected = []
        shape = self.session.shape()
        for item in items:
            if not is_check(item):
                continue
            item.add_marker(pytest.mark.multinode)
            needs = dataclasses.replace(
                needs_of(item), declared=declared_not_applicable(item, self.session.cluster) or ""
            )
            self._collected.append(needs)
            na, blocked = not_applicable(needs, shape), cannot_run(needs, shape)
            callspec = getattr(item, "callspec", None)
            node = callspec.params.get("node") if callspec is not None else None
            # Blocked by its peers alone (no other node usable): not applicable to this node.
            peers_only = blocked and cannot_run(dataclasses.replace(needs, across_nodes=False), shape) is None
            if peers_only and not na and node in self.session.nodes:
                na = alone(needs, shape, node)
            if na:
                # First among the skip marks: a check the profile gives nothing to measure is n/a,
                # also on a node whose parameter skips it as excluded (pytest takes the first).
                item.add_marker(pytest.mark.skip(reason=NOT_APPLICABLE + na), append=False)
            elif blocked:
                item.add_marker(pytest.mark.skip(reason=blocked))
        order = last_order([requests_of(item) for item in items])
        items[:] = [items[i] for i in order]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record the tested nodes (and the excluded ones, with Slurm's reason), the required set
        and what the selection left out, in the results (an xdist worker hands its view to the
        controller)."""
        self.selection = self._selection(session)
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["gpucluster_selection"] = codec.encode_selection(self.selection)
            workeroutput["gpucluster_nodes"] = {
                "tested": list(self.session.nodes),
                "excluded": dict(self.session.excluded_nodes),
            }
        if self.session.results is not None:
            self.session.results.nodes = list(self.session.nodes)
            self.session.results.selection = self.selection
            if self.session.excluded_nodes:
                self.session.results.environment["excluded_nodes"] = dict(self.session.excluded_nodes)

    def _selection(self, session: pytest.Session) -> Selection:
        config = session.config
        named: list[str] = []
        if config.args_source == pytest.Config.ArgsSource.ARGS:
            base = config.invocation_params.dir
            for arg in config.args:
                path = arg.split("::", 1)[0]
                if "::" in arg or (base / path).is_file():
                    named.append(arg)
        return plan_selection(
            self._collected,
            [item.nodeid for item in session.items],
            self.session.shape(),
            named=named,
            command=list(config.invocation_params.args),
            keyword=str(config.option.keyword or ""),
            markexpr=str(config.option.markexpr or ""),
            deselect=[str(d) for d in (config.option.deselect or [])],
        )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: fold each worker's view of the selection into the results."""
        output = getattr(node, "workeroutput", {})
        tested = output.get("gpucluster_nodes") or {}
        if tested and self.session.results is not None and not self.session.results.nodes:
            # The controller collects nothing under xdist: the tested nodes are the workers' word.
            self.session.results.nodes = list(tested.get("tested", []))
            if tested.get("excluded"):
                self.session.results.environment.setdefault("excluded_nodes", dict(tested["excluded"]))
        data = output.get("gpucluster_selection")
        if data and self.session.results is not None:
            if self.session.results.selection is None:
                self.session.results.selection = codec.decode_selection(data)
            else:
                self.session.results.selection.merge(codec.decode_selection(data))
