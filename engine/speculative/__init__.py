"""The speculative step: a drafter proposes, the target verifies the block in one decode.

Words (docs/architecture.md):
  target      the model the user wants output from
  draft       the DFlash model (DFlash 2, or plain DFlash v1) or prompt lookup that proposes tokens
  anchor      the last committed token; slot 0 of the block
  block, B    anchor + B-1 slots drafted in one forward pass
  K           candidate token ids kept per block slot (16)
  lattice     per slot: K candidate ids + K x K transition scores (drafters.base.Lattice)
  path        the tokens the selector picks through the lattice (select.Path)
  verify      one target forward over [anchor] + path, logits at every row
  accepted    the longest prefix of the path the target agrees with
  bonus       the target's own token after the accepted prefix (always committed)
  tau         committed tokens per verify = accepted + 1
  rollback    removing rejected positions from the target's and the draft's KV cache

The step, one module per stage, joined by loop.py (Stepper.step):
  drafters/   draft: base.py (the protocol, Proposal, Lattice), dflash.py (DFlash 2 lattices
              and DFlash v1 paths through a llama.cpp draft context; dflash_fit.py checks a
              draft against the target),
              lookup.py (prompt lookup), grammar.py (the text a request's grammar forces,
              engine/grammar/gbnf.py), combined.py (that text, then prompt lookup after it; and both
              with the DFlash 2 lattice, merged in by span_lattice.py)
  select.py   select: the only code that turns a lattice into a path
  verify.py   verify: [anchor] + path as target batch rows, the target's choice at each
  accept.py   accept: greedy acceptance and rejection sampling (native/)
  constrain.py  the request's grammar at each verify row
  (commit)    the worker appends committed tokens (engine/worker.py `_commit`)
Around the step:
  setup.py    what an engine speculates with, built once: the drafters, the exactness verdict,
              the learned costs, the stepper (the worker asks it, never a drafter)
  exactness.py  the load-time judge: is speculation lossless on this build and device
  policy.py   at admission: whether a request speculates, with which drafter and block
  state.py    per request: block length per step, acceptance estimates (and DrafterRecord)
  costs.py    what a decode costs here, learned from every decode (rows and sequences
              against ms), and the idle fill-in for the rows traffic has not visited
  chooser.py  picks a path length, priced on the batch it joins
  params.py   the names and limits requests use: MODES, SELECTORS, MAX_BLOCK, SpecParams
"""
