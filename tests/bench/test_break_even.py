"""bench/break_even.py without a model: the acceptance carried from block 16 to a smaller block,
and the table's break-even and predicted speed-up, worked by hand."""

from __future__ import annotations

import pytest

from bench.break_even import PUBLISHED_TAU, rate_for, table, tau_at


def test_the_block_16_tau_is_carried_to_other_blocks_with_one_rate_per_position():
    a = rate_for(3.43)
    assert sum(a ** i for i in range(16)) == pytest.approx(3.43, abs=1e-6)
    assert tau_at(3.43, 16) == pytest.approx(3.43, abs=1e-6)
    assert tau_at(3.43, 1) == 1.0  # no drafted token: the target's own
    assert tau_at(3.43, 2) == pytest.approx(1 + a)
    taus = [tau_at(3.43, b) for b in range(1, 17)]
    assert taus == sorted(taus) and taus[-1] - taus[-2] < taus[1] - taus[0]  # each slot adds less
    assert rate_for(16.0) == pytest.approx(1.0, abs=1e-6) and rate_for(1.0) == pytest.approx(0.0, abs=1e-6)


def test_the_table_prices_a_step_against_plain_decoding():
    """c(1) 100 ms; at B = 3 a verify costs 150 ms and a draft call 50 ms: a step must commit 2 tokens
    to match plain decoding, and commits tau_pub(3) on average."""
    row = {"dtype": "bf16", "block": 3, "c_ms": 150.0, "d_ms": 50.0, "c_ratio": 1.5, "break_even_tau": 2.0,
           "predicted": {k: round(tau_at(t, 3) / 2.0, 2) for k, t in PUBLISHED_TAU.items()}}
    entry = {"entry": "qwen3-8b", "c1_ms": 100.0, "plain_tok_s": 10.0, "rows": [row],
             "draft_bytes": {"bf16": 2 << 30}}
    text = table({"entries": [entry]})
    assert "**qwen3-8b**: plain 10.0 tokens/s (c(1) = 100.0 ms); draft files bf16 2.00 GiB" in text
    chat = tau_at(PUBLISHED_TAU["chat"], 3)
    assert f"| bf16 | 3 | 1.5 | 50.0 | 2.0 | {chat:.2f} | {chat / 2:.2f}x |" in text
