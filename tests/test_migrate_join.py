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

#: Statements black keeps as they are.
KEPT = [
    # a magic trailing comma
    (["        y = f(", "            a,", "            b,", "        )"], 60),
    (["        x = f(", "            a,", "        )"], 60),
    (["        x = f(  # why", "            a", "        )"], 60),  # a comment inside
    (["        x = f(", "            a  # why", "        )"], 60),
]


@pytest.mark.parametrize("lines, limit, expected", BLACK)
def test_a_changed_statement_is_laid_out_as_black_lays_it_out(
    lines: List[str], limit: int, expected: List[str]
):
    assert relayout(lines, limit) == expected


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
