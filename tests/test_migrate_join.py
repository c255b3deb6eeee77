"""compatfn.migrate._join: a statement of several lines the codemod changed is laid out again as
black 26.10.1 lays it out (each expected layout below is black's, ``black -t py38 -l LIMIT``), and
left as it is where black keeps its lines."""

from __future__ import annotations

from typing import List

import pytest

from compatfn.migrate._join import join, relayout
from compatfn.migrate._layout import wrap_new_lines

#: (the statement's lines, the limit, black's layout of them)
BLACK = [
    # ctx removed from a def black had split: the rest fits on one line
    (["    def forward(", "        x, w", "    ):"], 88, ["    def forward(x, w):"]),
    (
        ["    def forward(scores, target, margin=0.5, shift=0.0", "    ):"],
        60,
        ["    def forward(scores, target, margin=0.5, shift=0.0):"],
    ),
    (
        [
            "    def forward(",
            "        representation_tree,",
            "        rhs,",
            "        *matrix_args",
            "    ):",
        ],
        50,
        ["    def forward(", "        representation_tree, rhs, *matrix_args", "    ):"],
    ),
    # a magic trailing comma: one parameter a line, the first one too
    (
        [
            "    def forward(scores,",
            "        target,",
            "        margin=0.5,",
            "        shift=0.0,",
            "    ):",
        ],
        50,
        [
            "    def forward(",
            "        scores,",
            "        target,",
            "        margin=0.5,",
            "        shift=0.0,",
            "    ):",
        ],
    ),
    # black's own optional parentheses, no longer needed
    (
        ["        cuda_devices, cuda_states = (", "            get_device_states(x)", "        )"],
        60,
        ["        cuda_devices, cuda_states = get_device_states(x)"],
    ),
    (["        return (", "            x", "        )"], 60, ["        return x"]),
    (
        ["        if (", "            a", "            and b", "        ):"],
        60,
        ["        if a and b:"],
    ),
    # a value appended to a return the author had split
    (
        [
            "        return torch.nn.functional.softplus(",
            "            shifted, beta=beta",
            "        ), slope",
        ],
        60,
        [
            "        return (",
            "            torch.nn.functional.softplus(",
            "                shifted, beta=beta",
            "            ),",
            "            slope,",
            "        )",
        ],
    ),
    # a statement moved to where it fits, its comment last
    (
        ["        ctx.save_for_backward(", "            x, y", "        )  # note"],
        60,
        ["        ctx.save_for_backward(x, y)  # note"],
    ),
    (
        ["        x = (", "            foo.bar()", "            .baz()", "        )  # note"],
        60,
        ["        x = foo.bar().baz()  # note"],
    ),
    (["        x = (", "            a,", "        )"], 60, ["        x = (a,)"]),  # a 1-tuple
    (["        y = f(a,", "              b)"], 60, ["        y = f(a, b)"]),
    (
        [
            "        (",
            "            ctx.fwd_gpu_devices,",
            "            ctx.fwd_gpu_states,",
            "        ) = fwd_gpu_devices, fwd_gpu_states",
        ],
        50,
        [
            "        (",
            "            ctx.fwd_gpu_devices,",
            "            ctx.fwd_gpu_states,",
            "        ) = (",
            "            fwd_gpu_devices,",
            "            fwd_gpu_states,",
            "        )",
        ],
    ),
    # a target with a magic trailing comma: black passes over the trailers first
    (
        [
            "        (",
            "            start,",
            "            stop,",
            "            step,",
            "        ) = idx.indices(",
            "            size[i]",
            "        )",
        ],
        61,
        [
            "        (",
            "            start,",
            "            stop,",
            "            step,",
            "        ) = idx.indices(size[i])",
        ],
    ),
    # black's right split: the last pair holds too little, so the pair before it is split
    (
        [
            "        out = compute(first_argument, second_argument) + compute(",
            "            third",
            "        )",
        ],
        60,
        [
            "        out = compute(",
            "            first_argument, second_argument",
            "        ) + compute(third)",
        ],
    ),
]

#: Comments inside a statement that fits on one line go to its end, in their order.
COMMENTS = [
    (["        x = f(  # why", "            a", "        )"], ["        x = f(a)  # why"]),
    (["        x = f(a,  # c1", "              b)"], ["        x = f(a, b)  # c1"]),
    (
        ["        x = (", "            1  # one", "        )  # two"],
        ["        x = 1  # one  # two"],
    ),
    (
        ["        abstol: float = (", "            1.0e-8  # Absolute", "        )"],
        ["        abstol: float = 1.0e-8  # Absolute"],
    ),
]

#: (a value in parentheses over three lines, black's one line of it): black drops redundant
#: parentheses and keeps the others
PARENTHESES = [
    ("x = (yield a)", "x = yield a"),
    ("return (yield a)", "return (yield a)"),
    ("x = (lambda a, b: a)", "x = lambda a, b: a"),
    ("return (lambda a, b: a)", "return lambda a, b: a"),
    ("x = (await a)", "x = await a"),
    ("x = (a := 1)", "x = (a := 1)"),
    ("x = (not a)", "x = not a"),
    ('x = ("a" "b")', 'x = "a" "b"'),
    ("x = ((a))", "x = a"),
    ("x = (a for a in b)", "x = (a for a in b)"),
    ("x = (*a,)", "x = (*a,)"),
    ("x = (a if b else c)", "x = a if b else c"),
    ("return (a.b)", "return a.b"),
]

#: Statements black keeps as they are.
KEPT = [
    # a magic trailing comma
    (["        y = f(", "            a,", "            b,", "        )"], 60),
    (["        x = f(", "            a,", "        )"], 60),
    # a comment on a line of its own
    (["        x = f(", "            # why", "            a", "        )"], 60),
]


@pytest.mark.parametrize("lines, limit, expected", BLACK)
def test_a_changed_statement_is_laid_out_as_black_lays_it_out(
    lines: List[str], limit: int, expected: List[str]
):
    assert relayout(lines, limit) == expected


@pytest.mark.parametrize("lines, expected", COMMENTS)
def test_comments_inside_go_to_the_end_of_the_joined_line(lines: List[str], expected: List[str]):
    assert relayout(lines, 60) == expected
    assert relayout(lines, 20) is None  # split again, black puts each by its own leaf: left


@pytest.mark.parametrize("one_line, expected", PARENTHESES)
def test_redundant_parentheses_are_dropped_as_black_drops_them(one_line: str, expected: str):
    head, value = one_line.split(" ", 1) if one_line.startswith("return") else one_line.split(" = ")
    joint = " " if one_line.startswith("return") else " = "
    lines = [f"    {head}{joint}(", f"        {value[1:-1]}", "    )"]
    assert (relayout(lines, 40) or lines) == [f"    {expected}"]


@pytest.mark.parametrize("lines, limit", KEPT)
def test_a_statement_black_keeps_is_kept(lines: List[str], limit: int):
    assert relayout(lines, limit) is None


@pytest.mark.parametrize(
    "lines",
    [
        ["    x = f(a, \\", "          b)"],  # a backslash
        ['    x = f("""a', '    b""")'],  # a string over several lines
        ["    x = f(a,", "    # a comment line", "          b)"],
    ],
)
def test_lines_black_would_not_join_are_not_joined(lines: List[str]):
    assert join(lines) is None


def test_join_puts_black_spacing_at_the_joints_and_keeps_the_rest():
    lines = [
        "    return (",
        "        first(a, b)",
        "        .second()",
        "        + third[",
        "            0",
        "        ]",
        "    )  # c",
    ]
    assert join(lines) == "    return (first(a, b).second() + third[0])  # c"


EDITED_OLD = """\
class F(Function):
    @staticmethod
    def forward(
        ctx, scores, target_tensor
    ):
        ctx.save_for_backward(
            scores, target_tensor
        )
        kept = some_function(scores,
                             target_tensor)
        return kept
"""
EDITED_NEW = """\
class F(Function):
    @staticmethod
    def forward(
        scores, target_tensor
    ):
        kept = some_function(scores,
                             target_tensor)
        return kept
"""


def test_only_statements_migrate_changed_are_laid_out_again():
    got = wrap_new_lines(EDITED_OLD, EDITED_NEW, 40)
    # the def (black's layout) lost ctx and fits; the author's own statement stays as it is
    joined = EDITED_NEW.replace(
        "(\n        scores, target_tensor\n    ):", "(scores, target_tensor):"
    )
    assert got == joined != EDITED_NEW


def test_an_unchanged_statement_moved_keeps_the_authors_layout_and_blacks_follows_black():
    old = "if x:\n    y = f(a,\n          b)\n    z = g(\n        a, b\n    )\n"
    new = "y = f(a,\n          b)\nz = g(\n    a, b\n)\n"
    # y's layout was the author's (black joins it): kept; z's was black's at 14 columns: joined
    assert wrap_new_lines(old, new, 14) == "y = f(a,\n          b)\nz = g(a, b)\n"


def test_a_changed_statement_in_the_authors_own_style_keeps_it():
    old = "class F:\n    def forward(ctx, first, second,\n                third):\n        pass\n"
    new = "class F:\n    def forward(first, second,\n                third):\n        pass\n"
    assert (
        wrap_new_lines(old, new, 40) == new
    )  # black would write `def forward(first, second, third):`
