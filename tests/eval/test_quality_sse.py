"""Answer extraction, scoring, the Wilson interval, the golden format, and SSE framing."""

from __future__ import annotations

import json

import pytest

from capserve.core.errors import SpecError
from capserve.core.evaluation.quality import (
    GoldenItem,
    extract_answer,
    is_correct,
    load_golden,
    packaged_golden,
    wilson_interval,
)
from capserve.core.evaluation.sse import SseDecoder, StreamState, apply_event


def test_last_number_not_first() -> None:
    # lm-eval's take_first extracted "2" from "2 + 2 = 4" (docs/evaluation.md §6.1)
    assert extract_answer("2 + 2 = 4", "last_number") == "4"
    assert extract_answer("It costs 1,250.50 dollars", "last_number") == "1250.5"
    assert extract_answer("no digits", "last_number") is None


def test_answer_line_takes_the_last_one() -> None:
    reply = "Answer: maybe\nThinking again...\n**Answer:** Paris."
    assert extract_answer(reply, "answer_line") == "Paris."
    item = GoldenItem(id="x", category="c", prompt="p", answer="Paris")
    assert is_correct(item, reply) == (True, "Paris.")
    assert is_correct(item, "Paris")[0] is False  # no Answer: line → not extracted


def test_aliases_and_numbers_inside_answer_lines() -> None:
    item = GoldenItem(id="x", category="c", prompt="p", answer="40", aliases=("room 40",))
    assert is_correct(item, "Answer: Room 40")[0]
    assert is_correct(item, "Answer: 40 apples")[0]
    assert not is_correct(item, "Answer: 41")[0]


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(8, 10, 0.95)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)


def test_packaged_golden_is_valid_and_covers_categories() -> None:
    items = packaged_golden()
    assert len(items) >= 40
    assert {i.category for i in items} == {"arithmetic", "instruction", "extraction"}


def test_bad_golden_line_names_its_number() -> None:
    good = json.dumps({"id": "a", "category": "c", "prompt": "p", "answer": "1"})
    with pytest.raises(SpecError, match="line 2"):
        load_golden([good, '{"id": "b"}'])
    with pytest.raises(SpecError, match="duplicate id"):
        load_golden([good, good])


def test_sse_decoder_handles_split_events_comments_and_trailing_data() -> None:
    decoder = SseDecoder()
    stream = ': ping\n\ndata: {"a": 1}\n\ndata: {"b": "é"}\r\n\r\ndata: [DONE]'.encode()
    events = []
    for i in range(0, len(stream), 5):  # 5-byte reads split lines and the two-byte é
        events += decoder.feed(stream[i : i + 5])
    events += decoder.finish()
    assert events == ['{"a": 1}', '{"b": "é"}', "[DONE]"]


def test_stream_state_counts_tokens_usage_and_errors() -> None:
    state = StreamState()
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    assert apply_event(state, json.dumps(role)) == (True, False, False)  # a token event without output (vLLM TTFT)
    assert apply_event(state, json.dumps({"choices": [{"delta": {"content": "Hi"}}]})) == (True, True, True)
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    assert apply_event(state, json.dumps(usage)) == (False, False, False)
    apply_event(state, "[DONE]")
    assert (state.token_events, state.content, state.completion_tokens, state.done) == (2, "Hi", 1, True)
    apply_event(state, json.dumps({"error": {"message": "overloaded"}}))
    assert state.error == "overloaded"
