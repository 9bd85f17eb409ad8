// OpenAI's Responses API over the chat path: requests translated into chat bodies (and
// accepted by the chat parser), chat answers into Response objects, and chat streams into
// the Responses stream's events, in order, with their indices and sequence numbers.
#include <gtest/gtest.h>

#include "server/api/api.h"
#include "server/api/responses/responses.h"
#include "server/api/openai/stream_writer.h"

using namespace edgellm;
using namespace edgellm::server;

namespace {

json to_chat(const json& body) {
    json chat;
    auto e = responses_to_chat(body, &chat);
    EXPECT_FALSE(e) << (e ? e->message : "");
    return chat;
}

// The refusal's message (empty when the body was accepted).
std::string refusal(const json& body) {
    json chat;
    auto e = responses_to_chat(body, &chat);
    if (!e) return "";
    EXPECT_EQ(e->status, 400);
    return e->message;
}

// The chat body through the chat request parser, as the server will parse it.
GenRequest parsed(const json& chat) {
    GenRequest g;
    auto e = parse_gen_request(Api::Chat, chat.dump(), GenerateParams{}, &g);
    EXPECT_FALSE(e) << (e ? e->message : "") << "\n" << chat.dump(2);
    return g;
}

GenOutcome outcome() {
    GenOutcome o;
    o.id = "chatcmpl-abc123";
    o.model = "m";
    o.created = 1700000000;
    o.result.stop = StopReason::Eos;
    o.result.n_prompt = 12;
    o.result.n_cached = 4;
    o.result.n_generated = 3;
    return o;
}

const json kWeatherTool = {{"type", "function"},
                           {"name", "get_weather"},
                           {"description", "The weather in a city"},
                           {"parameters",
                            {{"type", "object"},
                             {"properties", {{"city", {{"type", "string"}}}}},
                             {"required", {"city"}}}},
                           {"strict", true}};

// SSE bytes split into events; each one's "event:" line must name its data's type.
std::vector<json> events_of(const std::string& bytes) {
    std::vector<json> out;
    size_t at = 0;
    while (at < bytes.size()) {
        const size_t end = bytes.find("\n\n", at);
        EXPECT_NE(end, std::string::npos) << "an event not ended by a blank line";
        if (end == std::string::npos) break;
        const std::string ev = bytes.substr(at, end - at);
        at = end + 2;
        EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
        const size_t nl = ev.find('\n');
        EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
        json data = json::parse(ev.substr(nl + 7));
        EXPECT_EQ(data["type"], ev.substr(7, nl - 7));
        out.push_back(std::move(data));
    }
    return out;
}

std::vector<std::string> types_of(const std::vector<json>& ev) {
    std::vector<std::string> t;
    for (const json& e : ev) t.push_back(e["type"]);
    return t;
}

// Events numbered 0, 1, 2, ... in the order sent.
void expect_sequenced(const std::vector<json>& ev) {
    for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i]["sequence_number"], i) << ev[i].dump();
}

std::vector<json> of_type(const std::vector<json>& ev, const std::string& type) {
    std::vector<json> out;
    for (const json& e : ev)
        if (e["type"] == type) out.push_back(e);
    return out;
}

}  // namespace

// ---- requests -----------------------------------------------------------------------

TEST(ResponsesRequest, StringInputIsOneUserMessage) {
    const json chat = to_chat({{"model", "gpt-4.1"},
                               {"input", "What is the best book"},
                               {"max_output_tokens", 8},
                               {"temperature", 0.8},
                               {"top_p", 0.9}});
    EXPECT_EQ(chat["model"], "gpt-4.1");
    EXPECT_EQ(chat["messages"],
              json::parse(R"([{"role":"user","content":"What is the best book"}])"));
    EXPECT_EQ(chat["max_tokens"], 8);
    EXPECT_FALSE(chat.contains("max_output_tokens"));
    EXPECT_FALSE(chat.contains("input"));
    const GenRequest g = parsed(chat);
    ASSERT_EQ(g.messages.size(), 1u);
    EXPECT_EQ(g.messages[0].role, "user");
    EXPECT_EQ(g.gen.n_predict, 8);
    EXPECT_FLOAT_EQ(g.gen.sampling.temperature, 0.8f);
    EXPECT_FLOAT_EQ(g.gen.sampling.top_p, 0.9f);
    EXPECT_FALSE(g.stream);
}

TEST(ResponsesRequest, InstructionsComeFirstAndJoinALeadingSystemMessage) {
    json chat = to_chat({{"instructions", "Be brief."}, {"input", "Hi"}});
    EXPECT_EQ(chat["messages"][0], json::parse(R"({"role":"system","content":"Be brief."})"));
    EXPECT_EQ(chat["messages"][1]["role"], "user");

    // The llama.cpp test's form: system and user messages as items.
    chat = to_chat({{"instructions", "Be brief."},
                    {"input", json::parse(R"([{"role":"developer","content":"Book"},
                                              {"role":"user","content":"What is the best book"}])")}});
    ASSERT_EQ(chat["messages"].size(), 2u);
    EXPECT_EQ(chat["messages"][0]["content"], "Be brief.\n\nBook");
    const GenRequest g = parsed(chat);
    ASSERT_EQ(g.messages.size(), 2u);
    EXPECT_EQ(g.messages[0].role, "system");
    EXPECT_EQ(g.messages[0].content, "Be brief.\n\nBook");
}

TEST(ResponsesRequest, ContentPartsAreTextParts) {
    const json chat = to_chat({{"input", json::parse(R"([
        {"type":"message","role":"user","content":[{"type":"input_text","text":"Hello"},
                                                   {"type":"input_text","text":"there"}]},
        {"type":"message","role":"assistant","status":"completed","id":"msg_1",
         "content":[{"type":"output_text","text":"Hi!","annotations":[]}]},
        {"role":"user","content":"Bye"}])")}});
    const json& m = chat["messages"];
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0]["content"],
              json::parse(R"([{"type":"text","text":"Hello"},{"type":"text","text":"there"}])"));
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_EQ(m[1]["content"], json::parse(R"([{"type":"text","text":"Hi!"}])"));
    const GenRequest g = parsed(chat);
    ASSERT_EQ(g.messages.size(), 3u);
    EXPECT_EQ(g.messages[0].content, "Hello\nthere");
    EXPECT_EQ(g.messages[1].content, "Hi!");
}

TEST(ResponsesRequest, FunctionCallsAndOutputs) {
    const json chat = to_chat({{"tools", json::array({kWeatherTool})}, {"input", json::parse(R"([
        {"role":"user","content":"Weather in Paris and Rome?"},
        {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","id":"fc_1","status":"completed"},
        {"type":"function_call","call_id":"call_2","name":"get_weather","arguments":"{\"city\":\"Rome\"}"},
        {"type":"function_call_output","call_id":"call_1","output":"18C"},
        {"type":"function_call_output","call_id":"call_2","output":[{"type":"input_text","text":"20C"}]}])")}});
    const json& m = chat["messages"];
    ASSERT_EQ(m.size(), 4u) << m.dump(2);
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_TRUE(m[1]["content"].is_null());
    ASSERT_EQ(m[1]["tool_calls"].size(), 2u) << "consecutive calls are one assistant message";
    EXPECT_EQ(m[1]["tool_calls"][0], json::parse(R"({"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})"));
    EXPECT_EQ(m[1]["tool_calls"][1]["id"], "call_2");
    EXPECT_EQ(
        m[2],
        json::parse(
            R"({"role":"tool","tool_call_id":"call_1","content":"18C","name":"get_weather"})"));
    EXPECT_EQ(m[3]["tool_call_id"], "call_2");
    EXPECT_EQ(m[3]["content"], json::parse(R"([{"type":"text","text":"20C"}])"));
    const GenRequest g = parsed(chat);
    ASSERT_EQ(g.messages.size(), 4u);
    EXPECT_EQ(g.messages[2].role, "tool");
    EXPECT_EQ(g.messages[3].content, "20C");
    EXPECT_NE(g.messages[1].extra_json.find("call_2"), std::string::npos);
    EXPECT_TRUE(g.add_generation_prompt);
}

TEST(ResponsesRequest, ReasoningTextAndCallsAreOneAssistantTurn) {
    const json chat = to_chat({{"tools", json::array({kWeatherTool})}, {"input", json::parse(R"([
        {"role":"user","content":"Weather?"},
        {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Need the tool."}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me check."}]},
        {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"},
        {"type":"function_call_output","call_id":"call_1","output":"-3C"},
        {"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"gAAAA"}])")}});
    const json& m = chat["messages"];
    ASSERT_EQ(m.size(), 3u) << m.dump(2);
    EXPECT_EQ(m[1]["role"], "assistant");
    EXPECT_EQ(m[1]["reasoning_content"], "Need the tool.");
    EXPECT_EQ(m[1]["content"], json::parse(R"([{"type":"text","text":"Let me check."}])"));
    EXPECT_EQ(m[1]["tool_calls"].size(), 1u);
    EXPECT_EQ(m[2]["role"], "tool") << "an encrypted-only reasoning item is dropped";
    parsed(chat);
}

TEST(ResponsesRequest, ToolsAndToolChoice) {
    json chat = to_chat({{"input", "Weather in Paris?"},
                         {"tools", json::array({kWeatherTool})},
                         {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
                         {"parallel_tool_calls", false}});
    ASSERT_EQ(chat["tools"].size(), 1u);
    EXPECT_EQ(chat["tools"][0]["type"], "function");
    EXPECT_EQ(chat["tools"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(chat["tools"][0]["function"]["description"], "The weather in a city");
    EXPECT_EQ(chat["tools"][0]["function"]["parameters"], kWeatherTool["parameters"]);
    EXPECT_EQ(chat["tools"][0]["function"]["strict"], true);
    EXPECT_EQ(chat["tool_choice"],
              json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
    GenRequest g = parsed(chat);
    EXPECT_EQ(g.tool_choice, "get_weather");
    EXPECT_TRUE(g.tool_choice_named);
    EXPECT_FALSE(g.parallel_tool_calls);
    EXPECT_EQ(g.tool_names, std::vector<std::string>{"get_weather"});

    for (const char* s : {"auto", "none", "required"}) {
        chat =
            to_chat({{"input", "x"}, {"tools", json::array({kWeatherTool})}, {"tool_choice", s}});
        EXPECT_EQ(chat["tool_choice"], s);
        EXPECT_EQ(parsed(chat).tool_choice, s);
    }

    // allowed_tools: the tools cut to those listed, its mode the choice.
    json search = kWeatherTool;
    search["name"] = "search";
    chat = to_chat({{"input", "x"},
                    {"tools", json::array({kWeatherTool, search})},
                    {"tool_choice", json::parse(R"({"type":"allowed_tools","mode":"required",
                                                     "tools":[{"type":"function","name":"search"}]})")}});
    ASSERT_EQ(chat["tools"].size(), 1u);
    EXPECT_EQ(chat["tools"][0]["function"]["name"], "search");
    EXPECT_EQ(chat["tool_choice"], "required");
    EXPECT_EQ(parsed(chat).tool_names, std::vector<std::string>{"search"});
}

TEST(ResponsesRequest, TextFormatIsResponseFormat) {
    const json schema =
        json::parse(R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})");
    json chat = to_chat(
        {{"input", "x"},
         {"text",
          {{"format",
            {{"type", "json_schema"}, {"name", "count"}, {"schema", schema}, {"strict", true}}}}}});
    EXPECT_EQ(chat["response_format"]["type"], "json_schema");
    EXPECT_EQ(chat["response_format"]["json_schema"]["name"], "count");
    EXPECT_EQ(chat["response_format"]["json_schema"]["schema"], schema);
    GenRequest g = parsed(chat);
    EXPECT_TRUE(g.grammar) << "the schema constrains the reply";

    chat = to_chat({{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}});
    EXPECT_EQ(chat["response_format"], json::parse(R"({"type":"json_object"})"));
    EXPECT_TRUE(parsed(chat).grammar);

    chat =
        to_chat({{"input", "x"}, {"text", {{"format", {{"type", "text"}}}, {"verbosity", "low"}}}});
    EXPECT_FALSE(parsed(chat).grammar);

    EXPECT_NE(refusal({{"input", "x"}, {"text", {{"format", {{"type", "xml"}}}}}})
                  .find("text.format.type"),
              std::string::npos);
    EXPECT_NE(refusal({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}})
                  .find("text.format.schema"),
              std::string::npos);
}

TEST(ResponsesRequest, ReasoningEffortStreamLogprobsAndExtras) {
    json chat =
        to_chat({{"input", "x"},
                 {"reasoning", {{"effort", "low"}, {"summary", "auto"}}},
                 {"stream", true},
                 {"stream_options", {{"include_obfuscation", false}}},
                 {"include", {"message.output_text.logprobs", "reasoning.encrypted_content"}},
                 {"top_logprobs", 3},
                 {"store", false},
                 {"metadata", {{"k", "v"}}},
                 {"top_k", 20},
                 {"timings_per_token", true}});
    EXPECT_EQ(chat["reasoning_effort"], "low");
    EXPECT_EQ(chat["stream_options"], json::parse(R"({"include_usage":true})"));
    EXPECT_EQ(chat["logprobs"], true);
    EXPECT_EQ(chat["top_logprobs"], 3);
    for (const char* k : {"reasoning", "include", "store", "metadata", "text", "input"})
        EXPECT_FALSE(chat.contains(k)) << k;
    const GenRequest g = parsed(chat);
    EXPECT_TRUE(g.stream);
    EXPECT_TRUE(g.include_usage) << "response.completed carries the usage";
    EXPECT_TRUE(g.logprobs);
    EXPECT_EQ(g.top_logprobs, 3);
    EXPECT_EQ(g.gen.sampling.top_k, 20) << "llama.cpp's extras pass through";
    EXPECT_TRUE(g.timings_per_token);
    EXPECT_EQ(g.reasoning_effort, "low");

    chat = to_chat({{"input", "x"}, {"reasoning", {{"effort", "none"}}}});
    EXPECT_EQ(parsed(chat).reasoning_effort, "none");
    EXPECT_NE(refusal({{"input", "x"}, {"reasoning", {{"effort", "extreme"}}}}).find("reasoning.effort must be one of"),
              std::string::npos);
    // store: true is the API's default; accepted (nothing is stored, and the Response says so).
    EXPECT_EQ(refusal({{"input", "x"}, {"store", true}}), "");
    EXPECT_EQ(refusal({{"input", "x"}, {"background", false}}), "");
}

TEST(ResponsesRequest, RefusalsNameTheField) {
    auto refused = [](json body, const std::string& needle) {
        if (!body.contains("input")) body["input"] = "x";
        const std::string why = refusal(body);
        EXPECT_NE(why.find(needle), std::string::npos)
            << "got: \"" << why << "\" for " << body.dump();
    };
    refused({{"previous_response_id", "resp_123"}}, "previous_response_id");
    refused({{"conversation", "conv_1"}}, "conversation");
    refused({{"prompt", {{"id", "pmpt_1"}}}}, "prompt");
    refused({{"background", true}}, "background");
    refused(json::parse(R"({"input":[{"role":"user","content":[{"type":"input_text","text":"see"},
              {"type":"input_image","image_url":"https://x/y.png"}]}]})"),
            "input[0].content[1] is an input_image part: this model takes text only");
    refused(json::parse(
                R"({"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]})"),
            "text only");
    refused(json::parse(R"({"input":[{"type":"function_call_output","call_id":"c",
              "output":[{"type":"input_image","image_url":"u"}]}]})"),
            "input[0].output[0]");
    refused({{"tools", json::parse(R"([{"type":"web_search"}])")}}, "tools[0].type \"web_search\"");
    refused({{"tools", json::parse(R"([{"type":"file_search","vector_store_ids":["v"]}])")}},
            "function tools only");
    refused(
        {{"tools", json::array({kWeatherTool})}, {"tool_choice", {{"type", "web_search_preview"}}}},
        "tool_choice");
    refused(json::parse(R"({"input":[{"type":"item_reference","id":"msg_1"}]})"), "item_reference");
    refused(json::parse(R"({"input":[{"type":"computer_call_output","call_id":"c","output":{}}]})"),
            "input[0].type \"computer_call_output\"");
    refused(json::parse(R"({"input":[{"role":"tool","content":"x"}]})"), "input[0].role");
    refused(json::parse(R"({"input":[{"type":"function_call","call_id":"c","name":"f"}]})"),
            "input[0].arguments");
    refused({{"max_output_tokens", 0}}, "max_output_tokens");
    refused({{"max_output_tokens", "8"}}, "max_output_tokens");
    refused({{"messages", json::array()}}, "messages");
    refused({{"n", 2}}, "n is not supported");
    refused({{"input", 5}}, "input must be");
    refused({{"input", json::array()}}, "input must not be empty");
    EXPECT_NE(refusal(json::object()).find("input is required"), std::string::npos);
}

// ---- whole responses ----------------------------------------------------------------

TEST(ResponsesAnswer, TextReply) {
    GenOutcome o = outcome();
    o.content = "Suddenly, a book.";
    const json req = {
        {"model", "gpt-4.1"}, {"input", "x"}, {"temperature", 0.8}, {"max_output_tokens", 8}};
    const json r = chat_to_responses(chat_response(o), req);
    EXPECT_EQ(r["id"], "resp_abc123") << "the chat id's random part";
    EXPECT_EQ(r["object"], "response");
    EXPECT_EQ(r["created_at"], 1700000000);
    EXPECT_EQ(r["status"], "completed");
    EXPECT_TRUE(r["incomplete_details"].is_null());
    EXPECT_EQ(r["model"], "m");
    ASSERT_EQ(r["output"].size(), 1u);
    const json& msg = r["output"][0];
    EXPECT_EQ(msg["type"], "message");
    EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
    EXPECT_EQ(msg["status"], "completed");
    EXPECT_EQ(msg["role"], "assistant");
    EXPECT_EQ(msg["content"], json::parse(R"([{"type":"output_text","annotations":[],"logprobs":[],
                                               "text":"Suddenly, a book."}])"));
    EXPECT_FALSE(r.contains("output_text")) << "an SDK property, not a field";
    EXPECT_EQ(r["usage"],
              json::parse(R"({"input_tokens":12,"input_tokens_details":{"cached_tokens":4},
        "output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15})"));
    // The settings echoed, with the SDK's required fields.
    EXPECT_EQ(r["temperature"], 0.8);
    EXPECT_EQ(r["max_output_tokens"], 8);
    EXPECT_EQ(r["tools"], json::array());
    EXPECT_EQ(r["tool_choice"], "auto");
    EXPECT_EQ(r["parallel_tool_calls"], true);
    EXPECT_EQ(r["store"], false);
    EXPECT_EQ(r["text"]["format"]["type"], "text");
    EXPECT_TRUE(r.contains("timings"));
}

TEST(ResponsesAnswer, ReasoningAndToolCalls) {
    GenOutcome o = outcome();
    o.reasoning = "The user wants the weather.";
    o.parsed = ParsedReply{
        "Let me check.", {{"get_weather", "{\"city\":\"Paris\"}"}, {"search", "{\"q\":\"rain\"}"}}};
    o.call_ids = {"call_a", "call_b"};
    const json r = chat_to_responses(chat_response(o),
                                     {{"input", "x"}, {"tools", json::array({kWeatherTool})}});
    ASSERT_EQ(r["output"].size(), 4u) << r.dump(2);
    const json& rs = r["output"][0];
    EXPECT_EQ(rs["type"], "reasoning");
    EXPECT_EQ(rs["id"].get<std::string>().rfind("rs_", 0), 0u);
    EXPECT_EQ(rs["content"],
              json::parse(R"([{"type":"reasoning_text","text":"The user wants the weather."}])"));
    EXPECT_EQ(rs["summary"], json::array());
    EXPECT_EQ(r["output"][1]["content"][0]["text"], "Let me check.");
    const json& fc = r["output"][2];
    EXPECT_EQ(fc["type"], "function_call");
    EXPECT_EQ(fc["id"].get<std::string>().rfind("fc_", 0), 0u);
    EXPECT_EQ(fc["call_id"], "call_a");
    EXPECT_EQ(fc["name"], "get_weather");
    EXPECT_EQ(fc["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(fc["status"], "completed");
    EXPECT_EQ(r["output"][3]["call_id"], "call_b");
    EXPECT_EQ(r["status"], "completed");
    EXPECT_EQ(r["tools"][0]["name"], "get_weather") << "the request's tools, as given";
}

TEST(ResponsesAnswer, CutByTheLimitIsIncomplete) {
    GenOutcome o = outcome();
    o.content = "Once upon a";
    o.result.stop = StopReason::Length;
    json r = chat_to_responses(chat_response(o));
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"], json::parse(R"({"reason":"max_output_tokens"})"));
    EXPECT_EQ(r["output"][0]["status"], "incomplete");

    // A cut reply keeps its complete calls: those are finished items.
    o.content.clear();
    o.parsed = ParsedReply{"", {{"get_weather", "{\"city\":\"Paris\"}"}}};
    o.call_ids = {"call_a"};
    r = chat_to_responses(chat_response(o));
    EXPECT_EQ(r["status"], "incomplete");
    ASSERT_EQ(r["output"].size(), 1u);
    EXPECT_EQ(r["output"][0]["status"], "completed");
}

// ---- streams ------------------------------------------------------------------------

TEST(ResponsesStream, TextEventsInOrder) {
    GenOutcome o = outcome();
    ResponsesStream s("gpt-4.1", {{"input", "x"}, {"stream", true}});
    std::string bytes;
    bytes += s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_text(o, "Sudden"));
    bytes += s.on_chunk(chat_chunk_text(o, "ly"));
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_chunk(usage_chunk(o, true));
    EXPECT_FALSE(s.finished());
    bytes += s.on_done();
    EXPECT_TRUE(s.finished());
    EXPECT_EQ(s.on_done(), "") << "nothing after the terminal event";
    EXPECT_EQ(bytes.find("[DONE]"), std::string::npos);

    const auto ev = events_of(bytes);
    EXPECT_EQ(types_of(ev),
              (std::vector<std::string>{"response.created", "response.in_progress",
                                        "response.output_item.added", "response.content_part.added",
                                        "response.output_text.delta", "response.output_text.delta",
                                        "response.output_text.done", "response.content_part.done",
                                        "response.output_item.done", "response.completed"}));
    expect_sequenced(ev);
    const std::string resp_id = ev[0]["response"]["id"];
    EXPECT_EQ(resp_id, "resp_abc123");
    EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
    EXPECT_EQ(ev[0]["response"]["model"], "gpt-4.1");
    EXPECT_EQ(ev[0]["response"]["output"], json::array());
    EXPECT_EQ(ev[1]["response"]["id"], resp_id);
    const std::string msg_id = ev[2]["item"]["id"];
    EXPECT_EQ(msg_id.rfind("msg_", 0), 0u);
    EXPECT_EQ(ev[2]["item"]["status"], "in_progress");
    EXPECT_EQ(ev[2]["item"]["content"], json::array());
    std::string gathered;
    for (size_t i = 2; i <= 8; ++i) {
        EXPECT_EQ(ev[i]["output_index"], 0);
        if (i != 2 && i != 8) {
            EXPECT_EQ(ev[i]["item_id"], msg_id) << ev[i].dump();
            EXPECT_EQ(ev[i]["content_index"], 0);
        }
        if (ev[i]["type"] == "response.output_text.delta")
            gathered += ev[i]["delta"].get<std::string>();
    }
    EXPECT_EQ(gathered, "Suddenly");
    EXPECT_EQ(ev[3]["part"]["type"], "output_text");
    EXPECT_EQ(ev[6]["text"], "Suddenly");
    EXPECT_EQ(ev[7]["part"]["text"], "Suddenly");
    EXPECT_EQ(ev[8]["item"]["id"], msg_id);
    EXPECT_EQ(ev[8]["item"]["status"], "completed");
    const json& done = ev[9];
    EXPECT_EQ(done["response"]["id"], resp_id);
    EXPECT_EQ(done["response"]["status"], "completed");
    ASSERT_EQ(done["response"]["output"].size(), 1u);
    EXPECT_EQ(done["response"]["output"][0]["content"][0]["text"], gathered);
    EXPECT_EQ(done["response"]["usage"]["input_tokens"], 12);
    EXPECT_EQ(done["response"]["usage"]["output_tokens"], 3);
    EXPECT_TRUE(done.contains("timings")) << "llama.cpp's timings beside the response";
    EXPECT_TRUE(done["timings"].contains("predicted_per_second"));
}

TEST(ResponsesStream, StreamedToolCalls) {
    GenOutcome o = outcome();
    ResponsesStream s("m");
    std::string bytes;
    bytes += s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_text(o, "Let me check."));
    bytes += s.on_chunk(chat_chunk_call_start(o, 0, "call_a", "get_weather"));
    bytes += s.on_chunk(chat_chunk_call_arguments(o, 0, "{\"city\":"));
    bytes += s.on_chunk(chat_chunk_call_arguments(o, 0, "\"Paris\"}"));
    bytes += s.on_chunk(chat_chunk_call_start(o, 1, "call_b", "search"));
    bytes += s.on_chunk(chat_chunk_call_arguments(o, 1, "{\"q\":\"rain\"}"));
    o.call_ids = {"call_a", "call_b"};
    const json fin = chat_chunk_final(o);
    EXPECT_EQ(fin["choices"][0]["finish_reason"], "tool_calls");
    bytes += s.on_chunk(fin);
    bytes += s.on_chunk(usage_chunk(o, true));
    bytes += s.on_done();
    const auto ev = events_of(bytes);
    expect_sequenced(ev);
    EXPECT_EQ(
        types_of(ev),
        (std::vector<std::string>{
            "response.created", "response.in_progress", "response.output_item.added",
            "response.content_part.added", "response.output_text.delta",
            "response.output_text.done", "response.content_part.done", "response.output_item.done",
            "response.output_item.added", "response.function_call_arguments.delta",
            "response.function_call_arguments.delta", "response.function_call_arguments.done",
            "response.output_item.done", "response.output_item.added",
            "response.function_call_arguments.delta", "response.function_call_arguments.done",
            "response.output_item.done", "response.completed"}));
    const json& added = ev[8];
    EXPECT_EQ(added["output_index"], 1);
    EXPECT_EQ(added["item"]["type"], "function_call");
    EXPECT_EQ(added["item"]["call_id"], "call_a");
    EXPECT_EQ(added["item"]["name"], "get_weather");
    EXPECT_EQ(added["item"]["arguments"], "");
    EXPECT_EQ(added["item"]["status"], "in_progress");
    const std::string fc_id = added["item"]["id"];
    EXPECT_EQ(fc_id.rfind("fc_", 0), 0u);
    for (size_t i = 9; i <= 11; ++i) {
        EXPECT_EQ(ev[i]["item_id"], fc_id);
        EXPECT_EQ(ev[i]["output_index"], 1);
    }
    EXPECT_EQ(ev[11]["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(ev[11]["name"], "get_weather");
    EXPECT_EQ(ev[12]["item"]["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(ev[12]["item"]["status"], "completed");
    EXPECT_EQ(ev[13]["output_index"], 2);
    EXPECT_EQ(ev[13]["item"]["call_id"], "call_b");
    EXPECT_NE(ev[13]["item"]["id"], fc_id);
    const json& out = ev.back()["response"]["output"];
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0]["type"], "message");
    EXPECT_EQ(out[1]["name"], "get_weather");
    EXPECT_EQ(out[2]["arguments"], "{\"q\":\"rain\"}");
    EXPECT_EQ(ev.back()["response"]["status"], "completed");
}

TEST(ResponsesStream, CallsParsedAtTheEndComeAsOneDelta) {
    GenOutcome o = outcome();
    o.parsed = ParsedReply{"", {{"get_weather", "{\"city\":\"Paris\"}"}, {"search", "{}"}}};
    o.call_ids = {"call_a", "call_b"};
    ResponsesStream s("m");
    std::string bytes = s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_tool_calls(o));
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_done();
    const auto ev = events_of(bytes);
    expect_sequenced(ev);
    const auto added = of_type(ev, "response.output_item.added");
    ASSERT_EQ(added.size(), 2u);
    EXPECT_EQ(added[0]["output_index"], 0);
    EXPECT_EQ(added[1]["output_index"], 1);
    const auto args_done = of_type(ev, "response.function_call_arguments.done");
    ASSERT_EQ(args_done.size(), 2u);
    EXPECT_EQ(args_done[0]["arguments"], "{\"city\":\"Paris\"}");
    EXPECT_EQ(args_done[1]["name"], "search");
    EXPECT_EQ(args_done[1]["output_index"], 1);
    EXPECT_TRUE(ev.back()["response"]["usage"].is_null()) << "no usage chunk came";
}

TEST(ResponsesStream, ReasoningThenTextCutByTheLimit) {
    GenOutcome o = outcome();
    ResponsesStream s("m");
    std::string bytes = s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_reasoning(o, "A story"));
    bytes += s.on_chunk(chat_chunk_reasoning(o, " then."));
    bytes += s.on_chunk(chat_chunk_text(o, "Once upon"));
    o.result.stop = StopReason::Length;
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_chunk(usage_chunk(o, true));
    bytes += s.on_done();
    const auto ev = events_of(bytes);
    expect_sequenced(ev);
    EXPECT_EQ(types_of(ev), (std::vector<std::string>{
                                "response.created", "response.in_progress",
                                "response.output_item.added", "response.content_part.added",
                                "response.reasoning_text.delta", "response.reasoning_text.delta",
                                "response.reasoning_text.done", "response.content_part.done",
                                "response.output_item.done", "response.output_item.added",
                                "response.content_part.added", "response.output_text.delta",
                                "response.output_text.done", "response.content_part.done",
                                "response.output_item.done", "response.incomplete"}));
    EXPECT_EQ(ev[2]["item"]["type"], "reasoning");
    EXPECT_EQ(ev[3]["part"], json::parse(R"({"type":"reasoning_text","text":""})"));
    EXPECT_EQ(ev[4]["content_index"], 0);
    EXPECT_EQ(ev[6]["text"], "A story then.");
    EXPECT_EQ(ev[8]["item"]["status"], "completed");
    EXPECT_EQ(ev[8]["item"]["content"][0]["text"], "A story then.");
    EXPECT_EQ(ev[9]["output_index"], 1);
    EXPECT_EQ(ev[11]["output_index"], 1);
    EXPECT_EQ(ev[14]["item"]["status"], "incomplete") << "the message the limit cut";
    const json& r = ev.back()["response"];
    EXPECT_EQ(r["status"], "incomplete");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(r["output"].size(), 2u);
    EXPECT_EQ(r["usage"]["total_tokens"], 15);
}

TEST(ResponsesStream, AnErrorFailsTheResponse) {
    GenOutcome o = outcome();
    ResponsesStream s("m");
    std::string bytes = s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_text(o, "Hi"));
    const ApiError err{503, "unavailable_error", "the server is stopping: the reply was cut", {}};
    bytes += s.on_chunk(json::parse(error_body(err)));
    EXPECT_TRUE(s.finished());
    EXPECT_EQ(s.on_done(), "");
    EXPECT_EQ(s.on_chunk(chat_chunk_text(o, "more")), "");
    const auto ev = events_of(bytes);
    expect_sequenced(ev);
    ASSERT_GE(ev.size(), 2u);
    const json& e = ev[ev.size() - 2];
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["message"], err.message);
    EXPECT_EQ(e["code"], "unavailable_error");
    EXPECT_FALSE(e.contains("error")) << "a top-level error field makes the SDK raise instead";
    const json& r = ev.back()["response"];
    EXPECT_EQ(ev.back()["type"], "response.failed");
    EXPECT_EQ(r["status"], "failed");
    EXPECT_EQ(r["error"]["code"], "server_error");
    EXPECT_EQ(r["error"]["message"], err.message);
    ASSERT_EQ(r["output"].size(), 1u);
    EXPECT_EQ(r["output"][0]["status"], "incomplete");
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hi");
}

TEST(ResponsesStream, LlamaTelemetryRidesOnTheEvents) {
    // timings_per_token / return_progress, as the chat stream sends them.
    GenOutcome o = outcome();
    ResponsesStream s("m");
    std::string bytes = s.on_chunk(chat_chunk_role(o));
    json progress = usage_chunk(o, true);
    progress.erase("usage");
    progress.erase("timings");
    progress["prompt_progress"] = {
        {"total", 40}, {"cache", 0}, {"processed", 32}, {"time_ms", 5.0}};
    progress["timings"] = {
        {"prompt_n", 32}, {"prompt_per_second", 6400.0}, {"predicted_per_second", 0.0}};
    bytes += s.on_chunk(progress);
    json text = chat_chunk_text(o, "Hi");
    text["timings"] = {
        {"prompt_n", 40}, {"prompt_per_second", 6000.0}, {"predicted_per_second", 12.0}};
    bytes += s.on_chunk(text);
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_chunk(usage_chunk(o, true));
    bytes += s.on_done();
    const auto ev = events_of(bytes);
    expect_sequenced(ev);
    const auto in_progress = of_type(ev, "response.in_progress");
    ASSERT_EQ(in_progress.size(), 2u);
    EXPECT_FALSE(in_progress[0].contains("prompt_progress"));
    EXPECT_EQ(in_progress[1]["prompt_progress"]["processed"], 32);
    EXPECT_EQ(in_progress[1]["timings"]["prompt_n"], 32);
    const auto deltas = of_type(ev, "response.output_text.delta");
    ASSERT_EQ(deltas.size(), 1u);
    EXPECT_EQ(deltas[0]["timings"]["predicted_per_second"], 12.0);
    for (const json& e : ev) {
        if (e["type"] != "response.output_text.delta" && e["type"] != "response.in_progress" &&
            e["type"] != "response.completed") {
            EXPECT_FALSE(e.contains("timings")) << e.dump();
        }
    }
    EXPECT_TRUE(ev.back().contains("timings"));
    EXPECT_TRUE(ev.back()["response"].contains("usage"));
}

TEST(ResponsesStream, LogprobsRideOnTheDeltas) {
    GenOutcome o = outcome();
    ResponsesStream s("m");
    const json lp = json::parse(R"({"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],
                                                "top_logprobs":[]}],"refusal":null})");
    std::string bytes = s.on_chunk(chat_chunk_role(o));
    bytes += s.on_chunk(chat_chunk_text(o, "Hi", lp));
    bytes += s.on_chunk(chat_chunk_final(o));
    bytes += s.on_done();
    const auto ev = events_of(bytes);
    const auto deltas = of_type(ev, "response.output_text.delta");
    ASSERT_EQ(deltas.size(), 1u);
    EXPECT_EQ(deltas[0]["logprobs"], lp["content"]);
    EXPECT_EQ(of_type(ev, "response.output_text.done")[0]["logprobs"], lp["content"]);
    EXPECT_EQ(ev.back()["response"]["output"][0]["content"][0]["logprobs"], lp["content"]);
}

// The chat stream writer itself, its SSE decoded line by line into the Responses stream, as
// the server will chain them.
TEST(ResponsesStream, FedByTheChatStreamWriter) {
    const json body = {
        {"input", "Weather in Paris?"}, {"tools", json::array({kWeatherTool})}, {"stream", true}};
    json chat;
    ASSERT_FALSE(responses_to_chat(body, &chat));
    GenRequest g = parsed(chat);
    ResponsesStream rs("m", body);
    std::string out;
    std::string chat_bytes;
    auto sink = [&](std::string_view bytes) {
        chat_bytes.append(bytes);
        out += rs.on_sse(bytes);
        return true;
    };
    StreamSettings ss;
    ss.request = &g;
    ss.reasoning = true;
    ss.tool_grammar = true;
    auto w = make_stream_writer(Api::Chat, sink, ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "<|im_start|>assistant\n");
    for (const char* p :
         {"<think>", "Paris, so", " the tool.", "</think>\n\n", "<tool_call>\n{\"name\": \"get_",
          "weather\", \"arguments\": {\"city\": ", "\"Paris\"}}\n</tool_call>"})
        w->piece(o, p);
    w->end_choice(o);
    w->end(o, o);
    ASSERT_TRUE(rs.finished());

    const auto ev = events_of(out);
    expect_sequenced(ev);
    const json& r = ev.back()["response"];
    EXPECT_EQ(ev.back()["type"], "response.completed");
    ASSERT_EQ(r["output"].size(), 2u) << r.dump(2);
    EXPECT_EQ(r["output"][0]["type"], "reasoning");
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "Paris, so the tool.");
    const json& call = r["output"][1];
    EXPECT_EQ(call["type"], "function_call");
    EXPECT_EQ(call["name"], "get_weather");
    EXPECT_EQ(json::parse(call["arguments"].get<std::string>()),
              json::parse(R"({"city":"Paris"})"));
    ASSERT_EQ(o.call_ids.size(), 1u);
    EXPECT_EQ(call["call_id"], o.call_ids[0]);
    EXPECT_EQ(r["usage"]["input_tokens"], 12);
    EXPECT_EQ(r["tools"][0]["name"], "get_weather");
    EXPECT_TRUE(of_type(ev, "response.output_text.delta").empty()) << "no call text as content";

    // The same bytes cut anywhere (a byte at a time): the same events.
    ResponsesStream again("m", body);
    std::string out2;
    for (char ch : chat_bytes) out2 += again.on_sse(std::string_view(&ch, 1));
    EXPECT_EQ(types_of(events_of(out2)), types_of(ev));
    EXPECT_TRUE(again.finished());
}

TEST(ResponsesRequest, TruncationAutoIsRefusedNotIgnored) {
    EXPECT_NE(refusal({{"input", "hi"}, {"truncation", "auto"}}).find("truncation"), std::string::npos);
    EXPECT_EQ(refusal({{"input", "hi"}, {"truncation", "disabled"}}), "");
}
