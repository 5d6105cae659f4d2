"""Structured output and tool calls through the OpenAI and Anthropic SDKs
against the running tiny-fixture server (tests/server/run.sh), validated with
`jsonschema` (tests/server/structured_check.py has the schemas and checks)."""
import json
import os

import anthropic
import jsonschema
import openai
import pytest

import structured_check as sc

BASE = os.environ["ANEDVD_BASE_URL"]
KEY = os.environ["ANEDVD_API_KEY"]


@pytest.fixture(scope="module")
def oai():
    return sc.client(BASE, KEY)


def test_json_schema_strict_50_runs(oai):
    runs, failures = sc.check_json_schema(oai, seeds=5)
    assert runs == 50
    assert not failures, "\n".join(failures)


def test_tool_choice_required_50_runs(oai):
    runs, failures = sc.check_required_tool_calls(oai, runs=50)
    assert runs == 50
    assert not failures, "\n".join(failures)


def test_named_tool_and_streamed_call(oai):
    choice = {"type": "function", "function": {"name": "add"}}
    runs, failures = sc.check_required_tool_calls(oai, runs=5, tool_choice=choice)
    assert not failures, "\n".join(failures)
    stream = oai.chat.completions.create(
        model="m", max_tokens=160, temperature=1.0, seed=3, stream=True,
        messages=[{"role": "user", "content": "Add 2 and 3."}], tools=sc.TOOLS, tool_choice=choice,
    )
    calls, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for c in delta.tool_calls or []:
            entry = calls.setdefault(c.index, {"name": "", "arguments": ""})
            entry["name"] += c.function.name or ""
            entry["arguments"] += c.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == ["add"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), sc.TOOLS[1]["function"]["parameters"])


def test_tool_results_go_back_in(oai):
    """A full round trip: the call, its result as a `tool` message, a reply."""
    msgs = [{"role": "user", "content": "Add 2 and 3."}]
    first = oai.chat.completions.create(
        model="m", max_tokens=160, temperature=0, messages=msgs, tools=sc.TOOLS, tool_choice="required"
    )
    call = first.choices[0].message.tool_calls[0]
    msgs += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    second = oai.chat.completions.create(
        model="m", max_tokens=8, temperature=0, messages=msgs, tools=sc.TOOLS, tool_choice="none"
    )
    assert isinstance(second.choices[0].message.content, str)


def test_bad_tools_are_400s(oai):
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        oai.chat.completions.create(
            model="m", max_tokens=4, messages=[{"role": "user", "content": "x"}], tools=sc.TOOLS,
            tool_choice={"type": "function", "function": {"name": "no_such_tool"}},
        )
    with pytest.raises(openai.BadRequestError, match="tools"):
        oai.chat.completions.create(
            model="m", max_tokens=4, messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"description": "no name"}}],
        )


def test_anthropic_tool_use(oai):
    ant = anthropic.Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in sc.TOOLS]
    r = ant.messages.create(
        model="m", max_tokens=160, messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=tools, tool_choice={"type": "tool", "name": "get_weather"},
    )
    uses = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and len(uses) >= 1
    assert uses[0].name == "get_weather"
    jsonschema.validate(uses[0].input, tools[0]["input_schema"])
    with ant.messages.stream(
        model="m", max_tokens=160, messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=tools, tool_choice={"type": "any"},
    ) as s:
        final = s.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed
    jsonschema.validate(streamed[0].input, {t["name"]: t["input_schema"] for t in tools}[streamed[0].name])
    # the result goes back in as a tool_result block
    follow = ant.messages.create(
        model="m", max_tokens=8, tools=tools,
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": uses[0].name,
                                               "input": uses[0].input}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "12 C"}]},
        ],
    )
    assert follow.type == "message"
