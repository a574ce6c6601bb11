import pytest

from engine import InvalidRequest, SamplingParams


@pytest.mark.parametrize("field,value", [("temperature", -0.1), ("temperature", 2.5), ("top_p", 0.0),
                                         ("top_k", -1), ("min_p", 1.5), ("presence_penalty", 3.0),
                                         ("frequency_penalty", float("nan"))])
def test_out_of_range_values_are_refused_with_the_parameter_named(field, value):
    with pytest.raises(InvalidRequest) as e:
        SamplingParams(**{field: value}).validate()
    assert e.value.param == field


def test_defaults_are_valid():
    SamplingParams().validate()
    assert SamplingParams(temperature=0).greedy
