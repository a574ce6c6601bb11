"""Prompt prefix reuse: a finished sequence keeps its KV cache, and the next request admitted
to it decodes only the prompt tokens after the prefix the two share (a chat's earlier turns,
a work-order template's instructions: often most of the prompt).

Lossless: the CPU build computes a token's KV the same whatever batch it was decoded in
(the invariance tests check outputs with and without reuse). A drafter that follows the
target's KV (DFlash: its own KV of injected features) keeps the same prefix through its
`keep_prefix(seq_id, n) -> bool`; a request that drafts with one that holds nothing for
the prefix decodes its prompt from the start, so the drafter sees every row. Stateless
drafters (prompt lookup) read the token history and need nothing.

A recurrent memory drops a tail only inside its last decode (`Context.forget` says False
otherwise). Such a sequence keeps a copy of its recurrent state at the end of each prompt
(`checkpoint`, host memory): a later prompt that shares that prompt but not all of what the
request left (a chat's next turn, whose rendering of the answer differs from the tokens
generated) restores it and decodes from there. Anything shorter is decoded whole, so reuse
never builds on stale state.

Not admission policy beyond "the free slot sharing the longest prefix"; no cross-sequence
copies (llama_memory_seq_cp) yet.
"""

from __future__ import annotations

from .llama.context import Context


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def best_slot(free: list, prompt: list[int]):
    """The free slot whose kept prefix is longest for `prompt` (ties: the lowest sequence id)."""
    return max(free, key=lambda s: (common_prefix(s.cached, prompt), -s.seq_id))


def holder(drafter):
    """Whose state a kept prefix is: the drafter's own, or the one a combined drafter drafts with
    (grammar+lookup+dflash keeps the DFlash drafter's KV, which a plain dflash request may reuse)."""
    return drafter.holder if drafter is not None else None


def costs_reuse(slot, prompt: list[int], drafter, least: int = 64) -> bool:
    """Would drafting with `drafter` give up a kept prefix of at least `least` tokens (it is a
    drafter that follows the KV but holds nothing for it)? Auto mode then prompt-looks-up."""
    return (drafter is not None and drafter.follows_kv and slot.cached_drafter is not holder(drafter)
            and common_prefix(slot.cached, prompt) >= least)


def checkpoint(slot, ctx: Context) -> None:
    """The slot's prompt is decoded: on recurrent memory, copy the state it leaves."""
    if ctx.rollback is not None:
        slot.checkpoint = (slot.n_past, ctx.state_of(slot.seq_id))


def keep(slot, ctx: Context, ok: bool) -> None:
    """At the end of a request: keep its committed KV for the next one (not after an error)."""
    n = slot.n_past if ok else 0
    slot.cached, slot.cached_drafter = slot.history()[:n], None
    if not n:
        slot.checkpoint = None
    spec = slot.spec
    if spec is not None:
        if n and not spec.retired and spec.drafter.keep_prefix(slot.seq_id, n):
            slot.cached_drafter = holder(spec.drafter)
        else:
            spec.drafter.forget(slot.seq_id)
    if not ctx.forget(slot.seq_id, n):  # positions n.. (all of them when n = 0)
        drop(slot, ctx)  # the tail stays in this memory: keep nothing rather than a wrong prefix


def drop(slot, ctx: Context) -> None:
    """Forget what the slot kept (the sequence is about to be used for something else)."""
    if slot.cached_drafter is not None:
        slot.cached_drafter.forget(slot.seq_id)
    ctx.forget(slot.seq_id)
    slot.cached, slot.cached_drafter, slot.checkpoint = [], None, None


def reuse(slot, ctx: Context, prompt: list[int], drafter) -> int:
    """Trim the slot's kept KV to what `prompt` shares with it; returns the positions reused.
    At least the last prompt token is always decoded again (its logits start the answer)."""
    n = min(common_prefix(slot.cached, prompt), len(prompt) - 1)
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
