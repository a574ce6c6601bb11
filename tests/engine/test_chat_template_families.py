"""The catalog's model families' real chat templates, rendered by flashdesk's ChatTemplate.

Qwen3 (its thinking switch), Qwen3.5, Gemma 4 and Muse-Glimmer, each template read from the pinned
llama-cpp-python sdist (tests/llama_templates.py). Every expected text is written here by hand from
what the template says it produces; the whole prompt is compared, not a fragment. Messages are what
the server hands the renderer (server/http/schemas.py: string content, every role as the request named it).
Not a test of generation or of reading a model's answer: text in, text out.
See test_chat_template_options.py for the catalog's template variables reaching a loaded engine.
"""

from __future__ import annotations

import datetime

import pytest
from llama_templates import family_templates

from engine.errors import InvalidRequest
from engine.llama.chat_template import ChatTemplate

SYSTEM_HI = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
# BOS texts as the models' GGUFs give them; Qwen's templates never write one, Muse-Glimmer's
# writes whatever the model's is (a stand-in text here, to see where it goes)
BOS = {"qwen3": "", "qwen3.5": "", "gemma4": "<bos>", "muse-glimmer": "<BOS>"}


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    return family_templates()


def render(templates, family: str, messages: list[dict], **variables) -> str:
    return ChatTemplate.from_text(templates[family], BOS[family], variables=variables).render(messages)


def two_turns(earlier_answer: str) -> list[dict]:
    return [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": earlier_answer},
            {"role": "user", "content": "Bye"}]


# -- Qwen3: thinking is on unless enable_thinking is false, which closes an empty think block ----------

def test_qwen3_thinking_off_ends_with_an_empty_think_block(templates):
    assert render(templates, "qwen3", SYSTEM_HI, enable_thinking=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("variables", [{}, {"enable_thinking": True}], ids=["unset", "true"])
def test_qwen3_by_default_leaves_the_thinking_to_the_model(templates, variables):
    assert render(templates, "qwen3", SYSTEM_HI, **variables) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_qwen3_drops_the_thinking_of_earlier_answers(templates):
    # an answer before the last question keeps only what follows </think>
    assert render(templates, "qwen3", two_turns("<think>\nplan it\n</think>\n\nHello!"), enable_thinking=False) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_gets_a_developer_message_as_the_system_prompt(templates):
    # the template has no branch for "developer": passed as it is, the instruction would vanish
    developer = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render(templates, "qwen3", developer) == render(templates, "qwen3", SYSTEM_HI)
    assert "Be brief." in render(templates, "qwen3", developer)


# -- Qwen3.5: thinking opens a think block by default; the same switch closes it ----------------------

@pytest.mark.parametrize("variables, tail", [({}, "<think>\n"),
                                             ({"enable_thinking": False}, "<think>\n\n</think>\n\n")],
                         ids=["unset", "off"])
def test_qwen35_generation_prompt(templates, variables, tail):
    assert render(templates, "qwen3.5", SYSTEM_HI, **variables) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" + tail)


def test_qwen35_drops_the_thinking_of_earlier_answers(templates):
    assert render(templates, "qwen3.5", two_turns("<think>\nplan it\n</think>\n\nHello!")) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n")


def test_qwen35_wraps_a_tool_result_in_a_user_turn(templates):
    # loop.previtem / loop.nextitem decide where the user turn around tool results opens and closes
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": ""},
                {"role": "tool", "content": "sunny"}, {"role": "user", "content": "Thanks"}]
    assert render(templates, "qwen3.5", messages, enable_thinking=False) == (
        "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen35_refusals_are_invalid_requests(templates):
    # raise_exception in the template: a conversation with no question is the caller's mistake (400)
    with pytest.raises(InvalidRequest, match="No user query found in messages"):
        render(templates, "qwen3.5", [{"role": "system", "content": "Be brief."}])
    # "developer" would be "Unexpected message role." there: it arrives as the system prompt instead
    developer = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render(templates, "qwen3.5", developer) == render(templates, "qwen3.5", SYSTEM_HI)


# -- Gemma 4: <|turn> roles, the assistant is "model", BOS written by the template -------------------

EMPTY_THOUGHT = "<|turn>model\n<|channel>thought\n<channel|>"  # the generation prompt with thinking off


def test_gemma4_system_prompt_gets_its_own_turn(templates):
    assert render(templates, "gemma4", SYSTEM_HI) == (
        "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n" + EMPTY_THOUGHT)


def test_gemma4_without_a_system_prompt_opens_with_the_user(templates):
    assert render(templates, "gemma4", [{"role": "user", "content": "  Hi \n"}]) == (
        "<bos><|turn>user\nHi<turn|>\n" + EMPTY_THOUGHT)  # the user's text is trimmed


def test_gemma4_a_leading_developer_message_is_its_system_prompt(templates):
    developer = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render(templates, "gemma4", developer) == render(templates, "gemma4", SYSTEM_HI)


def test_gemma4_thinking_on_marks_the_system_turn_and_opens_the_model_turn(templates):
    assert render(templates, "gemma4", SYSTEM_HI, enable_thinking=True) == (
        "<bos><|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n")


def test_gemma4_earlier_answers_are_model_turns_without_their_thoughts(templates):
    assert render(templates, "gemma4", two_turns("<|channel>thought\nplan it<channel|>Hello!")) == (
        "<bos><|turn>user\nHi<turn|>\n<|turn>model\nHello!<turn|>\n<|turn>user\nBye<turn|>\n" + EMPTY_THOUGHT)


# -- Muse-Glimmer: <|start|>role<|message|>, a system block it writes itself when none is given --------

SYSTEM_TAIL = '\n\nReasoning strength: high.\n\n# Valid recipients: "self", "user".<|eot|>'


def test_muse_glimmer_with_a_system_prompt(templates):
    assert render(templates, "muse-glimmer", SYSTEM_HI) == (
        "<BOS><|start|>system<|message|>Be brief." + SYSTEM_TAIL +
        "<|start|>user<|message|>Hi<|eot|><|start|>assistant")


def test_muse_glimmer_default_system_block_dates_itself(templates):
    # strftime_now, the renderer's global, gives today's date (local time); either side of midnight
    days = {datetime.date.today().isoformat()}
    got = render(templates, "muse-glimmer", [{"role": "user", "content": "Hi"}])
    days.add(datetime.date.today().isoformat())
    assert got in {"<BOS><|start|>system<|message|>You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04."
                   f"\nCurrent date: {day}." + SYSTEM_TAIL + "<|start|>user<|message|>Hi<|eot|><|start|>assistant"
                   for day in days}


def test_muse_glimmer_template_variables(templates):
    got = render(templates, "muse-glimmer", two_turns("Hello!"), current_date="2026-05-01", reasoning_strength="low")
    assert got == (
        "<BOS><|start|>system<|message|>You are a helpful AI assistant.\nKnowledge cutoff: 2026-01-04.\n"
        'Current date: 2026-05-01.\n\nReasoning strength: low.\n\n# Valid recipients: "self", "user".<|eot|>'
        "<|start|>user<|message|>Hi<|eot|><|start|>assistant to=user<|message|>Hello!<|eot|>"
        "<|start|>user<|message|>Bye<|eot|><|start|>assistant")


def test_muse_glimmer_keeps_a_reasoning_line_the_system_prompt_has(templates):
    # "Reasoning effort" is renamed to the template's own word, and no second line is added
    messages = [{"role": "system", "content": "Reasoning effort: low."}, {"role": "user", "content": "Hi"}]
    assert render(templates, "muse-glimmer", messages) == (
        '<BOS><|start|>system<|message|>Reasoning strength: low.\n\n# Valid recipients: "self", "user".<|eot|>'
        "<|start|>user<|message|>Hi<|eot|><|start|>assistant")
