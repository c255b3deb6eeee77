import torch

from compatfn.testing import check_function
from softclip import SoftClip, soft_clip


def test_soft_clip_is_a_correct_function():
    x = torch.randn(16, dtype=torch.double, requires_grad=True)
    report = check_function(SoftClip, x, kwargs={"limit": 2.0})
    assert "gradcheck" in report.ran


def test_soft_clip_stays_within_the_limit():
    y = soft_clip(torch.tensor([-100.0, 0.0, 100.0]), limit=2.0)
    assert y.tolist() == [-2.0, 0.0, 2.0]
