"""How big a level's expressions get once written out: the guard that keeps compiled SQL linear.

Inside a level (see _plan) nothing names an intermediate value: an action's SQL
wraps the SQL of the values it reads, textually. A value read twice is written
out twice, and a value built from one read twice is written out four times:
twenty rules that each append to one field when their condition holds
(`CASE WHEN m THEN x || 'a' ELSE x END` names x twice) made a 53 MB statement.

So the planner follows every value composed in a level as a node: its size (one
unit per action, CASE and column reference, repeats included), its depth, and
how many places refer to it (the nodes that read it, and the level's output
while it is its field's current value). A node bigger than SMALL_UNITS may be
referred to once only. A node's readers are bigger than it, so every big node
is written out exactly once and a level's text is at most about SMALL_UNITS
times the actions it holds. Where an action or a step would break that (or nest
deeper than MAX_DEPTH), _plan starts a new step or level, where the values it
reads are plain columns again.
"""

from __future__ import annotations

from collections.abc import Iterable

from firefeed.rules.model import FieldAction, action_reads

#: a value at most this big (units, see above) may be written out several times (`CASE WHEN m THEN
#: 'x' ELSE <earlier CASE> END` of a few rules on one field); the benchmark's levels need 8
SMALL_UNITS = 8
#: the deepest nesting of one level's expressions (psycopg2 composes SQL recursively, and so does
#: Postgres' planner): a chain of 1,000 appends to one field becomes steps in several levels
MAX_DEPTH = 48


class _Node:
    """One composed value: an action's result, or the CASE of a rule's two branches."""

    __slots__ = ("children", "committed", "depth", "refs", "size")

    def __init__(self, children: Iterable[_Node | None]) -> None:
        self.children: tuple[_Node | None, ...] = tuple(children)  # one per textual reference; None: a column
        self.size: int = 1 + sum(1 if c is None else c.size for c in self.children)
        self.depth: int = 1 + max((c.depth for c in self.children if c is not None), default=0)
        self.refs = 0
        self.committed = False


class Scope:
    """The values a level (or a step's chain) has composed so far, and who refers to them."""

    def __init__(self) -> None:
        self.values: dict[str, _Node] = {}  # field -> its current composed value (absent: still a column)

    def _chain(self, actions: tuple[FieldAction, ...]) -> dict[str, _Node]:
        current: dict[str, _Node] = {}
        for action in actions:
            children: list[_Node | None] = []
            for name, times in action_reads(action).items():
                children.extend([current[name] if name in current else self.values.get(name)] * times)
            current[action.field] = _Node(children)
        return current

    def admit(
        self,
        then: tuple[FieldAction, ...],
        else_: tuple[FieldAction, ...] = (),
        *,
        conditional: bool = False,
        force: bool = False,
    ) -> bool:
        """Whether a step with these branches (a CASE of both when `conditional`) keeps the scope's
        text linear; it is added when it does, or anyway with `force` (the first of a new scope)."""
        yes, no = self._chain(then), self._chain(else_)
        outputs: dict[str, _Node | None] = {}
        for name in dict.fromkeys([*yes, *no]):
            before = self.values.get(name)
            chosen = yes.get(name, before)
            outputs[name] = _Node((chosen, no.get(name, before))) if conditional else chosen
        delta: dict[_Node, int] = {}

        def refer(node: _Node | None, by: int) -> None:
            if node is not None:
                delta[node] = delta.get(node, 0) + by

        for name, out in outputs.items():
            refer(out, 1)
            refer(self.values.get(name), -1)
        fresh = [n for n in dict.fromkeys(o for o in outputs.values() if o is not None) if not n.committed]
        seen = set(fresh)
        stack = list(fresh)
        while stack:
            for child in stack.pop().children:
                refer(child, 1)
                if child is not None and not child.committed and child not in seen:
                    seen.add(child)
                    fresh.append(child)
                    stack.append(child)
        ok = all(n.refs + d <= 1 or n.size <= SMALL_UNITS for n, d in delta.items()) and all(
            n.depth <= MAX_DEPTH for n in fresh
        )
        if ok or force:
            for node, d in delta.items():
                node.refs += d
            for node in fresh:
                node.committed = True
            for name, out in outputs.items():
                if out is None:
                    self.values.pop(name, None)
                else:
                    self.values[name] = out
        return ok
