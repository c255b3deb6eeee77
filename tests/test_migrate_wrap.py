"""compatfn.migrate._wrap: a long line the codemod writes is wrapped exactly as black 26 wraps it
(each expected layout below is black's output for that line and line length)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from compatfn.migrate._wrap import StarCommas, wrap

BLACK = [
    (
        "    @mylibrary_with_a_long_name._autograd_compat.function(intermediates=2)",
        60,
        """
        @mylibrary_with_a_long_name._autograd_compat.function(
            intermediates=2
        )
        """,
    ),
    (  # the target fits on the first line: the value goes in parentheses
        "        alpha, beta, gamma, delta, epsilon, zeta, eta, theta, iota, kappa = inputs",
        79,
        """
            alpha, beta, gamma, delta, epsilon, zeta, eta, theta, iota, kappa = (
                inputs
            )
        """,
    ),
    (  # it does not: the target is exploded, the subscript stays whole
        "        alpha, beta, gamma, delta, epsilon, zeta, eta, theta, iota, kappa, lam = "
        "inputs[:11]",
        79,
        """
            (
                alpha,
                beta,
                gamma,
                delta,
                epsilon,
                zeta,
                eta,
                theta,
                iota,
                kappa,
                lam,
            ) = inputs[:11]
        """,
    ),
    (
        "        alpha_value, beta_value, gamma_value, delta_value, epsilon_value, zeta_value, "
        "eta_value, theta = output",
        100,
        """
            (
                alpha_value,
                beta_value,
                gamma_value,
                delta_value,
                epsilon_value,
                zeta_value,
                eta_value,
                theta,
            ) = output
        """,
    ),
    (  # a returned tuple is exploded, one item a line, with a trailing comma
        "        return torch.nn.functional.dropout(x * 2, p), fwd_cpu_state, cuda_initialized, "
        "fwd_gpu_devices",
        100,
        """
            return (
                torch.nn.functional.dropout(x * 2, p),
                fwd_cpu_state,
                cuda_initialized,
                fwd_gpu_devices,
            )
        """,
    ),
    (
        "        return (ys, *extra_solver_state), forward_rng_state, cuda_devices, cuda_states",
        79,
        """
            return (
                (ys, *extra_solver_state),
                forward_rng_state,
                cuda_devices,
                cuda_states,
            )
        """,
    ),
    (  # parameters that do not fit on one line: one a line, with a trailing comma
        "    def forward(input_tensor, weight_tensor, bias_tensor, stride, padding, dilation, "
        "groups):",
        79,
        """
        def forward(
            input_tensor,
            weight_tensor,
            bias_tensor,
            stride,
            padding,
            dilation,
            groups,
        ):
        """,
    ),
    (  # ... and on one line where they fit
        "    def _forward_impl(cls, input_tensor, weight_tensor, bias_tensor, stride, padding):",
        79,
        """
        def _forward_impl(
            cls, input_tensor, weight_tensor, bias_tensor, stride, padding
        ):
        """,
    ),
    (  # a call's arguments that fit on one line stay on one line
        "        return VeryLongFunctionClassName._forward_impl(input_tensor, weight_tensor, bias, "
        "stride)",
        79,
        """
            return VeryLongFunctionClassName._forward_impl(
                input_tensor, weight_tensor, bias, stride
            )
        """,
    ),
    (  # an f-string is never split inside
        '        message = f"{alpha_value} and {beta_value} and {gamma_value} and {delta_value}" '
        "+ suffix_value",
        79,
        """
            message = (
                f"{alpha_value} and {beta_value} and {gamma_value} and {delta_value}"
                + suffix_value
            )
        """,
    ),
    (
        "        ctx.fwd_gpu_devices, ctx.fwd_gpu_states = fwd_gpu_devices_for_this_call, "
        "fwd_gpu_states",
        79,
        """
            ctx.fwd_gpu_devices, ctx.fwd_gpu_states = (
                fwd_gpu_devices_for_this_call,
                fwd_gpu_states,
            )
        """,
    ),
    (
        "        if ctx.needs_input_grad[0] and very_long_condition_name is not None and other:",
        60,
        """
            if (
                ctx.needs_input_grad[0]
                and very_long_condition_name is not None
                and other
            ):
        """,
    ),
    (  # a comprehension splits before `for` and `if`, never at its `in`
        "                    ctx.save_for_backward(*[t for t in very_long_intermediate_name if t "
        "is not None], b)",
        60,
        """
                        ctx.save_for_backward(
                            *[
                                t
                                for t in very_long_intermediate_name
                                if t is not None
                            ],
                            b
                        )
        """,
    ),
]


#: A trailing comment stays at the end of the last line, and counts in the line's length (black
#: 26.10.1's output for each, a comment on the optional parentheses or the closing bracket).
COMMENTED = [
    (
        "        y = f(a, b)  # a comment at the end of the call, counted in its length........",
        60,
        """
        y = f(
            a, b
        )  # a comment at the end of the call, counted in its length........
        """,
    ),
    (
        "        return grad_output * scale, steps  # the solver's steps, for the caller",
        60,
        """
        return (
            grad_output * scale,
            steps,
        )  # the solver's steps, for the caller
        """,
    ),
    (
        "        result = some_module.compute(input_tensor, weight_tensor)  # noqa: E501",
        60,
        """
        result = some_module.compute(
            input_tensor, weight_tensor
        )  # noqa: E501
        """,
    ),
    (  # no trailer is omitted past a comment: the subscript is split
        "        alpha, beta, gamma, delta, epsilon, zeta = inputs[:6]  # unpacked",
        60,
        """
        alpha, beta, gamma, delta, epsilon, zeta = inputs[
            :6
        ]  # unpacked
        """,
    ),
    (
        "    def forward(input_tensor, weight_tensor, bias_tensor=None):  # pragma: no cover",
        60,
        """
        def forward(
            input_tensor, weight_tensor, bias_tensor=None
        ):  # pragma: no cover
        """,
    ),
    (  # a type comment stays on the optional parentheses even around one leaf
        "        x = inputs[0]  # type: (int) -> int",
        30,
        """
        x = inputs[
            0
        ]  # type: (int) -> int
        """,
    ),
    (  # 33 characters, 41 columns: black counts a wide character as two
        "x = compute(aaa, bbb)  # 计算投影计算投影",
        40,
        """
        x = compute(
            aaa, bbb
        )  # 计算投影计算投影
        """,
    ),
    (
        "        output = torch.nn.functional.linear(x, w).clamp(min=0)  # c",
        60,
        """
        output = torch.nn.functional.linear(x, w).clamp(
            min=0
        )  # c
        """,
    ),
]


#: An empty pair at the end (``.t()``) is passed over for the pair before it, as black does.
TRAILERS = [
    (
        "        alpha_nz = alpha.repeat(nz, 1).t()",
        32,
        """
        alpha_nz = alpha.repeat(
            nz, 1
        ).t()
        """,
    ),
    (
        "        covar_mat = unitless_sq_dist_.div_(-2.0).exp_()",
        30,
        """
        covar_mat = unitless_sq_dist_.div_(
            -2.0
        ).exp_()
        """,
    ),
    (
        "        return grad_output.mul(scale_factor).contiguous(), None",
        40,
        """
        return (
            grad_output.mul(
                scale_factor
            ).contiguous(),
            None,
        )
        """,
    ),
]


#: A def whose head alone is longer than the limit (this once raised ValueError).
LONG_HEAD = [
    (
        "    def test_posterior_latent_gp_and_likelihood_with_optimization_cuda(self, a, b):",
        40,
        """
        def test_posterior_latent_gp_and_likelihood_with_optimization_cuda(
            self, a, b
        ):
        """,
    ),
]


#: Splits that once changed the code (an assert of a tuple, a tuple holding the lambda, a loop over
#: a 1-tuple): black's layout for each (26.10.1), the same statement.
SAME_CODE = [
    (
        '        assert x.shape == y.shape, "shapes differ between the two arguments"',
        40,
        """
        assert (
            x.shape == y.shape
        ), "shapes differ between the two arguments"
        """,
    ),
    (  # a lambda's parameters are no delimiters
        "        lambda_value = lambda first, second: first + second",
        40,
        """
        lambda_value = (
            lambda first, second: first
            + second
        )
        """,
    ),
    (  # nor are a comprehension's targets
        "        x = [first_function(a) for a, b in some_long_name_of_pairs]",
        40,
        """
        x = [
            first_function(a)
            for a, b in some_long_name_of_pairs
        ]
        """,
    ),
    (
        "        table = {key: value for key, value in zip(first_keys, second_values) if value}",
        60,
        """
        table = {
            key: value
            for key, value in zip(first_keys, second_values)
            if value
        }
        """,
    ),
]


def _layout(text: str) -> list:
    return textwrap.dedent(text).strip("\n").splitlines()


#: Shapes of real code where the wrapper and black differed (black 26.10.1's layouts): ``**`` is
#: a delimiter of its own priority, a magic trailing comma explodes its subscript, an annotated
#: assignment splits at its value, a subscripted target is no tuple, a conditional expression in
#: another's else branch is not split.
REAL = [
    (
        '        algo_col = "algo" if "algo" in df.columns else "algorithm"'
        ' if "algorithm" in df.columns else None',
        80,
        """
        algo_col = (
            "algo"
            if "algo" in df.columns
            else "algorithm" if "algorithm" in df.columns else None
        )
        """,
    ),
    (
        "            emp_spect = torch.abs(torch.fft.fft(train_y_np)) ** 2 / N",
        54,
        """
            emp_spect = (
                torch.abs(torch.fft.fft(train_y_np))
                ** 2
                / N
            )
        """,
    ),
    (
        "        lengthscale = torch.randn(*batch_size).view(*batch_size, 1, 1) ** 2",
        60,
        """
        lengthscale = (
            torch.randn(*batch_size).view(*batch_size, 1, 1)
            ** 2
        )
        """,
    ),
    (
        "        results: List[Tuple[Tensor, Tensor, Tensor,]] = []",
        45,
        """
        results: List[
            Tuple[
                Tensor,
                Tensor,
                Tensor,
            ]
        ] = []
        """,
    ),
    (
        "        self.max_plate_nesting: Optional[int] = max_plate_nesting_default",
        50,
        """
        self.max_plate_nesting: Optional[int] = (
            max_plate_nesting_default
        )
        """,
    ),
    (
        "        x[first_index, second_index] = compute(first_argument)",
        50,
        """
        x[first_index, second_index] = compute(
            first_argument
        )
        """,
    ),
]
WRAPPED = BLACK + COMMENTED + SAME_CODE + LONG_HEAD + TRAILERS + REAL


@pytest.mark.parametrize(
    "line, limit, expected", WRAPPED, ids=[f"{c[1]}-{c[0][:40]}" for c in WRAPPED]
)
def test_wraps_as_black_does(line, limit, expected):
    indent = len(line) - len(line.lstrip())
    got = wrap(line, limit)
    assert got is not None
    assert [part[indent:] for part in got] == _layout(expected)
    assert all(part.startswith(line[:indent]) for part in got)
    code = line.split("  #")[0]  # without its trailing comment
    header = code.rstrip().endswith(":") or code.lstrip().startswith("@")
    if not header:  # what it wrote is still the same statement
        assert ast.dump(ast.parse("\n".join(p[indent:] for p in got))) == ast.dump(
            ast.parse(line.strip())
        )


#: Calls and defs with ``*args``: black 26 puts a comma after it only where the file targets
#: Python 3.6+, in a call where it targets 3.5+ (``StarCommas``), but always after a ``def``'s
#: only parameter.
NONE, ALL = StarCommas(), StarCommas(calls=True, defs=True)
SAVE_STARRED = (
    "        ctx.save_for_backward(first_tensor_argument, second_tensor_argument, *rest_of_them)"
)
SAVE_STARRED_COMMA = """
ctx.save_for_backward(
    first_tensor_argument,
    second_tensor_argument,
    *rest_of_them,
)
"""
DEF_STARRED = (
    "    def forward(first_tensor_argument, second_tensor_argument, *rest_of_the_arguments_here):"
)
STARRED = [
    (
        SAVE_STARRED,
        60,
        NONE,
        """
        ctx.save_for_backward(
            first_tensor_argument,
            second_tensor_argument,
            *rest_of_them
        )
        """,
    ),
    (
        SAVE_STARRED,
        60,
        ALL,
        SAVE_STARRED_COMMA,
    ),
    (
        DEF_STARRED,
        79,
        ALL,
        """
        def forward(
            first_tensor_argument,
            second_tensor_argument,
            *rest_of_the_arguments_here,
        ):
        """,
    ),
    (
        "        return helper_function_with_long_name("
        "x, **keyword_arguments_for_the_helper_fn_xx)",
        79,
        ALL,
        """
        return helper_function_with_long_name(
            x, **keyword_arguments_for_the_helper_fn_xx
        )
        """,
    ),
    (
        "    def forward("
        "*rest_of_the_arguments_here_too_long_for_one_line_of_eighty_eight_chars_xx):",
        88,
        NONE,
        """
        def forward(
            *rest_of_the_arguments_here_too_long_for_one_line_of_eighty_eight_chars_xx,
        ):
        """,
    ),
]


#: A file black takes to target Python 3.5 (``target-version = ["py35"]``, or a comma already after
#: ``*args`` in a call): a comma after ``*args`` in a call, none in a ``def`` (black 26.10).
PYTHON_3_5 = [
    (
        SAVE_STARRED,
        60,
        StarCommas(calls=True),
        SAVE_STARRED_COMMA,
    ),
    (
        DEF_STARRED,
        79,
        StarCommas(calls=True),
        """
        def forward(
            first_tensor_argument,
            second_tensor_argument,
            *rest_of_the_arguments_here
        ):
        """,
    ),
    (
        "    def forward(first_tensor_argument, second_tensor_argument=g(*defaults_of_x), *rest):",
        60,
        StarCommas(calls=True),
        """
        def forward(
            first_tensor_argument,
            second_tensor_argument=g(*defaults_of_x),
            *rest
        ):
        """,
    ),
    # the return annotation split too: its brackets hold no parameters
    (
        "    def forward(first_argument_is_long, second_argument_is_long, *rest) -> "
        "Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:",
        60,
        StarCommas(calls=True),
        """
        def forward(
            first_argument_is_long,
            second_argument_is_long,
            *rest
        ) -> Tuple[
            torch.Tensor,
            torch.Tensor,
            torch.Tensor,
            torch.Tensor,
            torch.Tensor,
        ]:
        """,
    ),
    (
        "    def forward(first_argument_is_long, second_argument_is_long, *rest) -> "
        "Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:",
        60,
        StarCommas(calls=True, defs=True),
        """
        def forward(
            first_argument_is_long,
            second_argument_is_long,
            *rest,
        ) -> Tuple[
            torch.Tensor,
            torch.Tensor,
            torch.Tensor,
            torch.Tensor,
            torch.Tensor,
        ]:
        """,
    ),
]


@pytest.mark.parametrize(
    "line, limit, star_commas, expected",
    STARRED + PYTHON_3_5,
    ids=[f"{c[1]}-{tuple(c[2])}-{c[0].strip()[:30]}" for c in STARRED + PYTHON_3_5],
)
def test_comma_after_star_as_black_puts_it(line, limit, star_commas, expected):
    indent = len(line) - len(line.lstrip())
    got = wrap(line, limit, star_commas)
    assert got is not None
    assert [part[indent:] for part in got] == _layout(expected)


@pytest.mark.parametrize(
    "line",
    [
        "        x = inputs",  # fits
        # a comment on one leaf in optional parentheses stays with it: nothing to split
        "        return out  # a comment making the line too long for its limit of sixty.......",
        "        y = f(a, b)  # type: ignore[call-arg] (black keeps this line whole).............",
        "        y = f(a, b)  #type:ignore (black reads it as '# type: ignore' and keeps it whole)",
        "        y = f(a, b)  # fmt: skip (black leaves this line alone, however long it is)......",
        # two statements: black would make two lines of them
        "        x = compute(first_argument); y = compute(second_argument_of_the_call)",
        "        # a comment line much longer than the limit of sixty characters is left as it is",
        "        def forward(alpha, beta, gamma, delta, epsilon): return alpha + beta + gamma",
        "        class VeryLongNameForAClassThatDoesNotFitOnTheLine(torch.autograd.Function):",
        # an unsplittable value: black leaves the line as it is
        "        return 'a string too long to fit on this line, which cannot be split at all.....'",
    ],
)
def test_leaves_alone_what_it_does_not_wrap(line):
    assert wrap(line, 60) is None


def test_a_split_that_would_change_the_code_is_never_written():
    from compatfn.migrate._wrap import same_statement

    line = "f = lambda a, b: a + b"
    assert same_statement(line, ["f = (", "    lambda a, b: a", "    + b", ")"])
    # the layout an earlier version wrote: a tuple holding the lambda
    assert not same_statement(line, ["f = (", "    lambda a,", "    b: a + b,", ")"])
    assert same_statement("del a, b", ["del (", "    a,", "    b,", ")"])
    header = "    def forward(x, y):  # c"
    assert same_statement(header, ["    def forward(", "        x, y", "    ):  # c"])
    assert not same_statement(header, ["    def forward(", "        x", "    ):  # c"])
