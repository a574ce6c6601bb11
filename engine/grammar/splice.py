"""Rules of ours in the converter's grammar: a placeholder const per node, replaced afterwards.

What it is: llama-cpp-python's converter takes no raw GBNF and has no rule for a bounded integer
or number, nor for the string languages we build, so schema.py gives each such node the
const `placeholder(i)`; once the converter has written the grammar, `splice` replaces the literal
it wrote for that const with our expression and appends our rules, named with a prefix no rule of
the converter's starts with. `integer_rule`, `number` and `string` are the writers.
What it is not: what the rules say (rules.integer_gbnf, number.py,
string.py, automaton.to_gbnf) or the walk that decides where they go.
"""

from __future__ import annotations

import json

from . import automaton
from . import rules

SENTINEL = "\x01flashdesk-rule-{}"  # schema._literal_ok keeps \x01 out of users' consts


def placeholder(i: int) -> str:
    return SENTINEL.format(i)


def splice(text: str, writers: list) -> str:
    """Each placeholder's literal -> its writer's expression, the writer's rules appended. A writer
    takes a free rule name and returns (the expression, the rules it needs). ValueError when a
    placeholder is left (a bug)."""
    taken = {line.split(" ::= ")[0] for line in text.split("\n") if " ::= " in line}
    prefix = "own"
    while any(name.startswith(prefix) for name in taken):
        prefix += "x"
    extra = []
    for i, writer in enumerate(writers):  # written as it writes a const: '"' json.dumps '"', '"' escaped
        literal = '"' + json.dumps(placeholder(i)).replace('"', '\\"') + '"'
        expr, lines = writer(prefix + "".join("abcdefghij"[int(d)] for d in str(i)))  # letters: no clash
        text = text.replace(literal, expr)
        extra += lines
    if json.dumps(SENTINEL.format(""))[1:-1] in text:
        raise ValueError("a rule of ours was left out of the grammar")
    return "\n".join([text.rstrip("\n"), *extra]) + "\n"


def integer_rule(lo: int, hi: int):
    return lambda name: (f"({rules.integer_gbnf(lo, hi)}) space", [])  # space: as the converter's integer


def number(dfa: automaton.DFA):
    return lambda name: (f"{name} space", automaton.to_gbnf(dfa, name, json_string=False))


def string(dfa: automaton.DFA):
    return lambda name: (f'"\\"" {name} "\\"" space', automaton.to_gbnf(dfa, name))
