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

import torch
from torch.autograd import Function


def _scale_tree(scale):
    return lambda m: m * scale


class TreeMatmul(Function):
    @staticmethod
    def forward(ctx, representation_tree, rhs, *matrix_args):
        ctx.representation_tree = representation_tree
        op = ctx.representation_tree(*matrix_args)
        ctx.save_for_backward(rhs, *matrix_args)
        return op @ rhs

    @staticmethod
    def backward(ctx, grad):
        rhs, matrix = ctx.saved_tensors
        op = ctx.representation_tree(matrix)
        return None, op.transpose(-1, -2) @ grad, ctx.representation_tree(grad @ rhs.transpose(-1, -2))


class VectorSolve(Function):
    @staticmethod
    def forward(ctx, has_left, rhs, matrix):
        ctx.has_left = has_left
        ctx.is_vector = False
        if rhs.dim() == 1:
            rhs = rhs.unsqueeze(-1)
            ctx.is_vector = True
        res = torch.linalg.solve(matrix, rhs)
        ctx.save_for_backward(matrix, res)
        if ctx.is_vector:
            res = res.squeeze(-1)
        if ctx.has_left:
            res = res * 1
        return res

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


class PlainBackward(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


def _dimensions(o_dim, ri_dim):
    return (o_dim, ri_dim, o_dim + 1)


class DimsReadBack(Function):
    @staticmethod
    def forward(ctx, x, o_dim, ri_dim):
        ctx.dims = _dimensions(o_dim, ri_dim)
        o_dim, ri_dim = ctx.dims[0], ctx.dims[1]
        ctx.save_for_backward(x)
        return x.sum(o_dim) * (ri_dim + 1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        o_dim, ri_dim, _ = ctx.dims
        return grad.unsqueeze(o_dim).expand_as(x) * (ri_dim + 1), None, None


class SmoothMagnitude(Function):
    @staticmethod
    def forward(ctx, x, y, b):
        r = torch.sqrt(x**2 + y**2 + b**2)
        if x.requires_grad:
            dx = x / r
            dy = y / r
            ctx.save_for_backward(dx, dy)
        else:
            z = x.new_zeros(1)
            ctx.save_for_backward(z, z)
        r = r - b
        return r

    @staticmethod
    def backward(ctx, dr):
        drdx, drdy = ctx.saved_tensors
        return drdx * dr, drdy * dr, None


class NoGradForward(Function):
    @staticmethod
    @torch.no_grad()
    def forward(ctx, q, k):
        scores = q @ k.transpose(-1, -2)
        ctx.save_for_backward(q, k)
        return scores

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
