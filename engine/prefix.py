"""Prompt prefix reuse: a finished sequence keeps its KV cache, and the next request admitted
to it decodes only the prompt tokens after the prefix the two share (a chat's earlier turns,
a work-order template's instructions: often most of the prompt).

Lossless: a prompt's rows are computed the same whatever was kept (engine/chunks.py): where
they depend on the decode they are in, prompts are cut at fixed positions and only whole
chunks of an earlier prompt are reused (`Chunks.kept`, `Chunks.reusable`); elsewhere any
prefix is (the invariance tests check outputs with and without reuse). A drafter that follows the
target's KV (DFlash: its own KV of injected features) keeps the same prefix through its
`keep_prefix(seq_id, n) -> bool`; a request that drafts with one that holds nothing for
the prefix decodes its prompt from the start, so the drafter sees every row. Stateless
drafters (prompt lookup) read the token history and need nothing.

A recurrent memory drops a tail only inside its last decode (`Context.forget` says False
otherwise). Such a sequence keeps a copy of its recurrent state at the end of each prompt
(`checkpoint`, host memory): a later prompt that shares that prompt but not all of what the
request left (a chat's next turn, whose rendering of the answer differs from the tokens
generated) restores it and decodes from there; with aligned chunks, the copy is of the state at
the last whole chunk. Anything shorter is decoded whole, so reuse
never builds on stale state.

Not admission policy beyond "the free slot sharing the longest prefix, unless it splits the
busy sequences' steps"; no cross-sequence copies (llama_memory_seq_cp) yet.
"""

from __future__ import annotations

from typing import Sequence

from .chunks import Chunks
from .llama.context import Context


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def runs(seq_ids) -> int:
    """How many runs of consecutive ids `seq_ids` make."""
    ids = sorted(set(seq_ids))
    return sum(1 for i, s in enumerate(ids) if i == 0 or s != ids[i - 1] + 1)


def best_slot(free: list, prompt: list[int], chunks: Chunks, busy: Sequence[int] = (), gap_tokens: float | None = None):
    """The free slot for `prompt`: the longest reusable kept prefix, less `gap_tokens` for each
    run of busy sequence ids it adds. Over this KV cache llama.cpp computes a decode in ubatches of
    consecutive ids (speculative/costs.py: ubatches), so a gap among the busy ones splits each of
    their steps; `gap_tokens` is what that costs over an answer, in prompt tokens decoded (None:
    not known yet, the longest prefix wins). Ties: the lowest sequence id."""
    def score(slot):
        reused = chunks.reusable(min(common_prefix(slot.cached, prompt), len(prompt) - 1))
        gaps = runs(list(busy) + [slot.seq_id]) - 1 if gap_tokens is not None else 0
        return reused - gaps * (gap_tokens or 0), -slot.seq_id
    return max(free, key=score)


def holder(drafter):
    """Whose state a kept prefix is: the drafter's own, or the one a combined drafter drafts with
    (grammar+lookup+dflash keeps the DFlash drafter's KV, which a plain dflash request may reuse)."""
    return drafter.holder if drafter is not None else None


def costs_reuse(slot, prompt: list[int], drafter, least: int = 64) -> bool:
    """Would drafting with `drafter` give up a kept prefix of at least `least` tokens (it is a
    drafter that follows the KV but holds nothing for it)? Auto mode then prompt-looks-up."""
    return (drafter is not None and drafter.follows_kv and slot.cached_drafter is not holder(drafter)
            and common_prefix(slot.cached, prompt) >= least)


def checkpoint(slot, ctx: Context, chunks: Chunks) -> None:
    """A prompt chunk is decoded: on recurrent memory, copy the state a later prompt may start
    from (the whole prompt's; with aligned chunks, a whole chunk's)."""
    if ctx.rollback is None:
        return
    if (slot.n_past % chunks.size == 0) if chunks.aligned else not slot.prefilling:
        slot.checkpoint = (slot.n_past, ctx.state_of(slot.seq_id))


def keep(slot, ctx: Context, ok: bool, chunks: Chunks) -> None:
    """At the end of a request: keep its committed KV for the next one (not after an error)."""
    n = chunks.kept(slot.n_past, len(slot.req.prompt_tokens)) if ok else 0
    slot.cached, slot.cached_drafter = slot.history()[:n], None
    if not n:
        slot.checkpoint = None
    spec = slot.spec
    if spec is not None:
        if n and not spec.retired and spec.drafter.keep_prefix(slot.seq_id, n):
            slot.cached_drafter = holder(spec.drafter)
        else:
            spec.drafter.forget(slot.seq_id)
    if not ctx.forget(slot.seq_id, n) and not (n and slot.checkpoint is not None and slot.checkpoint[0] == n):
        drop(slot, ctx)  # the tail stays in this memory, no copy of n's state: keep nothing rather than a wrong prefix


def drop(slot, ctx: Context) -> None:
    """Forget what the slot kept (the sequence is about to be used for something else)."""
    if slot.cached_drafter is not None:
        slot.cached_drafter.forget(slot.seq_id)
    ctx.forget(slot.seq_id)
    slot.cached, slot.cached_drafter, slot.checkpoint = [], None, None


def reuse(slot, ctx: Context, prompt: list[int], drafter, chunks: Chunks) -> int:
    """Trim the slot's kept KV to what `prompt` shares with it; returns the positions reused.
    At least the last prompt token is always decoded again (its logits start the answer)."""
    n = chunks.reusable(min(common_prefix(slot.cached, prompt), len(prompt) - 1))
    kept, mine = slot.cached_drafter, holder(drafter)
    if kept is not None and kept is not mine:
        kept.forget(slot.seq_id)  # the new request does not draft with it
    if drafter is not None and drafter.follows_kv:
        if kept is not mine or not n or not drafter.keep_prefix(slot.seq_id, n):
            if kept is mine:
                drafter.forget(slot.seq_id)
            n = 0
    n = max(n, 0)
    if slot.checkpoint is not None and slot.checkpoint[0] > n:
        slot.checkpoint = None  # of tokens this prompt does not share
    if not ctx.forget(slot.seq_id, n):  # this memory cannot drop that tail: back to the checkpoint, or nothing
        cp = slot.checkpoint
        n = cp[0] if cp is not None and cp[0] > 0 and ctx.restore(slot.seq_id, cp[1], cp[0]) else 0
        if drafter is not None and drafter.follows_kv and not (n and drafter.keep_prefix(slot.seq_id, n)):
            drafter.forget(slot.seq_id)
            n = 0
        if not n:
            ctx.forget(slot.seq_id)
    slot.cached, slot.cached_drafter = [], None
    return n
