"""ctx under conditions on values forward computes, and ``ctx.needs_input_grad`` read in forward.

Models gpytorch/functions/rbf_covariance.py and matern_covariance.py (a guard on
``ctx.needs_input_grad``, then ``needs_grad = any(ctx.needs_input_grad)`` choosing what to compute
in if/elif branches and a save under ``if needs_grad:``), gpytorch/functions/_log_normal_cdf.py
(ctx attributes set under ``if mask.sum() > 0:`` next to masked in-place writes),
pytorch_wavelets/scatternet/lowlevel.py (saves in an ``if``/``else`` on ``x.requires_grad``
nested in a branch on an input flag, names deleted after the saves) and Functions that save
different tensors depending on the data, or only where a gradient is needed. Written for
compatfn's tests.
"""

import compatfn
import torch


def _sq_dist(a, b):
    return (a.unsqueeze(-2) - b.unsqueeze(-3)).pow(2).sum(-1)


@compatfn.function(intermediates=2)
class ScaledExpCovariance(torch.autograd.Function):
    @staticmethod
    def forward(x1, x2, lengthscale, dist_func):
        """A covariance matrix with a gradient for the lengthscale only."""
        needs_input_grad = tuple(
            isinstance(arg, torch.Tensor) and arg.requires_grad
            for arg in (x1, x2, lengthscale, dist_func)
        )
        if any(needs_input_grad[:2]):
            raise RuntimeError("ScaledExpCovariance cannot compute gradients for x1 and x2")
        needs_grad = any(needs_input_grad)
        dist = dist_func(x1.div(lengthscale), x2.div(lengthscale))
        dist_ = dist.clone() if needs_grad else dist
        covar = dist_.div_(-2.0).exp_()
        d_output = None
        if needs_grad:
            d_output = dist.mul_(covar).div_(lengthscale)
        return covar, needs_grad, d_output

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, needs_grad, d_output = output
        if needs_grad:
            ctx.save_for_backward(d_output)

    @staticmethod
    def backward(ctx, grad):
        (d_output,) = ctx.saved_tensors
        return None, None, (grad * d_output).sum().reshape(1), None


@compatfn.function(intermediates=2)
class BranchyCovariance(torch.autograd.Function):
    @staticmethod
    def forward(x1, x2, lengthscale, nu):
        needs_input_grad = tuple(
            isinstance(arg, torch.Tensor) and arg.requires_grad
            for arg in (x1, x2, lengthscale, nu)
        )
        if any(needs_input_grad[:2]):
            raise RuntimeError("BranchyCovariance cannot compute gradients for x1 and x2")
        needs_grad = any(needs_input_grad)
        dist = _sq_dist(x1.div(lengthscale), x2.div(lengthscale)).sqrt_()
        d_output = None
        if nu == 0.5:
            covar = dist.neg().exp()
            if needs_grad:
                d_output = dist.div(lengthscale).mul_(covar)
        elif nu == 1.5:
            linear = dist.clone().add_(1)
            exp_part = dist.neg().exp_()
            covar = linear.mul_(exp_part)
            if needs_grad:
                d_output = dist.pow(2).div_(lengthscale).mul_(exp_part)
        return covar, d_output, needs_grad

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, d_output, needs_grad = output
        if needs_grad:
            ctx.save_for_backward(d_output)

    @staticmethod
    def backward(ctx, grad):
        (d_output,) = ctx.saved_tensors
        return None, None, (grad * d_output).sum().reshape(1), None


@compatfn.function(intermediates=3)
class PiecewiseLogCdf(torch.autograd.Function):
    @staticmethod
    def forward(z):
        result = torch.zeros_like(z)
        is_small = z.lt(-1)
        is_ordinary = ~is_small
        branch_taken = False
        numerator = None
        denominator = None
        if is_small.sum() > 0:
            branch_taken = True
            small = z.masked_select(is_small)
            numerator = small.mul(-0.5).add(2.0)
            denominator = small.pow(2).add(1.0)
            result.masked_scatter_(is_small, torch.log(numerator / denominator))
        result.masked_scatter_(is_ordinary, z.masked_select(is_ordinary).mul(0.5))
        return result, numerator, denominator, branch_taken

    @staticmethod
    def setup_context(ctx, inputs, output):
        (z,) = inputs
        _, numerator, denominator, branch_taken = output
        if branch_taken:
            ctx.numerator = numerator
            ctx.denominator = denominator
        ctx.save_for_backward(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        is_small = z.lt(-1)
        out = torch.full_like(z, 0.5)
        if is_small.sum() > 0:
            small = z[is_small]
            d_num = -0.5 / ctx.numerator
            d_den = -2 * small / ctx.denominator
            out[is_small] = d_num + d_den
        return out * grad


@compatfn.function(intermediates=3)
class ColourScatter(torch.autograd.Function):
    @staticmethod
    def forward(x, bias, combine):
        reals, imags = x.cos(), x.sin()
        d_imag = None
        d_real = None
        z = None
        if combine:
            mag = torch.sqrt(reals**2 + imags**2 + bias**2).sum(0, keepdim=True)
            if x.requires_grad:
                d_real = reals / mag
                d_imag = imags / mag
            if x.requires_grad:
                pass
            else:
                z = x.new_zeros(1)
            del reals, imags
            out = mag - bias
        else:
            mag = torch.sqrt(reals**2 + imags**2 + bias**2)
            if x.requires_grad:
                d_real = reals / mag
                d_imag = imags / mag
            else:
                z = x.new_zeros(1)
            del reals, imags
            out = mag - bias
        return out, d_imag, d_real, z

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, _, combine = inputs
        _, d_imag, d_real, z = output
        ctx.combine = combine
        if combine:
            if x.requires_grad:
                ctx.save_for_backward(x, d_real, d_imag)
            else:
                ctx.save_for_backward(x, z, z)
        else:
            if x.requires_grad:
                ctx.save_for_backward(x, d_real, d_imag)
            else:
                ctx.save_for_backward(x, z, z)

    @staticmethod
    def backward(ctx, grad):
        x, d_real, d_imag = ctx.saved_tensors
        return grad * (d_real * -x.sin() + d_imag * x.cos()), None, None


@compatfn.function(intermediates=1)
class DataConditionalSave(torch.autograd.Function):
    @staticmethod
    def forward(x):
        y = x.exp()
        branch_taken = 0
        if y.sum() > 10:
            branch_taken = 1
        else:
            branch_taken = 2
        return y, branch_taken

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        y, branch_taken = output
        if branch_taken == 1:
            ctx.save_for_backward(y)
        elif branch_taken == 2:
            ctx.save_for_backward(x.exp())

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


@compatfn.function(intermediates=1)
class ElifOnData(torch.autograd.Function):
    @staticmethod
    def forward(x):
        total = x.sum()
        branch_taken = 0
        if total > 100:
            branch_taken = 1
            y = x * 2
        elif total > -100:
            y = x * 3
        else:
            branch_taken = 3
            y = x * 4
        return y, branch_taken

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _, branch_taken = output
        if branch_taken == 1:
            ctx.slope = 2.0
        elif branch_taken == 3:
            ctx.slope = 4.0
            ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * getattr(ctx, "slope", 3.0)


@compatfn.function
class ReadsNeedsInputGrad(torch.autograd.Function):
    @staticmethod
    def forward(x):
        needs_input_grad = tuple(
            isinstance(arg, torch.Tensor) and arg.requires_grad for arg in (x,)
        )
        scale = 2.0 if needs_input_grad[0] else 1.0
        return x * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2.0


@compatfn.function(intermediates=1)
class SavedWhereAssigned(torch.autograd.Function):
    @staticmethod
    def forward(x):
        y = None
        if x.requires_grad:
            y = x * 2
        return x * 3, y

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        _, y = output
        ctx.scale = 3
        if x.requires_grad:
            ctx.save_for_backward(y)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * 0 + grad * ctx.scale


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


_X1 = torch.randn(4, 3, dtype=torch.float64)
_X2 = torch.randn(5, 3, dtype=torch.float64)

CASES = {
    "ScaledExpCovariance": lambda: ((_f64(1).abs().add(0.5).detach().requires_grad_(),), (_sq_dist,)),
    "BranchyCovariance": lambda: ((_f64(1).abs().add(0.5).detach().requires_grad_(),), (1.5,)),
    "PiecewiseLogCdf": lambda: ((_f64(8).mul(2).detach().requires_grad_(),), ()),
    "ColourScatter": lambda: ((_f64(3, 4),), (0.1, True)),
    "DataConditionalSave": lambda: ((_f64(6),), ()),
    "ElifOnData": lambda: ((_f64(6),), ()),
    "ReadsNeedsInputGrad": lambda: ((_f64(3),), ()),
    "SavedWhereAssigned": lambda: ((_f64(3),), ()),
}
#: Functions whose first arguments are not differentiable (they come before the inputs).
LEADING = {"ScaledExpCovariance": (_X1, _X2), "BranchyCovariance": (_X1, _X2)}
#: The same Functions called otherwise: (arguments, whether to run under torch.no_grad()).
MORE_CALLS = {
    "ScaledExpCovariance": [((_X1, _X2, torch.ones(1, dtype=torch.float64), _sq_dist), False)],
    "BranchyCovariance": [
        ((_X1, _X2, torch.ones(1, dtype=torch.float64), 0.5), False),
        ((_X1, _X2, torch.ones(1, dtype=torch.float64, requires_grad=True), 0.5), True),
        ((_X1, _X2, torch.ones(1, dtype=torch.float64, requires_grad=True), 0.5), False),
    ],
    "PiecewiseLogCdf": [((torch.linspace(-3, 3, 7, dtype=torch.float64),), False)],
    "ColourScatter": [
        ((torch.randn(3, 4, dtype=torch.float64), 0.1, True), False),
        ((torch.randn(3, 4, dtype=torch.float64), 0.1, False), False),
        ((torch.randn(3, 4, dtype=torch.float64, requires_grad=True), 0.1, False), False),
    ],
    "DataConditionalSave": [((torch.full((6,), -1.0, dtype=torch.float64),), False)],
    "ElifOnData": [
        ((torch.full((6,), 30.0, dtype=torch.float64, requires_grad=True),), False),
        ((torch.full((6,), -30.0, dtype=torch.float64, requires_grad=True),), False),
    ],
    "ReadsNeedsInputGrad": [
        ((torch.ones(3, dtype=torch.float64),), False),
        ((torch.ones(3, dtype=torch.float64, requires_grad=True),), True),
    ],
    "SavedWhereAssigned": [((torch.ones(3, dtype=torch.float64),), False)],
}
REFUSED = {}
