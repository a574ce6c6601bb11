"""The schema corpus (tests/data/schemas: Pydantic v2 models, OpenAI strict schemas, business
schemas as shops' software writes them): each schema is enforced exactly or refused with a 400
naming the keyword, as its file says. Enforced: its valid examples pass llama.cpp's sampler and
its invalid ones do not, and random texts walked through the grammar all validate against the
schema (jsonschema, formats checked) -- the grammar never writes what the schema refuses.
bench/schema_corpus.py reports the share."""

import json
import random

import jsonschema
import pytest
from jsonschema import validators

from conftest import EVAL_DATA
from engine.errors import InvalidRequest
from engine.grammar.schema import compile_response_format
from grammar_vocab import accepts, js, walk

CORPUS = sorted((EVAL_DATA / "schemas").glob("*.json"))
WALKS = 6


def load(path):
    return json.loads(path.read_text("utf-8"))


def validator(schema):
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_the_corpus_is_large_and_mixed():
    entries = [load(p) for p in CORPUS]
    assert len(entries) >= 40
    kinds = [e["source"].split(":")[0] for e in entries]
    assert kinds.count("Pydantic v2") >= 8 and kinds.count("OpenAI strict") >= 8
    assert len([k for k in kinds if k not in ("Pydantic v2", "OpenAI strict")]) >= 8  # hand-written


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_each_schema_is_enforced_exactly_or_refused_by_name(vocab, path):
    entry = load(path)
    schema, check = entry["schema"], validator(entry["schema"])
    for value in entry["valid"]:  # the corpus itself is right about what the schema says
        assert check.is_valid(value), value
    for value in entry["invalid"]:
        assert not check.is_valid(value), value
    if "refused" in entry:
        with pytest.raises(InvalidRequest) as e:
            compile_response_format(js(schema))
        assert f'keyword "{entry["refused"]}"' in e.value.message and "HINT" in e.value.message, e.value.message
        return
    c = compile_response_format(js(schema))
    assert entry["valid"] and entry["invalid"]
    for value in entry["valid"]:
        assert accepts(vocab, c.grammar, json.dumps(value, ensure_ascii=False)), value
    for value in entry["invalid"]:
        assert not accepts(vocab, c.grammar, json.dumps(value, ensure_ascii=False)), value
    rng, done = random.Random(path.stem), 0
    for _ in range(WALKS * 3):
        text = walk(vocab, c.grammar, rng)
        if text is not None:
            assert c.validate(text) == [], text
            done += 1
        if done == WALKS:
            break
    assert done >= WALKS // 2, "most random walks should end"
