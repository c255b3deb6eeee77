"""Wrap one long logical line the way black wraps it (the shapes the codemod writes).

A line is split at its last bracket pair (``head(`` / body / ``)tail``), a ``def`` at its first;
a body that still does not fit, or a tuple, list or set display, is split at its delimiters of
highest priority (one item a line, with a trailing comma after commas). ``return`` values,
assignment targets and values and ``if`` conditions get optional parentheses, which are kept only
where they help, as black decides; a trailing comment stays at the end of the last line. Comment
lines, ``# type: ignore`` comments, strings over several lines and backslashes are left to the
caller (:func:`wrap` returns None for them).

Example::

    wrap("    a, b, c = inputs", 16)  # ['    (', '        a,', ..., '    ) = inputs']
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from typing import FrozenSet, Iterator, List, NamedTuple, Optional, Tuple

from ._leaves import (
    CLOSING,
    COMMA,
    COMPOUND,
    OPENING,
    WRAPPED_AFTER,
    Leaf,
    Line,
    annotation_parens,
    copy_line,
    delimiters,
    has_star,
    magic_comma,
    never_omitted,
    parse,
    width,
    with_optional_parens,
)


class CannotSplit(Exception):
    """This split does not apply to the line."""


class StarCommas(NamedTuple):
    """Where a comma follows ``*args`` or ``**kwargs`` in an exploded line (black puts one in a
    call where the file targets Python 3.5+, in a ``def`` where 3.6+: :mod:`._targets`)."""

    calls: bool = False
    defs: bool = False


#: No comma after ``*args`` anywhere (a file black takes to target Pythons older than 3.5).
NO_STAR_COMMAS = StarCommas()


@dataclass
class Split:
    head: Line
    body: Line
    tail: Line
    opening: Leaf
    closing: Leaf


@dataclass
class Wrapper:
    limit: int
    star_commas: StarCommas = NO_STAR_COMMAS  # where a comma follows ``*args`` too
    unit: str = "    "
    force_parens: bool = False
    _omitted: FrozenSet[int] = field(default_factory=frozenset)

    def fits(self, line: Line) -> bool:
        return width(line.render()) <= self.limit

    def lines(self, line: Line) -> List[Line]:
        """``line`` split until each part fits (or cannot be split further)."""
        if self.fits(line) and not line.explode and not magic_comma(line.leaves):
            return [line]
        if line.is_def and not line.inside_brackets:
            transforms = [self.left_split]
        elif line.inside_brackets:
            transforms = [self.delimiter_split, self.right_split]
        else:
            transforms = [self.right_split]
        before = line.render()
        invisible = [leaf for leaf in line.leaves if leaf.invisible]
        copy = copy_line(line) if invisible else None
        for transform in transforms:
            try:
                if transform == self.right_split:
                    line, parts = self._right_split_omitting_trailers(line)
                    invisible = [
                        leaf for leaf in line.leaves if leaf in invisible or leaf.invisible
                    ]
                else:
                    parts = transform(line)
            except CannotSplit:
                continue
            if any(part.render() == before for part in parts):
                continue
            result = [done for part in parts for done in self.lines(part)]
            if (
                transform == self.right_split
                and copy is not None
                and not self.force_parens
                and all(leaf.invisible for leaf in invisible)
                and not self.fits(result[0])
            ):
                result = self._second_opinion(copy, result)
            return result
        return [line]

    def _right_split_omitting_trailers(self, line: Line) -> Tuple[Line, List[Line]]:
        """The first right split (on a copy of ``line``) whose first line fits, omitting ever
        more trailers that fit at the end of the line (``[:2]`` in ``(a, b) = inputs[:2]``);
        else the plain right split of ``line``."""
        for omit in _trailers_to_omit(line, self.limit):
            copy = copy_line(line)
            try:
                parts = self.right_split(copy, frozenset(id(copy.leaves[n]) for n in omit))
            except CannotSplit:
                continue
            if self.fits(parts[0]):
                return copy, parts
        return line, self.right_split(line)

    def _second_opinion(self, copy: Line, result: List[Line]) -> List[Line]:
        """The split keeping the optional parentheses, where the one omitting them leaves a
        first line too long and this one fits."""
        forced = Wrapper(self.limit, self.star_commas, self.unit, force_parens=True)
        try:
            other = [done for part in forced.right_split(copy) for done in forced.lines(part)]
        except CannotSplit:
            return result
        return other if all(forced.fits(part) for part in other) else result

    # -- the splits

    def left_split(self, line: Line) -> List[Line]:
        """``def name(`` / parameters / ``) -> ...:``, at the first opening bracket."""
        index = next((n for n, leaf in enumerate(line.leaves) if leaf.text in OPENING), None)
        if index is None:
            raise CannotSplit
        opening = line.leaves[index]
        if not any(leaf is opening.partner for leaf in line.leaves):
            raise CannotSplit  # a head whose bracket closes on a later line: as long as it gets
        end = line.leaves.index(opening.partner)  # type: ignore[arg-type]
        return self._build(line, index, end)

    def right_split(self, line: Line, omit: FrozenSet[int] = frozenset()) -> List[Line]:
        split = self._last_pair(line, omit)
        if (
            not self.force_parens
            and split.opening.invisible
            and split.closing.invisible
            and self._can_omit(split)
        ):
            try:
                other = self._last_pair(line, omit | {id(split.closing)})
                if self._prefer_other(other, split):
                    return self.right_split(line, omit | {id(split.closing)})
            except CannotSplit:
                if len(split.body.leaves) < 2 and not self.fits(split.body):
                    raise
        if not split.body.leaves:
            raise CannotSplit
        start = line.leaves.index(split.opening)
        return self._build(line, start, line.leaves.index(split.closing))

    def delimiter_split(self, line: Line) -> List[Line]:
        """One line per item, split at the delimiters of highest priority."""
        found = delimiters(line.leaves)
        found.pop(len(line.leaves) - 1, None)  # a trailing comma
        if not found:
            raise CannotSplit
        top = max(found.values())
        if top == 1 and list(found.values()).count(1) == 1:
            raise CannotSplit
        parts: List[List[Leaf]] = [[]]
        for n, leaf in enumerate(line.leaves):
            parts[-1].append(leaf)
            if found.get(n) == top and n + 1 < len(line.leaves):
                parts.append([])
        last = parts[-1][-1]
        comma = self.star_commas.defs if line.parameters else self.star_commas.calls
        starred = line.arguments and has_star(line.leaves) and not comma
        if top == COMMA and last.text != "," and not starred:
            parts[-1].append(Leaf(","))
        return [Line(p, line.indent, inside_brackets=True) for p in parts if p]

    # -- helpers

    def _last_pair(self, line: Line, omit: FrozenSet[int]) -> Split:
        leaves = line.leaves
        for end in range(len(leaves) - 1, -1, -1):
            leaf = leaves[end]
            if leaf.text in CLOSING and id(leaf) not in omit:
                if not any(other is leaf.partner for other in leaves[:end]):
                    break  # its opening bracket is on an earlier line
                start = leaves.index(leaf.partner)  # type: ignore[arg-type]
                if start == end - 1:
                    continue  # an empty pair (``.t()``): black looks further left
                head, body, tail = self._pieces(line, start, end)
                return Split(head, body, tail, leaves[start], leaf)
        raise CannotSplit

    def _pieces(self, line: Line, start: int, end: int) -> List[Line]:
        leaves = line.leaves
        head = Line(leaves[: start + 1], line.indent, line.inside_brackets, line.is_def)
        inner = leaves[start + 1 : end]
        opening = leaves[start]
        body = Line(inner, line.indent + self.unit, inside_brackets=True)
        body.arguments = opening.text == "(" and not (opening.atom or opening.invisible)
        body.parameters = (
            line.is_def
            and leaves[0].text in ("def", "async")
            and opening is next((x for x in leaves if x.text == "("), None)
        )
        lone = inner and not any(x.text == "," for x in inner)
        if line.is_def and opening.text == "(" and lone:  # black adds a comma to one parameter,
            # ``*args`` too, whatever the file targets (black 26)
            body.leaves = [*inner, Leaf(",")]
        found = delimiters(body.leaves)
        found.pop(len(body.leaves) - 1, None)
        exploded = opening.atom or opening.invisible or (inner and inner[-1].text == ",")
        if found and max(found.values()) == COMMA and exploded:
            body.explode = True
        tail = Line(leaves[end:], line.indent, line.inside_brackets, line.is_def)
        return [head, body, tail]

    def _build(self, line: Line, start: int, end: int) -> List[Line]:
        head, body, tail = self._pieces(line, start, end)
        line.leaves[start].invisible = line.leaves[end].invisible = False
        if not body.leaves and len(tail.render().strip()) < 3:
            raise CannotSplit
        return [part for part in (head, body, tail) if part.leaves]

    def _can_omit(self, split: Split) -> bool:
        body = split.body.leaves
        found = delimiters(body)
        if not found:
            return True
        top = max(found.values())
        if list(found.values()).count(top) > 1:
            return False
        if top == 1:
            return True
        first, last = body[0], body[-1]
        if first.text in OPENING and body[1].text not in CLOSING:
            length, rest = len(split.body.indent), False
            for leaf in body:
                rest = rest or leaf is first.partner
                if rest:
                    length += width(leaf.prefix + leaf.text + leaf.comment)
                    if length > self.limit:
                        break
                    rest = leaf.text not in OPENING
            else:
                return True
        if last.text in (")", "}") or (last.text == "]" and last.partner.atom):  # type: ignore[union-attr]
            if body[-2] is last.partner:
                return False
            length = len(split.body.indent)
            nested = False
            for n, leaf in enumerate(body):
                length += width((leaf.prefix if n else "") + leaf.text + leaf.comment)
                if leaf is last.partner:
                    return nested or length <= self.limit
                nested = nested or leaf.text in OPENING
        return False

    def _prefer_other(self, other: Split, split: Split) -> bool:
        head = split.head.leaves
        if not (len(head) >= 2 and head[-2].text == "="):
            return True
        if not any(leaf.text in OPENING or leaf.text in CLOSING for leaf in head[:-1]):
            return True
        if len(split.head.render()) > self.limit - 1:
            return True
        if magic_comma(split.head.leaves):  # the target is split one item a line anyway
            return True
        for leaf in reversed(other.head.leaves):
            if leaf.text == "=":
                break
            if leaf.text in CLOSING:
                return True
        return any(leaf.text == "=" for leaf in other.head.leaves) and self.fits(other.head)


def _trailers_to_omit(line: Line, limit: int) -> Iterator[List[int]]:
    """Growing lists of the indices of closing brackets a right split may pass over: the
    trailers at the end of the line that fit in ``limit`` with what follows them."""
    omit: List[int] = []
    if not magic_comma(line.leaves):  # else black starts past the trailers (its 26.10 rhs)
        yield omit
    length = len(line.indent)
    opening: Optional[Leaf] = None
    closing: Optional[int] = None
    inner: List[int] = []
    leaves = line.leaves
    for n in range(len(leaves) - 1, -1, -1):
        leaf = leaves[n]
        length += width(leaf.prefix + leaf.shown() + leaf.comment)
        if length > limit or leaf.comment:  # black omits no trailer past a comment
            break
        if opening is not None:
            if leaf is opening:
                opening = None
            elif leaf.text in CLOSING:
                if never_omitted(leaves, n):
                    break
                inner.append(n)
        elif leaf.text in CLOSING:
            if n and leaves[n - 1].text in OPENING:
                inner.append(n)
                continue
            if closing is not None:
                omit = [*omit, closing, *inner]
                inner = []
                yield omit
            if never_omitted(leaves, n):
                break
            if not leaf.invisible:
                opening, closing = leaf.partner, n


def wrap(line: str, limit: int, star_commas: StarCommas = NO_STAR_COMMAS) -> Optional[List[str]]:
    """``line`` (one physical line, without its line ending) as black would wrap it within
    ``limit`` characters; None if it fits or is left as it is (see :func:`parse`).
    ``star_commas``: where a comma follows ``*args`` too (the Pythons the file targets)."""
    if width(line) <= limit:
        return None
    prepared = prepare(line)
    if prepared is None:
        return None
    result = Wrapper(limit, star_commas).lines(prepared)
    rendered = [part.render().rstrip() for part in result]
    if len(rendered) < 2 or not same_statement(line, rendered):
        return None
    return rendered


def prepare(line: str) -> Optional[Line]:
    """``line`` as the :class:`Line` black would lay out: its leaves, with the optional
    parentheses; None for a line black leaves whole (see :func:`parse`) or splits otherwise."""
    stripped = line.lstrip(" \t")
    indent = line[: len(line) - len(stripped)]
    leaves = parse(stripped)
    if leaves is None:
        return None
    is_def = leaves[0].text == "def" or (
        leaves[0].text == "async" and len(leaves) > 1 and leaves[1].text == "def"
    )
    if leaves[0].text in COMPOUND and not (
        (is_def or leaves[0].text in WRAPPED_AFTER) and leaves[-1].text == ":"
    ):
        return None  # a body on the header's line, or a header black splits otherwise
    if not is_def and leaves[0].text != "@":
        leaves = with_optional_parens(leaves)
    elif is_def:
        annotation_parens(leaves)
    if any(leaf.text == ";" for leaf in leaves):
        return None  # black would make statements of it
    return Line(leaves, indent, is_def=is_def)


#: Ways to make one statement (or header) a module for :func:`ast.parse`, inside an async def.
_FRAMES = ("{}", "{}\n    pass", "{}\ndef _():\n    pass", "if 0:\n    pass\n{}\n    pass")


def same_statement(line: str, wrapped: List[str]) -> bool:
    """Whether ``wrapped`` is the statement ``line`` is: a layout that would change the code (a
    bug in a split) is never written."""
    for frame in _FRAMES:
        before = _tree(line, frame)
        if before is not None:
            return before == _tree("\n".join(wrapped), frame)
    return False


def _tree(text: str, frame: str) -> Optional[str]:
    code = "async def _():\n" + textwrap.indent(frame.format(textwrap.dedent(text)), "    ")
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):  # black's ``del (a, b)`` deletes what ``del a, b`` does
        if isinstance(node, ast.Delete) and len(node.targets) == 1:
            target = node.targets[0]
            node.targets = target.elts if isinstance(target, ast.Tuple) else node.targets
    return ast.dump(tree)
