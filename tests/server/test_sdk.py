"""The official `openai` and `anthropic` SDKs against a running `anedvd serve`.

Started by tests/server/run.sh with the tiny qwen2 fixture, greedy defaults and
an API key. Expected values come from tests/server/expected.json (HF references,
tests/server/gen_expected.py).
"""
import json
import os
import pathlib

import anthropic
import openai
import pytest

BASE = os.environ["ANEDVD_BASE_URL"]
KEY = os.environ["ANEDVD_API_KEY"]
EXP = json.loads((pathlib.Path(__file__).parent / "expected.json").read_text())
MSGS = EXP["chat_messages"]


@pytest.fixture(scope="module")
def oai():
    return openai.OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def ant():
    return anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)


def test_models(oai):
    models = oai.models.list()
    assert len(models.data) == 1
    assert models.data[0].object == "model"


def test_completion_matches_hf_greedy(oai):
    r = oai.completions.create(model="m", prompt=EXP["prompt_ids"], max_tokens=16)
    assert r.choices[0].text == EXP["greedy_text"]
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (24, 16)


def test_completion_stream_and_stop(oai):
    stream = oai.completions.create(
        model="m", prompt=EXP["prompt_ids"], max_tokens=16, temperature=0, stream=True, stop=[EXP["stop"]]
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == EXP["text_before_stop"]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat(oai):
    r = oai.chat.completions.create(model="m", messages=MSGS, max_tokens=6)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert isinstance(r.choices[0].message.content, str)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == EXP["chat_prompt_tokens"]
    assert r.usage.completion_tokens == 6
    assert r.usage.total_tokens == EXP["chat_prompt_tokens"] + 6


def test_chat_n_choices(oai):
    r = oai.chat.completions.create(
        model="m", messages=MSGS, max_tokens=4, n=3, temperature=1.0, seed=9
    )
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.prompt_tokens == EXP["chat_prompt_tokens"]
    # Each choice generates 1..=4 tokens; usage sums them.
    assert 3 <= r.usage.completion_tokens <= 12
    again = oai.chat.completions.create(
        model="m", messages=MSGS, max_tokens=4, n=3, temperature=1.0, seed=9
    )
    assert [c.message.content for c in again.choices] == [
        c.message.content for c in r.choices
    ]


def test_responses(oai):
    r = oai.responses.create(model="m", input="Hello", instructions="Be brief.", max_output_tokens=4)
    assert r.object == "response" and r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 4
    deltas, kinds = [], []
    for ev in oai.responses.create(
        model="m", input="Hello", instructions="Be brief.", max_output_tokens=4, stream=True
    ):
        kinds.append(ev.type)
        if ev.type == "response.output_text.delta":
            deltas.append(ev.delta)
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
    assert "".join(deltas) == r.output_text


def test_embeddings(oai):
    # The SDK asks for base64 and decodes it.
    r = oai.embeddings.create(model="m", input=["Hello world", "Hello world", "Other"])
    assert [d.index for d in r.data] == [0, 1, 2]
    a, b, c = (d.embedding for d in r.data)
    assert len(a) == 64 and a == b and a != c
    assert abs(sum(x * x for x in a) - 1.0) < 1e-4
    f = oai.embeddings.create(model="m", input="Hello world", encoding_format="float")
    assert max(abs(x - y) for x, y in zip(f.data[0].embedding, a)) < 1e-6


def test_chat_stream_include_usage(oai):
    full = oai.chat.completions.create(model="m", messages=MSGS, max_tokens=6)
    stream = oai.chat.completions.create(
        model="m", messages=MSGS, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 6
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "length"


def test_chat_logprobs(oai):
    r = oai.chat.completions.create(
        model="m", messages=MSGS, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
    )
    content = r.choices[0].logprobs.content
    assert content
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob == e.logprob


def test_chat_errors(oai):
    bad = openai.OpenAI(base_url=BASE + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=MSGS, max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="functions"):
        oai.chat.completions.create(
            model="m",
            messages=MSGS,
            max_tokens=1,
            functions=[{"name": "f", "parameters": {}}],
        )
    with pytest.raises(openai.BadRequestError, match="context"):
        oai.completions.create(model="m", prompt=[5] * 300, max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="n"):
        oai.chat.completions.create(model="m", messages=MSGS, max_tokens=1, n=17)
    with pytest.raises(openai.APIStatusError) as e:
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 100_000}])
    assert e.value.status_code == 413


def test_messages(ant):
    system, rest = MSGS[0]["content"], MSGS[1:]
    r = ant.messages.create(model="m", max_tokens=6, system=system, messages=rest)
    assert r.type == "message" and r.role == "assistant"
    assert r.content[0].type == "text"
    assert r.stop_reason == "max_tokens"
    assert r.usage.input_tokens == EXP["chat_prompt_tokens"]
    assert r.usage.output_tokens == 6
    blocks = ant.messages.create(
        model="m", max_tokens=6, system=[{"type": "text", "text": system}], messages=rest
    )
    assert blocks.content[0].text == r.content[0].text


def test_messages_stream(ant):
    system, rest = MSGS[0]["content"], MSGS[1:]
    full = ant.messages.create(model="m", max_tokens=12, system=system, messages=rest)
    with ant.messages.stream(model="m", max_tokens=12, system=system, messages=rest) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == full.content[0].text
    assert final.stop_reason == full.stop_reason
    assert final.usage.output_tokens == full.usage.output_tokens
    stop = text[2:4]
    if len(stop) == 2:
        r = ant.messages.create(
            model="m", max_tokens=12, system=system, messages=rest, stop_sequences=[stop]
        )
        assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
        assert r.content[0].text == text[: text.find(stop)]


def test_messages_errors(ant):
    bad = anthropic.Anthropic(base_url=BASE, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model="m", max_tokens=4, messages=MSGS[1:2])
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        ant.messages.create(
            model="m", max_tokens=4, messages=MSGS[1:2], thinking={"type": "enabled", "budget_tokens": 1024}
        )
    with pytest.raises(anthropic.BadRequestError):
        ant.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "word " * 400}])
    with pytest.raises(anthropic.RequestTooLargeError):
        ant.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "x" * 100_000}])
