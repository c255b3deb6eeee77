"""The leaves of one logical line for :mod:`._wrap`: tokens with their spacing, bracket pairs,
black's optional parentheses and the priorities of the places a line may be split at.

Example::

    leaves = parse("a, b = inputs")  # ['a', ',', 'b', '=', 'inputs']
    with_optional_parens(leaves)     # ... '=', '(' (invisible), 'inputs', ')' (invisible)
"""

from __future__ import annotations

import io
import keyword
import re
import tokenize
import unicodedata
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

OPENING = {"(": ")", "[": "]", "{": "}"}
CLOSING = {")", "]", "}"}
COMMA = 18
PRIORITIES = {
    "for": 20,  # only inside brackets (a comprehension)
    "if": 16,  # a conditional expression (a comprehension's if is 20, see _priority)
    "else": 16,
    "and": 14,
    "or": 14,
    "in": 10,
    "not": 10,
    "is": 10,
    "<": 10,
    ">": 10,
    "==": 10,
    "!=": 10,
    "<=": 10,
    ">=": 10,
    "|": 9,
    "^": 8,
    "&": 7,
    "<<": 6,
    ">>": 6,
    "+": 5,
    "-": 5,
    "*": 4,
    "/": 4,
    "//": 4,
    "%": 4,
    "@": 4,
    "**": 2,
}
#: black's type comments: one ignoring errors keeps its line whole; any stays where it was written.
TYPE_COMMENT = re.compile(r"#\s*type:")
TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore")
#: A comment that tells black (or yapf) to leave its line alone.
FORMAT_SKIP = re.compile(r"#\s*(fmt\s*:\s*(skip|off)|yapf\s*:\s*disable)")
#: Where black's extra depth for a lambda's parameters and a for's targets ends.
SCOPES = {"lambda": ":", "for": "in"}
#: Statements whose first expression black wraps in optional parentheses.
WRAPPED_AFTER = {"return", "if", "elif", "while", "del", "assert"}


COMPOUND = {
    "def",
    "async",
    "class",
    "if",
    "elif",
    "else",
    "for",
    "while",
    "with",
    "try",
    "except",
    "finally",
    "match",
    "case",
}


def width(text: str) -> int:
    """The columns ``text`` takes as black counts them (``str_width``): 2 for a wide or
    full-width East Asian character, else 1.

    Example::

        width("# 投影")  # 6
    """
    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


@dataclass(eq=False)
class Leaf:
    """One token: its text, the space before it in the source, and its bracket partner."""

    text: str
    prefix: str = ""
    kind: int = tokenize.OP
    invisible: bool = False  # an optional parenthesis (shown only if it is split at)
    partner: Optional[Leaf] = None
    atom: bool = False  # an opening bracket of a display or parenthesized expression
    comment: str = ""  # a trailing comment attached to this leaf (black shows it at the line's end)

    def shown(self) -> str:
        return "" if self.invisible else self.text


@dataclass
class Line:
    leaves: List[Leaf]
    indent: str
    inside_brackets: bool = False
    is_def: bool = False
    explode: bool = False  # a display's items: split at its commas even if it fits
    arguments: bool = False  # a call's arguments or a def's parameters
    parameters: bool = False  # a def's parameters

    def render(self) -> str:
        text = "".join(
            (leaf.prefix if n else "") + leaf.shown() for n, leaf in enumerate(self.leaves)
        )
        comments = "".join(f"  {leaf.comment}" for leaf in self.leaves if leaf.comment)
        return self.indent + text + comments


def copy_line(line: Line) -> Line:
    mapping = {
        id(leaf): Leaf(leaf.text, leaf.prefix, leaf.kind, False, None, leaf.atom, leaf.comment)
        for leaf in line.leaves
    }
    for leaf in line.leaves:
        new = mapping[id(leaf)]
        new.invisible = leaf.invisible
        if leaf.partner is not None:
            new.partner = mapping.get(id(leaf.partner), leaf.partner)
    return Line(
        [mapping[id(x)] for x in line.leaves],
        line.indent,
        line.inside_brackets,
        line.is_def,
        line.explode,
    )


def has_star(leaves: Sequence[Leaf]) -> bool:
    """A ``*args`` or ``**kwargs`` at the outer level (black adds no comma after it unless it
    knows the file targets Python 3.6+)."""
    return any(leaves[n].text in ("*", "**") and _unary(leaves, n) for n in _outer_leaves(leaves))


def _unary(leaves: Sequence[Leaf], n: int) -> bool:
    if n == 0:
        return True
    before = leaves[n - 1]
    return (
        before.text in OPENING
        or before.text in {",", "=", ":", "lambda"}
        or (before.kind == tokenize.OP and before.text not in CLOSING)
        or (
            before.kind == tokenize.NAME
            and keyword.iskeyword(before.text)
            and before.text not in ("None", "True", "False")
        )
    )


def delimiters(leaves: Sequence[Leaf]) -> Dict[int, int]:
    """index -> priority of a split *after* that leaf, at the outer bracket level."""
    found: Dict[int, int] = {}
    depth = 0
    comprehension = nested_ternary = False
    # black's BracketTracker: a lambda's parameters (to its ``:``) and a for's targets (to its
    # ``in``) are one level deeper, so their commas are no delimiters
    scopes: List[Tuple[str, int]] = []
    for n, leaf in enumerate(leaves):
        if scopes and scopes[-1] == (leaf.text, depth):
            depth -= 1
            scopes.pop()
        if leaf.text in CLOSING:
            depth -= 1
        comprehension = comprehension or (depth == 0 and leaf.text == "for")
        if depth == 0 and n:
            priority = _priority(leaves, n, comprehension)
            if priority == PRIORITIES["else"]:
                # black wraps each conditional expression in invisible parentheses: one in the
                # else branch of another is a level deeper, its if and else no delimiters here
                priority = 0 if nested_ternary else priority
                nested_ternary = nested_ternary or leaf.text == "else"
            if priority:
                found[n - 1] = max(found.get(n - 1, 0), priority)
            if leaf.text == ",":
                found[n] = COMMA
        elif depth == 0 and leaf.text == ",":
            found[n] = COMMA
        if leaf.text in OPENING:
            depth += 1
        if leaf.kind == tokenize.NAME and leaf.text in SCOPES:
            depth += 1
            scopes.append((SCOPES[leaf.text], depth))
    return found


def _priority(leaves: Sequence[Leaf], n: int, comprehension: bool) -> int:
    leaf, before = leaves[n], leaves[n - 1]
    if leaf.kind == tokenize.STRING or (leaf.kind == tokenize.NAME and leaf.text not in PRIORITIES):
        return 0
    if leaf.text == "." and before.text in CLOSING:
        return 1
    if leaf.text in ("if", "for") and comprehension:
        return 20
    if leaf.text == "not":  # `not in` splits before `not`; `is not` and `not x` do not
        return 10 if n + 1 < len(leaves) and leaves[n + 1].text == "in" else 0
    if leaf.text == "in" and (before.text == "not" or comprehension):
        return 0
    if leaf.text in ("+", "-", "*", "**", "~") and _unary(leaves, n):
        return 0
    return PRIORITIES.get(leaf.text, 0)


def parse(text: str) -> Optional[List[Leaf]]:
    """The leaves of one logical line (no indentation), a trailing comment attached to the last,
    or None for one :func:`wrap` leaves alone: a comment line, a ``# type: ignore`` or
    ``# fmt: skip`` comment, a string over several lines, a backslash, unbalanced brackets."""
    leaves: List[Leaf] = []
    stack: List[Leaf] = []
    end_col = 0
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    nested = 0  # inside an f-string (tokenized in parts from Python 3.12): one leaf
    start_col = 0
    for token in tokens:
        name = tokenize.tok_name[token.type]
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT):
            continue
        if token.type == tokenize.COMMENT and leaves and not stack and token.start[0] == 1:
            if TYPE_IGNORE.match(token.string) or FORMAT_SKIP.search(token.string):
                return None  # black keeps the line whole
            leaves[-1].comment = token.string
            continue
        if token.type in (tokenize.COMMENT, tokenize.NL) or token.start[0] != 1:
            return None
        if name.endswith("STRING_START"):
            nested += 1
            start_col = token.start[1] if nested == 1 else start_col
            continue
        if nested:
            nested -= name.endswith("STRING_END")
            if nested:
                continue
            token = token._replace(
                type=tokenize.STRING, string=text[start_col : token.end[1]], start=(1, start_col)
            )
        leaf = Leaf(token.string, text[end_col : token.start[1]], token.type)
        end_col = token.end[1]
        if leaf.text in OPENING:
            leaf.atom = not leaves or not (
                leaves[-1].text in CLOSING
                or leaves[-1].kind == tokenize.STRING
                or (leaves[-1].kind == tokenize.NAME and not keyword.iskeyword(leaves[-1].text))
            )
            stack.append(leaf)
        elif leaf.text in CLOSING:
            if not stack:
                return None
            leaf.partner = stack.pop()
            leaf.partner.partner = leaf
        leaves.append(leaf)
    return leaves if leaves and not stack else None


def magic_comma(leaves: Sequence[Leaf]) -> bool:
    """Whether a bracket pair within ``leaves`` ends its contents with a comma black keeps one
    item a line for (a "magic trailing comma"): any but a 1-tuple's or a one-item subscript's."""
    return any(_trailing_comma(leaves, n, subscripts=False) for n in range(1, len(leaves)))


def _trailing_comma(leaves: Sequence[Leaf], n: int, subscripts: bool) -> bool:
    """Whether the closing bracket ``leaves[n]`` follows a comma that is not a 1-tuple's (nor,
    unless ``subscripts``, a one-item subscript's)."""
    closing, opening = leaves[n], leaves[n].partner
    if not (closing.text in CLOSING and leaves[n - 1].text == "," and opening in leaves):
        return False
    start = leaves.index(opening)  # type: ignore[arg-type]
    single = sum(1 for _ in _outer_commas(leaves[start + 1 : n])) == 1
    atom = opening.atom  # type: ignore[union-attr]
    if closing.text == ")":
        return not (single and atom)
    return closing.text == "}" or not single or atom or subscripts


def never_omitted(leaves: Sequence[Leaf], n: int) -> bool:
    """Whether black's right split never passes over the bracket pair closed at ``leaves[n]``:
    one with a trailing comma, but for a 1-tuple (``generate_trailers_to_omit``)."""
    return n > 0 and _trailing_comma(leaves, n, subscripts=True)


def _outer_leaves(leaves: Sequence[Leaf]) -> Iterator[int]:
    """The indices of the leaves outside brackets (a bracket pair's closing one included)."""
    depth = 0
    for n, leaf in enumerate(leaves):
        depth += leaf.text in OPENING
        depth -= leaf.text in CLOSING
        if depth == 0:
            yield n


def _outer(leaves: Sequence[Leaf], text: str) -> Optional[int]:
    """The index of the first ``text`` outside brackets in ``leaves``, or None."""
    return next((n for n in _outer_leaves(leaves) if leaves[n].text == text), None)


def annotation_parens(leaves: List[Leaf]) -> None:
    """Make redundant parentheses around a ``def``'s parameter and return annotations
    invisible, as black does (they are optional parentheses there)."""
    opening = next((leaf for leaf in leaves if leaf.text == "("), None)
    if opening is None or opening.partner not in leaves:
        return
    start, end = leaves.index(opening), leaves.index(opening.partner)  # type: ignore[arg-type]
    lambdas = 0
    for inside in _outer_leaves(leaves[start + 1 : end]):
        n = start + 1 + inside
        text = leaves[n].text
        if text == "lambda":
            lambdas += 1
        elif text == ":" and lambdas:
            lambdas -= 1  # a lambda's own colon
        elif text == ":":
            _invisible_if_redundant(leaves, n + 1, (",", "=", ")"))
    arrow = next((n for n in range(end, len(leaves)) if leaves[n].text == "->"), None)
    if arrow is not None:
        _invisible_if_redundant(leaves, arrow + 1, (":",))


def _invisible_if_redundant(leaves: List[Leaf], n: int, followers: Tuple[str, ...]) -> None:
    opening = leaves[n] if n < len(leaves) else None
    if opening is None or opening.text != "(" or opening.partner not in leaves:
        return
    end = leaves.index(opening.partner)  # type: ignore[arg-type]
    followed = end + 1 < len(leaves) and leaves[end + 1].text in followers
    if followed and _redundant(leaves[n + 1 : end], False):
        opening.invisible = leaves[end].invisible = True


def _outer_commas(leaves: Sequence[Leaf]) -> Iterator[int]:
    return (n for n in _outer_leaves(leaves) if leaves[n].text == ",")


def _redundant(content: Sequence[Leaf], value: bool) -> bool:
    """Whether parentheses around ``content`` (a value, target or condition; ``value``: an
    assignment's value) are redundant, as black's ``normalize_invisible_parens`` judges: not
    around nothing, a tuple, a generator, a starred item, an assignment expression, or a yield
    but for an assignment's value."""
    if not content or content[0].text in ("*", "**") or (content[0].text == "yield" and not value):
        return False
    if {COMMA, PRIORITIES["for"]} & set(delimiters(content).values()):
        return False
    return _outer(content, ":=") is None


def _assigns(leaf: Leaf) -> bool:
    """Whether ``leaf`` is an assignment operator (``=``, ``+=``, ..., ``:=``), no comparison."""
    return (
        leaf.kind == tokenize.OP
        and leaf.text.endswith("=")
        and leaf.text not in ("==", "!=", "<=", ">=")
    )


def with_optional_parens(leaves: List[Leaf]) -> List[Leaf]:
    """``leaves`` with invisible parentheses around a return value, an assignment's target and
    value, and the condition of an if (black's optional parentheses); redundant parentheses the
    source has there become such parentheses."""
    first = leaves[0].text
    spans = []
    value = -1  # where an assignment's value starts
    if first == "assert":  # the condition and the message, each on its own (black)
        comma = next(_outer_commas(leaves), len(leaves))
        spans.extend([(1, comma), (comma + 1, len(leaves))])
    elif first in WRAPPED_AFTER:
        end = len(leaves) - (leaves[-1].text == ":" and first != "return")
        spans.append((1, end))
    else:
        equals = [n for n in _outer_leaves(leaves) if _assigns(leaves[n])]
        if len(equals) == 1:
            spans.append((equals[0] + 1, len(leaves)))
            value = equals[0] + 1 if leaves[equals[0]].text == "=" else -1
            target = leaves[: equals[0]]
            colon = _outer(target, ":")
            if colon is not None:  # an annotation: black's optional parentheses too
                spans.append((colon + 1, equals[0]))
            elif leaves[equals[0]].text == "=" and _outer(target, ",") is not None:
                spans.append((0, equals[0]))  # a tuple target
    for start, end in sorted(spans, reverse=True):
        inner = leaves[start:end]
        if not inner:
            continue
        if inner[0].text == "(" and inner[0].partner is inner[-1]:
            # black makes them optional parentheses (and those inside them, where redundant)
            while len(inner) > 2 and inner[0].partner is inner[-1] and inner[0].text == "(":
                if not _redundant(inner[1:-1], start == value):
                    break
                inner[0].invisible = inner[-1].invisible = True
                inner = inner[1:-1]
            continue
        opening = Leaf("(", inner[0].prefix, invisible=True, atom=True)
        closing = Leaf(")", invisible=True, partner=opening)
        opening.partner = closing
        inner[0].prefix = ""
        comment = inner[-1].comment
        if end == len(leaves) and (len(inner) > 1 or TYPE_COMMENT.match(comment)):
            # black: a comment after the optional parentheses of a value of several leaves (or a
            # type comment) goes with them; of one leaf, with the leaf
            closing.comment, inner[-1].comment = comment, ""
        leaves[start:end] = [opening, *inner, closing]
    return leaves
