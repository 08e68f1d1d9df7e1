#!/usr/bin/env python3
"""Renders chat requests in OpenAI's API form (tools, assistant tool calls whose arguments are JSON text,
tool results with ids, chat_template_kwargs such as enable_thinking) into tests/fixtures/templates/
chat_goldens.json, the way a server hands them to transformers' apply_chat_template: as vLLM does, a
missing content becomes "" and each tool call's function.arguments text becomes the object it holds.
tests/template/test_chat_messages.c builds the same requests as cinfer_messages and compares bytes.

Uses the jinja2 environment of make_template_goldens.py (transformers' settings); needs jinja2 3.1.x.
"""
import copy
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_template_goldens as base  # noqa: E402

TEMPLATES = ("qwen3", "mistral_v03", "chatml")

WEATHER, SEARCH, SYS, U1, U2 = base.WEATHER, base.SEARCH, base.SYS, base.U1, base.U2


def call(name, args, cid):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


ROUND_TRIP = [
    SYS, U2,
    {"role": "assistant", "content": None,
     "tool_calls": [call("get_weather", "{\"city\": \"Zürich\", \"days\": 2}", "call12345")]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
]

CASES = [
    {"name": "tools_offered", "messages": [SYS, U2], "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    {"name": "tool_round_trip", "messages": ROUND_TRIP, "tools": [WEATHER], "add_generation_prompt": True},
    {"name": "tool_round_trip_answered", "tools": [WEATHER], "add_generation_prompt": True, "messages": ROUND_TRIP + [
        {"role": "assistant", "content": "It is 21.5 °C and clear in Zürich."},
        {"role": "user", "content": "And tomorrow?"}]},
    {"name": "parallel_calls_with_text", "tools": [WEATHER, SEARCH], "add_generation_prompt": True, "messages": [
        U2, {"role": "assistant", "content": "Let me check both.",
             "tool_calls": [call("get_weather", "{\"city\": \"Bern\"}", "callaaaaa"),
                            call("search", "{\"q\": \"föhn \\\"wind\\\"\"}", "callbbbbb")]},
        {"role": "tool", "tool_call_id": "callaaaaa", "name": "get_weather", "content": "rain"},
        {"role": "tool", "tool_call_id": "callbbbbb", "name": "search", "content": "a warm wind"}]},
    {"name": "thinking_disabled", "messages": [U1], "add_generation_prompt": True,
     "kwargs": {"enable_thinking": False}},
    {"name": "thinking_disabled_tools", "messages": ROUND_TRIP, "tools": [WEATHER], "add_generation_prompt": True,
     "kwargs": {"enable_thinking": False}},
    {"name": "thinking_enabled", "messages": [SYS, U1], "add_generation_prompt": True,
     "kwargs": {"enable_thinking": True}},
]


def as_template_sees(messages):
    """vLLM's preprocessing: content None -> "", tool call arguments text -> its JSON value."""
    out = copy.deepcopy(messages)
    for m in out:
        if m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            args = c["function"].get("arguments")
            if isinstance(args, str):
                c["function"]["arguments"] = json.loads(args) if args.strip() else {}
    return out


def main():
    os.environ["TZ"] = "UTC"
    time.tzset()
    assert base.jinja2.__version__.startswith("3.1"), base.jinja2.__version__
    env = base.environment()
    templates = {}
    for name in TEMPLATES:
        path = os.path.join(base.FIX, f"{name}.jinja")
        templates[name] = open(path, encoding="utf-8").read()
    special = {"qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
               "mistral_v03": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
               "chatml": {"eos_token": "<|im_end|>"}}
    results = {}
    for tname, source in templates.items():
        results[tname] = {}
        for case in CASES:
            variables = dict(special[tname])
            variables.update(case.get("kwargs", {}))
            variables.update(messages=as_template_sees(case["messages"]), tools=case.get("tools"), documents=None,
                             add_generation_prompt=case["add_generation_prompt"])
            results[tname][case["name"]] = base.render(env, source, variables)
    cases = [{"name": c["name"], "messages": c["messages"], "tools": c.get("tools"), "kwargs": c.get("kwargs"),
              "add_generation_prompt": c["add_generation_prompt"]} for c in CASES]
    out = {"jinja2": base.jinja2.__version__, "now": base.NOW, "special": special, "cases": cases, "results": results}
    with open(os.path.join(base.FIX, "chat_goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for r in results.values() for x in r.values() if "error" in x)
    print(f"{len(templates)} templates x {len(CASES)} cases ({n_err} jinja2 errors)", file=sys.stderr)


if __name__ == "__main__":
    main()
