"""Structured output: an OpenAI `response_format` compiled to the GBNF grammar llama.cpp enforces.

The wing's rooms, from the entry down:
- schema.py: `compile_response_format()`, the fail-closed walk over a JSON Schema;
- rules.py: rewrites and exact rules the walk uses (types split per keyword, integer ranges);
- number.py and string.py: a number's or a string's language when its keywords go past the
  converter's (bounds with multipleOf; pattern, format and lengths together);
- regex.py: a Python regex as an automaton (the language of a "pattern");
- automaton.py: automata algebra (intersect, contains, minimal), and an automaton as GBNF;
- splice.py: our rules written into the converter's grammar;
- gbnf.py: a GBNF recognizer in Python, which text a grammar forces next (the grammar drafter's).

Pure compilation: no model, no store, no HTTP. The grammar sampler that enforces the result is
engine/llama/grammar.py; the drafter that proposes what it forces is engine/speculative/drafters/.
"""
