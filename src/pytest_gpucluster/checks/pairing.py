"""Bad-node isolation by pairing: which node makes a multi-node collective slow or wrong.

A collective over all nodes only says *some* node or link is bad. Measured in pairs, a pair that
passes clears both of its nodes; a pair that fails makes both suspects. A suspect is then paired
with a node already cleared: passing clears it, failing convicts it, since its partner is known
good. While no node is cleared yet, suspects are re-paired among themselves with partners they
have not had. This is the approach of Google's cluster-health-scanner (a second pass re-pairs
failed nodes with known-good ones) and ROCm CVS' bad-node isolation.

Pure logic: the caller runs each round's pairs (all at once, as sub-communicators of one job)
and reports which passed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

Pair = tuple[str, str]


@dataclass(frozen=True)
class Isolation:
    """What the rounds established."""

    good: tuple[str, ...]
    bad: tuple[str, ...]
    undetermined: tuple[str, ...]  # failed with every partner tried, none of them known good
    rounds: tuple[tuple[tuple[Pair, bool], ...], ...]

    def summary(self) -> str:
        """One sentence for a failure message."""
        parts = []
        if self.bad:
            parts.append(f"bad node(s): {', '.join(self.bad)} (failed when paired with a known-good node)")
        if len(self.undetermined) == 2 and not self.good and not self.bad:
            parts.append(
                f"could not isolate {', '.join(self.undetermined)}: with two nodes a failed pair cannot "
                "tell which node is bad (add a known-good node to the profile's nodelist to tell)"
            )
        elif self.undetermined:
            parts.append(
                f"could not isolate {', '.join(self.undetermined)}: every pairing of them failed and no "
                "known-good partner was left (a fault common to all, e.g. fabric or configuration, "
                "or every one of them is bad)"
            )
        if not parts:
            parts.append("every node passed in pairs (the fault needs more than two nodes to show)")
        tried = "; ".join(
            f"round {i + 1}: " + ", ".join(f"{a}+{b} {'ok' if ok else 'FAIL'}" for (a, b), ok in rnd)
            for i, rnd in enumerate(self.rounds)
        )
        return "; ".join(parts) + f" [{tried}]"


@dataclass
class Pairing:
    """The state machine: call ``next_round()``, run its pairs, ``record()`` each outcome."""

    nodes: Sequence[str]
    max_rounds: int = 6
    good: set[str] = field(default_factory=set)
    bad: set[str] = field(default_factory=set)
    suspects: list[str] = field(default_factory=list)
    tried: set[frozenset[str]] = field(default_factory=set)
    history: list[list[tuple[Pair, bool]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"node names repeat: {list(self.nodes)}")

    def _untested(self) -> list[str]:
        seen = {n for pair in self.tried for n in pair}
        return [n for n in self.nodes if n not in seen]

    def next_round(self) -> list[Pair]:
        """The pairs to run now (disjoint, so they run concurrently); empty when done."""
        if len(self.history) >= self.max_rounds or len(self.nodes) < 2:
            return []
        if not self.tried:  # first round: neighbours; an odd node out waits for a cleared partner
            return [(self.nodes[i], self.nodes[i + 1]) for i in range(0, len(self.nodes) - 1, 2)]
        # Sets, looked up once per node: a round costs O(nodes), not O(nodes × pairs tried).
        waiting = set(self.suspects) | set(self._untested())
        pending = [n for n in self.nodes if n in waiting and n not in self.good and n not in self.bad]
        if not pending:
            return []
        partners = [n for n in self.nodes if n in self.good]
        pairs: list[Pair] = []
        if partners:
            # one known-good partner per suspect per round, so the pairs stay disjoint
            for node, partner in zip(pending, partners, strict=False):
                pairs.append((node, partner))
            return pairs
        # nobody cleared yet: re-pair suspects with partners they have not had
        free = list(pending)
        while free:
            node = free.pop(0)
            mate = next((m for m in free if frozenset((node, m)) not in self.tried), None)
            if mate is not None:
                free.remove(mate)
                pairs.append((node, mate))
        return pairs

    def record(self, outcomes: Iterable[tuple[Pair, bool]]) -> None:
        """Fold one round's outcomes in."""
        outcomes = list(outcomes)
        self.history.append(outcomes)
        for (a, b), passed in outcomes:
            self.tried.add(frozenset((a, b)))
            if passed:
                for n in (a, b):
                    self.good.add(n)
                    self.bad.discard(n)
                    if n in self.suspects:
                        self.suspects.remove(n)
                continue
            for n, partner in ((a, b), (b, a)):
                if n in self.good:
                    continue
                if partner in self.good:
                    self.bad.add(n)
                    if n in self.suspects:
                        self.suspects.remove(n)
                elif n not in self.suspects:
                    self.suspects.append(n)
        # a node cleared later exonerates nothing retroactively: a pair that failed with one
        # now-good member convicts the other
        for outcome in self.history:
            for (a, b), passed in outcome:
                if passed:
                    continue
                for n, partner in ((a, b), (b, a)):
                    if partner in self.good and n not in self.good:
                        self.bad.add(n)
                        if n in self.suspects:
                            self.suspects.remove(n)

    def result(self) -> Isolation:
        """Good, bad and undetermined nodes, in the order given."""
        undetermined = [n for n in self.nodes if n not in self.good and n not in self.bad]
        return Isolation(
            good=tuple(n for n in self.nodes if n in self.good),
            bad=tuple(n for n in self.nodes if n in self.bad),
            undetermined=tuple(undetermined),
            rounds=tuple(tuple(r) for r in self.history),
        )


def isolate(
    nodes: Sequence[str], run_round: Callable[[list[Pair]], dict[Pair, bool]], max_rounds: int = 6
) -> Isolation:
    """Run rounds until every node is judged or nothing new can be learnt.

    ``run_round(pairs)`` measures every pair at once and returns pass/fail per pair.
    """
    state = Pairing(list(nodes), max_rounds=max_rounds)
    while True:
        pairs = state.next_round()
        if not pairs:
            return state.result()
        outcome = run_round(pairs)
        state.record((pair, bool(outcome.get(pair, False))) for pair in pairs)


def neighbour_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """The edges of the ring of ``nodes`` (each node paired with the one before and the one after
    it) in rounds of disjoint pairs, each round run at once: ``(n0, n1), (n2, n3), ...``, then
    ``(n1, n2), (n3, n4), ...``, and for an odd count a third round of the pair that closes the
    ring. From three nodes on, every node has two partners, so a node slow with both is told from
    a pair slow together; two nodes make one pair, one node none."""
    n = len(nodes)
    if len(set(nodes)) != n:
        raise ValueError(f"node names repeat: {list(nodes)}")
    if n < 2:
        return []
    if n == 2:
        return [[(nodes[0], nodes[1])]]
    first = [(nodes[i], nodes[i + 1]) for i in range(0, n - 1, 2)]
    second = [(nodes[i], nodes[(i + 1) % n]) for i in range(1, n, 2)]
    if n % 2 == 0:
        return [first, second]
    # odd: the last node's pair with the first closes the ring in a round of its own
    return [first, second, [(nodes[-1], nodes[0])]]
