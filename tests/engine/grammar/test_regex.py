"""engine/grammar/regex.py and automaton.py against Python's own re: for many patterns, every string
of a small alphabet up to a few characters (and random longer ones) is in the automaton exactly when
re.search finds a match, but for the one narrowing said in the module ($ before a final newline);
intersection and inclusion against the same brute force; refusals for what no such automaton follows."""

import itertools
import random
import re

import pytest

from engine.grammar import automaton, regex

ALPHABET = "ab c@.-0_\n٣É\""
PATTERNS = [
    "^[A-Z]{2}-[0-9]{4}$", "^(red|navy)( blue)?$", "ab", "^a", "b$", "^\\d{3}$", "^[^@ ]+@[^@ ]+\\.[a-z]{2,}$",
    "^(a|b)*c$", "x*", "^$", "a^b", "^(ab|a)(bc|c)?$", "\\d+(\\.\\d{1,2})?$", "^.{2,4}$", "[^a]", "^\\w+$",
    "^\\s*$", "^(?:a|b)+?$", "^a{2,}$", "^(a|)b$", "\\Aa\\Z", "^[\\w.-]+$", "[^\\W\\d]", "^a|b$|^c$", "(^a|b)c",
    "^\\S\\D\\W$", "é", "(?:^|-)0", "^[\\s\\S]$", "^a{0}b$", "^(a{1,2}){2}$", "^\"$", "^[-a]$",
]




def strings(rng: random.Random):
    for n in range(4):
        yield from map("".join, itertools.product(ALPHABET, repeat=n))
    for _ in range(2000):
        yield "".join(rng.choice(ALPHABET) for _ in range(rng.randint(4, 9)))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_automaton_is_re_search(pattern):
    dfa, rng = regex.search_dfa(pattern), random.Random(pattern)
    for s in strings(rng):
        found = re.search(pattern, s) is not None
        if dfa.matches(s) != found:
            # the narrowing: $ matches only at the very end, not before a final newline
            assert found and s.endswith("\n") and not re.search(pattern.replace("$", "\\Z"), s), (pattern, s)


@pytest.mark.parametrize("a, b", [("^[a-c]+$", "^[b-d]+$"), ("a", "b"), ("^\\d+$", "^[0-9]{2}$"),
                                  ("^.{1,3}$", "@"), ("^(ab)*$", "^a(ba)*b$")])
def test_intersection_and_inclusion(a, b):
    da, db = regex.search_dfa(a), regex.search_dfa(b)
    both = automaton.intersect(da, db)
    seen_a = seen_b = set()
    rng = random.Random(a + b)
    for s in strings(rng):
        in_a, in_b = da.matches(s), db.matches(s)
        assert both.matches(s) == (in_a and in_b), s
        if in_a:
            seen_a = seen_a | {s}
        if in_b:
            seen_b = seen_b | {s}
    # inclusion can only be refuted by a string; the automaton's answer must not contradict one
    assert not automaton.contains(db, da) or seen_a <= seen_b
    assert not automaton.contains(da, db) or seen_b <= seen_a


def test_inclusion_decided_on_languages():
    d = regex.search_dfa
    assert automaton.contains(d("^\\d{4}$"), d("^[0-9]{4}$"))  # \d is wider: every ASCII digit string is in
    assert not automaton.contains(d("^[0-9]{4}$"), d("^\\d{4}$"))  # ... but not the other way (Unicode digits)
    assert automaton.contains(d("-"), d("^[0-9]{4}-[0-9]{2}$"))
    assert automaton.contains(d("^(ab)*$"), d("^(abab)*$")) and not automaton.contains(d("^(abab)*$"), d("^(ab)*$"))
    assert automaton.is_empty(automaton.intersect(d("^a+$"), d("^b+$")))
    assert automaton.is_empty(d("a^b")) and not automaton.is_empty(d("^$"))


def test_lengths():
    for lo, hi in ((0, 0), (2, 5), (3, None)):
        dfa = automaton.length_dfa(lo, hi)
        for n in range(8):
            assert dfa.matches("é" * n) == (lo <= n and (hi is None or n <= hi))


def test_minimal_and_small():
    """Minimised: an alternation of equal branches is as small as one branch."""
    one, many = regex.search_dfa("^[0-9]{6}$"), regex.search_dfa("^([0-9]{6}|[0-4][0-9]{5}|[5-9][0-9]{5})$")
    assert one.size == many.size == 7


@pytest.mark.parametrize("pattern, fragment", [
    ("(a)\\1", "backreferences"), ("(?=a)", "lookaround"), ("\\bx", "\\b"), ("(?i)a", "flags"),
    ("a{3000}", "above 2000"), ("(?>a)", "atomic"), ("a++", "possessive"), ("(a)?(?(1)b|c)", "conditional"),
])
def test_refusals(pattern, fragment):
    with pytest.raises(regex.Unsupported, match=re.escape(fragment)):
        regex.search_dfa(pattern)


def test_too_complex_is_refused():
    with pytest.raises(automaton.TooComplex):
        regex.search_dfa("(a|b)*a(a|b){13}$")  # the minimal DFA has 2^14 states
