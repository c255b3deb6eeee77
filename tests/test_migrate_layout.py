"""compatfn.migrate._layout: the lines the codemod writes stay within the line length the
project sets (black, ruff, flake8), wrapped as black wraps them; the author's lines are kept."""

from __future__ import annotations

import pytest

from compatfn.migrate._layout import DEFAULT_LINE_LENGTH, line_length_for, wrap_new_lines


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("pyproject.toml", "[tool.black]\nline-length = 79\n", 79),
        ("pyproject.toml", '[tool.ruff]\ntarget-version = "py38"\nline-length = 100\n', 100),
        ("pyproject.toml", "[tool.black]\nline-length = 90\n[tool.ruff]\nline-length = 100\n", 90),
        ("pyproject.toml", "[tool.ruff.lint]\nline-length = 100\n", DEFAULT_LINE_LENGTH),
        ("pyproject.toml", "[project]\nname = 'x'\n", DEFAULT_LINE_LENGTH),
        ("ruff.toml", "line-length = 120  # wide\n", 120),
        ("setup.cfg", "[flake8]\nmax-line-length = 99\n", 99),
        ("tox.ini", "[flake8]\nmax-line-length = 110\n", 110),
        (".flake8", "[flake8]\nmax-line-length = 79\n", 79),
        ("setup.cfg", "[pycodestyle]\nmax-line-length = 95\n", 95),
        # a tool configured without a length: its default (flake8's 79 where memcnn's is)
        ("setup.cfg", "[flake8]\nexclude = docs\n", 79),
        ("tox.ini", "[pycodestyle]\nignore = E203\n", 79),
        ("pyproject.toml", "[tool.black]\ntarget-version = ['py38']\n", DEFAULT_LINE_LENGTH),
        ("pyproject.toml", "[tool.black]\n[tool.other]\n", DEFAULT_LINE_LENGTH),
    ],
)
def test_line_length_comes_from_the_project_configuration(tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    (tmp_path / "pkg").mkdir()
    assert line_length_for(tmp_path / "pkg" / "ops.py") == expected


def test_the_nearest_configuration_wins_and_the_repository_root_ends_the_search(tmp_path):
    (tmp_path / "setup.cfg").write_text("[flake8]\nmax-line-length = 120\n")
    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "pyproject.toml").write_text("[tool.black]\nline-length = 79\n")
    assert line_length_for(repo / "pkg" / "sub" / "ops.py") == 79
    assert line_length_for(repo / "ops.py") == 120  # found above: no repository root between
    (repo / ".git").mkdir()
    assert line_length_for(repo / "ops.py") == DEFAULT_LINE_LENGTH


@pytest.mark.parametrize("longest, expected", [(60, 79), (79, 79), (84, 84), (88, 88), (130, 88)])
def test_without_configuration_the_files_own_longest_line_is_the_length(
    tmp_path, longest, expected
):
    """No formatter or linter set: new lines stay within what the file already does, from
    flake8's 79 to black's 88 (a file of short lines stays flake8-clean)."""
    (tmp_path / ".git").mkdir()
    path = tmp_path / "ops.py"
    path.write_text("import torch\n" + "x = " + "1" * (longest - 4) + "\n")
    assert line_length_for(path) == expected


def test_only_the_lines_migrate_wrote_are_wrapped():
    old = "def f():\n    a_long_name_the_author_wrote, another_long_one = compute(first, second)\n"
    new = old + "    first_new_name, second_new_name, third_new_name = inputs_of_the_call\n"
    got = wrap_new_lines(old, new, 60)
    assert got.startswith(old)  # the author's long line is kept as it is
    assert got[len(old) :] == (
        "    first_new_name, second_new_name, third_new_name = (\n"
        "        inputs_of_the_call\n"
        "    )\n"
    )


def test_a_moved_line_as_long_as_the_authors_is_kept_and_line_endings_are_kept():
    old = "x = 1\r\nif x:\r\n    ctx.save_for_backward(first_tensor, second_tensor, third)\r\n"
    moved = "x = 1\r\nctx.save_for_backward(first_tensor, second_tensor, third)\r\n"
    assert wrap_new_lines(old, moved, 50) == moved  # over 50 in the author's file too
    new = "x = 1\r\nreturn first_tensor, second_tensor, third_tensor, fourth\r\n"
    assert wrap_new_lines(old, new, 50) == (
        "x = 1\r\nreturn (\r\n    first_tensor,\r\n    second_tensor,\r\n    third_tensor,\r\n"
        "    fourth,\r\n)\r\n"
    )


LEGACY = """\
import torch


class ScaleShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_tensor, weight_matrix, bias_vector, scale, offset, eps):
        normalized_input_tensor = input_tensor / (input_tensor.norm() + eps)
        ctx.save_for_backward(normalized_input_tensor, weight_matrix)
        ctx.extras = (bias_vector, scale, offset)
        out = normalized_input_tensor @ weight_matrix * scale
        return out + bias_vector + offset + normalized_input_tensor.mean(dim=0)

    @staticmethod
    def backward(ctx, grad):
        normalized, weight_matrix = ctx.saved_tensors  # the author's own long line, kept as it is
        grad_input = grad @ weight_matrix.t()
        return grad_input, normalized.t() @ grad, grad, None, None, None
"""
RETURN_WRAPPED = """\
        return (
            out + bias_vector + offset + normalized_input_tensor.mean(dim=0),
            normalized_input_tensor,
        )
"""


@pytest.mark.parametrize(
    "config, limit",
    [
        ("pyproject.toml:[tool.black]\nline-length = 79\n", 79),
        (".flake8:[flake8]\nmax-line-length = 100\n", 100),
        ("", DEFAULT_LINE_LENGTH),
    ],
)
def test_migrate_write_keeps_its_lines_within_the_projects_line_length(tmp_path, config, limit):
    pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")
    from compatfn.migrate import _command as command

    if config:
        name, text = config.split(":", 1)
        (tmp_path / name).write_text(text)
    (tmp_path / ".git").mkdir()  # the project's root: nothing above it is read
    path = tmp_path / "ops.py"
    path.write_text(LEGACY)
    assert command.run([path], mode="write") == 0
    new = path.read_text()
    old_lines = LEGACY.splitlines()
    written = [line for line in new.splitlines() if line not in old_lines]
    assert written and all(len(line) <= limit for line in written), written
    assert old_lines[-3] in new.splitlines()  # the author's line over the limit is kept
    assert RETURN_WRAPPED in new  # 104 characters on one line
    torch = pytest.importorskip("torch")
    results = []
    for source in (LEGACY, new):  # the wrapped class computes what the original did
        namespace: dict = {}
        exec(compile(source, str(path), "exec"), namespace)
        inputs = [torch.ones(3, 3, dtype=torch.float64, requires_grad=True) for _ in range(3)]
        out = namespace["ScaleShift"].apply(*inputs, 2.0, 0.5, 1e-6)
        out.sum().backward()
        results.append([out.detach(), *(t.grad for t in inputs)])
    assert all(torch.equal(a, b) for a, b in zip(*results))


COMMENTED = """\
import torch


class Project(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input_tensor, weight_matrix, eps):
        normalized = input_tensor / (input_tensor.norm() + eps)
        ctx.save_for_backward(normalized, weight_matrix)
        return normalized @ weight_matrix  # the projection

    @staticmethod
    def backward(ctx, grad):
        normalized, weight_matrix = ctx.saved_tensors
        return grad @ weight_matrix.t(), normalized.t() @ grad, None
"""


def test_a_written_line_with_a_trailing_comment_is_wrapped_with_the_comment_last(tmp_path):
    pytest.importorskip("libcst", reason="libcst is not installed: pip install 'compatfn[migrate]'")
    from compatfn.migrate import _command as command

    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 50\n")
    (tmp_path / ".git").mkdir()
    path = tmp_path / "ops.py"
    path.write_text(COMMENTED)
    assert command.run([path], mode="write") == 0
    # black 26.10.1 -l 50 writes the same lines for the one-line return
    assert (
        "        return (\n"
        "            normalized @ weight_matrix,\n"
        "            normalized,\n"
        "        )  # the projection\n"
    ) in path.read_text()
