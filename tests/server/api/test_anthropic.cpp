// Anthropic's Messages API over the chat path: the request forms of llama.cpp's
// test_compat_anthropic.py translated and then parsed by our chat parser, the message a
// chat response becomes, and the events a chat stream becomes.
#include <gtest/gtest.h>

#include "server/api/anthropic/anthropic.h"
#include "server/api/openai/stream_writer.h"
#include "text/chat/tool_calls.h"

using namespace edgellm;
using namespace edgellm::server;

namespace {

// Translate, then parse as the server will; both must succeed.
GenRequest through_chat(const json& body, json* chat_out = nullptr) {
    json chat;
    auto err = anthropic_to_chat(body, &chat);
    EXPECT_FALSE(err) << err->message;
    GenRequest g;
    auto perr = parse_gen_request(Api::Chat, chat.dump(), GenerateParams{}, &g);
    EXPECT_FALSE(perr) << perr->message << "\n" << chat.dump(2);
    if (chat_out) *chat_out = chat;
    return g;
}

// The 400 a body gets (an empty message when it was accepted).
std::string refusal(const json& body) {
    json chat;
    auto err = anthropic_to_chat(body, &chat);
    if (!err) return "";
    EXPECT_EQ(err->status, 400);
    return err->message;
}

json user(const json& content) {
    return {{"role", "user"}, {"content", content}};
}
json assistant(const json& content) {
    return {{"role", "assistant"}, {"content", content}};
}
json request(json messages) {
    return {{"model", "test"}, {"max_tokens", 50}, {"messages", std::move(messages)}};
}

const json kWeatherTool = json::parse(R"({
    "name": "get_weather",
    "description": "Get the current weather in a location",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                     "required": ["location"]}})");

const json kToolUse = json::parse(
    R"({"type": "tool_use", "id": "test123", "name": "get_weather", "input": {"location": "Paris"}})");

// ---- SSE events ---------------------------------------------------------------------

struct Event {
    std::string name;
    json data;
};

// "event: NAME\ndata: {...}\n\n" ... ; each event's name is its data's type.
std::vector<Event> parse_events(const std::string& bytes) {
    std::vector<Event> out;
    size_t at = 0;
    while (at < bytes.size()) {
        const size_t end = bytes.find("\n\n", at);
        EXPECT_NE(end, std::string::npos) << "an event not ended by a blank line";
        if (end == std::string::npos) break;
        const std::string ev = bytes.substr(at, end - at);
        at = end + 2;
        const size_t nl = ev.find('\n');
        EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
        EXPECT_NE(nl, std::string::npos) << ev;
        if (nl == std::string::npos) continue;
        EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
        Event e{ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7))};
        EXPECT_EQ(e.data["type"], e.name);
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<std::string> names(const std::vector<Event>& ev) {
    std::vector<std::string> n;
    for (const Event& e : ev) n.push_back(e.name);
    return n;
}

bool has_key_anywhere(const json& j, const std::string& key) {
    if (j.is_object()) {
        for (const auto& [k, v] : j.items())
            if (k == key || has_key_anywhere(v, key)) return true;
    } else if (j.is_array()) {
        for (const json& v : j)
            if (has_key_anywhere(v, key)) return true;
    }
    return false;
}

// What every finished stream must be: message_start first, blocks 0, 1, 2, ... each
// started, given deltas of its own kind and stopped before the next starts, then
// message_delta and message_stop; no timings anywhere.
void expect_well_formed(const std::vector<Event>& ev) {
    ASSERT_GE(ev.size(), 4u);
    EXPECT_EQ(ev.front().name, "message_start");
    EXPECT_EQ(ev.front().data["message"]["content"], json::array());
    EXPECT_EQ(ev[ev.size() - 2].name, "message_delta");
    EXPECT_EQ(ev.back().name, "message_stop");
    int64_t open = -1, next = 0;
    std::string kind;
    for (size_t i = 1; i + 2 < ev.size(); ++i) {
        const Event& e = ev[i];
        EXPECT_FALSE(has_key_anywhere(e.data, "timings"));
        if (e.name == "content_block_start") {
            EXPECT_EQ(open, -1) << "block " << e.data["index"] << " opens before " << open
                                << " closed";
            EXPECT_EQ(e.data["index"], next);
            open = next++;
            kind = e.data["content_block"]["type"];
        } else if (e.name == "content_block_delta") {
            EXPECT_EQ(e.data["index"], open);
            const std::string t = e.data["delta"]["type"];
            const std::string want = kind == "text"           ? "text_delta"
                                     : kind == "tool_use"     ? "input_json_delta"
                                     : t == "signature_delta" ? t
                                                              : "thinking_delta";
            EXPECT_EQ(t, want) << "in a " << kind << " block";
        } else if (e.name == "content_block_stop") {
            EXPECT_EQ(e.data["index"], open);
            open = -1;
        } else {
            ADD_FAILURE() << "unexpected event " << e.name << " inside the message";
        }
    }
    EXPECT_EQ(open, -1) << "a block was never stopped";
    EXPECT_GE(next, 1) << "a message has at least one block";
    for (const Event& e : ev) EXPECT_FALSE(has_key_anywhere(e.data, "timings"));
}

// The blocks a stream built, as a message's content would hold them.
json blocks_of(const std::vector<Event>& ev) {
    json blocks = json::array();
    std::vector<std::string> partial;
    for (const Event& e : ev) {
        if (e.name == "content_block_start") {
            blocks.push_back(e.data["content_block"]);
            partial.push_back("");
        } else if (e.name == "content_block_delta") {
            json& b = blocks[e.data["index"].get<size_t>()];
            const json& d = e.data["delta"];
            if (d["type"] == "text_delta")
                b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
            if (d["type"] == "thinking_delta")
                b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
            if (d["type"] == "input_json_delta")
                partial[e.data["index"].get<size_t>()] += d["partial_json"];
        }
    }
    for (size_t i = 0; i < blocks.size(); ++i)
        if (blocks[i]["type"] == "tool_use") blocks[i]["input"] = json::parse(partial[i]);
    return blocks;
}

// The chunks through the stream in order (an operand order of `a + b` is not), then [DONE]
// when done.
std::string feed(AnthropicStream& s, const std::vector<json>& chunks, bool done = true) {
    std::string out;
    for (const json& c : chunks) out += s.on_chunk(c);
    if (done) out += s.on_done();
    return out;
}

GenOutcome outcome() {
    GenOutcome o;
    o.id = "chatcmpl-abc";
    o.model = "m";
    o.created = 1;
    o.result.stop = StopReason::Eos;
    o.result.n_prompt = 12;
    o.result.n_cached = 5;
    o.result.n_generated = 7;
    return o;
}

}  // namespace

// ---- requests -----------------------------------------------------------------------

TEST(AnthropicRequest, BasicAndSystem) {
    json chat;
    GenRequest g = through_chat(request({user("Say hello")}), &chat);
    EXPECT_EQ(chat["model"], "test");
    EXPECT_EQ(chat["max_tokens"], 50);
    EXPECT_FALSE(chat.contains("stream"));
    ASSERT_EQ(g.messages.size(), 1u);
    EXPECT_EQ(g.messages[0].role, "user");
    EXPECT_EQ(g.messages[0].content, "Say hello");
    EXPECT_EQ(g.gen.n_predict, 50);

    json body = request({user("Hello")});
    body["system"] = "You are a helpful assistant.";
    g = through_chat(body);
    ASSERT_EQ(g.messages.size(), 2u);
    EXPECT_EQ(g.messages[0].role, "system");
    EXPECT_EQ(g.messages[0].content, "You are a helpful assistant.");

    // As text blocks (Claude Code sends several, with cache_control).
    body["system"] = json::parse(R"([{"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Answer in French.", "cache_control": {"type": "ephemeral"}}])");
    g = through_chat(body);
    EXPECT_EQ(g.messages[0].content, "You are terse.\nAnswer in French.");
    body["system"] = json::parse(R"([{"type": "image", "source": {}}])");
    EXPECT_NE(refusal(body).find("image input is not supported"), std::string::npos);
}

TEST(AnthropicRequest, MultipartContentAndConversation) {
    GenRequest g = through_chat(request({user(json::parse(
        R"([{"type": "text", "text": "What is"}, {"type": "text", "text": " the answer?"}])"))}));
    ASSERT_EQ(g.messages.size(), 1u);
    EXPECT_EQ(g.messages[0].content, "What is\n the answer?");

    g = through_chat(request({user("Hello"), assistant("Hi there!"), user("How are you?")}));
    ASSERT_EQ(g.messages.size(), 3u);
    EXPECT_EQ(g.messages[1].role, "assistant");
    EXPECT_EQ(g.messages[1].content, "Hi there!");
    EXPECT_EQ(g.messages[2].content, "How are you?");
    EXPECT_TRUE(g.add_generation_prompt);

    // An assistant turn last is a prefill, continued as Anthropic continues it.
    g = through_chat(request({user("Count to 3"), assistant("1, 2,")}));
    EXPECT_TRUE(g.continue_final);
    EXPECT_EQ(g.continue_text, "1, 2,");
}

TEST(AnthropicRequest, ToolUseThenToolResult) {
    json body = request({user("What's the weather?"), assistant(json::array({kToolUse})),
                         user(json::parse(R"([{"type": "tool_result", "tool_use_id": "test123",
                                               "content": "The weather is sunny, 25°C"}])"))});
    body["tools"] = json::array({kWeatherTool});
    json chat;
    GenRequest g = through_chat(body, &chat);
    const json& m = chat["messages"];
    ASSERT_EQ(m.size(), 3u);
    EXPECT_TRUE(m[1]["content"].is_null());
    const json& call = m[1]["tool_calls"][0];
    EXPECT_EQ(call["id"], "test123");
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], "get_weather");
    ASSERT_TRUE(call["function"]["arguments"].is_string()) << "OpenAI sends arguments as text";
    EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
              json::parse(R"({"location": "Paris"})"));
    EXPECT_EQ(m[2], json::parse(R"({"role": "tool", "tool_call_id": "test123",
        "content": "The weather is sunny, 25°C", "name": "get_weather"})"));
    ASSERT_EQ(g.messages.size(), 3u);
    EXPECT_EQ(g.messages[2].role, "tool");
    EXPECT_EQ(g.messages[2].content, "The weather is sunny, 25°C");
    // The tools in OpenAI's form, the schema as the parameters.
    ASSERT_EQ(g.tool_names, std::vector<std::string>{"get_weather"});
    EXPECT_EQ(g.tools[0]["type"], "function");
    EXPECT_EQ(g.tools[0]["function"]["description"], kWeatherTool["description"]);
    EXPECT_EQ(g.tools[0]["function"]["parameters"], kWeatherTool["input_schema"]);
}

TEST(AnthropicRequest, ToolResultsComeBeforeTheUsersText) {
    // The text written first, as in test_anthropic_tool_result_with_text, still goes after:
    // the results answer the assistant's calls, which the next message must do.
    json body = request({user("What's the weather?"),
                         assistant(json::parse(R"([{"type": "text", "text": "Let me check."},
             {"type": "tool_use", "id": "tool_1", "name": "get_weather", "input": {"location": "Paris"}},
             {"type": "tool_use", "id": "tool_2", "name": "get_weather", "input": {"location": "Rome"}}])")),
                         user(json::parse(R"([{"type": "text", "text": "Here are the results:"},
             {"type": "tool_result", "tool_use_id": "tool_1", "content": "Sunny, 25°C"},
             {"type": "tool_result", "tool_use_id": "tool_2",
              "content": [{"type": "text", "text": "Rainy,"}, {"type": "text", "text": "12°C"}]}])"))});
    json chat;
    through_chat(body, &chat);
    const json& m = chat["messages"];
    ASSERT_EQ(m.size(), 5u) << m.dump(2);
    EXPECT_EQ(m[1]["content"], json::parse(R"([{"type": "text", "text": "Let me check."}])"));
    EXPECT_EQ(m[1]["tool_calls"].size(), 2u);
    EXPECT_EQ(m[2]["role"], "tool");
    EXPECT_EQ(m[2]["tool_call_id"], "tool_1");
    EXPECT_EQ(m[3]["tool_call_id"], "tool_2");
    EXPECT_EQ(m[3]["content"], "Rainy,\n12°C");
    EXPECT_EQ(m[4]["role"], "user");
    EXPECT_EQ(m[4]["content"],
              json::parse(R"([{"type": "text", "text": "Here are the results:"}])"));
}

TEST(AnthropicRequest, ToolResultErrorIsNotedInTheText) {
    json chat;
    through_chat(request({user("Get the weather"), assistant(json::array({kToolUse})),
                          user(json::parse(R"([{"type": "tool_result", "tool_use_id": "test123",
                                                "is_error": true, "content": "City not found"}])"))}),
                 &chat);
    EXPECT_EQ(chat["messages"][2]["content"], "Error: City not found");
    // No content at all: an empty result.
    through_chat(
        request({user("Go"), assistant(json::array({kToolUse})),
                 user(json::parse(R"([{"type": "tool_result", "tool_use_id": "test123"}])"))}),
        &chat);
    EXPECT_EQ(chat["messages"][2]["content"], "");
}

TEST(AnthropicRequest, ImagesAreRefused) {
    const json image = json::parse(R"({"type": "image", "source": {"type": "base64",
        "media_type": "image/png", "data": "iVBORw0KGgo="}})");
    std::string why = refusal(
        request({user(json::array({image, {{"type", "text"}, {"text", "What is this?"}}}))}));
    EXPECT_NE(why.find("image input is not supported"), std::string::npos) << why;
    EXPECT_NE(why.find("messages[0].content[0]"), std::string::npos) << why;
    // Inside a tool result too (test_anthropic_tool_result_with_image).
    why = refusal(request(
        {user("What is in this image?"), assistant(json::array({kToolUse})),
         user(json::array({{{"type", "tool_result"},
                            {"tool_use_id", "test123"},
                            {"content", json::array({{{"type", "text"}, {"text", "File: test.png"}},
                                                     image})}}}))}));
    EXPECT_NE(why.find("image input is not supported"), std::string::npos) << why;
    EXPECT_NE(why.find("messages[2].content[0].content[1]"), std::string::npos) << why;
    why =
        refusal(request({user(json::array({{{"type", "document"}, {"source", json::object()}}}))}));
    EXPECT_NE(why.find("document input is not supported"), std::string::npos) << why;
}

TEST(AnthropicRequest, MalformedRequestsAreRefused) {
    EXPECT_EQ(refusal({{"model", "test"}, {"max_tokens", 50}}), "messages is required");
    EXPECT_EQ(refusal(request(json::array())), "messages must not be empty");
    EXPECT_EQ(refusal({{"messages", json::array({user("Hi")})}}), "max_tokens is required");
    EXPECT_NE(
        refusal({{"max_tokens", 0}, {"messages", json::array({user("Hi")})}}).find("max_tokens"),
        std::string::npos);
    EXPECT_EQ(refusal(json::array()), "the request body must be a JSON object");
    EXPECT_NE(
        refusal(request({{{"role", "system"}, {"content", "x"}}})).find("top-level \"system\""),
        std::string::npos);
    EXPECT_NE(refusal(request({user(json::array({{{"type", "video"}}}))})).find("\"video\""),
              std::string::npos);
    EXPECT_NE(refusal(request({user(json::array({kToolUse}))})).find("assistant message"),
              std::string::npos);
    EXPECT_NE(refusal(request({user("Hi"), assistant(json::parse(R"([{"type": "tool_result",
        "tool_use_id": "x", "content": "y"}])"))}))
                  .find("user message"),
              std::string::npos);
    EXPECT_NE(
        refusal(request({user(json::array({{{"type", "text"}}}))})).find(".text must be a string"),
        std::string::npos);
    // A field that asks for something this server does not do is named, not ignored.
    json body = request({user("Hi")});
    body["mcp_servers"] = json::array({{{"type", "url"}, {"url", "https://example.com"}}});
    EXPECT_NE(refusal(body).find("\"mcp_servers\""), std::string::npos);
    body = request({user("Hi")});
    body["service_tier"] = "priority";
    EXPECT_NE(refusal(body).find("service_tier"), std::string::npos);
    body = request({user("Hi")});
    body["tools"] = json::parse(R"([{"type": "web_search_20250305", "name": "web_search"}])");
    EXPECT_NE(refusal(body).find("tools[0].type"), std::string::npos);
    body["tools"] = json::parse(R"([{"name": "f", "input_schema": {}, "input_examples": []}])");
    EXPECT_NE(refusal(body).find("tools[0].input_examples"), std::string::npos);
}

TEST(AnthropicRequest, FieldsThatChangeNothingAreAccepted) {
    json body = request({user(json::parse(R"([{"type": "text", "text": "Hello",
        "cache_control": {"type": "ephemeral"}}])"))});
    body["metadata"] = {{"user_id", "test_user_123"}};
    body["service_tier"] = "auto";
    body["temperature"] = nullptr;  // null is absent
    body["cache_control"] = {{"type", "ephemeral"}, {"ttl", "1h"}};  // the prefix is kept anyway
    through_chat(body);
    // ... but a cache_control that is not Anthropic's shape is named
    body["cache_control"] = {{"type", "persistent"}};
    EXPECT_NE(refusal(body).find("cache_control"), std::string::npos);
    body["cache_control"] = {{"type", "ephemeral"}, {"ttl", "1d"}};
    EXPECT_NE(refusal(body).find("cache_control.ttl"), std::string::npos);
}

TEST(AnthropicRequest, SamplingAndStopSequences) {
    json body = request({user("Count to 10")});
    body["stop_sequences"] = {"\n", "END"};
    body["temperature"] = 0.5;
    body["top_p"] = 0.9;
    body["top_k"] = 40;
    json chat;
    GenRequest g = through_chat(body, &chat);
    EXPECT_EQ(chat["stop"], json({"\n", "END"}));
    EXPECT_EQ(g.gen.stop, (std::vector<std::string>{"\n", "END"}));
    EXPECT_FLOAT_EQ(g.gen.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(g.gen.sampling.top_p, 0.9f);
    EXPECT_EQ(g.gen.sampling.top_k, 40);
    body["stop_sequences"] = {"ok", 3};
    EXPECT_NE(refusal(body).find("stop_sequences"), std::string::npos);
}

TEST(AnthropicRequest, StreamingAsksForUsage) {
    json body = request({user("Say hello")});
    body["stream"] = true;
    json chat;
    GenRequest g = through_chat(body, &chat);
    EXPECT_TRUE(g.stream);
    EXPECT_TRUE(g.include_usage) << "the stream translator needs output_tokens";
    body["stream"] = "yes";
    EXPECT_EQ(refusal(body), "stream must be true or false");
}

TEST(AnthropicRequest, ToolChoice) {
    json body = request({user("Weather?")});
    body["tools"] = json::array({kWeatherTool});
    auto choice = [&](const json& tc) {
        body["tool_choice"] = tc;
        return through_chat(body);
    };
    EXPECT_EQ(choice({{"type", "auto"}}).tool_choice, "auto");
    EXPECT_EQ(choice({{"type", "any"}}).tool_choice, "required");
    GenRequest g = choice({{"type", "tool"}, {"name", "get_weather"}});
    EXPECT_EQ(g.tool_choice, "get_weather");
    EXPECT_TRUE(g.tool_choice_named);
    g = choice({{"type", "none"}});
    EXPECT_EQ(g.tool_choice, "none");
    EXPECT_TRUE(g.tool_names.empty()) << "none: the reply is text";
    g = choice({{"type", "auto"}, {"disable_parallel_tool_use", true}});
    EXPECT_FALSE(g.parallel_tool_calls);
    body["tool_choice"] = {{"type", "tool"}};
    EXPECT_NE(refusal(body).find("name"), std::string::npos);
    body["tool_choice"] = "auto";
    EXPECT_NE(refusal(body).find("tool_choice must be"), std::string::npos);
    // A named tool that is not declared: the chat parser says so.
    body["tool_choice"] = {{"type", "tool"}, {"name", "nope"}};
    json chat;
    ASSERT_FALSE(anthropic_to_chat(body, &chat));
    GenRequest bad;
    auto err = parse_gen_request(Api::Chat, chat.dump(), GenerateParams{}, &bad);
    ASSERT_TRUE(err);
    EXPECT_NE(err->message.find("not among the tools"), std::string::npos);
}

TEST(AnthropicRequest, ThinkingSwitchesTheTemplateVariable) {
    json body = request({user("What is 2+2?")});
    body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 50}};
    json chat;
    through_chat(body, &chat);
    EXPECT_EQ(chat["chat_template_kwargs"], json({{"enable_thinking", true}}));
    EXPECT_EQ(chat["thinking_budget_tokens"], 50);
    body["thinking"] = {{"type", "disabled"}};
    GenRequest g = through_chat(body, &chat);
    EXPECT_EQ(json::parse(g.template_kwargs_json), json({{"enable_thinking", false}}));
    body["thinking"] = {{"type", "sometimes"}};
    EXPECT_NE(refusal(body).find("thinking.type"), std::string::npos);
    body["thinking"] = {{"type", "enabled"}, {"budget_tokens", "lots"}};
    EXPECT_NE(refusal(body).find("thinking.budget_tokens must be a positive integer"), std::string::npos);
    body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 0}};
    EXPECT_NE(refusal(body).find("thinking.budget_tokens"), std::string::npos);
    // a budget below max_tokens cuts the thinking there (the sampler forces its end)
    body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 30}};  // max_tokens 50
    EXPECT_EQ(through_chat(body, &chat).reasoning_budget, 30);
    body["thinking"] = {{"type", "adaptive"}};
    EXPECT_EQ(through_chat(body, &chat).reasoning_budget, -1);
    EXPECT_EQ(chat["chat_template_kwargs"], json({{"enable_thinking", true}}));
    body.erase("thinking");
    through_chat(body, &chat);
    EXPECT_FALSE(chat.contains("chat_template_kwargs"));
}

TEST(AnthropicRequest, ThinkingHistoryBecomesReasoningContent) {
    // test_anthropic_thinking_history_in_count_tokens: the thinking blocks must not be lost.
    json body = {{"model", "test"},
                 {"tools", json::array({kWeatherTool})},
                 {"messages",
                  {user("Fix the bug"), assistant(json::parse(R"([
                       {"type": "thinking", "thinking": "Check the layout first.", "signature": "x"},
                       {"type": "redacted_thinking", "data": "EmwKAhgBEgy"},
                       {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}}])")),
                   user(json::parse(R"([{"type": "tool_result", "tool_use_id": "call_1",
                                         "content": "main.py"}])"))}}};
    json chat;
    ASSERT_FALSE(anthropic_count_tokens_to_chat(body, &chat));
    EXPECT_EQ(chat["messages"][1]["reasoning_content"], "Check the layout first.");
    EXPECT_EQ(chat["messages"][1]["tool_calls"][0]["function"]["arguments"], "{}");
    GenRequest g;
    ASSERT_FALSE(parse_gen_request(Api::Chat, chat.dump(), GenerateParams{}, &g));
    EXPECT_NE(g.messages[1].extra_json.find("Check the layout first."), std::string::npos);
    // A thinking block in a user turn makes no sense.
    body["messages"][0] = user(json::parse(R"([{"type": "thinking", "thinking": "hm"}])"));
    ASSERT_TRUE(anthropic_count_tokens_to_chat(body, &chat));
}

TEST(AnthropicRequest, CountTokensNeedsNoMaxTokensAndNeverStreams) {
    json body = {{"model", "test"},
                 {"system", "You are a helpful assistant."},
                 {"messages", {user("Hello world")}}};
    json chat;
    ASSERT_FALSE(anthropic_count_tokens_to_chat(body, &chat));
    EXPECT_FALSE(chat.contains("max_tokens"));
    EXPECT_EQ(chat["messages"].size(), 2u);
    body["stream"] = true;
    ASSERT_FALSE(anthropic_count_tokens_to_chat(body, &chat));
    EXPECT_FALSE(chat.contains("stream"));
    EXPECT_FALSE(chat.contains("stream_options"));
    // The same body is refused by /v1/messages.
    EXPECT_EQ(refusal(body), "max_tokens is required");
    json empty = {{"messages", json::array()}};
    auto err = anthropic_count_tokens_to_chat(empty, &chat);
    ASSERT_TRUE(err);
    EXPECT_EQ(err->message, "messages must not be empty");
    EXPECT_EQ(anthropic_count_tokens_response(7), json({{"input_tokens", 7}}));
}

// ---- whole responses ----------------------------------------------------------------

TEST(AnthropicResponse, Text) {
    GenOutcome o = outcome();
    o.content = "Hello!";
    o.result.text = "Hello!";
    const json m = chat_to_anthropic(chat_response(o));
    EXPECT_EQ(m["id"], "msg_abc");
    EXPECT_EQ(m["type"], "message");
    EXPECT_EQ(m["role"], "assistant");
    EXPECT_EQ(m["model"], "m");
    EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": "Hello!"}])"));
    EXPECT_EQ(m["stop_reason"], "end_turn");
    EXPECT_TRUE(m["stop_sequence"].is_null());
    // Anthropic's accounting: input + cache_read + cache_creation = the prompt.
    EXPECT_EQ(m["usage"], json::parse(R"({"input_tokens": 7, "cache_creation_input_tokens": 0,
                                          "cache_read_input_tokens": 5, "output_tokens": 7})"));
    for (const char* k : {"timings", "choices", "object", "created", "system_fingerprint"})
        EXPECT_FALSE(m.contains(k)) << k;
}

TEST(AnthropicResponse, StopReasons) {
    GenOutcome o = outcome();
    o.content = "1, 2, 3";
    o.result.stop = StopReason::Length;
    EXPECT_EQ(chat_to_anthropic(chat_response(o))["stop_reason"], "max_tokens");
    o.result.stop = StopReason::ContextFull;
    EXPECT_EQ(chat_to_anthropic(chat_response(o))["stop_reason"], "max_tokens");
    o.result.stop = StopReason::StopString;
    o.result.stop_string = "END";
    json m = chat_to_anthropic(chat_response(o), o.result.stop_string);
    EXPECT_EQ(m["stop_reason"], "stop_sequence");
    EXPECT_EQ(m["stop_sequence"], "END");
    m = chat_to_anthropic(chat_response(o));
    EXPECT_EQ(m["stop_reason"], "end_turn") << "without the matched string, the turn ended";
}

TEST(AnthropicResponse, ToolCallsAndReasoning) {
    GenOutcome o = outcome();
    o.result.text =
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}"
        "</tool_call>";
    o.reasoning = "The user wants the weather.";
    o.parsed = parse_tool_calls(o.result.text, {"get_weather"});
    ASSERT_TRUE(o.parsed);
    o.parsed->calls.push_back({"get_weather", "{not json"});  // (unparsable: {})
    o.call_ids = {"call_1", "call_2"};
    const json m = chat_to_anthropic(chat_response(o));
    EXPECT_EQ(m["stop_reason"], "tool_use");
    ASSERT_EQ(m["content"].size(), 3u) << m.dump(2);
    EXPECT_EQ(m["content"][0], json::parse(R"({"type": "thinking",
        "thinking": "The user wants the weather.", "signature": ""})"));
    EXPECT_EQ(m["content"][1], json::parse(R"({"type": "tool_use", "id": "call_1",
        "name": "get_weather", "input": {"location": "Paris"}})"));
    EXPECT_EQ(m["content"][2]["input"], json::object());
    // Text with the calls goes between the thinking and the calls; cut by max_tokens the
    // complete calls still go out, and the reason says it was cut.
    o.parsed->content = "Let me look.";
    o.result.stop = StopReason::Length;
    const json cut = chat_to_anthropic(chat_response(o));
    EXPECT_EQ(cut["content"][1], json::parse(R"({"type": "text", "text": "Let me look."})"));
    EXPECT_EQ(cut["content"][2]["type"], "tool_use");
    EXPECT_EQ(cut["stop_reason"], "max_tokens");
}

TEST(AnthropicResponse, NothingWrittenIsOneEmptyTextBlock) {
    GenOutcome o = outcome();
    const json m = chat_to_anthropic(chat_response(o));
    EXPECT_EQ(m["content"], json::parse(R"([{"type": "text", "text": ""}])"));
}

TEST(AnthropicResponse, Errors) {
    const json e = anthropic_error_json(bad_request("max_tokens is required"));
    EXPECT_EQ(e, json::parse(R"({"type": "error", "error": {"type": "invalid_request_error",
                                 "message": "max_tokens is required"}})"));
    EXPECT_EQ(anthropic_error_json({503, "unavailable_error", "busy", {}})["error"]["type"],
              "overloaded_error");
    EXPECT_EQ(anthropic_error_json({500, "server_error", "x", {}})["error"]["type"], "api_error");
    EXPECT_EQ(anthropic_error_json({400, "exceed_context_size_error", "x", {}})["error"]["type"],
              "invalid_request_error");
    EXPECT_EQ(anthropic_error_json({401, "authentication_error", "x", {}})["error"]["type"],
              "authentication_error");
    EXPECT_EQ(json::parse(anthropic_error_body(bad_request("x")))["type"], "error");
}

// ---- streams ------------------------------------------------------------------------

TEST(AnthropicStream, TextOnly) {
    GenOutcome o = outcome();
    AnthropicStream s("claude-local", 12);
    std::string bytes;
    bytes += s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_text(o, "Hel"));
    bytes += s.on_chunk(chat_chunk_text(o, ""));  // (nothing to send)
    bytes += s.on_chunk(chat_chunk_text(o, "lo"));
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_chunk(usage_chunk(o, true));
    bytes += s.on_done();
    EXPECT_TRUE(s.ended());
    EXPECT_EQ(s.on_done(), "") << "closed once";
    const auto ev = parse_events(bytes);
    expect_well_formed(ev);
    EXPECT_EQ(names(ev),
              (std::vector<std::string>{"message_start", "content_block_start",
                                        "content_block_delta", "content_block_delta",
                                        "content_block_stop", "message_delta", "message_stop"}));
    const json& msg = ev[0].data["message"];
    EXPECT_EQ(msg["id"], "msg_abc");
    EXPECT_EQ(msg["model"], "claude-local");
    EXPECT_EQ(msg["role"], "assistant");
    EXPECT_TRUE(msg["stop_reason"].is_null());
    EXPECT_EQ(msg["usage"]["input_tokens"], 12);
    EXPECT_EQ(msg["usage"]["output_tokens"], 0);
    EXPECT_EQ(ev[1].data["content_block"], json::parse(R"({"type": "text", "text": ""})"));
    EXPECT_EQ(ev[2].data["delta"], json::parse(R"({"type": "text_delta", "text": "Hel"})"));
    EXPECT_EQ(blocks_of(ev), json::parse(R"([{"type": "text", "text": "Hello"}])"));
    const json& md = ev[5].data;
    EXPECT_EQ(md["delta"], json::parse(R"({"stop_reason": "end_turn", "stop_sequence": null})"));
    EXPECT_EQ(md["usage"]["output_tokens"], 7);
    EXPECT_EQ(md["usage"]["input_tokens"], 7);
    EXPECT_EQ(md["usage"]["cache_read_input_tokens"], 5);
    EXPECT_EQ(ev[6].data, json({{"type", "message_stop"}}));
}

TEST(AnthropicStream, StopSequenceAndMaxTokens) {
    GenOutcome o = outcome();
    o.result.stop = StopReason::StopString;
    AnthropicStream s("", 3);
    std::string bytes = feed(
        s,
        {chat_chunk_role(o), chat_chunk_text(o, "1 2"), chat_chunk_final(o), usage_chunk(o, true)},
        false);
    s.set_stop_sequence("3");
    bytes += s.on_done();
    auto ev = parse_events(bytes);
    expect_well_formed(ev);
    EXPECT_EQ(ev[0].data["message"]["model"], "m") << "no name given: the chunks'";
    EXPECT_EQ(ev[ev.size() - 2].data["delta"],
              json::parse(R"({"stop_reason": "stop_sequence", "stop_sequence": "3"})"));

    o.result.stop = StopReason::Length;
    AnthropicStream cut("m", 3);
    bytes = feed(cut, {chat_chunk_role(o), chat_chunk_text(o, "1 2"), chat_chunk_final(o)});
    // (no usage chunk)
    ev = parse_events(bytes);
    expect_well_formed(ev);
    EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "max_tokens");
    EXPECT_EQ(ev[ev.size() - 2].data["usage"], json({{"output_tokens", 0}}));
}

TEST(AnthropicStream, TextThenToolCallsStreamedAsWritten) {
    GenOutcome o = outcome();
    o.call_ids = {"call_1", "call_2"};
    AnthropicStream s("m", 12);
    std::string bytes = s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_text(o, "Checking."));
    bytes += s.on_chunk(chat_chunk_call_start(o, 0, "call_1", "get_weather"));
    bytes += s.on_chunk(chat_chunk_call_arguments(o, 0, "{\"location\": "));
    bytes += s.on_chunk(chat_chunk_call_arguments(o, 0, "\"Paris\"}"));
    bytes += s.on_chunk(chat_chunk_call_start(o, 1, "call_2", "get_weather"));
    bytes += s.on_chunk(chat_chunk_call_arguments(o, 1, "{\"location\": \"Rome\"}"));
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_chunk(usage_chunk(o, true));
    bytes += s.on_done();
    const auto ev = parse_events(bytes);
    expect_well_formed(ev);
    EXPECT_EQ(blocks_of(ev), json::parse(R"([
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"location": "Rome"}}])"));
    for (const Event& e : ev) {
        if (e.name == "content_block_start" && e.data["content_block"]["type"] == "tool_use") {
            EXPECT_EQ(e.data["content_block"]["input"], json::object());
        }
    }
    EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "tool_use");
}

TEST(AnthropicStream, ToolCallsOnlyInOneDelta) {
    // Without streamed calls, ChatStream sends every parsed call in one delta at the end.
    GenOutcome o = outcome();
    o.result.text =
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>"
        "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
    o.parsed = parse_tool_calls(o.result.text, {"f", "g"});
    ASSERT_TRUE(o.parsed);
    ASSERT_EQ(o.parsed->calls.size(), 2u);
    o.call_ids = {"call_a", "call_b"};
    AnthropicStream s("m", 12);
    const std::string bytes = feed(s, {chat_chunk_role(o), chat_chunk_tool_calls(o),
                                       chat_chunk_final(o), usage_chunk(o, true)});
    const auto ev = parse_events(bytes);
    expect_well_formed(ev);
    const json blocks = blocks_of(ev);
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(blocks[0]["id"], "call_a");
    EXPECT_EQ(blocks[0]["name"], "f");
    EXPECT_EQ(blocks[0]["input"], json({{"a", 1}}));
    EXPECT_EQ(blocks[1]["name"], "g");
    EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "tool_use");
}

TEST(AnthropicStream, AnyOrderKeepsBlocksConsecutive) {
    // Kinds alternating, a call's fragment after its block closed (Anthropic blocks do not
    // reopen: dropped), a call delta without an index: still one block at a time.
    GenOutcome o = outcome();
    AnthropicStream s("m", 12);
    const json no_index = json::parse(R"({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "h", "arguments": "{}"}}]}}]})");
    const std::string bytes =
        feed(s, {chat_chunk_reasoning(o, "a"), chat_chunk_text(o, "b"),
                 chat_chunk_call_start(o, 0, "call_1", "f"), chat_chunk_call_arguments(o, 0, "{"),
                 chat_chunk_text(o, " c"), chat_chunk_call_arguments(o, 0, "}"),
                 chat_chunk_reasoning(o, "d"), no_index, chat_chunk_final(o)});
    const auto ev = parse_events(bytes);
    expect_well_formed(ev);
    std::vector<std::string> kinds;
    for (const Event& e : ev)
        if (e.name == "content_block_start") kinds.push_back(e.data["content_block"]["type"]);
    EXPECT_EQ(kinds, (std::vector<std::string>{"thinking", "text", "tool_use", "text", "thinking",
                                               "tool_use"}));
    std::string partial;
    for (const Event& e : ev)
        if (e.name == "content_block_delta" && e.data["index"] == 2)
            partial += e.data["delta"]["partial_json"].get<std::string>();
    EXPECT_EQ(partial, "{") << "the late fragment is not sent into another block";
    EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "tool_use")
        << "calls were made, whatever the finish reason said";
}

TEST(AnthropicStream, ReasoningThenText) {
    GenOutcome o = outcome();
    AnthropicStream s("m", 12);
    const std::string bytes = feed(
        s, {chat_chunk_role(o), chat_chunk_reasoning(o, "2+2 is "), chat_chunk_reasoning(o, "4."),
            chat_chunk_text(o, "4"), chat_chunk_final(o), usage_chunk(o, true)});
    const auto ev = parse_events(bytes);
    expect_well_formed(ev);
    EXPECT_EQ(names(ev), (std::vector<std::string>{
                             "message_start", "content_block_start", "content_block_delta",
                             "content_block_delta", "content_block_delta", "content_block_stop",
                             "content_block_start", "content_block_delta", "content_block_stop",
                             "message_delta", "message_stop"}));
    EXPECT_EQ(ev[1].data["content_block"]["type"], "thinking");
    EXPECT_EQ(ev[1].data["index"], 0);
    EXPECT_EQ(ev[4].data["delta"], json::parse(R"({"type": "signature_delta", "signature": ""})"))
        << "a thinking block ends with its signature";
    EXPECT_EQ(ev[6].data["content_block"]["type"], "text");
    EXPECT_EQ(ev[6].data["index"], 1);
    const json blocks = blocks_of(ev);
    EXPECT_EQ(blocks[0]["thinking"], "2+2 is 4.");
    EXPECT_EQ(blocks[1]["text"], "4");
}

TEST(AnthropicStream, NothingWrittenStillMakesAMessage) {
    GenOutcome o = outcome();
    AnthropicStream s("m", 12);
    const std::string bytes =
        feed(s, {chat_chunk_role(o), chat_chunk_final(o), usage_chunk(o, true)});
    auto ev = parse_events(bytes);
    expect_well_formed(ev);
    EXPECT_EQ(blocks_of(ev), json::parse(R"([{"type": "text", "text": ""}])"));
    // Not even a chunk: still a whole message.
    AnthropicStream bare("m", 1);
    ev = parse_events(bare.on_done());
    expect_well_formed(ev);
    EXPECT_EQ(ev[0].data["message"]["id"].get<std::string>().rfind("msg_", 0), 0u);
}

TEST(AnthropicStream, Errors) {
    const json err = json::parse(error_body({500, "server_error", "the model failed", {}}));
    // Before anything: the error alone.
    AnthropicStream first("m", 12);
    auto ev = parse_events(first.on_chunk(err));
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].data, json::parse(R"({"type": "error",
        "error": {"type": "api_error", "message": "the model failed"}})"));
    EXPECT_TRUE(first.ended());
    EXPECT_EQ(first.on_done(), "");
    EXPECT_EQ(first.on_chunk(chat_chunk_text(outcome(), "late")), "");

    // In the middle: what was sent, then the error, then nothing.
    GenOutcome o = outcome();
    AnthropicStream mid("m", 12);
    const std::string bytes =
        feed(mid, {chat_chunk_role(o), chat_chunk_text(o, "Hi"),
                   json::parse(error_body({503, "unavailable_error", "stopping", {}})),
                   chat_chunk_final(o)});
    ev = parse_events(bytes);
    EXPECT_EQ(names(ev), (std::vector<std::string>{"message_start", "content_block_start",
                                                   "content_block_delta", "error"}));
    EXPECT_EQ(ev.back().data["error"]["type"], "overloaded_error");
}

TEST(AnthropicStream, PingAndRawSseSplitAnywhere) {
    EXPECT_EQ(AnthropicStream::ping(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    GenOutcome o = outcome();
    std::string chat;
    for (const json& c : {chat_chunk_role(o), chat_chunk_reasoning(o, "hm"),
                          chat_chunk_text(o, "a\n\nb"), chat_chunk_final(o), usage_chunk(o, true)})
        chat += sse(c);
    chat += "data: [DONE]\n\n";
    AnthropicStream whole("m", 12);
    const std::string expected = whole.on_sse(chat);
    expect_well_formed(parse_events(expected));
    for (size_t cut = 1; cut < chat.size(); cut += 7) {
        AnthropicStream s("m", 12);
        std::string got = s.on_sse(chat.substr(0, cut));
        got += s.on_sse(chat.substr(cut));
        // (ids are the chunks', so the bytes match exactly)
        ASSERT_EQ(got, expected) << "cut at " << cut;
    }
}

// The whole path the server will run: ChatStream writing into AnthropicStream.
TEST(AnthropicStream, BehindTheChatStreamWriter) {
    GenRequest g;
    g.api = Api::Chat;
    g.include_usage = true;
    g.tool_names = {"get_weather"};
    std::string out;
    AnthropicStream a("m", 12);
    StreamSettings ss;
    ss.request = &g;
    ss.reasoning = true;
    ss.tool_grammar = true;
    auto w = make_stream_writer(
        Api::Chat,
        [&](std::string_view b) {
            out += a.on_sse(b);
            return true;
        },
        ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "<|im_start|>assistant\n");
    for (const char* p :
         {"<think>", "Paris, ", "then.</think>\n\n", "<tool_call>\n{\"name\": \"get_",
          "weather\", \"arguments\": {\"location\": ", "\"Paris\"}}\n</tool_call>"})
        w->piece(o, p);
    w->end_choice(o);
    w->end(o, o);
    const auto ev = parse_events(out);
    expect_well_formed(ev);
    const json blocks = blocks_of(ev);
    ASSERT_EQ(blocks.size(), 2u) << blocks.dump(2);
    EXPECT_EQ(blocks[0]["type"], "thinking");
    EXPECT_EQ(blocks[0]["thinking"], "Paris, then.");
    EXPECT_EQ(blocks[1]["type"], "tool_use");
    ASSERT_EQ(o.call_ids.size(), 1u);
    EXPECT_EQ(blocks[1]["id"], o.call_ids[0]);
    EXPECT_EQ(blocks[1]["input"], json({{"location", "Paris"}}));
    EXPECT_EQ(ev[ev.size() - 2].data["delta"]["stop_reason"], "tool_use");
    EXPECT_EQ(ev[ev.size() - 2].data["usage"]["output_tokens"], 7);
    EXPECT_TRUE(a.ended());
}
