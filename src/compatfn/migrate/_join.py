"""Lay out again a statement of several lines that the codemod edited or moved, as black would.

Black joins a statement that fits on one line (the parentheses it added when it split the
statement become optional again) and splits the joined statement again where it does not fit. It
keeps a statement as it is where a comment sits inside it or a comma ends a bracket's contents (a
"magic trailing comma"), and so does :func:`relayout`.

Example::

    relayout(["    def forward(", "        x, w", "    ):"], 88)  # ['    def forward(x, w):']
"""

from __future__ import annotations

import io
import tokenize
from typing import List, Optional, Sequence

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
    joined = join(lines)
    prepared = None if joined is None else prepare(joined)
    if prepared is None:
        return None
    rendered = [part.render().rstrip() for part in Wrapper(limit, star_commas).lines(prepared)]
    if len(rendered) == 1 and width(rendered[0]) > limit:
        return None  # black could not split it either: the author's lines stay
    original = "\n".join([lines[0].lstrip(" \t"), *lines[1:]])
    if rendered == [line.rstrip() for line in lines] or not same_statement(original, rendered):
        return None
    return rendered


def join(lines: Sequence[str]) -> Optional[str]:
    """``lines`` (one statement over several physical lines) on one line: no space after an
    opening bracket or before a closing bracket or a ``.``, one space at every other joint, the
    rest of each line as it is. None where black would not join them: a comment before the end
    of the last line, a comma before a closing bracket (black's magic trailing comma), a
    backslash, a string over several lines."""
    first = lines[0]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    text = "\n".join([first[len(indent) :], *lines[1:]])
    rows = text.split("\n")
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    parts: List[str] = [indent]
    previous: Optional[tokenize.TokenInfo] = None
    comment = ""
    broken = False
    for token in tokens:
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
            continue
        if token.type == tokenize.NL:
            broken = True
            continue
        if comment or token.start[0] != token.end[0]:
            return None  # something after a comment, or a string over several lines
        if token.type == tokenize.COMMENT:
            comment = token.string
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
    return "".join(parts) + (f"  {comment}" if comment else "")
