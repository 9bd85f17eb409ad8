// The server's JSON side without sockets: requests validated into typed requests, and tool
// calls found in replies (every form a model writes them in, and what must stay content).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "edgellm/chat.h"
#include "edgellm/gguf.h"
#include "edgellm/grammar.h"
#include "edgellm/tokenizer.h"
#include "server/api/api.h"
#include "server/http/access.h"
#include "test_paths.h"
#include "text/chat/reasoning.h"
#include "text/chat/tool_calls.h"
#include "text/chat/tool_prompt.h"

using namespace edgellm;
using namespace edgellm::server;

namespace {

const std::vector<std::string> kTools = {"get_weather", "search"};

std::optional<ParsedReply> parse(const std::string& s) {
    return parse_tool_calls(s, kTools);
}

}  // namespace

TEST(ToolCalls, HermesBlocks) {
    auto p = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), 1u);
    EXPECT_EQ(p->calls[0].name, "get_weather");
    EXPECT_EQ(p->calls[0].arguments, "{\"city\":\"Paris\"}");
    EXPECT_EQ(p->content, "");

    // Text before, two calls, an unclosed last block (the reply ended at EOS).
    p = parse("Let me check.\n<tool_call>{\"name\":\"search\",\"arguments\":{\"q\":\"a\"}}</tool_call>\n"
              "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}");
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), 2u);
    EXPECT_EQ(p->calls[0].name, "search");
    EXPECT_EQ(p->calls[1].arguments, "{\"city\":\"Rome\"}");
    EXPECT_EQ(p->content, "Let me check.");
}

TEST(ToolCalls, BareJsonFencesAndLlamaForms) {
    // A small model's habit: the call as a fenced JSON block.
    auto p = parse("```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\"city\": \"Paris\"}\n}\n```");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls[0].name, "get_weather");
    // Llama 3.x: "parameters", and the python tag.
    p = parse("<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}");
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls[0].arguments, "{\"q\":\"x\"}");
    // Arguments written as a JSON string; an array of calls; no arguments at all.
    p = parse("[{\"name\":\"search\",\"arguments\":\"{\\\"q\\\": 1}\"},{\"name\":\"get_weather\"}]");
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), 2u);
    EXPECT_EQ(p->calls[0].arguments, "{\"q\":1}");
    EXPECT_EQ(p->calls[1].arguments, "{}");
}

TEST(ToolCalls, AnythingElseStaysContent) {
    EXPECT_FALSE(parse("The weather in Paris is sunny."));
    EXPECT_FALSE(parse("{\"name\": \"Alice\", \"age\": 30}")) << "JSON, but not a declared tool";
    EXPECT_FALSE(parse("{\"name\": \"delete_everything\", \"arguments\": {}}"));
    EXPECT_FALSE(parse("{\"name\": \"search\", \"arguments\": [1, 2]}")) << "arguments not an object";
    EXPECT_FALSE(parse("<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": </tool_call>"))
        << "broken JSON in a block";
    EXPECT_FALSE(parse("[]"));
    EXPECT_FALSE(parse_tool_calls("<tool_call>{\"name\":\"search\"}</tool_call>", {}))
        << "no tools declared";
}

TEST(ToolCalls, StreamingHoldsBackWhatMayBecomeACall) {
    EXPECT_EQ(tool_safe_prefix("Hello there"), 11u);
    EXPECT_EQ(tool_safe_prefix("Hello <tool"), 6u) << "a tag may be starting";
    EXPECT_EQ(tool_safe_prefix("Sure.\n<tool_call>{\"name\""), 6u);
    EXPECT_EQ(tool_safe_prefix("  "), 0u);
    EXPECT_EQ(tool_safe_prefix("{\"name\""), 0u);
    EXPECT_EQ(tool_safe_prefix("```json\n{"), 0u);
    EXPECT_EQ(tool_safe_prefix("<|python"), 0u);
    EXPECT_EQ(tool_safe_prefix("<b>bold</b>"), 11u) << "other tags are text";
}

TEST(ToolCalls, NamesFromTheRequest) {
    const auto tools = nlohmann::ordered_json::parse(
        R"([{"type":"function","function":{"name":"a"}},{"type":"function","function":{}},7,
            {"type":"function","function":{"name":"b","parameters":{}}}])");
    EXPECT_EQ(tool_names(tools), (std::vector<std::string>{"a", "b"}));
}

TEST(GenRequest, ChatRequestIsValidated) {
    GenerateParams defaults;
    defaults.n_predict = 256;
    GenRequest g;
    auto e = parse_gen_request(Api::Chat,
                               R"({"model":"local","messages":[{"role":"user","content":"hi"}],
                                   "temperature":0.1,"max_tokens":5,"stop":"\n",
                                   "tools":[{"type":"function","function":{"name":"f"}}]})",
                               defaults, &g);
    ASSERT_FALSE(e) << e->message;
    EXPECT_EQ(g.model, "local");
    EXPECT_EQ(g.gen.n_predict, 5);
    EXPECT_FLOAT_EQ(g.gen.sampling.temperature, 0.1f);
    EXPECT_EQ(g.gen.stop, std::vector<std::string>{"\n"});
    EXPECT_EQ(g.tool_names, std::vector<std::string>{"f"});

    // Defaults from the server when the request says nothing.
    e = parse_gen_request(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}]})", defaults, &g);
    ASSERT_FALSE(e);
    EXPECT_EQ(g.gen.n_predict, 256);

    // Content parts, and an assistant's tool calls with string arguments made objects.
    e = parse_gen_request(
        Api::Chat,
        R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                        {"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function",
                          "function":{"name":"f","arguments":"{\"x\":1}"}}]},
                        {"role":"tool","tool_call_id":"1","content":"42"}]})",
        defaults, &g);
    ASSERT_FALSE(e) << e->message;
    ASSERT_EQ(g.messages.size(), 3u);
    EXPECT_EQ(g.messages[0].content, "a\nb");
    EXPECT_NE(g.messages[1].extra_json.find("\"arguments\":{\"x\":1}"), std::string::npos)
        << g.messages[1].extra_json;
    EXPECT_NE(g.messages[2].extra_json.find("tool_call_id"), std::string::npos);
}

TEST(GenRequest, BadRequestsNameTheField) {
    const GenerateParams defaults;
    GenRequest g;
    auto bad = [&](Api api, const std::string& body) {
        auto e = parse_gen_request(api, body, defaults, &g);
        return e ? e->message : std::string("(accepted)");
    };
    EXPECT_NE(bad(Api::Chat, "{"), "(accepted)");
    EXPECT_NE(bad(Api::Chat, "[]").find("object"), std::string::npos);
    EXPECT_NE(bad(Api::Chat, R"({"messages":[]})").find("messages"), std::string::npos);
    EXPECT_NE(bad(Api::Chat, R"({"messages":[{"role":"wizard","content":"x"}]})").find("wizard"),
              std::string::npos);
    EXPECT_NE(bad(Api::Chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})")
                  .find("temperature"),
              std::string::npos);
    EXPECT_NE(bad(Api::Chat, R"({"messages":[{"role":"user","content":"x"}],"top_p":1.5})")
                  .find("top_p"),
              std::string::npos);
    EXPECT_NE(bad(Api::Chat, R"({"messages":[{"role":"user","content":"x"}],"n":17})").find("n"),
              std::string::npos);
    EXPECT_NE(bad(Api::Chat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})")
                  .find("text only"),
              std::string::npos);
    EXPECT_NE(bad(Api::Native, R"({"prompt":{"a":1}})").find("prompt"), std::string::npos);
    EXPECT_NE(bad(Api::Native, R"({"prompt":[1,-2]})").find("prompt"), std::string::npos);
    EXPECT_EQ(bad(Api::Native, R"({"prompt":[1,2,3],"n_predict":4,"temperature":-1})"), "(accepted)");
    EXPECT_TRUE(g.prompt_is_tokens);
    EXPECT_EQ(g.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
}

TEST(Responses, ChatWithToolCalls) {
    GenOutcome o;
    o.id = "chatcmpl-x";
    o.model = "m";
    o.result.text = "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>";
    o.result.stop = StopReason::Eos;
    o.parsed = parse_tool_calls(o.result.text, {"f"});
    ASSERT_TRUE(o.parsed);
    o.call_ids = {"call_1"};
    const json r = chat_response(o);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null());
    EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
    EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{}");
    const json c = chat_chunk_tool_calls(o);
    EXPECT_EQ(c["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
    EXPECT_EQ(sse(chat_chunk_final(o)).substr(0, 6), "data: ");
    EXPECT_EQ(chat_chunk_final(o)["choices"][0]["finish_reason"], "tool_calls");
}

TEST(Reasoning, WholeReplies) {
    auto s = split_reasoning("<think>\nThe user greets me.\n</think>\n\nHello!", false);
    EXPECT_EQ(s.reasoning, "\nThe user greets me.\n");
    EXPECT_EQ(s.content, "Hello!");
    s = split_reasoning("Hello, no thinking here.", false);
    EXPECT_EQ(s.reasoning, "");
    EXPECT_EQ(s.content, "Hello, no thinking here.");
    // cut off by max_tokens inside the block: all of it is reasoning
    s = split_reasoning("<think>Let me see, first", false);
    EXPECT_EQ(s.reasoning, "Let me see, first");
    EXPECT_EQ(s.content, "");
    // the template opened the block in the prompt (DeepSeek-R1 style)
    EXPECT_TRUE(prompt_opens_thinking("<|Assistant|><think>\n"));
    EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
    s = split_reasoning("thinking...</think>The answer.", true);
    EXPECT_EQ(s.reasoning, "thinking...");
    EXPECT_EQ(s.content, "The answer.");
    // Qwen3 with enable_thinking false: an empty block
    s = split_reasoning("<think>\n\n</think>\n\nHi.", false);
    EXPECT_EQ(s.reasoning, "\n\n");
    EXPECT_EQ(s.content, "Hi.");
}

// Streaming gives the same split as the whole reply, however the text is cut into pieces.
TEST(Reasoning, StreamingMatchesTheWholeReply) {
    const std::vector<std::pair<std::string, bool>> replies = {
        {"<think>\nThe user greets me.\n</think>\n\nHello! <b>x</b> </think>", false},
        {"Plain answer <think> in the middle", false},
        {"  <think>a</think>b", false},
        {"<thi", false},
        {"<think>never closed", false},
        {"opened in the prompt</think>\n\nanswer", true},
        {"", false},
    };
    for (const auto& [reply, opened] : replies)
        for (size_t step : {1u, 2u, 3u, 5u, 100u}) {
            ReasoningStream rs(opened);
            std::string reasoning, content;
            for (size_t at = 0; at < reply.size(); at += step)
                rs.push(std::string_view(reply).substr(at, step), &reasoning, &content);
            rs.finish(&reasoning, &content);
            const ReasoningSplit whole = split_reasoning(reply, opened);
            EXPECT_EQ(reasoning, whole.reasoning) << reply << " / " << step;
            EXPECT_EQ(content, whole.content) << reply << " / " << step;
        }
}

// Whether a prompt's end says the template turned thinking off (an empty block closed).
TEST(Reasoning, PromptsThatCloseThinking) {
    EXPECT_TRUE(prompt_closes_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // Qwen 3, 3.5
    EXPECT_TRUE(prompt_closes_thinking("<|im_start|>assistant\n<think>\n\n</think>\n"));     // SmolLM3
    EXPECT_TRUE(prompt_closes_thinking("<|turn>model\n<|channel>thought\n<channel|>"));       // Gemma 4
    EXPECT_FALSE(prompt_closes_thinking("<|im_start|>assistant\n<think>\n"));
    EXPECT_FALSE(prompt_closes_thinking("<|im_start|>assistant\n"));
}

// The thinking fields, in every spelling, and their refusals naming the field.
TEST(GenRequest, ThinkingFields) {
    GenRequest g;
    auto parse = [&](Api api, const json& extra) {
        json body = api == Api::Chat ? json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}
                                     : json{{"prompt", "hi"}};
        for (const auto& [k, v] : extra.items()) body[k] = v;
        auto e = parse_gen_request(api, body.dump(), GenerateParams{}, &g);
        return e ? e->message : std::string("(accepted)");
    };
    EXPECT_EQ(parse(Api::Chat, json::object()), "(accepted)");
    EXPECT_EQ(g.reasoning_budget, -1);
    EXPECT_EQ(g.reasoning_effort, "");
    EXPECT_EQ(parse(Api::Chat, {{"reasoning_budget_tokens", 64}}), "(accepted)");
    EXPECT_EQ(g.reasoning_budget, 64);
    EXPECT_EQ(parse(Api::Chat, {{"thinking_budget_tokens", 0}}), "(accepted)");
    EXPECT_EQ(g.reasoning_budget, 0);
    EXPECT_EQ(parse(Api::Chat, {{"reasoning_budget_tokens", 8}, {"thinking_budget_tokens", 8}}), "(accepted)");
    EXPECT_EQ(g.reasoning_budget, 8);
    EXPECT_EQ(parse(Api::Native, {{"reasoning_budget_tokens", 5}}), "(accepted)");
    EXPECT_EQ(g.reasoning_budget, 5);
    for (const char* effort : {"none", "minimal", "low", "medium", "high", "xhigh", "max"}) {
        EXPECT_EQ(parse(Api::Chat, {{"reasoning_effort", effort}}), "(accepted)") << effort;
        EXPECT_EQ(g.reasoning_effort, effort);
    }
    EXPECT_EQ(parse(Api::Chat, {{"chat_template_kwargs", {{"enable_thinking", false}}}}), "(accepted)");

    auto refused = [&](Api api, const json& extra, const std::string& needle) {
        const std::string m = parse(api, extra);
        EXPECT_NE(m.find(needle), std::string::npos) << extra.dump() << ": " << m;
    };
    refused(Api::Chat, {{"reasoning_budget_tokens", -2}}, "reasoning_budget_tokens must be between -1");
    refused(Api::Chat, {{"thinking_budget_tokens", "many"}}, "thinking_budget_tokens must be an integer");
    refused(Api::Chat, {{"reasoning_budget_tokens", 1.5}}, "reasoning_budget_tokens must be an integer");
    refused(Api::Chat, {{"reasoning_budget_tokens", 8}, {"thinking_budget_tokens", 9}}, "disagree");
    refused(Api::Chat, {{"reasoning_effort", "extreme"}}, "reasoning_effort must be one of none, minimal");
    refused(Api::Chat, {{"reasoning_effort", 3}}, "reasoning_effort must be one of");
    refused(Api::Completions, {{"reasoning_effort", "low"}}, "reasoning_effort applies to chat");
    refused(Api::Chat, {{"chat_template_kwargs", {{"enable_thinking", "false"}}}},
            "chat_template_kwargs.enable_thinking must be true or false");
}

TEST(Responses, UsageCountsTheReasoningTokens) {
    GenerateResult r;
    r.n_prompt = 7;
    r.n_generated = 10;
    r.n_reasoning = 4;
    const json u = usage_json(r);
    EXPECT_EQ(u["completion_tokens"], 10);
    EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 4);
}

// ---- constrained output and the request options of the structured-output issue ----------

namespace {

std::optional<ApiError> parse_req(Api api, const std::string& body, GenRequest* g) {
    return parse_gen_request(api, body, GenerateParams{}, g);
}

const char* kToolsJson = R"([{"type":"function","function":{"name":"get_weather","parameters":{
    "type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,
    "maximum":7}},"required":["city"]}}},{"type":"function","function":{"name":"play_music",
    "parameters":{"type":"object","properties":{"song":{"type":"string"}},"required":["song"]}}}])";

bool grammar_accepts(const std::string& gbnf, const std::string& text) {
    auto g = Grammar::parse(gbnf);
    if (!g) return false;
    GrammarMatcher m(*g, GrammarVocab::from_pieces({}, {}));
    return m.accept_bytes(text) && m.can_end();
}

}  // namespace

TEST(ConstrainedRequests, GrammarErrorsNameLineAndColumn) {
    GenRequest g;
    auto e = parse_req(Api::Native, R"({"prompt":"x","grammar":"root ::= foo"})", &g);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find("line 1, column 10"), std::string::npos) << e->message;
    EXPECT_EQ(e->extra["param"], "grammar");
    EXPECT_FALSE(parse_req(Api::Native, R"({"prompt":"x","grammar":"root ::= \"a\""})", &g));
    EXPECT_TRUE(g.grammar);
}

TEST(ConstrainedRequests, SchemaRefusalsNameKeywordAndPath) {
    GenRequest g;
    auto e = parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],
        "response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{
        "type":"object","properties":{"a":{"not":{"type":"string"}}}}}}})", &g);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->extra["keyword"], "not");
    EXPECT_EQ(e->extra["path"], "$.properties.a.not");
    e = parse_req(Api::Native, R"({"prompt":"x","json_schema":{"type":"string","format":"uri"}})", &g);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->extra["keyword"], "format");
    // json_object and json_schema compile; text does not constrain.
    EXPECT_FALSE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],
        "response_format":{"type":"json_object"}})", &g));
    EXPECT_TRUE(g.grammar);
    EXPECT_FALSE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],
        "response_format":{"type":"text"}})", &g));
    EXPECT_FALSE(g.grammar);
    e = parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],
        "response_format":{"type":"xml"}})", &g);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400) << "a 5xx would make the openai client retry";
    e = parse_req(Api::Native, R"({"prompt":"x","grammar":"root ::= \"a\"","json_schema":{}})", &g);
    ASSERT_TRUE(e);
}

TEST(ConstrainedRequests, ToolChoice) {
    GenRequest g;
    const std::string base = std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kToolsJson;
    EXPECT_FALSE(parse_req(Api::Chat, base + R"(,"tool_choice":"required"})", &g));
    EXPECT_EQ(g.tool_choice, "required");
    EXPECT_FALSE(parse_req(Api::Chat, base + R"(,"tool_choice":{"type":"function","function":{"name":"play_music"}}})", &g));
    EXPECT_EQ(g.tool_choice, "play_music");
    EXPECT_TRUE(g.tool_choice_named);
    auto e = parse_req(Api::Chat, base + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}}})", &g);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("nope"), std::string::npos);
    EXPECT_TRUE(parse_req(Api::Chat, base + R"(,"tool_choice":"sometimes"})", &g));
    EXPECT_FALSE(parse_req(Api::Chat, base + R"(,"tool_choice":"none"})", &g));
    EXPECT_TRUE(g.tool_names.empty()) << "tool_choice none: the reply is not parsed for calls";
    EXPECT_TRUE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"})", &g));
}

TEST(ConstrainedRequests, ToolCallGrammarConstrainsArguments) {
    const auto tools = nlohmann::ordered_json::parse(kToolsJson);
    SchemaRefusal why;
    auto req = tool_call_grammar(tools, ToolFormat::Hermes, "required", true, &why);
    ASSERT_TRUE(req) << why.message;
    EXPECT_TRUE(req->triggers.empty());
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
    EXPECT_TRUE(grammar_accepts(req->gbnf, call));
    EXPECT_TRUE(grammar_accepts(req->gbnf, call + "\n" + call)) << "parallel calls";
    EXPECT_FALSE(grammar_accepts(req->gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>"))
        << "the required city is missing";
    EXPECT_FALSE(grammar_accepts(req->gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"days\": 9}}\n</tool_call>"))
        << "days is at most 7";
    EXPECT_FALSE(grammar_accepts(req->gbnf, "Sure!")) << "required: a call from the first token";
    auto named = tool_call_grammar(tools, ToolFormat::Hermes, "play_music", false, &why);
    ASSERT_TRUE(named);
    EXPECT_FALSE(grammar_accepts(named->gbnf, call));
    EXPECT_TRUE(grammar_accepts(named->gbnf, "<tool_call>{\"name\":\"play_music\",\"arguments\":{\"song\":\"x\"}}</tool_call>"));
    auto aut = tool_call_grammar(tools, ToolFormat::Hermes, "auto", false, &why);
    ASSERT_TRUE(aut);
    EXPECT_TRUE(grammar_accepts(aut->gbnf, "It is sunny."));
    EXPECT_TRUE(grammar_accepts(aut->gbnf, call));
    EXPECT_TRUE(grammar_accepts(aut->gbnf, "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```"));
    EXPECT_FALSE(grammar_accepts(aut->gbnf, "{\"name\": \"get_weather\", \"arguments\": {}}"));
    auto llama = tool_call_grammar(tools, ToolFormat::Llama3, "auto", false, &why);
    ASSERT_TRUE(llama);
    EXPECT_TRUE(grammar_accepts(llama->gbnf, "{\"name\": \"play_music\", \"parameters\": {\"song\": \"x\"}}"));
    ASSERT_EQ(llama->triggers.size(), 1u);
    EXPECT_TRUE(llama->triggers[0].at_start);
    // A tool whose parameters cannot be enforced: refused, naming the tool's path.
    auto bad = nlohmann::ordered_json::parse(R"([{"type":"function","function":{"name":"f",
        "parameters":{"type":"object","properties":{"x":{"type":"string","format":"uri"}}}}}])");
    EXPECT_FALSE(tool_call_grammar(bad, ToolFormat::Hermes, "auto", false, &why));
    EXPECT_EQ(why.keyword, "format");
    EXPECT_EQ(why.path.rfind("$.tools[0].function.parameters", 0), 0u) << why.path;
}

TEST(ConstrainedRequests, ToolsWithATypedAnswer) {
    const auto tools = nlohmann::ordered_json::parse(kToolsJson);
    const auto answer = nlohmann::ordered_json::parse(
        R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false})");
    SchemaRefusal why;
    const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const std::string bare = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    for (ToolFormat fmt : {ToolFormat::Hermes, ToolFormat::Llama3}) {
        // auto: a call or the answer, nothing else (not lazy: no free text before a call)
        auto g = tool_call_grammar(tools, fmt, "auto", false, &why, &answer);
        ASSERT_TRUE(g) << why.message;
        EXPECT_TRUE(g->triggers.empty());
        EXPECT_TRUE(grammar_accepts(g->gbnf, "{\"answer\": \"sunny\"}"));
        EXPECT_FALSE(grammar_accepts(g->gbnf, "{\"answer\": 3}")) << "the answer keeps its schema";
        EXPECT_FALSE(grammar_accepts(g->gbnf, "{\"answer\": \"x\", \"more\": 1}"));
        EXPECT_FALSE(grammar_accepts(g->gbnf, "It is sunny.")) << "no free text";
        if (fmt == ToolFormat::Hermes) {
            EXPECT_TRUE(grammar_accepts(g->gbnf, call));
            EXPECT_TRUE(grammar_accepts(g->gbnf, bare));
        } else {
            EXPECT_TRUE(grammar_accepts(g->gbnf, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"));
        }
        // required: calls only, the answer's schema aside
        auto req = tool_call_grammar(tools, fmt, "required", false, &why, &answer);
        ASSERT_TRUE(req);
        EXPECT_FALSE(grammar_accepts(req->gbnf, "{\"answer\": \"sunny\"}"));
    }
    // an answer schema that cannot be enforced: refused, naming response_format
    const auto bad = nlohmann::ordered_json::parse(R"({"type":"string","format":"uri"})");
    EXPECT_FALSE(tool_call_grammar(tools, ToolFormat::Hermes, "auto", false, &why, &bad));
    EXPECT_EQ(why.path.rfind("$.response_format", 0), 0u) << why.path;
    // the request: a schema with tools is taken (the server joins them), a GBNF grammar is not
    GenRequest g;
    EXPECT_FALSE(parse_req(Api::Chat, std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kToolsJson +
                                          R"(,"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"}}}})",
                           &g));
    ASSERT_TRUE(g.answer_schema);
    auto e = parse_req(Api::Chat, std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kToolsJson +
                                      R"(,"grammar":"root ::= \"x\""})",
                       &g);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find("grammar together with tools"), std::string::npos) << e->message;
}

TEST(ChatRequests, WhatCannotBeGivenIsRefusedNotDropped) {
    GenRequest g;
    EXPECT_FALSE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"modalities":["text"]})", &g));
    for (const char* body : {R"({"messages":[{"role":"user","content":"hi"}],"modalities":["text","audio"]})",
                             R"({"messages":[{"role":"user","content":"hi"}],"audio":{"voice":"alloy","format":"wav"}})",
                             R"({"messages":[{"role":"user","content":"hi"}],"web_search_options":{}})"}) {
        auto e = parse_req(Api::Chat, body, &g);
        ASSERT_TRUE(e) << body;
        EXPECT_EQ(e->status, 400) << body;
    }
    auto e = parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"modalities":["audio"]})", &g);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("modalities"), std::string::npos) << e->message;
}

TEST(ConstrainedRequests, SamplingOptionsHonouredOrRefused) {
    GenRequest g;
    EXPECT_FALSE(parse_req(Api::Native, R"({"prompt":"x","typical_p":0.9,"mirostat":2,"mirostat_tau":4,
        "mirostat_eta":0.2,"xtc_probability":0.5,"xtc_threshold":0.2,"top_n_sigma":1.5,
        "samplers":["top_k","temperature"],"n_probs":3,"dry_multiplier":0})", &g));
    EXPECT_FLOAT_EQ(g.gen.sampling.typical_p, 0.9f);
    EXPECT_EQ(g.gen.sampling.mirostat, 2);
    EXPECT_EQ(g.gen.sampling.order.size(), 2u);
    EXPECT_TRUE(g.logprobs);
    EXPECT_EQ(g.top_logprobs, 3);
    for (const char* body : {R"({"prompt":"x","dry_multiplier":0.8})", R"({"prompt":"x","samplers":["bogus"]})",
                             R"({"prompt":"x","min_keep":5})", R"({"prompt":"x","post_sampling_probs":"yes"})",
                             R"({"prompt":"x","mirostat":3})", R"({"prompt":"x","logit_bias":5})"}) {
        auto e = parse_req(Api::Native, body, &g);
        ASSERT_TRUE(e) << body;
        EXPECT_EQ(e->status, 400) << body;
    }
    auto e = parse_req(Api::Native, R"({"prompt":"x","dry_multiplier":0.8})", &g);
    EXPECT_NE(e->message.find("dry_multiplier"), std::string::npos);
}

TEST(ConstrainedRequests, LogitBiasForms) {
    GenRequest g;
    EXPECT_FALSE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"15":-100,"7":5}})", &g));
    ASSERT_EQ(g.bias_ids.size(), 2u);
    EXPECT_EQ(g.bias_ids[0].first, 15);
    EXPECT_FLOAT_EQ(g.bias_ids[0].second, -100.0f);
    EXPECT_TRUE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"15":-101}})", &g))
        << "OpenAI's range is -100..100";
    EXPECT_FALSE(parse_req(Api::Native, R"({"prompt":"x","logit_bias":[[15,false],["Hello",2.5]]})", &g));
    ASSERT_EQ(g.bias_ids.size(), 1u);
    EXPECT_TRUE(std::isinf(g.bias_ids[0].second));
    ASSERT_EQ(g.bias_texts.size(), 1u);
    EXPECT_EQ(g.bias_texts[0].first, "Hello");
}

TEST(ConstrainedRequests, LogprobsAndChoices) {
    GenRequest g;
    EXPECT_FALSE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":4,"n":3})", &g));
    EXPECT_TRUE(g.logprobs);
    EXPECT_EQ(g.top_logprobs, 4);
    EXPECT_EQ(g.n_choices, 3);
    EXPECT_TRUE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"top_logprobs":4})", &g));
    EXPECT_FALSE(parse_req(Api::Completions, R"({"prompt":"x","logprobs":2})", &g));
    EXPECT_EQ(g.top_logprobs, 2);
    EXPECT_TRUE(parse_req(Api::Chat, R"({"messages":[{"role":"user","content":"hi"}],"n":17})", &g));
}

TEST(ToolCalls, ParallelBareObjectsOneAfterAnother) {
    auto p = parse("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"杭州\"}}\n"
                   "{\"name\": \"search\", \"arguments\": {\"q\": \"{not a brace}\"}}");
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), 2u);
    EXPECT_EQ(p->calls[1].arguments, "{\"q\":\"{not a brace}\"}");
    // an unfinished last object (cut by max_tokens), or an undeclared tool: content
    EXPECT_FALSE(parse("{\"name\": \"search\", \"arguments\": {}}\n{\"name\": \"search\", \"argu"));
    EXPECT_FALSE(parse("{\"name\": \"search\", \"arguments\": {}}\n{\"name\": \"rm\", \"arguments\": {}}"));
}

TEST(ConstrainedRequests, ParallelCallsAreBounded) {
    const auto tools = nlohmann::ordered_json::parse(kToolsJson);
    SchemaRefusal why;
    auto g = tool_call_grammar(tools, ToolFormat::Hermes, "required", true, &why);
    ASSERT_TRUE(g);
    const std::string call = "<tool_call>{\"name\": \"play_music\", \"arguments\": {\"song\": \"x\"}}</tool_call>";
    std::string eight, nine;
    for (int i = 0; i < 8; ++i) eight += call + "\n";
    nine = eight + call;
    EXPECT_TRUE(grammar_accepts(g->gbnf, eight.substr(0, eight.size() - 1)));
    EXPECT_FALSE(grammar_accepts(g->gbnf, nine));
}

TEST(ToolCalls, ACutReplyKeepsItsCompleteCalls) {
    const std::string two = "{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\n"
                            "{\"name\": \"search\", \"arguments\": {\"q\": \"b\"}}\n{\"name\": \"sea";
    EXPECT_FALSE(parse_tool_calls(two, kTools, false));
    auto p = parse_tool_calls(two, kTools, true);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls.size(), 2u);
    auto h = parse_tool_calls("<tool_call>{\"name\":\"search\",\"arguments\":{\"q\":1}}</tool_call>\n"
                              "<tool_call>{\"name\":\"search\",\"argu", kTools, true);
    ASSERT_TRUE(h);
    EXPECT_EQ(h->calls.size(), 1u);
    EXPECT_FALSE(parse_tool_calls("{\"name\": \"sea", kTools, true)) << "nothing complete";
}

TEST(ToolCalls, ACutReplyDropsTheOpeningOfACallThatNeverCame) {
    auto p = parse_tool_calls("<tool_call>{\"name\":\"search\",\"arguments\":{\"q\":1}}</tool_call>\n<tool_",
                              kTools, true);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->calls.size(), 1u);
    EXPECT_EQ(p->content, "");
}

TEST(Cors, AsLlamaServerAnswers) {
    using H = std::vector<std::pair<std::string, std::string>>;
    auto value = [](const H& h, const std::string& name) -> std::string {
        for (const auto& [n, v] : h)
            if (n == name) return v;
        return "(none)";
    };
    CorsPolicy any;  // "*", credentials: the request's origin is echoed
    const std::string web = "http://web.mydomain.fr";
    H h = cors_headers(any, &web, true);
    EXPECT_EQ(value(h, "Access-Control-Allow-Origin"), web);
    EXPECT_EQ(value(h, "Access-Control-Allow-Credentials"), "true");
    EXPECT_EQ(value(h, "Access-Control-Allow-Methods"), "GET, POST, DELETE, OPTIONS");
    EXPECT_EQ(value(h, "Access-Control-Allow-Headers"), "*");
    EXPECT_EQ(value(cors_headers(any, nullptr, false), "Access-Control-Allow-Origin"), "*");
    EXPECT_EQ(value(cors_headers(any, &web, false), "Access-Control-Allow-Methods"), "(none)");
    CorsPolicy plain;
    plain.credentials = false;
    EXPECT_EQ(value(cors_headers(plain, &web, false), "Access-Control-Allow-Origin"), "*");

    CorsPolicy local;
    local.origins = "localhost";
    for (const char* o : {"http://localhost", "http://localhost:8080", "http://127.0.0.1",
                          "https://127.0.0.1:3000", "http://[::1]", "http://[::1]:3000"}) {
        const std::string origin = o;
        EXPECT_EQ(value(cors_headers(local, &origin, true), "Access-Control-Allow-Origin"), origin);
    }
    for (const char* o : {"http://web.mydomain.fr", "http://evil.com", "http://notlocalhost",
                          "http://localhost.evil.com", "http://localhost:80a", "localhost"}) {
        const std::string origin = o;
        EXPECT_EQ(value(cors_headers(local, &origin, true), "Access-Control-Allow-Origin"), "(none)") << o;
    }
    CorsPolicy list;
    list.origins = "http://a.example, http://b.example";
    const std::string b = "http://b.example", c = "http://c.example";
    EXPECT_EQ(value(cors_headers(list, &b, false), "Access-Control-Allow-Origin"), b);
    EXPECT_EQ(value(cors_headers(list, &c, false), "Access-Control-Allow-Origin"), "(none)");
}

// ---- an agent's turns with Qwen3.5's template -------------------------------------------------

namespace {

std::string read_data(const std::string& name) {
    std::ifstream f(std::string(EDGELLM_TEST_DATA) + "/templates/" + name, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// A chat request's prompt as the server renders it with a --chat-template-file (its
// template variables, the tools as the template takes them).
std::string render_turn(const GgufFile& f, const Tokenizer& t, const std::string& tmpl, const GenRequest& g) {
    json kw = {{"enable_thinking", true}};
    std::vector<ChatMessage> messages = g.messages;
    prepare_tool_prompt(tmpl, g.tools, &messages, &kw);
    const ChatPrompt p = chat_prompt(f, t, messages, true, kw.dump(), g.tools_json, tmpl);
    EXPECT_EQ(p.how, "template") << p.warning;
    return p.text;
}

}  // namespace

// Two turns of an agent with tools, through the chat path: the request as a client sends
// it renders as jinja2 renders the conversation (tests/data/templates/qwen35.*); the
// model's reply, which the request's tool-call grammar admits, is answered as OpenAI
// tool_calls; those calls sent back with their results render as jinja2 renders that
// conversation: what the model wrote is what it sees again.
TEST(ToolTurns, Qwen35AgentLoopThroughTheChatPath) {
    const auto vocab = test::vocab_file("ggml-vocab-qwen35.gguf");
    if (vocab.empty()) GTEST_SKIP() << "no ggml-vocab-qwen35.gguf in " << test::vocab_dir() << " (scripts/fetch-vocabs.sh)";
    auto f = GgufFile::open(vocab.string());
    ASSERT_TRUE(f.ok());
    auto t = Tokenizer::load(**f);
    ASSERT_TRUE(t.ok());
    const std::string tmpl = read_data("qwen35.jinja");
    ASSERT_EQ(tool_format_for_template(tmpl), ToolFormat::QwenXml);
    const json conv = json::parse(read_data("qwen35.tool_calls.json"));

    // Turn 1: the tools and the question.
    json body = {{"messages", json::array({conv["messages"][0], conv["messages"][1]})}, {"tools", conv["tools"]}};
    GenRequest g;
    ASSERT_FALSE(parse_gen_request(Api::Chat, body.dump(), GenerateParams{}, &g));
    const std::string prompt = render_turn(**f, **t, tmpl, g);
    EXPECT_EQ(prompt, read_data("qwen35.tools.txt"));
    ASSERT_TRUE(prompt_opens_thinking(prompt));

    // The model's reply: its thinking, then two calls as its template writes them.
    const std::string written = read_data("qwen35.tool_calls.txt");
    const std::string turn_start = "<|im_start|>assistant\n<think>\n";
    const size_t from = written.find(turn_start) + turn_start.size();
    const std::string reply = written.substr(from, written.find("<|im_end|>", from) - from);
    SchemaRefusal why;
    auto tg = tool_call_grammar(g.tools, ToolFormat::QwenXml, "auto", g.parallel_tool_calls, &why, nullptr, true);
    ASSERT_TRUE(tg) << why.message;
    EXPECT_TRUE(tg->arguments_typed);
    auto compiled = Grammar::parse(tg->gbnf);
    ASSERT_TRUE(compiled) << compiled.error();
    GrammarMatcher m(*compiled, GrammarVocab::from_pieces({}, {}));
    EXPECT_TRUE(m.accept_bytes(reply) && m.can_end()) << reply;

    GenOutcome o;
    o.id = "chatcmpl-1";
    o.result.text = reply;
    o.result.stop = StopReason::Eos;
    const ReasoningSplit split = split_reasoning(reply, true);
    o.reasoning = split.reasoning;
    o.content = split.content;
    o.parsed = parse_tool_calls(o.content, g.tool_names, false, &g.tools);
    ASSERT_TRUE(o.parsed) << o.content;
    o.call_ids = {"call12345", "call67890"};
    const json answer = chat_response(o);
    const json& message = answer["choices"][0]["message"];
    EXPECT_EQ(answer["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(message["content"], "Let me check.");
    EXPECT_EQ(message["reasoning_content"], "The weather and the notes.\n");
    ASSERT_EQ(message["tool_calls"].size(), 2u);
    EXPECT_EQ(json::parse(message["tool_calls"][1]["function"]["arguments"].get<std::string>()),
              conv["messages"][2]["tool_calls"][1]["function"]["arguments"]);

    // Turn 2: the answer as the client keeps it, and the tools' results.
    body["messages"].push_back(message);
    body["messages"].push_back(conv["messages"][3]);
    body["messages"].push_back(conv["messages"][4]);
    GenRequest g2;
    ASSERT_FALSE(parse_gen_request(Api::Chat, body.dump(), GenerateParams{}, &g2));
    EXPECT_EQ(render_turn(**f, **t, tmpl, g2), written);
}
