// The tool-call formats of the model families beyond Qwen's: which one a chat template
// asks for (the real templates of tests/data/templates), the calls read from a finished
// reply, the grammar that holds a reply to them (tool_choice required / named / auto, and
// tools with a typed answer), how the tools reach each template, and the thinking blocks
// split off before the calls are read.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "edgellm/grammar.h"
#include "text/chat/gemma4_args.h"
#include "text/chat/reasoning.h"
#include "text/chat/tool_calls.h"
#include "text/chat/tool_prompt.h"
#include "text/chat/xml_calls.h"
#include "text/jinja.h"

using namespace edgellm;
using json = nlohmann::ordered_json;

namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

fs::path templates_dir() {
    return fs::path(EDGELLM_TEST_DATA) / "templates";
}

std::string template_text(const std::string& name) {
    return read(templates_dir() / (name + ".jinja"));
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "play_music", "parameters": {"type": "object",
    "properties": {"song": {"type": "string"}}, "required": ["song"]}}}
])");
const std::vector<std::string> kNames = {"get_weather", "play_music"};

bool grammar_accepts(const std::string& gbnf, const std::string& text) {
    auto g = Grammar::parse(gbnf);
    EXPECT_TRUE(g) << (g ? "" : g.error()) << "\n" << gbnf;
    if (!g) return false;
    GrammarMatcher m(*g, GrammarVocab::from_pieces({}, {}));
    return m.accept_bytes(text) && m.can_end();
}

ToolGrammar grammar(ToolFormat fmt, const std::string& choice, bool parallel = false,
                    const json* answer = nullptr, bool thinking_open = false) {
    SchemaRefusal why;
    auto g = tool_call_grammar(kTools, fmt, choice, parallel, &why, answer, thinking_open);
    EXPECT_TRUE(g) << why.message;
    return g ? *g : ToolGrammar{};
}

// A conversation rendered as chat_prompt renders it: role and content, then the further
// fields over them, with the template variables beside.
std::string render(const std::string& tmpl, const std::vector<ChatMessage>& messages, json vars) {
    json msgs = json::array();
    for (const ChatMessage& m : messages) {
        json j = {{"role", m.role}, {"content", m.content}};
        const json extra = m.extra_json.empty() ? json::object() : json::parse(m.extra_json);
        for (const auto& [k, v] : extra.items()) j[k] = v;
        msgs.push_back(j);
    }
    vars["messages"] = msgs;
    auto r = jinja::render(tmpl, vars);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error());
    return r.ok() ? *r : std::string();
}

}  // namespace

// ---- which format a template asks for ---------------------------------------------------

TEST(ToolFormats, DetectedFromTheRealTemplates) {
    const struct {
        const char* name;
        ToolFormat fmt;
        bool renders_tools;
    } cases[] = {
        {"llama32", ToolFormat::Llama3, true},    {"phi4_mini", ToolFormat::Phi4Mini, true},
        {"smollm3", ToolFormat::Hermes, false},   {"gemma4", ToolFormat::Gemma4, true},
        {"gemma4_interleaved", ToolFormat::Gemma4, true},
        {"qwen3", ToolFormat::Hermes, true},      {"qwen25_coder_15b", ToolFormat::Hermes, true},
        {"phi35", ToolFormat::Hermes, false},     {"gemma3", ToolFormat::Hermes, false},
        {"qwen35", ToolFormat::QwenXml, true},
    };
    for (const auto& c : cases) {
        const std::string t = template_text(c.name);
        ASSERT_FALSE(t.empty()) << c.name;
        EXPECT_EQ(tool_format_for_template(t), c.fmt) << c.name;
        EXPECT_EQ(template_renders_tools(t), c.renders_tools) << c.name;
    }
}

// ---- calls in a finished reply ----------------------------------------------------------

TEST(ToolFormats, Gemma4Reply) {
    auto p = parse_tool_calls(
        "Let me check.\n<|tool_call>call:get_weather{city:<|\"|>Paris, \"FR\"<|\"|>,days:2}<tool_call|>"
        "<|tool_call>call:play_music{song:<|\"|>Ode<|\"|>,opts:{loud:true,tags:[1,None]}}<tool_call|>",
        kNames);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->content, "Let me check.");
    ASSERT_EQ(p->calls.size(), 2u);
    EXPECT_EQ(p->calls[0].name, "get_weather");
    EXPECT_EQ(p->calls[0].arguments, R"({"city":"Paris, \"FR\"","days":2})");
    EXPECT_EQ(p->calls[1].arguments, R"({"song":"Ode","opts":{"loud":true,"tags":[1,null]}})");
    // The closing tag may be missing at the end; an undeclared tool or broken notation
    // leaves the whole reply content.
    p = parse_tool_calls("<|tool_call>call:play_music{song:<|\"|>x<|\"|>}", kNames);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls.size(), 1u);
    EXPECT_FALSE(parse_tool_calls("<|tool_call>call:rm{path:<|\"|>/<|\"|>}<tool_call|>", kNames));
    EXPECT_FALSE(parse_tool_calls("<|tool_call>call:get_weather{city:Paris}<tool_call|>", kNames));
    EXPECT_FALSE(parse_tool_calls("<|tool_call>call:get_weather{city:<|\"|>Paris}<tool_call|>", kNames));
    // Cut short (max_tokens): the complete calls stand, the unfinished one is dropped.
    const std::string one = "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>}<tool_call|>";
    EXPECT_FALSE(parse_tool_calls(one + "<|tool_call>call:play_mu", kNames, false));
    p = parse_tool_calls(one + "<|tool_call>call:play_mu", kNames, true);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls.size(), 1u);
    EXPECT_EQ(p->content, "");
}

TEST(ToolFormats, Gemma4ArgumentsToJson) {
    size_t used = 0;
    const std::string src = " {a:<|\"|>x\ty \\ <b<|\"|>, n:-0.5E+3 ,l:[ ],o:{},\"q\":False}tail";
    auto j = gemma4_args_to_json(src, &used);
    ASSERT_TRUE(j);
    EXPECT_EQ(*j, R"({"a":"x\ty \\ <b","n":-0.5E+3,"l":[],"o":{},"q":false})");
    EXPECT_EQ(src.substr(used), "tail");
    EXPECT_TRUE(json::parse(*j, nullptr, false).is_object());
    for (const char* bad : {"{a:01}", "{a:1.}", "{a:nope}", "{:1}", "{a:1", "[1]", "{a:[1}",
                            "{a:<|\"x<|\"|>}", "{a}"}) {
        EXPECT_FALSE(gemma4_args_to_json(bad, &used)) << bad;
    }
}

TEST(ToolFormats, Phi4MiniReply) {
    // <|tool_call|> and <|/tool_call|> are control tokens: usually only the array is left.
    const std::string arr = R"([{"name": "get_weather", "arguments": {"city": "Paris"}}, )"
                            R"({"name": "play_music", "arguments": {"song": "x"}}])";
    for (const std::string& text : {arr, "<|tool_call|>" + arr + "<|/tool_call|>", "functools" + arr}) {
        auto p = parse_tool_calls(text, kNames);
        ASSERT_TRUE(p) << text;
        ASSERT_EQ(p->calls.size(), 2u);
        EXPECT_EQ(p->calls[1].arguments, R"({"song":"x"})");
        EXPECT_EQ(p->content, "");
    }
    auto p = parse_tool_calls("I'll look it up.<|tool_call|>" + arr + "<|/tool_call|>", kNames);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->content, "I'll look it up.");
    EXPECT_FALSE(parse_tool_calls(R"([{"name": "rm", "arguments": {}}])", kNames));
}

TEST(ToolFormats, HeldBackWhileStreamingWithoutAGrammar) {
    EXPECT_EQ(tool_safe_prefix("Sure.<|tool_call>call:"), 5u);
    EXPECT_EQ(tool_safe_prefix("Sure.<|tool_call|>["), 5u);
    EXPECT_EQ(tool_safe_prefix("Sure.<|tool_c"), 5u);
    EXPECT_EQ(tool_safe_prefix("functools[{"), 0u);
    EXPECT_EQ(tool_safe_prefix("[{\"name\""), 0u);
    EXPECT_EQ(tool_safe_prefix("Sure. <b>bold</b>"), 17u);
}

// ---- the grammars -------------------------------------------------------------------------

TEST(ToolFormats, Gemma4Grammar) {
    const std::string call = "<|tool_call>call:get_weather{city:<|\"|>Paris \"la\" <3<|\"|>,days:3}<tool_call|>";
    auto req = grammar(ToolFormat::Gemma4, "required", true);
    EXPECT_TRUE(req.triggers.empty());
    EXPECT_FALSE(req.arguments_typed) << "required keys and bounds are checked after";
    EXPECT_TRUE(grammar_accepts(req.gbnf, call));
    EXPECT_TRUE(grammar_accepts(req.gbnf, call + call)) << "parallel";
    EXPECT_TRUE(grammar_accepts(req.gbnf, "<|channel>thought\nParis, so the weather.<channel|>" + call))
        << "its thinking channel first";
    EXPECT_TRUE(grammar_accepts(req.gbnf, "<|tool_call>call:play_music{song:<|\"|>a<|\"|>}<tool_call|>"));
    EXPECT_FALSE(grammar_accepts(req.gbnf, "It is sunny.")) << "required: no free text";
    EXPECT_FALSE(grammar_accepts(req.gbnf, "<|tool_call>call:rm{}<tool_call|>")) << "undeclared";
    EXPECT_FALSE(grammar_accepts(req.gbnf, "<|tool_call>call:get_weather{city:Paris}<tool_call|>"));
    // the schema's keys, in any order, with their types
    EXPECT_TRUE(grammar_accepts(req.gbnf, "<|tool_call>call:get_weather{days:2,city:<|\"|>Oslo<|\"|>}<tool_call|>"));
    EXPECT_FALSE(grammar_accepts(req.gbnf, "<|tool_call>call:get_weather{town:<|\"|>Oslo<|\"|>}<tool_call|>"));
    EXPECT_FALSE(grammar_accepts(req.gbnf, "<|tool_call>call:get_weather{city:3}<tool_call|>"));
    EXPECT_FALSE(grammar_accepts(req.gbnf, "<|tool_call>call:get_weather{city:<|\"|>Oslo<|\"|>,days:1.5}<tool_call|>"));
    auto single = grammar(ToolFormat::Gemma4, "required", false);
    EXPECT_FALSE(grammar_accepts(single.gbnf, call + call));
    auto named = grammar(ToolFormat::Gemma4, "play_music");
    EXPECT_FALSE(grammar_accepts(named.gbnf, call));
    EXPECT_TRUE(grammar_accepts(named.gbnf, "<|tool_call>call:play_music{song:<|\"|>x<|\"|>}<tool_call|>"));
    // auto: lazy from the first <|tool_call> (text before it is the model's own)
    auto aut = grammar(ToolFormat::Gemma4, "auto");
    ASSERT_EQ(aut.triggers.size(), 1u);
    EXPECT_EQ(aut.triggers[0].word, "<|tool_call>");
    EXPECT_FALSE(aut.triggers[0].at_start);
    EXPECT_TRUE(grammar_accepts(aut.gbnf, call));
    // tools and a typed answer: a call or the answer, not lazy
    const json answer = json::parse(R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]})");
    auto mix = grammar(ToolFormat::Gemma4, "auto", false, &answer);
    EXPECT_TRUE(mix.triggers.empty());
    EXPECT_TRUE(grammar_accepts(mix.gbnf, call));
    EXPECT_TRUE(grammar_accepts(mix.gbnf, "{\"answer\": \"sunny\"}"));
    EXPECT_FALSE(grammar_accepts(mix.gbnf, "{\"answer\": 1}"));
    EXPECT_FALSE(grammar_accepts(mix.gbnf, "It is sunny."));
}

TEST(ToolFormats, Gemma4SchemaRule) {
    const json schema = json::parse(R"({"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "filter": {"type": "object", "properties": {"after": {"type": "string"}, "limit": {"type": ["integer", "null"]}}},
        "extra": {"description": "anything"}}})");
    std::string rules;
    const std::string root = gemma4_schema_rule(schema, "g-t0", &rules);
    const std::string gbnf = "root ::= " + root + "\ntc-ws ::= [ \\t\\n]{0,4}\n" + kGemma4ValueRules + rules;
    const std::string q = "<|\"|>";
    EXPECT_TRUE(grammar_accepts(gbnf, "{unit:" + q + "celsius" + q + ",tags:[" + q + "a" + q + "," + q + "b" + q +
                                          "],filter:{limit:null,after:" + q + "x" + q + "},extra:{any:[1]}}"));
    EXPECT_TRUE(grammar_accepts(gbnf, "{}"));
    EXPECT_FALSE(grammar_accepts(gbnf, "{unit:" + q + "kelvin" + q + "}")) << "enum";
    EXPECT_FALSE(grammar_accepts(gbnf, "{tags:[1]}")) << "items";
    EXPECT_FALSE(grammar_accepts(gbnf, "{filter:{limit:" + q + "5" + q + "}}")) << "nested types";
    EXPECT_FALSE(grammar_accepts(gbnf, "{filter:{before:1}}")) << "nested keys";
    // a key the notation cannot write bare: that object takes any keys
    rules.clear();
    const std::string odd = gemma4_schema_rule(
        json::parse(R"({"type": "object", "properties": {"a b": {"type": "string"}}})"), "g-t1", &rules);
    EXPECT_TRUE(grammar_accepts("root ::= " + odd + "\ntc-ws ::= [ \\t\\n]{0,4}\n" + kGemma4ValueRules + rules,
                                "{whatever:1}"));
}

TEST(ToolFormats, Phi4MiniGrammar) {
    const std::string one = R"({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})";
    const std::string two = R"({"name": "play_music", "arguments": {"song": "x"}})";
    auto req = grammar(ToolFormat::Phi4Mini, "required", true);
    EXPECT_TRUE(req.triggers.empty());
    EXPECT_TRUE(req.arguments_typed);
    EXPECT_TRUE(grammar_accepts(req.gbnf, "[" + one + "]"));
    EXPECT_TRUE(grammar_accepts(req.gbnf, "[" + one + ", " + two + "]")) << "parallel: one array";
    EXPECT_FALSE(grammar_accepts(req.gbnf, R"([{"name": "get_weather", "arguments": {"days": 2}}])"))
        << "the schema holds: city is required";
    EXPECT_FALSE(grammar_accepts(req.gbnf, R"([{"name": "get_weather", "arguments": {"city": "P", "days": 9}}])"));
    EXPECT_FALSE(grammar_accepts(req.gbnf, one)) << "calls are an array";
    EXPECT_FALSE(grammar_accepts(req.gbnf, "Sure!"));
    auto single = grammar(ToolFormat::Phi4Mini, "required", false);
    EXPECT_FALSE(grammar_accepts(single.gbnf, "[" + one + ", " + two + "]"));
    auto named = grammar(ToolFormat::Phi4Mini, "play_music");
    EXPECT_FALSE(grammar_accepts(named.gbnf, "[" + one + "]"));
    EXPECT_TRUE(grammar_accepts(named.gbnf, "[" + two + "]"));
    auto aut = grammar(ToolFormat::Phi4Mini, "auto");
    ASSERT_EQ(aut.triggers.size(), 1u);
    EXPECT_EQ(aut.triggers[0].word, "[");
    EXPECT_TRUE(aut.triggers[0].at_start);
    const json answer = json::parse(R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]})");
    auto mix = grammar(ToolFormat::Phi4Mini, "auto", false, &answer);
    EXPECT_TRUE(mix.triggers.empty());
    EXPECT_TRUE(grammar_accepts(mix.gbnf, "[" + one + "]"));
    EXPECT_TRUE(grammar_accepts(mix.gbnf, "{\"answer\": \"sunny\"}"));
    EXPECT_FALSE(grammar_accepts(mix.gbnf, "It is sunny."));
}

// Llama 3.2 (bare {"name", "parameters"}) and SmolLM3 (Hermes <tool_call> blocks) use the
// formats of before; their templates ask for them (DetectedFromTheRealTemplates) and a
// call each writes fits the grammar and parses back.
TEST(ToolFormats, Llama32AndSmolLM3CallsRoundTrip) {
    const std::string llama = R"({"name": "get_weather", "parameters": {"city": "Paris"}})";
    auto g = grammar(ToolFormat::Llama3, "required");
    EXPECT_TRUE(grammar_accepts(g.gbnf, llama));
    EXPECT_FALSE(grammar_accepts(g.gbnf, "Sure!"));
    auto p = parse_tool_calls("<|python_tag|>" + llama, kNames);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls[0].arguments, R"({"city":"Paris"})");
    const std::string smol =
        "<tool_call>\n{\"name\": \"play_music\", \"arguments\": {\"song\": \"x\"}}\n</tool_call>";
    g = grammar(ToolFormat::Hermes, "required");
    EXPECT_TRUE(grammar_accepts(g.gbnf, smol));
    EXPECT_FALSE(grammar_accepts(g.gbnf, "Sure!"));
    // SmolLM3 thinks first (/think): the block is split off, then the call is read.
    const ReasoningSplit r = split_reasoning("<think>\nThe user wants music.\n</think>\n" + smol, false);
    EXPECT_EQ(r.reasoning, "\nThe user wants music.\n");
    p = parse_tool_calls(r.content, kNames);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls[0].name, "play_music");
}

// ---- Qwen3.5's XML calls -------------------------------------------------------------------

namespace {

// A call as Qwen3.5's template writes one.
std::string xml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
    std::string s = "<tool_call>\n<function=" + name + ">\n";
    for (const auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
    return s + "</function>\n</tool_call>";
}

// A tool with a parameter of each kind.
const json kTypedTools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
  "type": "object", "properties": {
    "s": {"type": "string"}, "n": {"type": "integer"}, "x": {"type": "number"}, "b": {"type": "boolean"},
    "o": {"type": "object"}, "a": {"type": "array", "items": {"type": "integer"}},
    "m": {"type": ["string", "integer"]}, "u": {"description": "anything"},
    "e": {"enum": ["on", "off"]}, "r": {"$ref": "#/$defs/level"}},
  "$defs": {"level": {"type": "integer", "minimum": 0, "maximum": 3}}}}}])");

}  // namespace

// The calls of the template's own rendering of an assistant turn (jinja2's, in
// tests/data/templates/qwen35.tool_calls.txt) read back give the arguments it was given.
TEST(ToolFormats, Qwen35ReadsBackWhatItsTemplateWrote) {
    const json c = json::parse(read(templates_dir() / "qwen35.tool_calls.json"));
    const std::string txt = read(templates_dir() / "qwen35.tool_calls.txt");
    const std::string open = "<|im_start|>assistant\n";
    const size_t from = txt.find(open) + open.size();
    const std::string turn = txt.substr(from, txt.find("<|im_end|>", from) - from);
    const ReasoningSplit r = split_reasoning(turn, false);
    EXPECT_EQ(r.reasoning, "\nThe weather and the notes.\n");
    auto p = parse_tool_calls(r.content, {"get_weather", "search_notes"}, false, &c["tools"]);
    ASSERT_TRUE(p) << r.content;
    EXPECT_EQ(p->content, "Let me check.");
    const json& want = c["messages"][2]["tool_calls"];
    ASSERT_EQ(p->calls.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(p->calls[i].name, want[i]["function"]["name"]);
        // (its pinned: true was written True)
        EXPECT_EQ(json::parse(p->calls[i].arguments), want[i]["function"]["arguments"]) << p->calls[i].arguments;
    }
}

TEST(ToolFormats, Qwen35ValuesTypedByTheirSchemas) {
    const std::vector<std::string> names = {"f"};
    const auto value = [&](const std::string& key, const std::string& raw, const json* tools = &kTypedTools) {
        auto p = parse_tool_calls(xml_call("f", {{key, raw}}), names, false, tools);
        if (!p || p->calls.size() != 1) return json("<no call>");
        return json::parse(p->calls[0].arguments)[key];
    };
    EXPECT_EQ(value("s", "42"), json("42")) << "a string stays as written";
    EXPECT_EQ(value("s", "  two\nlines <b>x</b> \"q\" \\ </param "), json("  two\nlines <b>x</b> \"q\" \\ </param "));
    EXPECT_EQ(value("n", "7"), json(7));
    EXPECT_EQ(value("n", " 7 "), json(7));
    EXPECT_EQ(value("x", "2.5"), json(2.5));
    EXPECT_EQ(value("x", "3"), json(3));
    EXPECT_EQ(value("b", "true"), json(true));
    EXPECT_EQ(value("b", "False"), json(false)) << "Python's, as the template writes earlier calls";
    EXPECT_EQ(value("o", "{\"k\": [1, null]}"), json::parse(R"({"k": [1, null]})"));
    EXPECT_EQ(value("a", "[1, 2]"), json::array({1, 2}));
    EXPECT_EQ(value("m", "12"), json(12));
    EXPECT_EQ(value("m", "twelve"), json("twelve"));
    EXPECT_EQ(value("m", "true"), json("true")) << "not of one of its types: the text";
    EXPECT_EQ(value("u", "null"), json(nullptr)) << "no type: JSON when it is";
    EXPECT_EQ(value("u", "Paris"), json("Paris"));
    EXPECT_EQ(value("e", "on"), json("on"));
    EXPECT_EQ(value("r", "2"), json(2)) << "its $ref resolved";
    EXPECT_EQ(value("n", "seven"), json("seven")) << "not a number: the text (the finished call's check refuses it)";
    EXPECT_EQ(value("n", "1.5"), json("1.5"));
    EXPECT_EQ(value("zz", "5"), json(5)) << "an undeclared parameter: of any type";
    EXPECT_EQ(value("s", "42", nullptr), json(42)) << "without the tools: of any type";
    // The newlines around a value are not its own, one on each side.
    auto p = parse_tool_calls("<tool_call><function=f><parameter=s>x</parameter><parameter=n>\n\n1\n\n</parameter>"
                              "<parameter=e>\n\non\n\n</parameter></function></tool_call>",
                              names, false, &kTypedTools);
    ASSERT_TRUE(p);
    EXPECT_EQ(json::parse(p->calls[0].arguments), json::parse(R"({"s": "x", "n": 1, "e": "\non\n"})"));
    p = parse_tool_calls("<tool_call>\n<function=f>\n</function>\n</tool_call>", names, false, &kTypedTools);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls[0].arguments, "{}");
}

TEST(ToolFormats, Qwen35Reply) {
    const std::string oslo = xml_call("get_weather", {{"city", "Oslo"}});
    auto p = parse_tool_calls("Let me check.\n\n" + oslo + "\n" + xml_call("play_music", {{"song", "Ode"}}), kNames,
                              false, &kTools);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->content, "Let me check.");
    ASSERT_EQ(p->calls.size(), 2u);
    EXPECT_EQ(p->calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(p->calls[1].name, "play_music");
    // The closing </tool_call> may be missing at the end.
    p = parse_tool_calls(oslo.substr(0, oslo.size() - 12), kNames, false, &kTools);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls.size(), 1u);
    // An undeclared function, or a call not in the form, leaves the whole reply content.
    EXPECT_FALSE(parse_tool_calls("Sure.\n" + xml_call("rm", {{"path", "/"}}), kNames, false, &kTools));
    EXPECT_FALSE(parse_tool_calls("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                                  "</tool_call>", kNames, false, &kTools)) << "no </function>";
    EXPECT_FALSE(parse_tool_calls("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</tool_call>",
                                  kNames, false, &kTools)) << "no </parameter>";
    EXPECT_FALSE(parse_tool_calls("<tool_call>\n<function=get_weather>\ncity=Paris\n</function>\n</tool_call>",
                                  kNames, false, &kTools));
    // The <function=...> block alone (Qwen3-Coder leaves the <tool_call> out at times).
    const std::string bare = "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                             "<parameter=days>\n2\n</parameter>\n</function>";
    p = parse_tool_calls("Sure.\n" + bare + "\n" + bare, kNames, false, &kTools);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->content, "Sure.");
    ASSERT_EQ(p->calls.size(), 2u);
    EXPECT_EQ(p->calls[1].arguments, R"({"city":"Oslo","days":2})");
    EXPECT_FALSE(parse_tool_calls("Use <function=get_weather> like this.", kNames, false, &kTools));
    // Cut short (max_tokens): the complete calls stand, the unfinished one is dropped.
    EXPECT_FALSE(parse_tool_calls(oslo + "\n<tool_call>\n<function=play_mu", kNames, false, &kTools));
    p = parse_tool_calls(oslo + "\n<tool_call>\n<function=play_mu", kNames, true, &kTools);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls.size(), 1u);
    EXPECT_EQ(p->content, "");
}

TEST(ToolFormats, Qwen35Grammar) {
    const std::string paris = xml_call("get_weather", {{"city", "Paris"}, {"days", "3"}});
    const std::string song = xml_call("play_music", {{"song", "Ode"}});
    auto req = grammar(ToolFormat::QwenXml, "required", true);
    EXPECT_TRUE(req.triggers.empty());
    EXPECT_TRUE(req.arguments_typed);
    EXPECT_TRUE(grammar_accepts(req.gbnf, paris));
    EXPECT_TRUE(grammar_accepts(req.gbnf, xml_call("get_weather", {{"city", "Saint-<Denis> </param \"x\"\nline"}})));
    EXPECT_TRUE(grammar_accepts(req.gbnf, paris + "\n" + song)) << "parallel";
    EXPECT_TRUE(grammar_accepts(req.gbnf, "<think>\nParis, so the weather.\n</think>\n\n" + paris)) << "thinking first";
    EXPECT_FALSE(grammar_accepts(req.gbnf, "It is sunny.")) << "required: no free text";
    EXPECT_FALSE(grammar_accepts(req.gbnf, xml_call("get_weather", {{"days", "3"}}))) << "city is required";
    EXPECT_FALSE(grammar_accepts(req.gbnf, xml_call("get_weather", {{"city", "P"}, {"days", "9"}}))) << "days <= 7";
    EXPECT_FALSE(grammar_accepts(req.gbnf, xml_call("get_weather", {{"city", "P"}, {"days", "three"}})));
    EXPECT_FALSE(grammar_accepts(req.gbnf, xml_call("get_weather", {{"city", "P"}, {"town", "Q"}})));
    EXPECT_FALSE(grammar_accepts(req.gbnf, xml_call("get_weather", {{"city", "a</parameter>b"}})));
    EXPECT_FALSE(grammar_accepts(req.gbnf, xml_call("rm", {}))) << "undeclared";
    EXPECT_FALSE(grammar_accepts(grammar(ToolFormat::QwenXml, "required").gbnf, paris + "\n" + song));
    auto named = grammar(ToolFormat::QwenXml, "play_music");
    EXPECT_FALSE(grammar_accepts(named.gbnf, paris));
    EXPECT_TRUE(grammar_accepts(named.gbnf, song));
    // The prompt opened the thinking: it is closed before the calls, and holds none.
    auto thinking = grammar(ToolFormat::QwenXml, "required", false, nullptr, true);
    EXPECT_TRUE(grammar_accepts(thinking.gbnf, "The weather, so get_weather.\n</think>\n\n" + paris));
    EXPECT_FALSE(grammar_accepts(thinking.gbnf, paris));
    EXPECT_FALSE(grammar_accepts(thinking.gbnf, "So: " + paris + "\n</think>\n\n" + paris));
    // auto: text, or text that ends in calls; every "<tool_call>" a valid call (not lazy)
    auto aut = grammar(ToolFormat::QwenXml, "auto");
    EXPECT_TRUE(aut.triggers.empty());
    EXPECT_TRUE(grammar_accepts(aut.gbnf, "It is sunny."));
    EXPECT_TRUE(grammar_accepts(aut.gbnf, "Let me check.\n\n" + paris));
    EXPECT_TRUE(grammar_accepts(aut.gbnf, "<think>\nx\n</think>\n\nIt is sunny <3."));
    EXPECT_FALSE(grammar_accepts(aut.gbnf, "Let me check.\n\n" + xml_call("rm", {})));
    EXPECT_FALSE(grammar_accepts(aut.gbnf, "Let me check. <tool_call> is how I call."));
    EXPECT_FALSE(grammar_accepts(aut.gbnf, paris + "\nDone.")) << "nothing after the calls";
    const std::string bare = "<function=play_music>\n<parameter=song>\nOde\n</parameter>\n</function>\n";
    EXPECT_TRUE(grammar_accepts(aut.gbnf, "Playing.\n" + bare)) << "a call without its <tool_call>";
    EXPECT_FALSE(grammar_accepts(aut.gbnf, "Use <function=play_music> to play."));
    EXPECT_FALSE(grammar_accepts(req.gbnf, bare)) << "required: the template's form";
    auto aut_thinking = grammar(ToolFormat::QwenXml, "auto", false, nullptr, true);
    EXPECT_TRUE(grammar_accepts(aut_thinking.gbnf, "Easy.\n</think>\n\nIt is sunny."));
    EXPECT_FALSE(grammar_accepts(aut_thinking.gbnf, "It is sunny.")) << "the thinking never closed";
    // tools and a typed answer: calls or the answer, nothing else
    const json answer = json::parse(R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]})");
    auto mix = grammar(ToolFormat::QwenXml, "auto", false, &answer, true);
    EXPECT_TRUE(grammar_accepts(mix.gbnf, "Hm.\n</think>\n\n" + paris));
    EXPECT_TRUE(grammar_accepts(mix.gbnf, "Hm.\n</think>\n\n{\"answer\": \"sunny\"}"));
    EXPECT_FALSE(grammar_accepts(mix.gbnf, "Hm.\n</think>\n\n{\"answer\": 1}"));
    EXPECT_FALSE(grammar_accepts(mix.gbnf, "Hm.\n</think>\n\nIt is sunny."));
}

TEST(ToolFormats, Qwen35GrammarTypesEachValue) {
    SchemaRefusal why;
    auto g = tool_call_grammar(kTypedTools, ToolFormat::QwenXml, "required", false, &why);
    ASSERT_TRUE(g) << why.message;
    EXPECT_TRUE(g->arguments_typed);
    const struct {
        const char *key, *raw;
        bool accepted;
    } cases[] = {
        {"s", "any text {[<", true}, {"n", "-7", true},       {"n", "7.5", false},     {"n", "seven", false},
        {"x", "7.5", true},          {"b", "false", true},    {"b", "yes", false},     {"o", "{\"k\": 1}", true},
        {"o", "k=1", false},         {"a", "[1, 2]", true},   {"a", "[\"1\"]", false}, {"m", "anything", true},
        {"u", "anything", true},     {"e", "off", true},      {"e", "maybe", false},   {"r", "3", true},
        {"r", "5", false},  // (its $ref's maximum)
        {"b", "True", true},  // (as the template writes earlier calls' booleans)
    };
    for (const auto& c : cases)
        EXPECT_EQ(grammar_accepts(g->gbnf, xml_call("f", {{c.key, c.raw}})), c.accepted) << c.key << " = " << c.raw;
    EXPECT_TRUE(grammar_accepts(g->gbnf, xml_call("f", {{"s", "a"}, {"n", "1"}, {"b", "true"}})));
    EXPECT_TRUE(grammar_accepts(g->gbnf, xml_call("f", {}))) << "nothing required";
    // Parameters without properties: any, unless the schema says none.
    const json open_tools = json::parse(R"([
        {"type": "function", "function": {"name": "any"}},
        {"type": "function", "function": {"name": "none", "parameters": {"type": "object", "additionalProperties": false}}}])");
    g = tool_call_grammar(open_tools, ToolFormat::QwenXml, "required", false, &why);
    ASSERT_TRUE(g) << why.message;
    EXPECT_TRUE(g->arguments_typed);
    EXPECT_TRUE(grammar_accepts(g->gbnf, xml_call("any", {{"x", "1"}, {"why not", "two\nlines"}})));
    EXPECT_TRUE(grammar_accepts(g->gbnf, xml_call("none", {})));
    EXPECT_FALSE(grammar_accepts(g->gbnf, xml_call("none", {{"x", "1"}})));
    // A string's pattern is not followed in raw text: those calls are checked once finished.
    const json pattern = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}}}}}])");
    g = tool_call_grammar(pattern, ToolFormat::QwenXml, "required", false, &why);
    ASSERT_TRUE(g);
    EXPECT_FALSE(g->arguments_typed);
    // What cannot be enforced is refused, naming where.
    const json bad = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "not": {"const": 1}}}}}}])");
    EXPECT_FALSE(tool_call_grammar(bad, ToolFormat::QwenXml, "required", false, &why));
    EXPECT_EQ(why.keyword, "not");
    EXPECT_EQ(why.path, "$.tools[0].function.parameters.properties.a.not");
    const json odd = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a>b": {"type": "string"}}}}}])");
    EXPECT_FALSE(tool_call_grammar(odd, ToolFormat::QwenXml, "required", false, &why));
    EXPECT_EQ(why.path, "$.tools[0].function.parameters.properties[\"a>b\"]");
}

// The rule of text without some words admits exactly the texts that hold none of them.
TEST(ToolFormats, TextWithoutWordsIsExact) {
    const std::vector<std::string_view> words = {"</think>", "<tool_call>"};
    std::string rules;
    gbnf_text_without(words, "t", &rules);
    auto g = Grammar::parse("root ::= t\n" + rules);
    ASSERT_TRUE(g) << g.error() << "\n" << rules;
    const char* pieces[] = {"<", "</", "</think>", "<tool_call>", "</thi", "<tool", "x", "<<", ">", "t", "think>", "_call>", "\n"};
    std::mt19937 rng(7);
    for (int i = 0; i < 4000; ++i) {
        std::string s;
        for (size_t n = rng() % 7; n > 0; --n) s += pieces[rng() % std::size(pieces)];
        bool clean = true;
        for (std::string_view w : words) clean = clean && s.find(w) == std::string::npos;
        GrammarMatcher m(*g, GrammarVocab::from_pieces({}, {}));
        EXPECT_EQ(m.accept_bytes(s) && m.can_end(), clean) << s;
    }
}

// ---- Gemma 4's thinking channel ----------------------------------------------------------

TEST(ToolFormats, Gemma4ThoughtChannel) {
    const struct {
        const char* reply;
        const char* reasoning;
        const char* content;
    } cases[] = {
        {"<|channel>thought\nParis is in France.<channel|>It is sunny.", "Paris is in France.", "It is sunny."},
        {"<|channel>thought\nStill thinking", "Still thinking", ""},
        {"It is sunny.", "", "It is sunny."},
        // a thought block later in the answer is reasoning; lone channel tokens are dropped
        {"Sunny.<|channel>thought\nmore<channel|> Really.<channel|>", "more", "Sunny.Really."},
        {"<|channel>thought\n<channel|>Hi<|channel>", "", "Hi"},
        {"Less than <3 and <|chan", "", "Less than <3 and <|chan"},
    };
    for (const auto& c : cases) {
        const ReasoningSplit whole = split_reasoning(c.reply, false);
        EXPECT_EQ(whole.reasoning, c.reasoning) << c.reply;
        EXPECT_EQ(whole.content, c.content) << c.reply;
        // every cut in two gives the same
        const std::string reply = c.reply;
        for (size_t cut = 0; cut <= reply.size(); ++cut) {
            ReasoningStream s(false);
            ReasoningSplit parts;
            s.push(std::string_view(reply).substr(0, cut), &parts.reasoning, &parts.content);
            s.push(std::string_view(reply).substr(cut), &parts.reasoning, &parts.content);
            s.finish(&parts.reasoning, &parts.content);
            EXPECT_EQ(parts.reasoning, whole.reasoning) << reply << " cut at " << cut;
            EXPECT_EQ(parts.content, whole.content) << reply << " cut at " << cut;
        }
    }
    // Thinking off: the template's prompt already holds an empty thought, the reply is
    // all content.
    const std::string off = read(templates_dir() / "gemma4.thinking_off.txt");
    EXPECT_NE(off.find("<|channel>thought\n<channel|>"), std::string::npos);
    EXPECT_FALSE(prompt_opens_thinking(off));
}

// ---- how the tools reach each template ---------------------------------------------------

// Phi-4-mini's template reads the tools from the system message: they go there, as the
// reference rendering of tests/data/templates/phi4_mini.tools has them.
TEST(ToolFormats, Phi4MiniTemplateGetsToolsInTheSystemMessage) {
    const std::string tmpl = template_text("phi4_mini");
    const json ctx = json::parse(read(templates_dir() / "phi4_mini.tools.json"));
    const json tools = json::parse(read(templates_dir() / "qwen3.tools.json"))["tools"];
    std::vector<ChatMessage> messages = {{"system", ctx["messages"][0]["content"].get<std::string>()},
                                         {"user", ctx["messages"][1]["content"].get<std::string>()}};
    json kw = json::object();
    prepare_tool_prompt(tmpl, tools, &messages, &kw);
    json vars = {{"add_generation_prompt", true}, {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}};
    EXPECT_EQ(render(tmpl, messages, vars), read(templates_dir() / "phi4_mini.tools.txt"));
    // no system message: one of the model card's wording carries them
    messages = {{"user", "Hi"}};
    prepare_tool_prompt(tmpl, tools, &messages, &kw);
    EXPECT_EQ(render(tmpl, messages, vars).rfind("<|system|>You are a helpful assistant with some tools.<|tool|>[{\"name\": \"get_weather\"", 0), 0u);
    // without tools the conversation is left alone
    messages = {{"user", "Hi"}};
    prepare_tool_prompt(tmpl, json::array(), &messages, &kw);
    EXPECT_EQ(render(tmpl, messages, vars), "<|user|>Hi<|end|><|assistant|>");
}

// Gemma 4's first template reads tool results from the assistant message: OpenAI's role
// "tool" messages are moved there (llama.cpp's workaround), giving the reference rendering
// of tests/data/templates/gemma4_interleaved.tool_responses.
TEST(ToolFormats, Gemma4FirstTemplateGetsToolResponses) {
    const json ctx = json::parse(read(templates_dir() / "gemma4_interleaved.tool_responses.json"));
    const json& m = ctx["messages"];
    std::vector<ChatMessage> messages = {
        {"system", m[0]["content"].get<std::string>()},
        {"user", m[1]["content"].get<std::string>()},
        {"assistant", "", json{{"content", nullptr}, {"tool_calls", m[2]["tool_calls"]}}.dump()},
        {"tool", "{\"temperature\": 18.5, \"condition\": \"sunny\"}", R"({"tool_call_id": "call12345"})"},
        {"assistant", m[2]["content"].get<std::string>()},
        {"user", m[3]["content"].get<std::string>()},
    };
    json kw = json::object();
    const std::string tmpl = template_text("gemma4_interleaved");
    prepare_tool_prompt(tmpl, ctx["tools"], &messages, &kw);
    ASSERT_EQ(messages.size(), 4u);
    json vars = ctx;
    vars.erase("messages");
    EXPECT_EQ(render(tmpl, messages, vars), read(templates_dir() / "gemma4_interleaved.tool_responses.txt"));
    // Ending on that answer, the template opens no next model turn: it is opened (as
    // llama.cpp does); other prompts are left as they are.
    messages.pop_back();
    const std::string off = render(tmpl, messages, vars);  // (thinking off)
    const std::string answer_end = "sunny.<turn|>\n", empty_thought = "<|channel>thought\n<channel|>";
    ASSERT_EQ(off.substr(off.size() - answer_end.size() - empty_thought.size()), answer_end + empty_thought);
    EXPECT_EQ(complete_generation_prompt(tmpl, off),
              off.substr(0, off.size() - empty_thought.size()) + "<|turn>model\n" + empty_thought);
    vars["enable_thinking"] = true;
    const std::string on = render(tmpl, messages, vars);
    ASSERT_EQ(on.substr(on.size() - answer_end.size()), answer_end);
    EXPECT_EQ(complete_generation_prompt(tmpl, on), on + "<|turn>model\n");
    EXPECT_EQ(complete_generation_prompt(template_text("qwen3"), "x<turn|>\n"), "x<turn|>\n");
    // The later template reads role "tool" messages itself: left as they are.
    std::vector<ChatMessage> same = {{"user", "x"}, {"assistant", "", json{{"tool_calls", m[2]["tool_calls"]}}.dump()},
                                     {"tool", "18"}};
    prepare_tool_prompt(template_text("gemma4"), ctx["tools"], &same, &kw);
    EXPECT_EQ(same.size(), 3u);
}

// SmolLM3: llama.cpp's copy of its template renders no tools, so a system prompt of ours
// declares them and its <tool_call> format; Hugging Face's own reads `xml_tools`.
TEST(ToolFormats, SmolLM3TemplatesGetTheTools) {
    const std::string tmpl = template_text("smollm3");
    std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Play x"}};
    json kw = {{"enable_thinking", false}};
    prepare_tool_prompt(tmpl, kTools, &messages, &kw);
    const std::string out = render(tmpl, messages, json{{"add_generation_prompt", true}, {"enable_thinking", false}});
    EXPECT_NE(out.find("\"name\":\"play_music\""), std::string::npos) << out;
    EXPECT_NE(out.find("<tool_call>\n{\"name\": <function name>"), std::string::npos) << out;
    EXPECT_NE(out.find("Be brief."), std::string::npos);
    EXPECT_NE(out.find("Reasoning Mode: /no_think"), std::string::npos);
    // Hugging Face's template: {%- if xml_tools -%} ... (tool | string) ...
    const std::string hf =
        "{%- if xml_tools -%}<tools>{% for tool in xml_tools[:] %}{{ tool | string }}\n{% endfor %}</tools>"
        "{%- endif -%}{% for m in messages %}{{ m.content }}{% endfor %}";
    messages = {{"user", "Play x"}};
    kw = json::object();
    prepare_tool_prompt(hf, kTools, &messages, &kw);
    ASSERT_TRUE(kw.contains("xml_tools"));
    json vars = kw;
    EXPECT_EQ(render(hf, messages, vars).rfind("<tools>{'type': 'function', 'function': {'name': 'get_weather'", 0), 0u);
}
