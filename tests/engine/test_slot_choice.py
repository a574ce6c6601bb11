"""Which free slot a request takes (prefix.best_slot) and how prompts are cut (engine/chunks.py):
pure logic, no model. The measurements behind both are in test_cpu_batch_invariant.py (a K-quant
model whose prompt rows depend on their decode) and bench/anchor.py (what a split step costs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import prefix
from engine.chunks import Chunks

ANY = Chunks(False, "rows measured the same in any decode")
ALIGNED = Chunks(True, "rows depend on their decode", size=64)


@dataclass
class Kept:
    seq_id: int
    cached: list[int] = field(default_factory=list)


def test_runs_counts_consecutive_ids():
    assert prefix.runs([]) == 0
    assert prefix.runs([3]) == 1
    assert prefix.runs([0, 1, 2]) == 1
    assert prefix.runs([2, 0, 1, 5]) == 2
    assert prefix.runs([0, 2, 4]) == 3


def test_aligned_chunks_cut_at_fixed_positions_and_reuse_whole_ones():
    assert ALIGNED.cut(n_past=0, pending=300, room=512) == 64
    assert ALIGNED.cut(n_past=64, pending=10, room=512) == 10  # the prompt's last, partial chunk
    assert ALIGNED.cut(n_past=64, pending=300, room=20) == 20  # never more than the batch holds
    assert [ALIGNED.reusable(n) for n in (0, 63, 64, 125, 128)] == [0, 0, 64, 64, 128]
    # a finished sequence keeps its prompt's whole chunks, never its answer's rows
    assert ALIGNED.kept(n_past=200, n_prompt=150) == 128
    assert ANY.cut(n_past=61, pending=300, room=200) == 200 and ANY.reusable(61) == 61
    assert ANY.kept(n_past=200, n_prompt=150) == 200


def test_without_prices_the_longest_prefix_wins():
    prompt = list(range(100))
    free = [Kept(1, prompt[:10]), Kept(3, prompt[:50]), Kept(5)]
    assert prefix.best_slot(free, prompt, ANY, busy=[0, 2]).seq_id == 3
    assert prefix.best_slot([Kept(4), Kept(2)], prompt, ANY).seq_id == 2  # ties: the lowest id


def test_a_slot_that_keeps_the_busy_ids_in_one_run_wins_unless_its_rival_saves_more():
    prompt = list(range(400))
    free = [Kept(2, prompt[:40]), Kept(6, prompt[:100])]  # busy 0, 1: slot 2 keeps one run, 6 splits
    assert prefix.best_slot(free, prompt, ANY, busy=[0, 1], gap_tokens=200).seq_id == 2
    assert prefix.best_slot(free, prompt, ANY, busy=[0, 1], gap_tokens=50).seq_id == 6
    free[1].cached = prompt[:300]  # 260 tokens more of the prompt are worth one gap of 200
    assert prefix.best_slot(free, prompt, ANY, busy=[0, 1], gap_tokens=200).seq_id == 6


def test_aligned_chunks_count_only_the_reusable_prefix():
    prompt = list(range(400))
    free = [Kept(2, prompt[:64]), Kept(6, prompt[:127])]  # 127 shared tokens reuse one chunk, as 64 do
    assert prefix.best_slot(free, prompt, ALIGNED, busy=[0, 1], gap_tokens=1).seq_id == 2
    assert prefix.best_slot(free, prompt, ALIGNED).seq_id == 2
