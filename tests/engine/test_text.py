"""TextStream: UTF-8 split across tokens, stop strings split across tokens. Pure logic, no model."""

from engine.text import TextStream


def run(pieces: list[bytes], stop=None):
    vocab = dict(enumerate(pieces))
    ts = TextStream(vocab.__getitem__, stop)
    out = [ts.push(i) for i in range(len(pieces))]
    out.append(ts.flush())
    return out, ts.stopped_by


def test_multibyte_character_split_over_tokens_is_emitted_whole():
    data = "印刷".encode()  # 6 bytes
    out, _ = run([data[:2], data[2:4], data[4:]])
    assert out[0] == "" and "".join(out) == "印刷"
    assert all("\ufffd" not in part for part in out)


def test_stop_string_spanning_tokens_is_cut_and_never_leaked():
    out, stopped = run([b"Hello ", b"EN", b"D more"], stop=["END"])
    assert stopped == "END"
    assert "".join(out) == "Hello "
    assert out[1] == ""  # "EN" was held back: it could start "END"


def test_held_prefix_released_when_it_does_not_complete_a_stop():
    out, stopped = run([b"a E", b"Nx"], stop=["END"])
    assert stopped is None
    assert out[0] == "a " and out[1] == "ENx"


def test_earliest_of_several_stops_wins():
    out, stopped = run([b"xx ## yy %% zz"], stop=["%%", "##"])
    assert stopped == "##" and "".join(out) == "xx "


def test_incomplete_bytes_at_the_end_become_replacement_char():
    out, _ = run(["é".encode()[:1]])
    assert "".join(out) == "\ufffd"
