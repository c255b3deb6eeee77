"""Patterns of real libraries that the codemod migrates.

Models linear_operator/functions/_matmul.py and _dsmm.py (forward(ctx, tree, rhs,
*matrix_args); ctx.representation_tree set from a parameter and called back in forward),
linear_operator/functions/_inv_quad.py and _solve.py (ctx.is_vector set to False, then to True
in an if that also reshapes the input; `if ctx.has_left:` reads in forward),
linear_operator/functions/_pivoted_cholesky.py (backward without @staticmethod),
pytorch_wavelets/dtcwt/transform_funcs.py (ctx.dims computed, then read back and its
parameters reassigned), pytorch_wavelets/scatternet/lowlevel.py (saves under
`if x.requires_grad:` next to the values computed for them, one branch per case) and
memory_efficient_attention_pytorch/flash_attention.py (@torch.no_grad() on forward). Written
for compatfn's tests.
"""

import compatfn
import torch
from torch.autograd import Function


def _scale_tree(scale):
    return lambda m: m * scale


@compatfn.function
class TreeMatmul(Function):
    @staticmethod
    def forward(representation_tree, rhs, *matrix_args):
        op = representation_tree(*matrix_args)
        return op @ rhs

    @staticmethod
    def setup_context(ctx, inputs, output):
        representation_tree, rhs = inputs[:2]
        matrix_args = inputs[2:]
        ctx.representation_tree = representation_tree
        ctx.save_for_backward(rhs, *matrix_args)

    @staticmethod
    def backward(ctx, grad):
        rhs, matrix = ctx.saved_tensors
        op = ctx.representation_tree(matrix)
        return None, op.transpose(-1, -2) @ grad, ctx.representation_tree(grad @ rhs.transpose(-1, -2))


@compatfn.function(intermediates=2)
class VectorSolve(Function):
    @staticmethod
    def forward(has_left, rhs, matrix):
        is_vector = False
        if rhs.dim() == 1:
            rhs = rhs.unsqueeze(-1)
            is_vector = True
        res = torch.linalg.solve(matrix, rhs)
        saved_1 = res
        if is_vector:
            res = res.squeeze(-1)
        if has_left:
            res = res * 1
        return res, saved_1, is_vector

    @staticmethod
    def setup_context(ctx, inputs, output):
        has_left, _, matrix = inputs
        _, saved_1, is_vector = output
        ctx.has_left = has_left
        ctx.save_for_backward(matrix, saved_1)
        ctx.is_vector = is_vector

    @staticmethod
    def backward(ctx, grad):
        matrix, res = ctx.saved_tensors
        if ctx.is_vector:
            grad = grad.unsqueeze(-1)
        rhs_grad = torch.linalg.solve(matrix.transpose(-1, -2), grad)
        matrix_grad = -rhs_grad @ res.transpose(-1, -2)
        if ctx.is_vector:
            rhs_grad = rhs_grad.squeeze(-1)
        return None, rhs_grad, matrix_grad


@compatfn.function
class PlainBackward(Function):
    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


def _dimensions(o_dim, ri_dim):
    return (o_dim, ri_dim, o_dim + 1)


@compatfn.function(intermediates=1)
class DimsReadBack(Function):
    @staticmethod
    def forward(x, o_dim, ri_dim):
        dims = _dimensions(o_dim, ri_dim)
        o_dim, ri_dim = dims[0], dims[1]
        return x.sum(o_dim) * (ri_dim + 1), dims

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _, _ = inputs
        _, dims = output
        ctx.dims = dims
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        o_dim, ri_dim, _ = ctx.dims
        return grad.unsqueeze(o_dim).expand_as(x) * (ri_dim + 1), None, None


@compatfn.function(intermediates=3)
class SmoothMagnitude(Function):
    @staticmethod
    def forward(x, y, b):
        r = torch.sqrt(x**2 + y**2 + b**2)
        dx = None
        dy = None
        z = None
        if x.requires_grad:
            dx = x / r
            dy = y / r
        else:
            z = x.new_zeros(1)
        r = r - b
        return r, dx, dy, z

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _, _ = inputs
        _, dx, dy, z = output
        if x.requires_grad:
            ctx.save_for_backward(dx, dy)
        else:
            ctx.save_for_backward(z, z)

    @staticmethod
    def backward(ctx, dr):
        drdx, drdy = ctx.saved_tensors
        return drdx * dr, drdy * dr, None


@compatfn.function
class NoGradForward(Function):
    @staticmethod
    @torch.no_grad()
    def forward(q, k):
        scores = q @ k.transpose(-1, -2)
        return scores

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k = inputs
        ctx.save_for_backward(q, k)

    @staticmethod
    def backward(ctx, grad):
        q, k = ctx.saved_tensors
        return grad @ k, grad.transpose(-1, -2) @ q


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


CASES = {
    "TreeMatmul": lambda: ((_f64(3, 2), _f64(3, 3)), ()),
    "VectorSolve": lambda: (
        (_f64(3), (torch.eye(3, dtype=torch.float64) * 3 + torch.rand(3, 3, dtype=torch.float64)).requires_grad_()),
        (),
    ),
    "PlainBackward": lambda: ((_f64(5),), ()),
    "DimsReadBack": lambda: ((_f64(2, 3),), (0, 1)),
    "SmoothMagnitude": lambda: ((_f64(4), _f64(4)), (0.5,)),
    "NoGradForward": lambda: ((_f64(3, 2), _f64(4, 2)), ()),
}
#: Functions whose first arguments are not tensors (they come after the tensors in CASES).
LEADING = {"TreeMatmul": (_scale_tree(2.0),), "VectorSolve": (True,)}
REFUSED = {}
