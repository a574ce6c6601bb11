"""Temperature > 0: speculative sampling draws from the same distribution as plain sampling.

On the real model with top_k = 3 (a small vocabulary per position), the first two
generated tokens are drawn many times with fixed seeds, plainly and speculatively
(a deterministic drafter that proposes a fixed path, so both acceptance and the
residual draw after a rejection are exercised); a two-sample chi-square test over
the joint (token 1, token 2) outcomes must not tell them apart. Deterministic: the
same seeds give the same draws on every run.
"""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import TEST_CTX
from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.drafters.base import Proposal
from engine.speculative.params import SpecParams
from engine.speculative.drafters.base import Drafter

PROMPT = "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
N = 400
MAX_TOKENS = 3  # token 0 comes from the prompt's logits; tokens 1 and 2 from one verify of 2 drafted


def critical(dof: int, z: float = 3.09) -> float:
    """Chi-square critical value at p = 0.001 (Wilson-Hilferty; within 2% of the tables for dof >= 1)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * a ** 0.5) ** 3


class FixedPathDrafter(Drafter):
    """Proposes the same tokens every step (a point-mass proposal)."""

    name = "fixed"

    def __init__(self, path):
        self.path = path

    def propose(self, seqs, n_draft, unary=False):
        return [Proposal(self.path[:n_draft]) for _ in seqs]


def draws(engine, spec: SpecParams, seed0: int) -> list[list[int]]:
    out, verifies = [], 0
    for i in range(N):
        c = engine.complete(PROMPT, max_tokens=MAX_TOKENS, speculative=spec,
                            sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed0 + i))
        out.append(c.tokens)
        verifies += c.usage.speculation.verifies if c.usage.speculation else 0
    if spec.mode != "off":  # every draw past the first token must have gone through acceptance
        assert verifies >= N * 0.9, f"only {verifies} verifies in {N} speculative draws"
    return out


def chi_square(a: Counter, b: Counter, min_expected: float = 5.0) -> tuple[float, int]:
    """Two-sample chi-square; categories expected below `min_expected` are pooled."""
    na, nb = sum(a.values()), sum(b.values())
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    cells, pool = [], [0, 0]
    for k in keys:
        if (a[k] + b[k]) * min(na, nb) / (na + nb) < min_expected:
            pool[0] += a[k]
            pool[1] += b[k]
        else:
            cells.append((a[k], b[k]))
    if sum(pool):
        cells.append(tuple(pool))
    stat = 0.0
    for x, y in cells:
        ex, ey = (x + y) * na / (na + nb), (x + y) * nb / (na + nb)
        stat += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    return stat, len(cells) - 1


@pytest.fixture(scope="module")
def plain(engine):
    return draws(engine, SpecParams(mode="off"), 0)


def test_speculative_sampling_matches_plain_sampling(engine, plain, model_path):
    greedy = engine.complete(PROMPT, max_tokens=MAX_TOKENS, sampling=SamplingParams(temperature=0)).tokens
    # the likeliest path: accepted often, not always (a drafter joins an engine before it starts)
    fixed = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2),
                        drafters=(FixedPathDrafter(greedy[1:]),))
    try:
        spec = draws(fixed, SpecParams(mode="fixed", block=3), 100_000)
    finally:
        fixed.close()
    for pos in (1, 2):  # the positions that went through acceptance
        a = Counter(t[pos] for t in plain if len(t) > pos)
        b = Counter(t[pos] for t in spec if len(t) > pos)
        assert len(a) >= 2, "the target must spread its choices for this test to mean anything"
        stat, dof = chi_square(a, b)
        print(f"position {pos}: chi2 {stat:.1f} with {dof} dof (critical {critical(dof):.1f})")
        assert stat < critical(dof), f"position {pos}: chi2 {stat:.1f} ({dof} dof); plain {a}, spec {b}"


def test_the_chi_square_test_can_see_a_biased_sampler(plain):
    """Guard against a test that cannot fail: a sampler that always keeps the drafted token."""
    a = Counter(t[1] for t in plain if len(t) > 1)
    top = max(a, key=a.get)
    biased = Counter({top: sum(a.values())})
    stat, dof = chi_square(a, biased)
    assert stat > critical(max(dof, 1))
