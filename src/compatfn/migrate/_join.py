"""Lay out again a statement of several lines that the codemod edited or moved, as black would.

Black joins a statement that fits on one line (the parentheses it added when it split the
statement become optional again, its comments go to the end of the line) and splits the joined
statement again where it does not fit (a comma that ends a bracket's contents, a "magic trailing
comma", keeps that bracket one item a line). It keeps a statement with a comment on a line of
its own as it is, and so does :func:`relayout`.

Example::

    relayout(["    def forward(", "        x, w", "    ):"], 88)  # ['    def forward(x, w):']
"""

from __future__ import annotations

import io
import tokenize
from typing import List, Optional, Sequence, Tuple

from ._leaves import CLOSING, OPENING, width
from ._wrap import NO_STAR_COMMAS, StarCommas, Wrapper, prepare, same_statement

#: Tokens that start a line black split before without a space after the joint (attribute access
#: in a chain of calls) or end one with nothing after it (an opening bracket).
_NO_SPACE_BEFORE = CLOSING | {"."}


def relayout(
    lines: Sequence[str], limit: int, star_commas: StarCommas = NO_STAR_COMMAS
) -> Optional[List[str]]:
    """``lines`` (one statement over several physical lines, without line endings) as black lays
    it out within ``limit`` columns: on one line where it fits, else split as black splits it;
    None where black keeps the lines as they are (see :func:`join`) or the layout is theirs."""
    joined = _joined(lines)
    prepared = None if joined is None else prepare(joined[0])
    if joined is None or prepared is None:
        return None
    rendered = [part.render().rstrip() for part in Wrapper(limit, star_commas).lines(prepared)]
    if len(rendered) == 1 and width(rendered[0]) > limit:
        return None  # black could not split it either: the author's lines stay
    if len(rendered) > 1 and joined[1]:
        return None  # comments inside: black puts each at the end of its own leaf's line
    original = "\n".join([lines[0].lstrip(" \t"), *lines[1:]])
    if rendered == [line.rstrip() for line in lines] or not same_statement(original, rendered):
        return None
    return rendered


def join(lines: Sequence[str]) -> Optional[str]:
    """``lines`` (one statement over several physical lines) on one line: no space after an
    opening bracket or before a closing bracket or a ``.``, one space at every other joint, the
    rest of each line as it is, and the comments at the end (black: ``x = f(a)  # c1  # c2``).
    None where black would not join them: a comment on a line of its own, a backslash, a string
    over several lines."""
    joined = _joined(lines)
    return None if joined is None else joined[0]


def _joined(lines: Sequence[str]) -> Optional[Tuple[str, bool]]:
    """:func:`join`'s line, and whether a comment stood before the last line."""
    first = lines[0]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    text = "\n".join([first[len(indent) :], *lines[1:]])
    rows = text.split("\n")
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    parts: List[str] = [indent]
    comments: List[str] = []
    previous: Optional[tokenize.TokenInfo] = None
    broken = inner = False
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
            continue
        if token.type == tokenize.NL:
            broken = True
            continue
        if token.start[0] != token.end[0]:
            return None  # a string over several lines
        if token.type == tokenize.COMMENT:
            if previous is None or previous.end[0] != token.start[0]:
                return None  # a comment on a line of its own
            comments.append(token.string)
            inner = inner or token.start[0] < len(rows)
            continue
        row = rows[token.start[0] - 1]
        if previous is None:
            parts.append(row[token.start[1] : token.end[1]])
        elif token.start[0] == previous.end[0]:
            parts.append(row[previous.end[1] : token.end[1]])
        elif not broken:
            return None  # a backslash
        else:
            tight = previous.string in OPENING or token.string in _NO_SPACE_BEFORE
            parts.append(("" if tight else " ") + row[token.start[1] : token.end[1]])
        previous, broken = token, False
    if previous is None:
        return None
    return "".join(parts) + "".join(f"  {comment}" for comment in comments), inner
