// The stream writers: what a streaming client receives, event by event, from each API.
#include <gtest/gtest.h>

#include "server/api/openai/stream_writer.h"
#include "text/chat/tool_calls.h"

using namespace edgellm;
using namespace edgellm::server;

namespace {

// The SSE events a writer produced: each "data: ..." payload, in order.
struct Captured {
    std::string bytes;
    bool fail_after = false;  // the sink refuses writes once this is set
    StreamWriter::Sink sink() {
        return [this](std::string_view b) {
            if (fail_after) return false;
            bytes.append(b);
            return true;
        };
    }
    std::vector<std::string> events() const {
        std::vector<std::string> out;
        size_t at = 0;
        while (at < bytes.size()) {
            const size_t end = bytes.find("\n\n", at);
            EXPECT_NE(end, std::string::npos) << "an event not ended by a blank line";
            if (end == std::string::npos) break;
            const std::string ev = bytes.substr(at, end - at);
            EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
            out.push_back(ev.substr(6));
            at = end + 2;
        }
        return out;
    }
    std::vector<json> chunks() const {
        std::vector<json> out;
        for (const std::string& e : events())
            if (e != "[DONE]") out.push_back(json::parse(e));
        return out;
    }
};

GenOutcome outcome() {
    GenOutcome o;
    o.id = "chatcmpl-x";
    o.model = "m";
    o.created = 1;
    o.result.stop = StopReason::Eos;
    return o;
}

std::string delta_text(const std::vector<json>& chunks, const char* field) {
    std::string s;
    for (const json& c : chunks)
        if (c.contains("choices") && !c["choices"].empty() && c["choices"][0].contains("delta") &&
            c["choices"][0]["delta"].contains(field) && c["choices"][0]["delta"][field].is_string())
            s += c["choices"][0]["delta"][field].get<std::string>();
    return s;
}

}  // namespace

TEST(ChatStream, RoleThenContentThenFinishThenUsageThenDone) {
    GenRequest g;
    g.api = Api::Chat;
    g.include_usage = true;
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    auto w = make_stream_writer(Api::Chat, cap.sink(), ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "");
    w->piece(o, "Hel");
    w->piece(o, "lo");
    o.result.n_generated = 2;
    w->end_choice(o);
    w->end(o, o);
    const auto ev = cap.events();
    ASSERT_GE(ev.size(), 6u);
    EXPECT_EQ(ev.back(), "[DONE]");
    const auto ch = cap.chunks();
    EXPECT_EQ(ch[0]["choices"][0]["delta"]["role"], "assistant");
    EXPECT_EQ(delta_text(ch, "content"), "Hello");
    const json& fin = ch[ch.size() - 2];
    EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
    EXPECT_TRUE(ch.back()["choices"].empty()) << "the usage chunk has no choices";
    EXPECT_EQ(ch.back()["usage"]["completion_tokens"], 2);
    for (const json& c : ch) EXPECT_EQ(c["object"], "chat.completion.chunk");
}

TEST(ChatStream, ThinkingGoesOutAsReasoningContent) {
    GenRequest g;
    g.api = Api::Chat;
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    ss.reasoning = true;
    auto w = make_stream_writer(Api::Chat, cap.sink(), ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "<|im_start|>assistant\n");
    for (const char* p : {"<th", "ink>", "The user", " greets.", "</think>\n\n", "Hi", "!"})
        w->piece(o, p);
    w->end_choice(o);
    w->end(o, o);
    const auto ch = cap.chunks();
    EXPECT_EQ(delta_text(ch, "reasoning_content"), "The user greets.");
    EXPECT_EQ(delta_text(ch, "content"), "Hi!");
    EXPECT_EQ(cap.events().back(), "[DONE]");
}

TEST(ChatStream, ToolCallsUnderTheGrammarStreamAsTheyAreWritten) {
    GenRequest g;
    g.api = Api::Chat;
    g.tool_names = {"get_weather"};
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    ss.tool_grammar = true;
    auto w = make_stream_writer(Api::Chat, cap.sink(), ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "");
    for (const char* p : {"<tool_call>\n{\"name\": \"get_", "weather\", \"arguments\": {\"city\": ",
                          "\"Paris\"}}\n</tool_call>"})
        w->piece(o, p);
    EXPECT_TRUE(w->streamed_calls());
    w->end_choice(o);
    const auto ch = cap.chunks();
    std::string name, args, id;
    for (const json& c : ch) {
        const json& d = c["choices"][0]["delta"];
        if (!d.contains("tool_calls")) continue;
        const json& tc = d["tool_calls"][0];
        EXPECT_EQ(tc["index"], 0);
        if (tc.contains("id")) id = tc["id"];
        if (tc["function"].contains("name")) name += tc["function"]["name"].get<std::string>();
        if (tc["function"].contains("arguments")) args += tc["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(json::parse(args), json::parse(R"({"city": "Paris"})"));
    ASSERT_EQ(o.call_ids.size(), 1u);
    EXPECT_EQ(id, o.call_ids[0]);
    EXPECT_EQ(delta_text(ch, "content"), "") << "no call text leaks out as content";
    EXPECT_EQ(ch.back()["choices"][0]["finish_reason"], "tool_calls");
}

// Qwen3.5 thinks in the block its prompt opened, then calls in its XML form: the thinking
// goes out as reasoning_content, each call as tool_calls deltas whose arguments are JSON
// typed by the request's tools, nothing as content.
TEST(ChatStream, Qwen35ThinkingThenXmlCalls) {
    GenRequest g;
    g.api = Api::Chat;
    g.tool_names = {"get_weather"};
    g.tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    ss.reasoning = true;
    ss.tool_grammar = true;
    auto w = make_stream_writer(Api::Chat, cap.sink(), ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "<|im_start|>assistant\n<think>\n");
    for (const char* p : {"The weather.", "\n</think>\n\n<tool_call>\n<function=get", "_weather>\n<parameter=city>\n",
                          "New", " York\n</parameter>\n<parameter=days>\n", "2\n</parameter>\n</function>\n</tool_call>"})
        w->piece(o, p);
    EXPECT_TRUE(w->streamed_calls());
    w->end_choice(o);
    const auto ch = cap.chunks();
    EXPECT_EQ(delta_text(ch, "reasoning_content"), "The weather.\n");
    EXPECT_EQ(delta_text(ch, "content"), "");
    std::string name, args;
    int with_arguments = 0;
    for (const json& c : ch) {
        const json& d = c["choices"][0]["delta"];
        if (!d.contains("tool_calls")) continue;
        const json& fn = d["tool_calls"][0]["function"];
        if (fn.contains("name")) name += fn["name"].get<std::string>();
        if (fn.contains("arguments") && !fn["arguments"].get<std::string>().empty()) {
            args += fn["arguments"].get<std::string>();
            ++with_arguments;
        }
    }
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(args, R"({"city":"New York","days":2})");
    EXPECT_GT(with_arguments, 2) << "the arguments went out as they were written";
    EXPECT_EQ(ch.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ChatStream, WithoutTheGrammarWhatMayBecomeACallIsHeldBack) {
    GenRequest g;
    g.api = Api::Chat;
    g.tool_names = {"f"};
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    auto w = make_stream_writer(Api::Chat, cap.sink(), ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "");
    w->piece(o, "<tool_call>{\"name\":\"f\",");
    EXPECT_EQ(delta_text(cap.chunks(), "content"), "") << "held back";
    w->piece(o, "\"arguments\":{}}</tool_call>");
    EXPECT_FALSE(w->streamed_calls());
    // The server parses the finished reply and the call goes out whole.
    o.parsed = parse_tool_calls("<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>", {"f"});
    ASSERT_TRUE(o.parsed);
    o.call_ids = {"call_1"};
    w->end_choice(o);
    const auto ch = cap.chunks();
    EXPECT_EQ(delta_text(ch, "content"), "");
    EXPECT_EQ(ch[ch.size() - 2]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_1");
    EXPECT_EQ(ch.back()["choices"][0]["finish_reason"], "tool_calls");

    // Text that turns out not to be a call is sent when the reply ends.
    Captured cap2;
    auto w2 = make_stream_writer(Api::Chat, cap2.sink(), ss);
    GenOutcome o2 = outcome();
    w2->begin(o2, nullptr, "");
    w2->piece(o2, "The answer is <tool");
    w2->end_choice(o2);
    EXPECT_EQ(delta_text(cap2.chunks(), "content"), "The answer is <tool");
}

TEST(CompletionsStream, TextThenFinishThenDone) {
    GenRequest g;
    g.api = Api::Completions;
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    auto w = make_stream_writer(Api::Completions, cap.sink(), ss);
    GenOutcome o = outcome();
    o.id = "cmpl-x";
    o.result.stop = StopReason::Length;
    w->begin(o, nullptr, "");
    w->piece(o, "one ");
    w->piece(o, "two");
    w->end_choice(o);
    w->end(o, o);
    const auto ev = cap.events();
    ASSERT_EQ(ev.size(), 4u);
    EXPECT_EQ(ev.back(), "[DONE]");
    const auto ch = cap.chunks();
    EXPECT_EQ(ch[0]["choices"][0]["text"], "one ");
    EXPECT_EQ(ch[1]["choices"][0]["text"], "two");
    EXPECT_EQ(ch[2]["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(ch[0]["object"], "text_completion");
}

TEST(NativeStream, ContentChunksThenTheFinalObjectWithoutDone) {
    GenRequest g;
    g.api = Api::Native;
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    auto w = make_stream_writer(Api::Native, cap.sink(), ss);
    GenOutcome o = outcome();
    o.result.text = "ab";
    o.result.n_generated = 2;
    o.result.n_drafted = 4;
    o.result.n_accepted = 3;
    w->begin(o, nullptr, "");
    w->piece(o, "a");
    w->piece(o, "b");
    w->end_choice(o);
    w->end(o, o);
    const auto ev = cap.events();
    ASSERT_EQ(ev.size(), 3u);
    const auto ch = cap.chunks();
    EXPECT_EQ(ch[0]["content"], "a");
    EXPECT_EQ(ch[0]["stop"], false);
    EXPECT_EQ(ch[2]["stop"], true);
    EXPECT_EQ(ch[2]["content"], "");
    EXPECT_EQ(ch[2]["timings"]["draft_n"], 4);
    EXPECT_EQ(ch[2]["timings"]["draft_n_accepted"], 3);
}

TEST(StreamWriter, AFailedWriteStopsEveryLaterWrite) {
    GenRequest g;
    g.api = Api::Chat;
    Captured cap;
    StreamSettings ss;
    ss.request = &g;
    auto w = make_stream_writer(Api::Chat, cap.sink(), ss);
    GenOutcome o = outcome();
    w->begin(o, nullptr, "");
    w->piece(o, "a");
    EXPECT_TRUE(w->ok());
    cap.fail_after = true;
    w->piece(o, "b");
    EXPECT_FALSE(w->ok());
    cap.fail_after = false;
    w->piece(o, "c");
    w->end_choice(o);
    w->end(o, o);
    EXPECT_EQ(delta_text(cap.chunks(), "content"), "a");
    EXPECT_EQ(cap.bytes.find("[DONE]"), std::string::npos);
}
