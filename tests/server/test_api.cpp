// The server's JSON side without sockets: requests validated into typed requests, and tool
// calls found in replies (every form a model writes them in, and what must stay content).
#include <gtest/gtest.h>

#include "server/api.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

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
    EXPECT_NE(bad(Api::Chat, R"({"messages":[{"role":"user","content":"x"}],"n":2})").find("n"),
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
