// Chat templates (src/text/jinja/) against the reference renderer: Python's jinja2 set
// up as Hugging Face transformers' apply_chat_template sets it up (trim_blocks and
// lstrip_blocks on, its tojson and raise_exception; tests/data/templates/render.py).
//
//  - Templates: every tests/data/templates/NAME.jinja (real model templates) rendered with
//    every NAME.CASE.json must equal NAME.CASE.txt byte for byte, or fail with the message
//    in NAME.CASE.err (raise_exception).
//  - Language: one small template per feature; every expected string below was produced
//    by jinja2 3.1.6 in that same environment, not written by hand.
//  - Errors: unsupported and bad constructs fail naming the line and the construct
//    (jinja2 fails on the same templates, with its own wording, except where noted).
//  - Robustness: deep nesting, runaway recursion, loops and output give an error, never a
//    crash or a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/jinja.h"

namespace fs = std::filesystem;
using edgellm::jinja::render;
using ojson = nlohmann::ordered_json;

namespace {

fs::path templates_dir() {
    return fs::path(EDGELLM_TEST_DATA) / "templates";
}

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// ---- the model templates ----------------------------------------------------------------

struct GoldenCase {
    std::string name;  // NAME_CASE
    fs::path template_path, context_path, expected_path;
    bool expects_error = false;
};

void PrintTo(const GoldenCase& c, std::ostream* os) {
    *os << c.name;
}

std::vector<GoldenCase> golden_cases() {
    std::vector<GoldenCase> cases;
    std::error_code ec;
    std::vector<fs::path> templates, files;
    for (const auto& entry : fs::directory_iterator(templates_dir(), ec)) {
        files.push_back(entry.path());
        if (entry.path().extension() == ".jinja") templates.push_back(entry.path());
    }
    std::sort(templates.begin(), templates.end());
    std::sort(files.begin(), files.end());
    for (const fs::path& t : templates) {
        const std::string stem = t.stem().string();
        for (const fs::path& f : files) {
            const std::string file = f.filename().string();
            if (f.extension() != ".json" || file.rfind(stem + ".", 0) != 0) continue;
            const std::string case_name =
                file.substr(stem.size() + 1, file.size() - stem.size() - 6);
            GoldenCase c;
            c.name = stem + "_" + case_name;
            c.template_path = t;
            c.context_path = f;
            c.expected_path = templates_dir() / (stem + "." + case_name + ".txt");
            if (!fs::exists(c.expected_path)) {
                c.expected_path = templates_dir() / (stem + "." + case_name + ".err");
                c.expects_error = true;
            }
            cases.push_back(c);
        }
    }
    return cases;
}

class Template : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(Template, RendersAsTransformers) {
    const GoldenCase& c = GetParam();
    ASSERT_TRUE(fs::exists(c.expected_path)) << "no expected output " << c.expected_path;
    const ojson context = ojson::parse(read_all(c.context_path));
    auto r = render(read_all(c.template_path), context);
    const std::string expected = read_all(c.expected_path);
    if (c.expects_error) {
        ASSERT_FALSE(r.ok()) << "rendered instead of failing:\n" << *r;
        EXPECT_NE(r.error().find(expected), std::string::npos) << r.error();
        EXPECT_EQ(r.error().rfind("line ", 0), 0u) << r.error();
    } else {
        ASSERT_TRUE(r.ok()) << r.error();
        EXPECT_EQ(*r, expected);
    }
}

INSTANTIATE_TEST_SUITE_P(Models, Template, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                             std::string n = info.param.name;
                             for (char& ch : n)
                                 if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                             return n;
                         });

// The data is there (a missing directory must not look like a pass).
TEST(TemplateData, EveryTemplateHasItsCases) {
    const std::vector<GoldenCase> cases = golden_cases();
    EXPECT_GE(cases.size(), 37u);
    for (const char* name : {"qwen25_coder_15b", "qwen25_coder_05b", "qwen3", "llama32", "gemma3",
                             "phi35", "mistral_nemo", "chatml"}) {
        const auto n = std::count_if(cases.begin(), cases.end(), [&](const GoldenCase& c) {
            return c.template_path.stem() == name;
        });
        EXPECT_GE(n, 3) << name;
    }
}

// ---- the language, case by case -------------------------------------------------------

struct LangCase {
    const char* name;
    const char* source;
    const char* context;   // JSON object
    const char* expected;  // the rendering, or for errors a part of the message
};

std::ostream& operator<<(std::ostream& os, const LangCase& c) {
    return os << c.name;
}

// Expected renderings: jinja2 3.1.6, transformers' environment.
const LangCase kLanguage[] = {
    {"if_elif_else",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %};{% "
     "endfor %}",
     "{}", "one;two;many;"},
    {"if_tuple_test",
     "{% if [] %}a{% elif 0 %}b{% elif '' %}c{% elif none %}d{% elif {} %}e{% else %}f{% endif %}",
     "{}", "f"},
    {"for_else",
     "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% "
     "endfor %}",
     "{}", "empty|1"},
    {"for_undefined_iterable", "{% for x in nothing %}x{% else %}none{% endfor %}", "{}", "none"},
    {"loop_vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 "
     "}}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     "{}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
    {"loop_prev_next",
     "{% for x in [1, 2, 3] %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}", "{}",
     "[<1>2][1<2>3][2<3>]"},
    {"loop_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", "{}", "ababa"},
    {"loop_nested",
     "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index "
     "}};{% endfor %}",
     "{}", "1x2y1;1x2y2;"},
    {"for_filter",
     "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.content "
     "}} {% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
     "\"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}",
     "1/2:u 2/2:a "},
    {"for_inline_filter_iterable",
     "{% for m in messages|selectattr('role', 'equalto', 'user')|list %}{{ m.content }}{% endfor "
     "%}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
     "\"content\": \"u1\"}, {\"role\": \"user\", \"content\": \"u2\"}]}",
     "u1u2"},
    {"for_unpack_items", "{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %}",
     "{}", "a=1;b=[2];"},
    {"for_unpack_pairs", "{% for (a, b) in [[1, 2], (3, 4)] %}{{ a + b }},{% endfor %}", "{}",
     "3,7,"},
    {"for_dict_keys", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "{}", "xy"},
    {"for_string_utf8", "{% for c in 'héj' %}[{{ c }}]{% endfor %}", "{}", "[h][é][j]"},
    {"for_reverse_slice", "{% for m in messages[::-1] %}{{ m }}{% endfor %}",
     "{\"messages\": [1, 2, 3]}", "321"},
    {"break_continue",
     "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break "
     "%}{% endif %}{{ i }}{% endfor %}",
     "{}", "0246"},
    {"set_plain", "{% set x = 1 + 2 %}{% set y = 'a' %}{{ x }}{{ y }}", "{}", "3a"},
    {"set_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}", "{}", "1two"},
    {"set_block", "{% set body %}Hello {{ name }}!{% endset %}[{{ body }}]", "{\"name\": \"you\"}",
     "[Hello you!]"},
    {"set_block_filter", "{% set body | upper | trim %}  shout {% endset %}[{{ body }}]", "{}",
     "[SHOUT]"},
    {"set_scope_loop",
     "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
     "{}", "outer1outer2outer"},
    {"set_scope_if", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "{}", "2"},
    {"namespace",
     "{% set ns = namespace(count=0, found=false) %}{% for i in range(4) %}{% set ns.count = "
     "ns.count + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} "
     "{{ ns.found }} {{ ns.missing }}",
     "{}", "6 True "},
    {"namespace_print", "{% set ns = namespace(a=1) %}{% set ns.b = 'x' %}{{ ns }}", "{}",
     "<Namespace {'a': 1, 'b': 'x'}>"},
    {"namespace_dict_arg",
     "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}", "{}", "121"},
    {"macro_defaults",
     "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% "
     "endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='\?') }} {{ "
     "greet() }}",
     "{}", "Hello, Ann! Hi, Bob! Hello, Cy\? Hello, !"},
    {"macro_recursive",
     "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro "
     "%}{{ fact(5) }}",
     "{}", "120"},
    {"macro_sees_globals",
     "{% macro show() %}{{ who }}{% endmacro %}{% set who = 'top' %}{{ show() }}",
     "{\"who\": \"ctx\"}", "top"},
    {"macro_returns_string", "{% macro m() %}42{% endmacro %}{{ m() ~ '!' }} {{ m() is string }}",
     "{}", "42! True"},
    {"macro_default_refers_param",
     "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", "{}", "3,6"},
    {"macro_closure_in_loop",
     "{% for x in ['a', 'b'] %}{% macro m() %}{{ x }}{{ loop.index }}{% endmacro %}{{ m() }}{% "
     "endfor %}",
     "{}", "a1b2"},
    {"macro_caller_scope_invisible",
     "{% macro m() %}[{{ y }}]{% endmacro %}{% for y in [1] %}{{ m() }}{% endfor %}", "{}", "[]"},
    {"with_block", "{% set x = 1 %}{% with x = 2, y = x %}{{ x }}{{ y }}{% endwith %}{{ x }}", "{}",
     "211"},
    {"filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}", "{\"name\": \"bob\"}",
     "HELLO BOB"},
    {"raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!", "{}",
     "{{ not evaluated }} {% if %}!"},
    {"comment", "a{# a comment {{ x }} #}b\n{# own line #}\nc", "{}", "ab\nc"},
    {"generation_tag", "{% generation %}{{ 'in' }}{% endgeneration %}out", "{}", "inout"},
    {"print_statement", "{% print 1 + 1 %}", "{}", "2"},
    {"trim_lstrip_blocks",
     "<ul>\n  {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n", "{}",
     "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
    {"minus_strips", "a   {%- if true -%}   b   {%- endif -%}   c", "{}", "abc"},
    {"minus_strips_newlines", "a\n\n{{- 'b' -}}\n\nc", "{}", "abc"},
    {"plus_keeps", "x\n  {%+ if true +%}\ny\n  {%- endif %}", "{}", "x\n  \ny"},
    {"variable_not_lstripped", "a\n  {{ 'b' }}\n  c", "{}", "a\n  b\n  c"},
    {"block_after_text_not_lstripped", "x  {% if true %}y{% endif %}", "{}", "x  y"},
    {"comment_trim", "a\n  {# c #}\nb", "{}", "a\nb"},
    {"one_trailing_newline_dropped", "a\n\n", "{}", "a\n"},
    {"crlf_normalized", "a\r\nb\r\n{% if true %}\r\nc\r\n{% endif %}\r\n", "{}", "a\nb\nc\n"},
    {"indented_tags_template",
     "{%- for m in msgs %}\n    {{- m }}\n    {%- if not loop.last %}\n        {{- ',' }}\n    {%- "
     "endif %}\n{%- endfor %}\n",
     "{\"msgs\": [\"a\", \"b\"]}", "a,b"},
    {"string_escapes", "{{ 'a\\nb\\t|\\x41\\u00e9\\U0001F600|\\\\|\\'|\\\"|\\101|\\q' }}", "{}",
     "a\nb\t|Aé😀|\\|'|\"|A|\\q"},
    {"string_adjacent", "{{ 'a' \"b\" 'c' }}", "{}", "abc"},
    {"numbers",
     "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5 }} {{ 1e3 }} {{ 2.5E-3 }} {{ 1_0.2_5 }}",
     "{}", "1000 31 15 5 1.5 1000.0 0.0025 10.25"},
    {"constants", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }}", "{}",
     "True True False None None"},
    {"print_float",
     "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ -2.5 }} {{ 1/3 "
     "}} {{ 3.0 * 1e300 * 1e10 }} {{ 10 / 4 }}",
     "{}",
     "1.0 0.30000000000000004 1e+16 1000000000000000.0 0.0001 1e-05 -2.5 0.3333333333333333 inf "
     "2.5"},
    {"print_containers",
     "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }} {{ (1,) }} {{ () }} {{ (1, 2) }} {{ {} }}",
     "{}", "[1, 'a', None, True, 1.5, [2], {'k': 'v'}] (1,) () (1, 2) {}"},
    {"print_repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t', 'é\\x07'] }}", "{}",
     "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t', 'é\\x07']"},
    {"print_context_values", "{{ i }} {{ f }} {{ b }} {{ n }} {{ l }} {{ d }}",
     "{\"i\": 3, \"f\": 2.0, \"b\": false, \"n\": null, \"l\": [1, \"x\"], \"d\": {\"z\": 1, "
     "\"a\": {\"b\": null}}}",
     "3 2.0 False None [1, 'x'] {'z': 1, 'a': {'b': None}}"},
    {"undefined_prints_empty", "[{{ nothing }}][{{ d.missing }}][{{ d['missing'] }}][{{ l[10] }}]",
     "{\"d\": {}, \"l\": []}", "[][][][]"},
    {"arithmetic",
     "{{ 7 + 3 }} {{ 7 - 10 }} {{ 6 * 7 }} {{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 "
     "% 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}",
     "{}", "10 -3 42 3.5 4.0 3 -4 1 2 -2 1024 0.5 64"},
    {"float_arithmetic",
     "{{ 7.5 // 2 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ true + 1 }}",
     "{}", "3.0 -4.0 1.5 0.5 2.5 2"},
    {"precedence",
     "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 2 * -1 }} {{ not 1 == 2 }} {{ (1 + 2) ~ 3 "
     "}} {{ 1 ~ 2 * 3 }} {{ 10 - 2 - 3 }}",
     "{}", "7 9 4 -2 True 33 16 5"},
    {"string_ops",
     "{{ 'ab' + 'cd' }} {{ 'ab' ~ 1 ~ none ~ true ~ [1] }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ 'a' * 0 "
     "}} {{ [1] * 2 }} {{ [1] + [2, 3] }}",
     "{}", "abcd ab1NoneTrue[1] ababab xx  [1, 1] [1, 2, 3]"},
    {"concat_undefined", "[{{ nothing ~ 'x' }}]", "{}", "[x]"},
    {"comparisons",
     "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 }} {{ 2 <= 2 }} {{ 'b' > 'a' }} {{ 'a' >= 'b' }} {{ [1, "
     "2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': "
     "1} }} {{ none == none }}",
     "{}", "True True True True True False True True False False True True"},
    {"logic_values",
     "{{ 1 and 'x' }}|{{ 0 and 'x' }}|{{ 0 or [] }}|{{ none or 'd' }}|{{ not 0 }}|{{ not 'a' }}|{{ "
     "'' or 0 or 'last' }}",
     "{}", "x|0|[]|d|True|False|last"},
    {"in_operator",
     "{{ 'b' in 'abc' }} {{ 'x' not in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'v' in "
     "{'k': 'v'} }} {{ 'a' in nothing }} {{ 1.0 in [1] }}",
     "{}", "True True True True False False True"},
    {"cond_expr",
     "{{ 'yes' if x else 'no' }} {{ 'yes' if not x else 'no' }} [{{ 'only' if not x }}] {{ 1 if "
     "false else 2 if false else 3 }}",
     "{\"x\": true}", "yes no [] 3"},
    {"attribute_subscript",
     "{{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ "
     "d.l[1] }}",
     "{\"d\": {\"a\": 1, \"b\": {\"c\": 2}, \"l\": [5, 6]}, \"l\": [10, 20, 30]}",
     "1 1 2 2 10 30 20 6"},
    {"dict_methods_vs_keys",
     "{{ d.items()|list }} {{ d['items'] }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', "
     "'dflt') }} {{ d.keys()|list }} {{ d.values()|list }}",
     "{\"d\": {\"a\": 1, \"items\": \"key\"}}",
     "[('a', 1), ('items', 'key')] key 1 None dflt ['a', 'items'] [1, 'key']"},
    {"slicing",
     "{{ l[1:] }} {{ l[:2] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[1:-1] }} {{ l[5:] }} {{ "
     "l[:-5] }} {{ l[3:0:-1] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ 'abc'[-1] }} {{ (1, 2, "
     "3)[1:] }}",
     "{\"l\": [1, 2, 3, 4]}",
     "[2, 3, 4] [1, 2] [4, 3, 2, 1] [1, 3] [3, 4] [2, 3] [] [] [4, 3, 2] él cba c (2, 3)"},
    {"string_index_utf8", "{{ s[0] }}{{ s[1] }}{{ s|length }}", "{\"s\": \"日本語\"}", "日本3"},
    {"list_dict_literals",
     "{% set l = [1, 'a', [2, 3], {'k': [4]}] %}{{ l[3].k[0] }} {{ l|length }} {% set d = {'x': 1, "
     "'y': {'z': 2},} %}{{ d.y.z }} {{ [1, 2,]|length }}",
     "{}", "4 4 2 2"},
    {"dict_literal_order_and_dup", "{{ {'b': 1, 'a': 2, 'b': 3} }}", "{}", "{'b': 3, 'a': 2}"},
    {"nested_brackets_in_output", "{{ {'a': {'b': 1}} }}", "{}", "{'a': {'b': 1}}"},
    {"tests_types",
     "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ n is none }} {{ x is string }} "
     "{{ 1 is number }} {{ 1.5 is number }} {{ true is number }} {{ 1 is integer }} {{ true is "
     "integer }} {{ 1.5 is float }} {{ true is boolean }} {{ 1 is boolean }}",
     "{\"x\": \"s\", \"n\": null}",
     "True False True True True True True True True False True True False"},
    {"tests_containers",
     "{{ d is mapping }} {{ l is mapping }} {{ l is sequence }} {{ 's' is sequence }} {{ d is "
     "sequence }} {{ l is iterable }} {{ 's' is iterable }} {{ 1 is iterable }} {{ nothing is "
     "iterable }}",
     "{\"d\": {}, \"l\": []}", "True False True True True True True False True"},
    {"tests_true_false",
     "{{ x is true }} {{ x is false }} {{ 1 is true }} {{ y is false }} {{ nothing is false }}",
     "{\"x\": true, \"y\": false}", "True False False True False"},
    {"tests_not", "{{ x is not none }} {{ x is not defined }} {{ not x is defined }}", "{\"x\": 1}",
     "True False False"},
    {"tests_compare",
     "{{ 2 is eq 2 }} {{ 2 is equalto 3 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 3 is gt(2) }} {{ 2 "
     "is ge 2 }} {{ 2 is le 1 }} {{ 'a' is in 'cat' }} {{ 6 is divisibleby 3 }} {{ 3 is even }} {{ "
     "3 is odd }}",
     "{}", "True False True True True True False True True False True"},
    {"tests_misc",
     "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }} {{ range is callable }} {{ "
     "none is sameas none }} {{ l is sameas l }} {{ [1] is sameas [1] }}",
     "{\"l\": [1]}", "True True False True True True False"},
    {"filter_trim",
     "[{{ '  a b \n'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ nothing|trim }}][{{ '　wide　'|trim }}]",
     "{}", "[a b][a][][wide]"},
    {"filter_length",
     "{{ 'héllo'|length }} {{ [1, 2]|length }} {{ {'a': 1}|length }} {{ nothing|length }} {{ "
     "'abc'|count }}",
     "{}", "5 2 1 0 3"},
    {"filter_tojson", "{{ x|tojson }}",
     "{\"x\": {\"s\": \"é \\\"q\\\" \\\\ \\n\\t\\u0001 </tag>\", \"i\": 1, \"f\": 2.5, \"g\": "
     "1e+16, \"h\": 3.0, \"b\": true, \"n\": null, \"l\": [1, [], {}], \"e\": {}}}",
     "{\"s\": \"é \\\"q\\\" \\\\ \\n\\t\\u0001 </tag>\", \"i\": 1, \"f\": 2.5, \"g\": 1e+16, "
     "\"h\": 3.0, \"b\": true, \"n\": null, \"l\": [1, [], {}], \"e\": {}}"},
    {"filter_tojson_indent", "{{ x|tojson(indent=2) }}\n{{ x|tojson(indent='\t') }}",
     "{\"x\": {\"a\": [1, {\"b\": null}], \"c\": [], \"d\": {}}}",
     "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": [],\n  \"d\": "
     "{}\n}\n{\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": null\n\t\t}\n\t],\n\t\"c\": [],\n\t\"d\": "
     "{}\n}"},
    {"filter_tojson_options",
     "{{ x|tojson(sort_keys=true) }} {{ x|tojson(separators=(',', ':')) }} {{ "
     "'é'|tojson(ensure_ascii=true) }} {{ '😀'|tojson(true) }}",
     "{\"x\": {\"b\": 1, \"a\": [1, 2]}}",
     "{\"a\": [1, 2], \"b\": 1} {\"b\":1,\"a\":[1,2]} \"\\u00e9\" \"\\ud83d\\ude00\""},
    {"filter_tojson_scalars",
     "{{ 'x'|tojson }} {{ 1|tojson }} {{ none|tojson }} {{ (1, 2)|tojson }} {{ {1: 'a'}|tojson }}",
     "{}", "\"x\" 1 null [1, 2] {\"1\": \"a\"}"},
    {"filter_case",
     "{{ 'hello wORLD'|upper }} {{ 'HeLLo'|lower }} {{ 'hELLO world'|capitalize }} {{ 'hello "
     "wORLD-foo (bar)'|title }} {{ 'éa'|upper }}",
     "{}", "HELLO WORLD hello Hello world Hello World-Foo (Bar) ÉA"},
    {"filter_join",
     "{{ [1, 2, 3]|join }} {{ [1, 2, 3]|join(', ') }} {{ users|join(', ', attribute='name') }} {{ "
     "'abc'|join('-') }}",
     "{\"users\": [{\"name\": \"a\"}, {\"name\": \"b\"}]}", "123 1, 2, 3 a, b a-b-c"},
    {"filter_default",
     "{{ nothing|default('dflt') }} {{ ''|default('dflt') }} {{ ''|default('dflt', true) }} {{ "
     "x|d('dflt') }} {{ none|default('d') }}",
     "{\"x\": 0}", "dflt  dflt 0 None"},
    {"filter_safe_string",
     "{{ '<b>'|safe }} {{ 1|string }} {{ [1]|string }} {{ none|string }} {{ '<&>\"\\''|e }}", "{}",
     "<b> 1 [1] None &lt;&amp;&gt;&#34;&#39;"},
    {"filter_int_float",
     "{{ '42'|int }} {{ '4.7'|int }} {{ 4.7|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ ' 0x1A "
     "'|int(base=16) }} {{ '3'|float }} {{ 'x'|float }} {{ 2|float }} {{ true|int }} {{ none|int "
     "}} {{ '1_000'|int }}",
     "{}", "42 4 4 0 -1 26 3.0 0.0 2.0 1 0 1000"},
    {"filter_list_first_last",
     "{{ 'abc'|list }} {{ [3, 4]|first }} {{ [3, 4]|last }} {{ 'xyz'|first }} [{{ []|first }}] {{ "
     "{'a': 1, 'b': 2}|first }}",
     "{}", "['a', 'b', 'c'] 3 4 x [] a"},
    {"filter_reverse", "{{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} {{ (1, 2)|reverse|list }}",
     "{}", "cba [3, 2, 1] [2, 1]"},
    {"filter_items",
     "{{ {'a': 1, 'b': 2}|items|list }} {% for k, v in {'x': 'y'}|items %}{{ k }}{{ v }}{% endfor "
     "%} {{ nothing|items|list }}",
     "{}", "[('a', 1), ('b', 2)] xy []"},
    {"filter_replace",
     "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '-') }}",
     "{}", "bbb bba -a-b-"},
    {"filter_unique",
     "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A', 'b']|unique(case_sensitive=true)|list "
     "}} {{ users|unique(attribute='g')|map(attribute='n')|list }}",
     "{\"users\": [{\"n\": 1, \"g\": \"x\"}, {\"n\": 2, \"g\": \"y\"}, {\"n\": 3, \"g\": \"x\"}]}",
     "['a', 'b'] ['a', 'A', 'b'] [1, 2]"},
    {"filter_map",
     "{{ users|map(attribute='name')|list }} {{ ['a', 'b']|map('upper')|list }} {{ "
     "users|map(attribute='age', default=0)|list }} {{ [' a ', 'b ']|map('trim')|join('|') }}",
     "{\"users\": [{\"name\": \"x\", \"age\": 3}, {\"name\": \"y\"}]}",
     "['x', 'y'] ['A', 'B'] [3, 0] a|b"},
    {"filter_select_reject",
     "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', "
     "'a']|select|list }} {{ [1, 5, 10]|select('gt', 4)|list }}",
     "{}", "[1, 3] [2, 4] [1, 'a'] [5, 10]"},
    {"filter_selectattr",
     "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }} {{ "
     "ms|rejectattr('role', 'eq', 'user')|map(attribute='c')|list }} {{ "
     "ms|selectattr('tool')|map(attribute='c')|list }} {{ ms|selectattr('role', 'in', ['tool', "
     "'system'])|list|length }}",
     "{\"ms\": [{\"role\": \"system\", \"c\": 0}, {\"role\": \"user\", \"c\": 1}, {\"role\": "
     "\"tool\", \"c\": 2, \"tool\": true}, {\"role\": \"user\", \"c\": 3}]}",
     "[1, 3] [0, 2] [2] 2"},
    {"filter_sort",
     "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ ['b', "
     "'A', 'c']|sort(case_sensitive=true) }} {{ "
     "users|sort(attribute='age')|map(attribute='name')|join }}",
     "{\"users\": [{\"name\": \"x\", \"age\": 3}, {\"name\": \"y\", \"age\": 1}]}",
     "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] yx"},
    {"filter_dictsort",
     "{{ {'b': 1, 'a': 2, 'C': 0}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': "
     "1, 'a': 2}|dictsort(reverse=true) }}",
     "{}", "[('a', 2), ('b', 1), ('C', 0)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)]"},
    {"filter_min_max_sum",
     "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ [1, 2, 3]|sum }} {{ [1.5, "
     "2]|sum }} {{ users|sum(attribute='age') }} {{ [[1], [2]]|sum(start=[]) }}",
     "{\"users\": [{\"age\": 3}, {\"age\": 4}]}", "1 3 A 6 3.5 7 [1, 2]"},
    {"filter_abs_round",
     "{{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ "
     "3|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }} {{ 1234.5|round(-2) }}",
     "{}", "3 2.5 2.0 4.0 2.67 3 3.0 2.0 1200.0"},
    {"filter_center_indent",
     "[{{ 'ab'|center(7) }}][{{ 'abc'|center(6) }}]\n{{ 'a\nb\n\nc'|indent(2) }}|{{ "
     "'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}",
     "{}", "[   ab  ][ abc  ]\na\n  b\n\n  c|  a\n  b|a\n> \n> b"},
    {"filter_format",
     "{{ '%s-%d-%05.1f-%x|%-4s|%4s|%%'|format('a', 3, 2.25, 255, 'l', 'r') }} {{ "
     "'%(k)s'|format(k='v') }} {{ '%s' % 'x' }} {{ '%s and %s' % ('a', 'b') }} {{ '%r' % 'q' }}",
     "{}", "a-3-002.2-ff|l   |   r|% v x a and b 'q'"},
    {"filter_attr", "{{ d|attr('a') }} [{{ d|attr('zz') }}]", "{\"d\": {\"a\": 1}}", " []"},
    {"filter_chain_precedence",
     "{{ -1|abs }} {{ 'a' ~ 'b'|upper }} {{ ('a' ~ 'b')|upper }} {{ [1, 2]|length + 1 }} {{ "
     "'x'|upper is string }}",
     "{}", "1 aB AB 3 True"},
    {"generators_are_true",
     "{{ 'yes' if [1]|select('none') else 'no' }} {% if messages|selectattr('role', 'eq', "
     "'system') %}always{% endif %} {{ [3, 1]|map('string')|list }} {{ [1, 2]|select|reverse }} {{ "
     "nothing|map('upper')|list }} {{ 0|select|list }}",
     "{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}]}",
     "yes always ['3', '1'] [2, 1] [] []"},
    // (SmolLM3's own template prints each tool with |string: Python's repr of a dict)
    {"filter_string_repr",
     "{% for tool in xml_tools[:] %}{{ tool | string }};{% endfor %}{{ d | string ~ '|' ~ (l | "
     "string) }}",
     "{\"xml_tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": "
     "\"it's \\\"x\\\"\", \"parameters\": {\"a\": [1, 2.5, true, null, \"é\\n\"]}}}], \"d\": {\"k\": "
     "\"v\"}, \"l\": [\"a\", \"b'c\"]}",
     "{'type': 'function', 'function': {'name': 'f', 'description': 'it\\'s \"x\"', 'parameters': "
     "{'a': [1, 2.5, True, None, 'é\\n']}}};{'k': 'v'}|['a', \"b'c\"]"},
    {"odd_even_floats", "{{ 2.5 is odd }} {{ 3.0 is odd }} {{ 4.0 is even }}", "{}",
     "False True True"},
    {"undefined_is_callable", "{{ nothing is callable }} {{ 'x' is callable }}", "{}",
     "True False"},
    {"str_strip",
     "[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ "
     "'\n\nx\n'.strip('\n') }}][{{ 'xyaxy'.strip('xy') }}][{{ 'abc'.lstrip('ba') }}]",
     "{}", "[a][a  ][  a][x][a][c]"},
    {"str_split",
     "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b "
     "c'.rsplit(' ', 1) }} {{ '  a b  c '.split(none, 1) }} {{ '  a b  c '.rsplit(none, 1) }} {{ "
     "'x</think>y</think>z'.split('</think>')[-1] }} {{ ''.split(',') }} {{ ''.split() }}",
     "{}",
     "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c'] ['a', 'b  c '] ['  a b', 'c'] z "
     "[''] []"},
    {"str_starts_ends",
     "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', "
     "'h')) }} {{ 'hello'.endswith('x') }} {{ 'hello'.startswith('l', 2) }}",
     "{}", "True True True False True"},
    {"str_case",
     "{{ 'hello world'.title() }} {{ 'they\\'re bill2x'.title() }} {{ 'hELLO'.capitalize() }} {{ "
     "'Ab'.upper() }}{{ 'Ab'.lower() }} {{ 'aB'.swapcase() }}",
     "{}", "Hello World They'Re Bill2X Hello ABab Ab"},
    {"str_replace_find",
     "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'hello'.find('l') }} {{ "
     "'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ "
     "'banana'.count('an') }} {{ 'hello'.index('e') }}",
     "{}", "a+b+c ab-c 2 3 -1 2 2 1"},
    {"str_misc",
     "{{ ', '.join(['a', 'b']) }} {{ '{} is {}'.format('x', 1) }} {{ '{0}{1}{0}'.format('a', 'b') "
     "}} {{ '{name}!'.format(name='N') }} {{ '{{}}'.format() }} {{ '42'.isdigit() }} {{ "
     "'ab'.isalpha() }} {{ '  '.isspace() }} {{ 'x'.zfill(3) }} {{ '-5'.zfill(4) }} {{ "
     "'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }} {{ 'pre_x'.removeprefix('pre_') }} {{ "
     "'a\nb\r\nc'.splitlines() }} {{ 'a=b=c'.partition('=') }}",
     "{}",
     "a, b x is 1 aba N! {} True True True 00x -005 ab..|  ab x ['a', 'b', 'c'] ('a', '=', 'b=c')"},
    {"list_methods", "{{ [1, 2, 1].count(1) }} {{ [1, 2, 3].index(2) }} {{ (1, 2).count(2) }}",
     "{}", "2 1 1"},
    {"globals_range_dict",
     "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} "
     "{{ dict(a=1, b='x') }}",
     "{}", "[0, 1, 2] [1, 3, 5] [5, 3, 1] [] {'a': 1, 'b': 'x'}"},
    // Steps and bounds near INT64_MAX: start + step would overflow, doubles would round.
    {"slice_huge_step",
     "{{ [1, 2, 3][2::9223372036854775807] }}{{ 'abc'[2::9223372036854775807] }}{{ [1, 2, "
     "3][1::-9223372036854775807 - 1] }}",
     "{}", "[3]c[2]"},
    {"range_huge_bounds",
     "{{ range(6825482640694017292, 8720749628047139639, 1895266987353122349)|list }} {{ range(0, "
     "9223372036854775807, 4611686018427387903)|list }}",
     "{}", "[6825482640694017292] [0, 4611686018427387903, 9223372036854775806]"},
    {"repeat_nothing_many_times", "{{ ('' * 10 ** 15)|length }}{{ ([] * 10 ** 15)|length }}", "{}",
     "00"},
    // A macro whose body names varargs / kwargs takes extra arguments into them.
    {"macro_varargs_kwargs",
     "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 2, 3, x=4) "
     "}}|{% macro n(a, b=2) %}{{ a }}{{ b }}{{ kwargs }}{% endmacro %}{{ n(b=3, a=1, c=5) }}|{% "
     "macro p() %}{% for x in varargs %}{{ x }}{% endfor %}{% endmacro %}{{ p('p', 'q') }}",
     "{}", "1(){}|1(2, 3){'x': 4}|13{'c': 5}|pq"},
    {"str_search",
     "{{ 'abcabc'.find('ca') }}{{ 'abcabc'.rfind('bc') }}{{ 'abcabc'.count('b') }} {{ "
     "'a,b,,c'.split(',') }} {{ 'a,b,,c'.rsplit(',', 1) }} {{ 'a-b-c'.rpartition('-') }} {{ "
     "'xaxa'.replace('a', 'yy') }} {{ 'bc' in 'abcd' }} {{ 'aaa'.rsplit('aa') }} {{ "
     "'\u00e9\u20acx\u20ac'.rfind('\u20ac') }}",
     "{}", "242 ['a', 'b', '', 'c'] ['a,b,', 'c'] ('a-b', '-', 'c') xyyxyy True ['a', ''] 3"},
};

class Language : public ::testing::TestWithParam<LangCase> {};

TEST_P(Language, MatchesJinja2) {
    const LangCase& c = GetParam();
    auto r = render(c.source, ojson::parse(c.context));
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(*r, c.expected);
}

INSTANTIATE_TEST_SUITE_P(Jinja, Language, ::testing::ValuesIn(kLanguage),
                         [](const ::testing::TestParamInfo<LangCase>& info) {
                             return std::string(info.param.name);
                         });

// Messages: what must appear in the error (ours; jinja2 fails on these too, except
// 'wordcount', which it has, and recursive loops, which it supports).
const LangCase kErrors[] = {
    {"unsupported_filter", "ok\n{{ 'a b'|wordcount }}", "{}",
     "line 2: unsupported filter 'wordcount'"},
    {"unknown_filter", "{{ 1|nosuchfilter }}", "{}", "line 1: unsupported filter 'nosuchfilter'"},
    {"unknown_test", "{{ 1 is nosuchtest }}", "{}", "line 1: unsupported test 'nosuchtest'"},
    {"unterminated_variable", "a\n{{ x", "{}", "line 2: unclosed tag: '{{' without '}}'"},
    {"unterminated_block", "{% if x ", "{}", "line 1: unclosed tag: '{%' without '%}'"},
    {"unterminated_comment", "a\n\n{# no end", "{}", "line 3: unclosed comment"},
    {"unclosed_if", "{% if true %}\nx\n", "{}",
     "unexpected end of template: 'if' from line 1 is not closed (expected 'elif' or 'else' or "
     "'endif')"},
    {"unclosed_for", "{% for x in y %}", "{}", "'for' from line 1 is not closed"},
    {"stray_endif", "x{% endif %}", "{}", "line 1: unexpected 'endif'"},
    {"unsupported_statement", "\n\n{% include 'other.jinja' %}", "{}",
     "line 3: unsupported statement 'include'"},
    {"unterminated_string", "{{ 'abc }}", "{}", "line 1: unterminated string literal"},
    {"bad_token", "{{ a \? b }}", "{}", "line 1: unexpected character '\?'"},
    {"syntax_missing_operand", "{{ 1 + }}", "{}", "line 1: unexpected end of print statement"},
    {"unbalanced_paren", "{{ (1 + 2 }}", "{}", "line 1:"},
    {"raise_exception",
     "{% if messages|length > 1 %}\n  {{ raise_exception('Only one message, please.') }}\n{% endif "
     "%}",
     "{\"messages\": [1, 2]}", "line 2: raise_exception: Only one message, please."},
    {"undefined_attribute_of_undefined", "{{ foo.bar }}", "{}", "line 1: 'foo' is undefined"},
    {"undefined_item_of_undefined", "{{ foo['bar'] }}", "{}", "'foo' is undefined"},
    {"missing_attr_chain", "{{ d.x.y }}", "{\"d\": {}}", "'dict object' has no attribute 'x'"},
    {"method_on_undefined", "{{ nothing.strip() }}", "{}", "'nothing' is undefined"},
    {"unknown_method", "{{ 'abc'.nosuch() }}", "{}", "'str object' has no attribute 'nosuch'"},
    {"call_undefined", "{{ nosuchfn() }}", "{}", "'nosuchfn' is undefined"},
    {"type_error_add", "{{ 'a' + 1 }}", "{}", "can only concatenate str (not \"int\") to str"},
    {"type_error_compare", "{{ 'a' < 1 }}", "{}",
     "'<' not supported between instances of 'str' and 'int'"},
    {"arith_on_undefined", "{{ nothing + 1 }}", "{}", "'nothing' is undefined"},
    {"division_by_zero", "{{ 1 / 0 }}", "{}", "division by zero"},
    {"list_append_unsafe", "{% set l = [] %}{{ l.append(1) }}", "{}",
     "access to attribute 'append' of 'list' object is unsafe."},
    {"set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", "{}",
     "cannot assign attribute on non-namespace object"},
    {"break_outside_loop", "{% break %}", "{}", "line 1: 'break' outside of a for loop"},
    {"unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{}",
     "too many values to unpack (expected 2)"},
    {"tojson_undefined", "{{ nothing|tojson }}", "{}",
     "Object of type Undefined is not JSON serializable"},
    {"not_iterable", "{% for x in 42 %}{% endfor %}", "{}", "'int' object is not iterable"},
    {"macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}",
     "macro 'm' takes not more than 1 argument(s)"},
    {"macro_kwargs_only_takes_keywords", "{% macro m(a) %}{{ kwargs }}{% endmacro %}{{ m(1, 2) }}",
     "{}", "macro 'm' takes not more than 1 argument(s)"},
    {"macro_varargs_only_takes_positionals",
     "{% macro m(a) %}{{ varargs }}{% endmacro %}{{ m(1, x=2) }}", "{}",
     "macro 'm' takes no keyword argument 'x'"},
    {"recursive_loop_unsupported", "{% for x in y recursive %}{% endfor %}", "{}",
     "unsupported: recursive for loops"},
    {"generator_has_no_len", "{{ [1]|select|length }}", "{}",
     "object of type 'generator' has no len()"},
    {"int_of_undefined", "{{ nothing|int }}", "{}", "'nothing' is undefined"},
    {"slice_of_int", "{{ n[1:] }}", "{\"n\": 5}", "'int' object is not subscriptable"},
    {"float_pow_overflow", "{{ 10.0 ** 400 }}", "{}", "OverflowError"},
    {"concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", "{}",
     "unsupported operand type(s) for +: 'int' and 'str'"},
};

class Errors : public ::testing::TestWithParam<LangCase> {};

TEST_P(Errors, NameTheLineAndTheConstruct) {
    const LangCase& c = GetParam();
    auto r = render(c.source, ojson::parse(c.context));
    ASSERT_FALSE(r.ok()) << "rendered: " << *r;
    EXPECT_NE(r.error().find(c.expected), std::string::npos) << r.error();
    EXPECT_EQ(r.error().rfind("line ", 0), 0u) << r.error();
}

INSTANTIATE_TEST_SUITE_P(Jinja, Errors, ::testing::ValuesIn(kErrors),
                         [](const ::testing::TestParamInfo<LangCase>& info) {
                             return std::string(info.param.name);
                         });

// ---- API ---------------------------------------------------------------------------------

std::string ok(const std::string& source, const std::string& context = "{}") {
    auto r = render(source, ojson::parse(context));
    EXPECT_TRUE(r.ok()) << r.error();
    return r.ok() ? *r : std::string("<error>");
}

std::string error_of(const std::string& source, const std::string& context = "{}") {
    auto r = render(source, ojson::parse(context));
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string("<rendered>") : r.error();
}

TEST(JinjaApi, KeyOrderFollowsTheJsonType) {
    const std::string source = "{{ d|tojson }} {% for k in d %}{{ k }}{% endfor %}";
    const std::string context = R"({"d": {"b": 1, "a": 2}})";
    // ordered_json keeps the order as written (as Python's json.loads), json sorts keys.
    EXPECT_EQ(*render(source, ojson::parse(context)), R"({"b": 1, "a": 2} ba)");
    EXPECT_EQ(*render(source, nlohmann::json::parse(context)), R"({"a": 2, "b": 1} ab)");
}

// Bytes that are not UTF-8 survive case mapping as themselves (Python's surrogateescape)
// and count as one character each; a real U+FFFD stays U+FFFD.
TEST(JinjaApi, InvalidUtf8BytesRoundTrip) {
    EXPECT_EQ(*render("{{ 'a\xff\xc3\xa9\xc3'|upper }}", nlohmann::json::object()),
              "A\xff\xc3\x89\xc3");
    EXPECT_EQ(*render("{{ 'a\xff\xc3\xa9'|length }}", nlohmann::json::object()), "3");
    EXPECT_EQ(*render("{{ '\xef\xbf\xbdx'|upper }}", nlohmann::json::object()), "\xef\xbf\xbdX");
}

TEST(JinjaApi, ContextMustBeAnObject) {
    EXPECT_FALSE(render("x", nlohmann::json::array()).ok());
    EXPECT_EQ(*render("x", nlohmann::json::object()), "x");
}

TEST(JinjaApi, ContextValues) {
    // Large unsigned numbers become floats (as Python would keep them exact, this is the
    // one lossy case); nested values come through.
    EXPECT_EQ(ok("{{ a }} {{ b }} {{ c[1].d }}",
                 R"({"a": 18446744073709551615, "b": -5, "c": [0, {"d": "x"}]})"),
              "1.8446744073709552e+19 -5 x");
}

TEST(JinjaApi, ErrorsNameTheLine) {
    const std::string e =
        error_of("line one\n{% for m in messages %}\n  {{ m.content|wordcount }}\n{% endfor %}",
                 R"({"messages": [{"content": "a b"}]})");
    EXPECT_EQ(e, "line 3: unsupported filter 'wordcount'");
    // An untaken branch does not fail: unknown filters are found when they run.
    EXPECT_EQ(ok("{% if false %}{{ x|wordcount }}{% endif %}ok"), "ok");
}

TEST(JinjaApi, RaiseExceptionMessageComesThrough) {
    EXPECT_EQ(error_of("{% if true %}\n{{ raise_exception('Only user and assistant roles are "
                       "supported!') }}{% endif %}"),
              "line 2: raise_exception: Only user and assistant roles are supported!");
}

// ---- robustness -------------------------------------------------------------------------

TEST(JinjaRobustness, DeepMacroRecursion) {
    EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
                  .find("macro calls nested too deeply"),
              std::string::npos);
    // Branching recursion (2^n calls) stops on the step limit instead.
    const std::string e = error_of(
        "{% macro f(n) %}{% if n < 40 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ "
        "f(0) }}");
    EXPECT_NE(e.find("too long"), std::string::npos) << e;
}

TEST(JinjaRobustness, HugeLoops) {
    const auto start = std::chrono::steady_clock::now();
    // Each inner range() is a new list: the data limit stops this one...
    std::string e = error_of(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    EXPECT_NE(e.find("too much data"), std::string::npos) << e;
    // ... and the step limit this one.
    e = error_of(
        "{% set r = range(1000) %}{% for i in r %}{% for j in r %}{% for k in r %}{% endfor %}{% "
        "endfor %}{% endfor %}");
    EXPECT_NE(e.find("takes too long"), std::string::npos) << e;
    e = error_of("{% for i in range(10 ** 9) %}{% endfor %}");
    EXPECT_NE(e.find("range() too long"), std::string::npos) << e;
    // ~3 s in a release build; the bound only catches a hang (sanitizers are ~10x slower).
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
}

TEST(JinjaRobustness, HugeOutputAndStrings) {
    std::string e = error_of("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}");
    EXPECT_NE(e.find("more than 32 MiB"), std::string::npos) << e;
    e = error_of("{{ 'x' * 10 ** 12 }}");
    EXPECT_NE(e.find("string too long"), std::string::npos) << e;
    e = error_of(
        "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% "
        "endfor %}");
    EXPECT_NE(e.find("string too long"), std::string::npos) << e;
    e = error_of("{{ [1] * 10 ** 9 }}");
    EXPECT_NE(e.find("list too long"), std::string::npos) << e;
    // Many medium strings: the total built is bounded too.
    e = error_of("{% for i in range(100000) %}{% set s = 'y' * 10000 %}{% endfor %}");
    EXPECT_NE(e.find("too much data"), std::string::npos) << e;
}

// Work inside a single step is bounded too: each of these is one or a few steps doing
// quadratic (or exponential) work, or a loop of cheap-looking steps over 30 MB.
TEST(JinjaRobustness, WorkInsideOneStep) {
    const auto start = std::chrono::steady_clock::now();
    for (const char* source : {
             // O(n^2) comparisons
             "{{ (range(100000)|unique|list)|length }}",
             "{% set r = range(100000)|list %}{% for i in r %}{% if -1 in r %}{% endif %}{% "
             "endfor %}",
             "{{ ([[1]] * 100000)|sum(start=[])|length }}",
             // a needle that almost matches everywhere
             "{% set h = 'a' * 30000000 %}{% set n = 'a' * 10000000 ~ 'b' %}{{ n in h }}",
             "{% set h = 'a' * 30000000 %}{% set n = 'a' * 10000000 ~ 'b' %}{{ h.split(n) }}",
             "{% set h = 'a' * 30000000 %}{% set n = 'a' * 10000000 ~ 'b' %}{{ h.rsplit(n) }}",
             "{% set h = 'a' * 30000000 %}{% set n = 'a' * 10000000 ~ 'b' %}{{ h.replace(n, "
             "'') }}",
             "{% set h = 'a' * 3000000 %}{% set n = 'a' * 1000000 ~ 'b' %}{{ h.find(n) }}",
             // decoding 30 MB at every step
             "{% set s = 'a' * 30000000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}",
             "{% set s = 'a' * 30000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor "
             "%}",
             // two lists of 2^60 leaves, shared at every level
             "{% set ns = namespace(a=1, b=1) %}{% for i in range(60) %}{% set ns.a = [ns.a, "
             "ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
         }) {
        const std::string e = error_of(source);
        EXPECT_NE(e.find("takes too long"), std::string::npos) << source << "\n" << e;
    }
    // Printing such a list stops at the size of a string.
    const std::string e = error_of(
        "{% set ns = namespace(a=1) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% "
        "endfor %}{{ ns.a }}");
    EXPECT_NE(e.find("string too long"), std::string::npos) << e;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(300));
}

TEST(JinjaRobustness, HugeWidths) {
    // width * 4 bytes of fill wraps to 0 in 64 bits.
    std::string e = error_of("{{ 'a'.center(4611686018427387904, '\U0001F600') }}");
    EXPECT_NE(e.find("string too long"), std::string::npos) << e;
    // A precision that overflows an int.
    e = error_of("{{ '%.99999999999999999999s' % 'a' }}");
    EXPECT_NE(e.find("format width too large"), std::string::npos) << e;
}

TEST(JinjaRobustness, DeepNestingInTheSource) {
    const auto deep = [](const std::string& open, const std::string& mid, const std::string& close,
                         int n) {
        std::string s;
        for (int k = 0; k < n; ++k) s += open;
        s += mid;
        for (int k = 0; k < n; ++k) s += close;
        return s;
    };
    for (int n : {250, 100000}) {
        EXPECT_NE(error_of("{{ " + deep("(", "1", ")", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of("{{ " + deep("[", "1", "]", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of("{{ " + deep("not ", "1", "", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of("{{ " + deep("- ", "1", "", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of(deep("{% if true %}", "x", "{% endif %}", n)).find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of("{{ 1" + deep(" + 1", "", "", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of("{{ 'a'" + deep("|trim", "", "", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(error_of("{{ d" + deep(".a", "", "", n) + " }}").find("nested too deeply"),
                  std::string::npos);
        EXPECT_NE(
            error_of("{{ 1" + deep(" if x else 1", "", "", n) + " }}").find("nested too deeply"),
            std::string::npos);
    }
    // Within the limits, nesting works.
    EXPECT_EQ(ok("{{ " + deep("(", "1", ")", 90) + " }}"), "1");
    EXPECT_EQ(ok(deep("{% if true %}", "x", "{% endif %}", 90)), "x");
    EXPECT_EQ(ok("{{ 0" + deep(" + 1", "", "", 150) + " }}"), "150");
}

TEST(JinjaRobustness, DeepValues) {
    // Nesting built at run time, and in the context.
    std::string e = error_of(
        "{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set ns.l = [ns.l] %}{% endfor "
        "%}");
    EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
    std::string context = "{\"x\": ";
    for (int k = 0; k < 1000; ++k) context += "[";
    for (int k = 0; k < 1000; ++k) context += "]";
    context += "}";
    e = error_of("{{ x }}", context);
    EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
    // A namespace that holds itself: printing it is an error, not endless recursion.
    e = error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
    EXPECT_NE(e.find("nested too deeply to print"), std::string::npos) << e;
}

// Random token soup: every template renders or fails, none crashes or hangs.
TEST(JinjaRobustness, RandomTemplates) {
    const std::vector<std::string> pieces = {
        "{{",        "}}",       "{%",     "%}",     "{#",       "#}",
        "{%-",       "-%}",      "{{-",    "-}}",    " ",        "\n",
        "x",         "'s'",      "\"t\"",  "1",      "2.5",      "(",
        ")",         "[",        "]",      "{",      "}",        ",",
        ":",         ".",        "|",      "+",      "-",        "*",
        "/",         "//",       "%",      "**",     "~",        "==",
        "!=",        "<",        ">",      "=",      "if",       "elif",
        "else",      "endif",    "for",    "in",     "endfor",   "set",
        "macro",     "endmacro", "not",    "and",    "or",       "is",
        "defined",   "none",     "true",   "loop",   "messages", "ns",
        "namespace", "trim",     "tojson", "length", "items",    "raise_exception",
        "range",     "m",        "break"};
    std::mt19937 rng(1234);
    const auto context =
        ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}], "x": [1, 2]})");
    int rendered = 0;
    for (int t = 0; t < 3000; ++t) {
        std::string source;
        const int n = 1 + static_cast<int>(rng() % 40);
        for (int k = 0; k < n; ++k) source += pieces[rng() % pieces.size()];
        auto r = render(source, context);
        rendered += r.ok();
        if (!r.ok()) {
            EXPECT_FALSE(r.error().empty());
        }
    }
    EXPECT_GT(rendered, 0);
}

}  // namespace
