"""Call memory-efficient-attention-pytorch's untested autograd Functions, forward and backward.

A test command for ``compatfn migrate memory_efficient_attention_pytorch --verify``: the
library's own tests (``tests/test.py``) call only ``flash_attention.FlashAttentionFunction``, so
this script calls the other two through the library's modules, seeded, in float64, and takes
gradients of each result: the cosine-sim ``FlashAttentionFunction`` through
``cosine_sim_flash_attention.FlashAttention`` (with and without a mask, causal or not, a longer
context), and ``_ReversibleFunction`` through ``transformer.Transformer`` (with the flash
attention in float32: that one cannot run in float64, see ``transformer`` below; with the
memory-efficient attention in float64) and through ``reversible.ReversibleSequence`` with a
routed mask (the cosine-sim attention as its ``f``).
Run it from an unpacked memory-efficient-attention-pytorch 0.1.6 (the package importable from
the current folder)::

    python -m compatfn migrate memory_efficient_attention_pytorch --verify \
        python PATH/probe_memory_efficient_attention.py

It imports nothing from this repository and is not part of compatfn's tests.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Optional, Tuple

import torch

DTYPE = torch.float64
DIM = 16
SEQ = 12


def _tokens(batch: int = 2, seq: int = SEQ) -> torch.Tensor:
    return torch.randn(batch, seq, DIM, dtype=DTYPE, requires_grad=True)


def _probes() -> List[Tuple[str, Callable[[], Any]]]:  # Any: the library has no types
    from memory_efficient_attention_pytorch.cosine_sim_flash_attention import FlashAttention
    from memory_efficient_attention_pytorch.reversible import ReversibleSequence
    from memory_efficient_attention_pytorch.transformer import FeedForward, PreNorm, Transformer

    def cosine_attention(causal: bool, buckets: Tuple[int, int]) -> Any:
        q_bucket, k_bucket = buckets
        module = FlashAttention(
            dim=DIM,
            heads=2,
            dim_head=4,
            causal=causal,
            q_bucket_size=q_bucket,
            k_bucket_size=k_bucket,
        )
        return module.to(DTYPE)

    def cosine_sim(
        causal: bool, buckets: Tuple[int, int], masked: bool = False, context_len: int = 0
    ) -> Callable[[], Any]:
        def call() -> Any:
            module = cosine_attention(causal, buckets)
            x = _tokens()
            context: Optional[torch.Tensor] = _tokens(seq=context_len) if context_len else None
            mask: Optional[torch.Tensor] = None
            if masked:  # the forward pairs key-mask chunks with query buckets: one bucket of each
                mask = torch.ones(2, SEQ, dtype=torch.bool)
                mask[0, -3:] = False
            out = module(x, context=context, mask=mask)
            return (out * torch.randn_like(out)).sum()

        return call

    def transformer(causal: bool, flash: bool) -> Callable[[], Any]:
        # the (not cosine-sim) flash attention fills a float32 tensor with float64's lowest value:
        # float32 there, as the library's tests run it
        dtype = torch.float32 if flash else DTYPE

        def call() -> Any:
            model = Transformer(
                num_tokens=20,
                max_seq_len=SEQ,
                dim=DIM,
                depth=2,
                causal=causal,
                dim_head=4,
                heads=2,
                q_bucket_size=4,
                k_bucket_size=6,
                use_flash_attn=flash,
            ).to(dtype)
            tokens = torch.randint(0, 20, (2, SEQ))
            labels = torch.randint(0, 20, (2, SEQ))
            return model(tokens, labels=labels)

        return call

    def reversible_with_mask() -> Any:
        depth = 2
        blocks = [
            (
                PreNorm(DIM, cosine_attention(causal=False, buckets=(SEQ, SEQ))),
                PreNorm(DIM, FeedForward(dim=DIM, mult=2)),
            )
            for _ in range(depth)
        ]
        sequence = ReversibleSequence(blocks, args_route={"mask": [(True, False)] * depth})
        sequence = sequence.to(DTYPE)
        mask = torch.ones(2, SEQ, dtype=torch.bool)
        mask[1, -4:] = False
        out = sequence(_tokens(), mask=mask)  # each block's f and g see one copy of x
        return (out * torch.randn_like(out)).sum()

    return [
        ("cosine-sim FlashAttention", cosine_sim(causal=False, buckets=(4, 6))),
        ("cosine-sim FlashAttention causal", cosine_sim(causal=True, buckets=(4, 6))),
        (
            "cosine-sim FlashAttention masked",
            cosine_sim(causal=False, buckets=(SEQ, SEQ), masked=True),
        ),
        ("cosine-sim FlashAttention longer context", cosine_sim(True, (4, 5), context_len=SEQ + 4)),
        ("Transformer (_ReversibleFunction)", transformer(causal=False, flash=True)),
        ("Transformer causal (_ReversibleFunction)", transformer(causal=True, flash=True)),
        ("Transformer causal, float64", transformer(causal=True, flash=False)),
        ("ReversibleSequence with a routed mask", reversible_with_mask),
    ]


def main() -> int:
    failed = 0
    torch.manual_seed(0)
    for name, probe in _probes():
        try:
            value = probe()
            value.backward()
            print(f"{name}: {value.item():.6g}")
        except Exception as error:  # reported; the others still run
            failed += 1
            print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
