"""Losses whose backward needs a value only forward computes.

Models the patterns of Liger-Kernel's src/liger_kernel/ops/cross_entropy.py
(LigerCrossEntropyFunction: the gradient is computed in forward, kept on ctx and only scaled in
backward) and of PyTorch's multi-margin style losses (a mask of active margins kept for
backward, the reduction kept as a ctx attribute). Written for compatfn's tests.
"""

import compatfn
import torch
import torch.autograd


@compatfn.function(intermediates=1)
class CrossEntropyGradInForward(torch.autograd.Function):
    @staticmethod
    def forward(logits, target, label_smoothing=0.0):
        log_probs = torch.log_softmax(logits, dim=-1)
        n_classes = logits.shape[-1]
        smooth = torch.full_like(log_probs, label_smoothing / n_classes)
        smooth.scatter_add_(
            -1, target.unsqueeze(-1), torch.full_like(log_probs[..., :1], 1 - label_smoothing)
        )
        loss = -(smooth * log_probs).sum(-1).mean()
        grad_logits = (log_probs.exp() - smooth) / logits.shape[0]
        return loss, grad_logits

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, grad_logits = output
        ctx.save_for_backward(grad_logits)

    @staticmethod
    def backward(ctx, grad):
        (grad_logits,) = ctx.saved_tensors
        return grad * grad_logits, None, None


@compatfn.function(intermediates=1)
class HingeLoss(torch.autograd.Function):
    @staticmethod
    def forward(scores, labels, margin=1.0, reduction="mean"):
        slack = margin - labels * scores
        active = slack > 0
        losses = slack.clamp(min=0)
        return losses.mean() if reduction == "mean" else losses.sum(), active

    @staticmethod
    def setup_context(ctx, inputs, output):
        scores, labels, _, reduction = inputs
        _, active = output
        ctx.reduction = reduction
        ctx.count = scores.numel()
        ctx.save_for_backward(labels, active)

    @staticmethod
    def backward(ctx, grad):
        labels, active = ctx.saved_tensors
        scale = grad / ctx.count if ctx.reduction == "mean" else grad
        return -labels * active * scale, None, None, None


CASES = {
    "CrossEntropyGradInForward": lambda: (
        (torch.randn(4, 6, dtype=torch.float64, requires_grad=True),),
        (torch.tensor([0, 5, 2, 3]), 0.1),
    ),
    "HingeLoss": lambda: (
        (torch.randn(8, dtype=torch.float64, requires_grad=True),),
        (torch.tensor([1.0, -1, 1, 1, -1, -1, 1, -1], dtype=torch.float64), 0.8, "sum"),
    ),
}
REFUSED = {}
