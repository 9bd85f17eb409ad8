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
                    const json* answer = nullptr) {
    SchemaRefusal why;
    auto g = tool_call_grammar(kTools, fmt, choice, parallel, &why, answer);
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
