#!/usr/bin/env python3
"""Structured output and forced tool calls through the official OpenAI SDK,
checked with the `jsonschema` package (an outside validator).

Two checks, as issue 17's acceptance states them:
  * `json_schema` strict: 10 schemas x 5 seeds = 50 runs, every reply valid
    against its schema;
  * `tool_choice: required`: 50 seeded runs, every reply one or more tool
    calls naming a given tool, with arguments valid against its parameters.
Sampling is at temperature 1 so the seeds matter.

Used by tests/server/test_structured.py (pytest, tiny fixture) and by hand
against any server, e.g. Gemma 3 270M:
  anedvd serve -m gemma3-270m-q4_k_m.gguf --port 8080 &
  python3 tests/server/structured_check.py --base-url http://127.0.0.1:8080
Prints one line per check and exits non-zero when a run fails.
"""
import argparse
import json
import sys
import time

import jsonschema
import openai

SCHEMAS = [
    {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 24}},
     "required": ["answer"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 130}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
     "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
     "required": ["color"], "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "maxItems": 4,
                                               "items": {"type": "string", "maxLength": 10}}},
     "required": ["tags"], "additionalProperties": False},
    # integers: a random-weight model writes a float's digits until max_tokens
    {"type": "object", "properties": {"x": {"type": "integer", "minimum": -10, "maximum": 10},
                                      "y": {"type": "integer", "minimum": -10, "maximum": 10}},
     "required": ["x", "y"], "additionalProperties": False},
    {"type": "object", "properties": {
        "city": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                  "population": {"type": "integer", "minimum": 0,
                                                                 "maximum": 100000000}},
                 "required": ["name", "population"], "additionalProperties": False}},
     "required": ["city"], "additionalProperties": False},
    {"type": "object", "properties": {"date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}},
     "required": ["date"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "point"}, "n": {"type": "integer", "minimum": 1, "maximum": 9}},
     "required": ["kind", "n"], "additionalProperties": False},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 99},
                                                          {"type": "string", "maxLength": 8}, {"type": "null"}]}},
     "required": ["value"], "additionalProperties": False},
]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "minimum": -1000, "maximum": 1000},
            "b": {"type": "integer", "minimum": -1000, "maximum": 1000}},
            "required": ["a", "b"], "additionalProperties": False}}},
]


def client(base_url, api_key):
    return openai.OpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key or "none", max_retries=0)


def check_json_schema(oai, seeds=5, max_tokens=160):
    """Returns (runs, failures) over every schema x seed."""
    runs, failures = 0, []
    for i, schema in enumerate(SCHEMAS):
        for seed in range(seeds):
            runs += 1
            r = oai.chat.completions.create(
                model="m", max_tokens=max_tokens, temperature=1.0, seed=seed,
                messages=[{"role": "user", "content": "Reply with a JSON object."}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": f"s{i}", "strict": True, "schema": schema}},
            )
            text = r.choices[0].message.content
            try:
                jsonschema.validate(json.loads(text), schema)
            except Exception as e:  # noqa: BLE001 - any failure is reported
                failures.append(f"schema {i} seed {seed}: {text!r}: {e}")
    return runs, failures


def check_required_tool_calls(oai, runs=50, max_tokens=160, tool_choice="required"):
    """Returns (runs, failures): each reply must call a tool with valid arguments."""
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    failures = []
    for seed in range(runs):
        r = oai.chat.completions.create(
            model="m", max_tokens=max_tokens, temperature=1.0, seed=seed,
            messages=[{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}],
            tools=TOOLS, tool_choice=tool_choice,
        )
        choice = r.choices[0]
        calls = choice.message.tool_calls or []
        try:
            assert calls, f"no tool call (finish_reason {choice.finish_reason}, content {choice.message.content!r})"
            assert choice.finish_reason == "tool_calls", choice.finish_reason
            for c in calls:
                assert c.function.name in params, c.function.name
                if isinstance(tool_choice, dict):
                    assert c.function.name == tool_choice["function"]["name"]
                jsonschema.validate(json.loads(c.function.arguments), params[c.function.name])
        except Exception as e:  # noqa: BLE001
            failures.append(f"seed {seed}: {e}")
    return runs, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--max-tokens", type=int, default=160)
    args = ap.parse_args()
    oai = client(args.base_url, args.api_key)
    bad = 0
    for name, check in [
        ("json_schema strict (10 schemas x 5 seeds)", lambda: check_json_schema(oai, 5, args.max_tokens)),
        ("tool_choice required (50 seeds)", lambda: check_required_tool_calls(oai, 50, args.max_tokens)),
        ("tool_choice add (10 seeds)", lambda: check_required_tool_calls(
            oai, 10, args.max_tokens, {"type": "function", "function": {"name": "add"}})),
    ]:
        t = time.time()
        runs, failures = check()
        print(f"{name}: {runs - len(failures)}/{runs} valid in {time.time() - t:.1f} s")
        for f in failures:
            print("  " + f)
        bad += len(failures)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
