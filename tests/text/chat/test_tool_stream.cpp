// Tool calls found while a reply streams: what goes out as content, when a call starts and
// how its arguments arrive, and that none of it depends on where the pieces were cut.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "text/chat/tool_calls.h"
#include "text/chat/tool_stream.h"

using namespace edgellm;
using Kind = ToolStreamEvent::Kind;

namespace {

const std::vector<std::string> kTools = {"get_weather", "search", "say\"hi", "查询"};

// Adjacent events of one kind and call as one: the form every chunking must agree on.
std::vector<ToolStreamEvent> merged(const std::vector<ToolStreamEvent>& events) {
    std::vector<ToolStreamEvent> out;
    for (const auto& e : events) {
        if (!out.empty() && e.kind != Kind::CallStart && out.back().kind == e.kind &&
            out.back().index == e.index)
            out.back().text += e.text;
        else
            out.push_back(e);
    }
    return out;
}

std::string show(const std::vector<ToolStreamEvent>& events) {
    std::string s;
    for (const auto& e : events) {
        s += e.kind == Kind::Content ? "C" : e.kind == Kind::CallStart ? "S" : "A";
        s += std::to_string(e.index) + "[" + e.text + "] ";
    }
    return s;
}

struct Outcome {
    std::string content;
    std::vector<std::pair<std::string, std::string>> calls;  // name, arguments text
    std::vector<ToolStreamEvent> events;                     // merged
    int n_calls = 0;                                         // calls()
};

// The reply cut at `cuts` (ascending offsets), fed piece by piece, then finished. Checks
// the event stream's shape on the way: calls start at 0, 1, 2, ... and a call's arguments
// come after its start and before the next call's.
Outcome run(std::string_view text, const std::vector<size_t>& cuts, bool llama3,
            const std::vector<std::string>& names = kTools, const nlohmann::ordered_json* tools = nullptr) {
    ToolCallStreamer s(names, llama3, tools);
    std::vector<ToolStreamEvent> events;
    size_t at = 0;
    for (size_t cut : cuts) {
        s.push(text.substr(at, cut - at), &events);
        at = cut;
    }
    s.push(text.substr(at), &events);
    s.finish(&events);
    Outcome o;
    o.n_calls = s.calls();
    for (const auto& e : events) {
        EXPECT_FALSE(e.kind != Kind::CallStart && e.text.empty()) << show(events);
        if (e.kind == Kind::Content) {
            o.content += e.text;
        } else if (e.kind == Kind::CallStart) {
            EXPECT_EQ(e.index, (int)o.calls.size()) << show(events);
            o.calls.push_back({e.text, ""});
        } else {
            EXPECT_EQ(e.index + 1, (int)o.calls.size()) << show(events);
            if (!o.calls.empty()) o.calls.back().second += e.text;
        }
    }
    EXPECT_EQ(o.n_calls, (int)o.calls.size());
    o.events = merged(events);
    return o;
}

// The one-shot outcome, after checking that every byte-by-byte, two-piece and random
// chunking of the text gives the same merged events.
Outcome stream(std::string_view text, bool llama3 = false,
               const std::vector<std::string>& names = kTools, const nlohmann::ordered_json* tools = nullptr) {
    const Outcome whole = run(text, {}, llama3, names, tools);
    const std::string want = show(whole.events);
    std::vector<size_t> every;
    for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
    EXPECT_EQ(show(run(text, every, llama3, names, tools).events), want) << "byte by byte: " << text;
    for (size_t i = 0; i <= text.size(); ++i)
        EXPECT_EQ(show(run(text, {i}, llama3, names, tools).events), want)
            << "cut at " << i << ": " << text;
    std::mt19937 rng(1234);
    for (int round = 0; round < 50; ++round) {
        std::vector<size_t> cuts;
        for (size_t i = 1; i < text.size(); ++i)
            if (rng() % 4 == 0) cuts.push_back(i);
        EXPECT_EQ(show(run(text, cuts, llama3, names, tools).events), want) << "random round " << round;
    }
    return whole;
}

bool valid_json(const std::string& s) {
    return !nlohmann::json::parse(s, nullptr, false).is_discarded();
}

// The events of one more push into s.
std::vector<ToolStreamEvent> events_of(ToolCallStreamer& s, std::string_view piece) {
    std::vector<ToolStreamEvent> ev;
    s.push(piece, &ev);
    return ev;
}

}  // namespace

TEST(ToolStream, OneHermesCall) {
    const std::string args = R"({"city": "Paris"})";
    const auto o = stream("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args +
                          "}\n</tool_call>");
    EXPECT_EQ(show(o.events), "S0[get_weather] A0[" + args + "] ");
    EXPECT_EQ(o.content, "");
}

TEST(ToolStream, ContentBeforeTwoCallsAndBetween) {
    const auto o = stream(
        "Let me check.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Rome\"}}\n</tool_call>\nAnd then\n<tool_call>{\"name\":\"search\",\"arguments\":{}}"
        "</tool_call>\n");
    EXPECT_EQ(show(o.events),
              "C0[Let me check.] S0[search] A0[{\"q\": \"a\"}] S1[get_weather] "
              "A1[{\"city\": \"Rome\"}] C0[\nAnd then] S2[search] A2[{}] ");
}

TEST(ToolStream, ArgumentsAsWrittenChineseNestingBracesEscapes) {
    const std::string args =
        "{\"城市\": \"北京\", \"opts\": {\"days\": [1, 2, {\"x\": [[], {}]}], \"unit\": null},"
        " \"code\": \"if (a) { return \\\"}\\\"; } [\", \"path\": \"C:\\\\dir\\\\\", "
        "\"emoji\": \"\\ud83d\\ude00\", \"n\": -1.5e3, \"ok\": true}";
    ASSERT_TRUE(valid_json(args));
    const auto o =
        stream("好的，我来查一下。<tool_call>\n{\"name\": \"查询\", \"arguments\": " + args +
               "}\n</tool_call>");
    EXPECT_EQ(o.content, "好的，我来查一下。");
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].first, "查询");
    EXPECT_EQ(o.calls[0].second, args);
}

TEST(ToolStream, NamesWithEscapes) {
    auto o =
        stream(R"(<tool_call>{"name": "get\u005fweather", "arguments": {"a": 1}}</tool_call>)");
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].first, "get_weather");
    o = stream(R"(<tool_call>{"name": "say\"hi", "arguments": {"a": "\""}}</tool_call>)");
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].first, "say\"hi");
    EXPECT_EQ(o.calls[0].second, R"({"a": "\""})");
    o = stream(R"(<tool_call>{"name": "\u67e5\u8be2", "arguments": {}}</tool_call>)");
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].first, "查询");
    // A key spelled with an escape is the same key.
    o = stream(R"(<tool_call>{"n\u0061me": "search", "\u0061rguments": {"q": 1}}</tool_call>)");
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].second, R"({"q": 1})");
}

TEST(ToolStream, UnknownToolIsContent) {
    const std::string text =
        "Hi <tool_call>\n{\"name\": \"delete_everything\", \"arguments\": {\"x\": 1}}\n"
        "</tool_call> bye";
    const auto o = stream(text);
    EXPECT_EQ(show(o.events), "C0[" + text + "] ");
    EXPECT_EQ(o.n_calls, 0);

    // ... as soon as the name is read, not at the end.
    ToolCallStreamer s(kTools, false);
    const size_t name_end = text.find("\",");
    auto ev = events_of(s, text.substr(0, name_end));
    EXPECT_EQ(show(ev), "C0[Hi] ");
    ev = events_of(s, text.substr(name_end, 1));
    EXPECT_EQ(show(ev), "C0[ <tool_call>\n{\"name\": \"delete_everything\"] ");
}

TEST(ToolStream, NotCallsStayContentExactly) {
    for (const std::string& text : {
             std::string("Use the <tool_call> tag like this."),
             std::string("<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>"),  // no name
             std::string("<tool_call>{\"name\": 7, \"arguments\": {}}</tool_call>"),
             std::string("<tool_call>{\"name\" \"search\", \"arguments\": {}}</tool_call>"),
             std::string("<tool_call>{\"arguments\": 5, \"name\": \"search\"}</tool_call>"),
             std::string("<tool_call>{\"name\": \"bad\\q\", \"arguments\": {}}"),
             std::string("<tool_call>{}</tool_call>"),
             std::string("a < b and <tool_ca> and <tool_call"),
             std::string("{\"name\": \"search\", \"arguments\": {}}"),  // bare, Hermes mode
             std::string("  \n  "),
             std::string("plain text\n\n"),
         }) {
        const auto o = stream(text);
        EXPECT_EQ(o.content, text);
        EXPECT_EQ(o.n_calls, 0) << text;
    }
    // A failed block does not swallow the one after it.
    const auto o = stream(
        "<tool_call><tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}</tool_call>");
    EXPECT_EQ(show(o.events), "C0[<tool_call>] S0[search] A0[{\"q\": \"x\"}] ");
}

TEST(ToolStream, ArgumentsBeforeName) {
    const std::string text =
        "<tool_call>{\"arguments\": {\"q\": \"天气\", \"k\": [1]}, \"name\": "
        "\"search\"}</tool_call>";
    const auto o = stream(text);
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": \"天气\", \"k\": [1]}] ");

    // Nothing goes out before the name; then the start and the held arguments together.
    ToolCallStreamer s(kTools, false);
    const size_t name_end = text.rfind('"') + 1;
    EXPECT_TRUE(events_of(s, text.substr(0, name_end - 1)).empty());
    EXPECT_EQ(show(events_of(s, text.substr(name_end - 1, 1))),
              "S0[search] A0[{\"q\": \"天气\", \"k\": [1]}] ");
    EXPECT_TRUE(events_of(s, text.substr(name_end)).empty());

    // ... and with the arguments before an undeclared name: content.
    const std::string bad =
        "<tool_call>{\"parameters\": {\"q\": 1}, \"name\": \"nope\"}</tool_call>";
    EXPECT_EQ(stream(bad).content, bad);
}

TEST(ToolStream, StartsAtTheNameAndStreamsArguments) {
    const std::string text =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
        "\"days\": 3}}\n</tool_call>";
    ToolCallStreamer s(kTools, false);
    const size_t quote = text.find("\", \"arguments");
    EXPECT_TRUE(events_of(s, text.substr(0, quote)).empty());  // the name may go on
    EXPECT_EQ(show(events_of(s, text.substr(quote, 1))), "S0[get_weather] ");
    EXPECT_EQ(s.calls(), 1);
    const size_t mid = text.find("Par");
    EXPECT_EQ(show(events_of(s, text.substr(quote + 1, mid - quote - 1))), "A0[{\"city\": \"] ");
    const size_t args_end = text.find("}}") + 1;
    EXPECT_EQ(show(events_of(s, text.substr(mid, args_end - mid))), "A0[Paris\", \"days\": 3}] ");
    EXPECT_TRUE(events_of(s, text.substr(args_end)).empty());
    std::vector<ToolStreamEvent> ev;
    s.finish(&ev);
    EXPECT_TRUE(ev.empty());
}

TEST(ToolStream, PartialOpeningIsHeld) {
    ToolCallStreamer s(kTools, false);
    EXPECT_EQ(show(events_of(s, "Hello <tool_c")), "C0[Hello] ");
    EXPECT_TRUE(events_of(s, "al").empty());
    EXPECT_EQ(show(events_of(s, "l!")), "C0[ <tool_call!] ");
    EXPECT_EQ(show(events_of(s, " <")), "");
    std::vector<ToolStreamEvent> ev;
    s.finish(&ev);
    EXPECT_EQ(show(ev), "C0[ <] ");
}

TEST(ToolStream, EarlierEventsAreNotMergedInto) {
    ToolCallStreamer s(kTools, false);
    std::vector<ToolStreamEvent> ev;
    s.push("Hello", &ev);
    s.push(" world", &ev);
    EXPECT_EQ(show(ev), "C0[Hello] C0[ world] ");
}

TEST(ToolStream, CutOffInsideACall) {
    // Mid-arguments: the call keeps what streamed, nothing more comes.
    auto o = stream("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"long que");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": \"long que] ");
    // After the arguments, before the object's end.
    o = stream("<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": 1}");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": 1}] ");
    // Before the name is whole: not a call.
    o = stream("Sure. <tool_call>\n{\"name\": \"sea");
    EXPECT_EQ(o.content, "Sure. <tool_call>\n{\"name\": \"sea");
    EXPECT_EQ(o.n_calls, 0);
}

TEST(ToolStream, OtherKeysFencesStringArgumentsNoArguments) {
    // Extra keys (any JSON) are skipped.
    auto o = stream(
        "<tool_call>{\"type\": \"function\", \"id\": 12, \"meta\": {\"a\": [\"}\", {}]}, "
        "\"ok\": false, \"name\": \"search\", \"arguments\": {\"q\": 2}, \"z\": null}</tool_call>");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": 2}] ");
    // A ```json fence inside the block.
    o = stream(
        "<tool_call>\n```json\n{\"name\": \"search\", \"arguments\": {\"q\": "
        "3}}\n```\n</tool_call>");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": 3}] ");
    // Arguments as a JSON string: they stream decoded.
    o = stream(
        R"(<tool_call>{"name": "search", "arguments": "{\"q\": \"a\\\"b\", \"n\": \"\u4e2d\"}"}</tool_call>)");
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].second, R"({"q": "a\"b", "n": "中"})");
    // No arguments, or arguments no call can have once the call started: "{}".
    o = stream("<tool_call>{\"name\": \"search\"}</tool_call>");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] ");
    o = stream("<tool_call>{\"name\": \"search\", \"arguments\": [1, 2]}</tool_call>");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] ");
    // "parameters" works in Hermes blocks too.
    o = stream("<tool_call>{\"name\": \"search\", \"parameters\": {\"q\": 4}}</tool_call>");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": 4}] ");
}

TEST(ToolStream, HermesTails) {
    // An unclosed block at the end, and a block without </tool_call> before the next one.
    auto o = stream(
        "<tool_call>{\"name\": \"search\", \"arguments\": {}}\n<tool_call>{\"name\": "
        "\"get_weather\", \"arguments\": {\"c\": 1}}");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] S1[get_weather] A1[{\"c\": 1}] ");
    // A stray closing brace is dropped; text after a block without its closing tag is text.
    o = stream("<tool_call>{\"name\": \"search\", \"arguments\": {}}}</tool_call>ok");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] C0[ok] ");
    o = stream("<tool_call>{\"name\": \"search\", \"arguments\": {}}\nDone.");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] C0[Done.] ");
    o = stream("<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_cal");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] ");
    // A syntax error after the call started ends the call; the rest is text.
    o = stream("<tool_call>{\"name\": \"search\", \"arguments\": {} x</tool_call>");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] C0[x</tool_call>] ");
}

TEST(ToolStream, BlanksAroundCalls) {
    auto o = stream(
        "\n\n<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>\n\n"
        "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>\n");
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] S1[search] A1[{}] ");
    o = stream("  Answer:\n\n  more  \n");
    EXPECT_EQ(o.content, "  Answer:\n\n  more  \n");
}

TEST(ToolStream, Llama3BareObjects) {
    const std::string args = "{\"city\": \"上海\", \"when\": {\"d\": [1, 2]}}";
    auto o = stream("{\"name\": \"get_weather\", \"parameters\": " + args + "}", true);
    EXPECT_EQ(show(o.events), "S0[get_weather] A0[" + args + "] ");
    o = stream("\n  <|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}", true);
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\": \"x\"}] ");
    // Llama 3 parallel calls: objects one after another.
    o = stream(
        "{\"name\": \"search\", \"parameters\": {\"q\": 1}}\n{\"parameters\": {\"c\": 2}, "
        "\"name\": \"get_weather\"}\nThat is all.",
        true);
    EXPECT_EQ(show(o.events),
              "S0[search] A0[{\"q\": 1}] S1[get_weather] A1[{\"c\": 2}] C0[\nThat is all.] ");

    // The start is held until clear.
    ToolCallStreamer s(kTools, true);
    EXPECT_TRUE(events_of(s, "  {\"na").empty());
    EXPECT_TRUE(events_of(s, "me\": \"search").empty());
    EXPECT_EQ(show(events_of(s, "\", \"param")), "S0[search] ");
}

TEST(ToolStream, Llama3Prose) {
    for (const std::string& text : {
             std::string("The weather in Paris is sunny, {mostly}."),
             std::string("  Hello! {\"name\": \"search\", \"parameters\": {}} is how I call."),
             std::string("{\"city\": \"Paris\", \"temp\": 21} is the JSON you asked for."),
             std::string("{\"name\": \"unknown_tool\", \"parameters\": {}}"),
             std::string("{not json at all"),
             std::string("<|python_tag|>print(1)"),
             std::string("[1, 2] are the numbers."),
             std::string("[{\"name\": \"unknown_tool\", \"parameters\": {}}]"),
             std::string("[]"),
         }) {
        const auto o = stream(text, true);
        EXPECT_EQ(o.content, text);
        EXPECT_EQ(o.n_calls, 0) << text;
    }
    // Prose goes out at once; a '{' later in it is text.
    ToolCallStreamer s(kTools, true);
    EXPECT_EQ(show(events_of(s, "Sure")), "C0[Sure] ");
    EXPECT_EQ(show(events_of(s, " {\"name\"")), "C0[ {\"name\"] ");
    // A non-call JSON reply goes out the moment its object closes.
    ToolCallStreamer t(kTools, true);
    EXPECT_TRUE(events_of(t, "{\"city\": \"Paris\"").empty());
    EXPECT_EQ(show(events_of(t, "} ok")), "C0[{\"city\": \"Paris\"} ok] ");
}

// Phi-4-mini writes its calls as one array (after <|tool_call|>, a control token that is
// usually not in the text): each element is a call of its own.
TEST(ToolStream, ArrayOfCalls) {
    const std::string a = R"({"city": "Paris"})", b = R"({"q": [1, {"x": "]"}]})";
    auto o = stream(" [{\"name\": \"get_weather\", \"arguments\": " + a + "},\n {\"name\": \"search\", "
                    "\"arguments\": " + b + "}]",
                    true);
    EXPECT_EQ(show(o.events), "S0[get_weather] A0[" + a + "] S1[search] A1[" + b + "] ");
    // in Phi-4-mini's tags, when they are text; text after them is content
    o = stream("Sure.<|tool_call|>[{\"name\": \"search\", \"arguments\": " + b + "}]<|/tool_call|> Done.");
    EXPECT_EQ(show(o.events), "C0[Sure.] S0[search] A0[" + b + "] C0[ Done.] ");
    // a call, then an element that is not one: the call stands, the rest is content
    o = stream("[{\"name\": \"search\", \"arguments\": {}}, {\"name\": \"rm\", \"arguments\": {}}]", true);
    EXPECT_EQ(show(o.events),
              "S0[search] A0[{}] C0[ {\"name\": \"rm\", \"arguments\": {}}]] ");
    // a trailing ',' and the reply cut after a complete call: no stray content
    o = stream("[{\"name\": \"search\", \"arguments\": {}},]", true);
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] ");
    o = stream("[{\"name\": \"search\", \"arguments\": {}}, ", true);
    EXPECT_EQ(show(o.events), "S0[search] A0[{}] ");
}

// Gemma 4: <|tool_call>call:NAME{...}<tool_call|>, the arguments converted to JSON as they
// are read.
TEST(ToolStream, Gemma4Calls) {
    const std::string text =
        "Let me look.<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>"
        "<|tool_call>call:search{q:<|\"|>a \"quoted\" <b> & \\ back\n<|\"|>,opts:{deep:true,"
        "tags:[<|\"|>x<|\"|>,null,-1.5e3]},empty:{}}<tool_call|>";
    for (bool llama3 : {false, true}) {
        const auto o = stream(text, llama3);
        ASSERT_EQ(o.calls.size(), 2u) << show(o.events);
        EXPECT_EQ(o.content, "Let me look.");
        EXPECT_EQ(o.calls[0].first, "get_weather");
        EXPECT_EQ(o.calls[0].second, R"({"city":"Paris","days":3})");
        EXPECT_EQ(o.calls[1].first, "search");
        EXPECT_EQ(o.calls[1].second,
                  R"({"q":"a \"quoted\" <b> & \\ back\n","opts":{"deep":true,"tags":["x",null,-1.5e3]},"empty":{}})");
        EXPECT_TRUE(valid_json(o.calls[1].second));
    }
    // The name is known at its '{'; the arguments go out as they are read.
    ToolCallStreamer s(kTools, false);
    EXPECT_EQ(show(events_of(s, "<|tool_call>call:get_wea")), "");
    EXPECT_EQ(show(events_of(s, "ther{city:<|\"|>Par")), "S0[get_weather] A0[{\"city\":\"Par] ");
    EXPECT_EQ(show(events_of(s, "is<|\"")), "A0[is] ");
    EXPECT_EQ(show(events_of(s, "|>}<tool_call|>")), "A0[\"}] ");
}

TEST(ToolStream, Gemma4NotCalls) {
    for (const std::string& text : {
             std::string("Hi <|tool_call>call:delete_all{x:1}<tool_call|> bye"),  // undeclared
             std::string("<|tool_call>cal get_weather{}"),                       // no "call:"
             std::string("<|tool_call>call:get weather{}"),                      // a blank in the name
             std::string("<|tool_call>call:{}"),                                 // no name
             std::string("<|tool_call>call:get_weather"),                        // ended before '{'
         }) {
        const auto o = stream(text);
        EXPECT_EQ(o.content, text);
        EXPECT_EQ(o.n_calls, 0) << text;
    }
    // A call cut off inside its arguments ends there; bad notation ends the call (what
    // follows up to its closing tag is dropped), and the text after it is content.
    auto o = stream("<|tool_call>call:search{q:<|\"|>unfinished");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\":\"unfinished] ");
    o = stream("<|tool_call>call:search{q:1 2}<tool_call|>ok");
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\":1] C0[ok] ");
}

TEST(ToolStream, EventsAreWholeUtf8WhenPiecesAre) {
    const std::string text =
        "你好，世界。<tool_call>\n{\"name\": \"查询\", \"arguments\": {\"问题\": "
        "\"天气怎么样？\"}}\n"
        "</tool_call>\n再见";
    // Pieces of whole characters: cut before every byte that does not continue a character.
    ToolCallStreamer s(kTools, false);
    std::vector<ToolStreamEvent> events;
    size_t at = 0;
    for (size_t i = 1; i <= text.size(); ++i) {
        if (i < text.size() && ((unsigned char)text[i] & 0xC0) == 0x80) continue;
        s.push(std::string_view(text).substr(at, i - at), &events);
        at = i;
    }
    s.finish(&events);
    for (const auto& e : events)  // dump() throws on invalid UTF-8
        EXPECT_NO_THROW((void)nlohmann::json(e.text).dump()) << e.text;
    EXPECT_EQ(show(merged(events)),
              "C0[你好，世界。] S0[查询] A0[{\"问题\": \"天气怎么样？\"}] C0[\n再见] ");
}

TEST(ToolStream, StringDecoder) {
    const auto decode = [](std::string_view body) {
        ToolCallStreamer::StringDecoder d;
        std::string out;
        for (char c : body) {
            const auto s = d.feed(c, &out);
            if (s == ToolCallStreamer::StringDecoder::Step::Bad) return std::string("BAD");
            if (s == ToolCallStreamer::StringDecoder::Step::Done) return out;
        }
        return std::string("MORE");
    };
    EXPECT_EQ(decode(R"(a\"b\\c\/\n\t")"), "a\"b\\c/\n\t");
    EXPECT_EQ(decode(R"(\ud83d\ude00")"), "😀");
    EXPECT_EQ(decode(R"(\ud83dx")"), "\xEF\xBF\xBDx");
    EXPECT_EQ(decode(R"(\ude00")"), "\xEF\xBF\xBD");
    EXPECT_EQ(decode(R"(\u00e9\u4E2D")"), "é中");
    EXPECT_EQ(decode(R"(\x")"), "BAD");
    EXPECT_EQ(decode(R"(\u12g4")"), "BAD");
    EXPECT_EQ(decode(R"(abc)"), "MORE");
}

// Random replies of text and calls, the arguments random JSON (Chinese, escapes, braces in
// strings, nesting) written compactly or indented, keys in either order: every call comes
// out with its name and its arguments exactly as written, the text around them as content.
namespace {

// The strings of random replies: JSON's and the tags' special characters, CJK, an emoji.
// (No concatenation of them makes Gemma 4's <|"|> mark, which its strings cannot hold.)
const std::vector<std::string> kWords = {"天气", "{",   "}", "\"", "\\",         "[x]",       "a<b",
                                         "é",    "\n", ":", ",",  "\\\"}",       "😀",        "<|x",
                                         "\"|>", "tool_call", "</tool_call>", "<tool_call|>"};

// A random JSON value: a number, a boolean, null, a string of kWords, or (to depth 2) an
// array or an object with keys of kWords.
nlohmann::ordered_json random_value(std::mt19937& rng, int depth) {
    const int kind = (int)(rng() % (depth > 2 ? 4 : 6));
    if (kind == 0) return (int)(rng() % 1000) - 500;
    if (kind == 1) return rng() % 2 == 0;
    if (kind == 2) return nullptr;
    if (kind == 3) {
        std::string s;
        for (int i = (int)(rng() % 4); i > 0; --i) s += kWords[rng() % kWords.size()];
        return s;
    }
    auto c = kind == 4 ? nlohmann::ordered_json::array() : nlohmann::ordered_json::object();
    for (int i = (int)(rng() % 3); i > 0; --i) {
        auto v = random_value(rng, depth + 1);
        if (c.is_array())
            c.push_back(std::move(v));
        else
            c[kWords[rng() % kWords.size()] + std::to_string(i)] = std::move(v);
    }
    return c;
}

// A JSON value in Gemma 4's notation (gemma4_args.h), with its object keys renamed k0, k1,
// ... (its bare keys cannot hold every character) in *renamed.
std::string to_gemma(const nlohmann::ordered_json& v, nlohmann::ordered_json* renamed) {
    if (v.is_string()) {
        *renamed = v;
        return "<|\"|>" + v.get<std::string>() + "<|\"|>";
    }
    std::string out;
    if (v.is_object() || v.is_array()) {
        *renamed = v.is_object() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::array();
        out += v.is_object() ? "{" : "[";
        size_t i = 0;
        for (const auto& [k, x] : v.items()) {
            if (i) out += ",";
            nlohmann::ordered_json r;
            const std::string key = "k" + std::to_string(i++);
            out += (v.is_object() ? key + ":" : "") + to_gemma(x, &r);
            if (v.is_object())
                (*renamed)[key] = r;
            else
                renamed->push_back(r);
        }
        return out + (v.is_object() ? "}" : "]");
    }
    *renamed = v;
    return v.dump();
}

}  // namespace

// Gemma 4 calls with random arguments: streamed, they are the same JSON values.
TEST(ToolStream, RandomGemma4Calls) {
    std::mt19937 rng(7);
    auto value = [&](int depth) { return random_value(rng, depth); };
    for (int round = 0; round < 60; ++round) {
        std::string reply = round % 2 ? "Checking." : "";
        std::vector<std::pair<std::string, nlohmann::ordered_json>> want;
        for (int i = 0, n = 1 + (int)(rng() % 3); i < n; ++i) {
            auto args = nlohmann::ordered_json::object();
            for (int k = (int)(rng() % 4); k > 0; --k) args["a" + std::to_string(k)] = value(1);
            nlohmann::ordered_json renamed;
            const std::string name = kTools[rng() % kTools.size()];
            reply += "<|tool_call>call:" + name + to_gemma(args, &renamed) + "<tool_call|>";
            want.push_back({name, renamed});
        }
        const Outcome whole = run(reply, {}, false);
        ASSERT_EQ(whole.calls.size(), want.size()) << reply;
        for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_EQ(whole.calls[i].first, want[i].first);
            EXPECT_EQ(nlohmann::ordered_json::parse(whole.calls[i].second, nullptr, false), want[i].second)
                << reply;
        }
        EXPECT_EQ(whole.content, round % 2 ? "Checking." : "");
        std::vector<size_t> every;
        for (size_t i = 1; i < reply.size(); ++i) every.push_back(i);
        EXPECT_EQ(show(run(reply, every, false).events), show(whole.events)) << reply;
    }
}

TEST(ToolStream, RandomReplies) {
    std::mt19937 rng(42);
    const auto& words = kWords;
    auto value = [&](int depth) { return random_value(rng, depth); };
    const std::vector<std::string> texts = {"",      "",        "Let me see.",   "好的，马上。",
                                            "x < y", "a {b} c", "see <tool_call"};
    for (int round = 0; round < 60; ++round) {
        const bool llama3 = round % 3 == 2;
        std::string reply, want_content;
        std::vector<std::pair<std::string, std::string>> want_calls;
        const int n = 1 + (int)(rng() % 3);
        if (!llama3) {
            const std::string& t = texts[rng() % texts.size()];
            reply += t;
            want_content += t;
        }
        for (int i = 0; i < n; ++i) {
            auto args = nlohmann::ordered_json::object();
            for (int k = (int)(rng() % 4); k > 0; --k)
                args["k" + std::to_string(k) + words[rng() % words.size()]] = value(1);
            const std::string args_text = args.dump(rng() % 2 ? -1 : 2);
            const std::string name = kTools[rng() % kTools.size()];
            const std::string name_json = nlohmann::json(name).dump();
            const std::string key = llama3 ? "\"parameters\"" : "\"arguments\"";
            const std::string obj =
                rng() % 2 ? "{\"name\": " + name_json + ", " + key + ": " + args_text + "}"
                          : "{" + key + ":" + args_text + ",\"name\":" + name_json + "}";
            reply += llama3 ? (i ? "\n" : "") + obj : "\n<tool_call>\n" + obj + "\n</tool_call>";
            want_calls.push_back({name, args_text});
            if (!llama3 && i + 1 < n && rng() % 2) {
                reply += "\nBetween " + std::to_string(i);
                want_content += "\nBetween " + std::to_string(i);
            }
        }
        if (rng() % 2) {
            reply += "\nDone.";
            want_content += "\nDone.";
        }
        // Two cuttings per reply (all of them is too slow for 60 long replies).
        const Outcome whole = run(reply, {}, llama3);
        EXPECT_EQ(whole.content, want_content) << reply;
        EXPECT_EQ(whole.calls, want_calls) << reply;
        for (const auto& c : whole.calls) EXPECT_TRUE(valid_json(c.second)) << c.second;
        std::vector<size_t> every, some;
        for (size_t i = 1; i < reply.size(); ++i) {
            every.push_back(i);
            if (rng() % 5 == 0) some.push_back(i);
        }
        EXPECT_EQ(show(run(reply, every, llama3).events), show(whole.events)) << reply;
        EXPECT_EQ(show(run(reply, some, llama3).events), show(whole.events)) << reply;
    }
}

// ---- Qwen3.5's XML calls ------------------------------------------------------------------

namespace {

const auto kXmlTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}}}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
    "q": {"type": "string"}, "tags": {"type": "array"}, "exact": {"type": "boolean"}}}}}])");

}  // namespace

// Each call's arguments stream as JSON, typed by the tool's schema, and end as the finished
// reply's parse has them; a string value goes out as it is written.
TEST(ToolStream, Qwen35CallsStreamTheirArgumentsAsJson) {
    const std::string text =
        "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n\"centre\" <b>\\\n"
        "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n"
        "<parameter=q>\na </param b\n\n</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n"
        "<parameter=exact>\nFalse\n</parameter>\n</function>\n</tool_call>";
    const std::vector<std::string> names = {"get_weather", "search"};
    const auto o = stream(text, false, names, &kXmlTools);
    EXPECT_EQ(show(o.events),
              "C0[Let me check.] S0[get_weather] A0[{\"city\":\"São Paulo\\n\\\"centre\\\" <b>\\\\\",\"days\":3}] "
              "S1[search] A1[{\"q\":\"a </param b\\n\",\"tags\":[\"x\",\"y\"],\"exact\":false}] ");
    auto p = parse_tool_calls(text, names, false, &kXmlTools);
    ASSERT_TRUE(p);
    ASSERT_EQ(p->calls.size(), o.calls.size());
    for (size_t i = 0; i < o.calls.size(); ++i) EXPECT_EQ(o.calls[i].second, p->calls[i].arguments);
    // A string value goes out as it comes; another waits for its </parameter>.
    ToolCallStreamer s(names, false, &kXmlTools);
    auto ev = events_of(s, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar");
    EXPECT_EQ(show(ev), "S0[get_weather] A0[{\"city\":\"Par] ");
    EXPECT_EQ(show(events_of(s, "is\n</param")), "A0[is] ");
    EXPECT_EQ(show(events_of(s, "eter>\n<parameter=days>\n1")), "A0[\",\"days\":] ");
    EXPECT_EQ(show(events_of(s, "2\n</parameter>")), "A0[12] ");
    EXPECT_EQ(show(events_of(s, "\n</function>\n</tool_call>")), "A0[}] ");
}

// Its <function=...> block without <tool_call> (Qwen3-Coder at times) is a call too.
TEST(ToolStream, Qwen35BareFunctionBlocks) {
    const std::vector<std::string> names = {"get_weather", "search"};
    const auto o = stream("Sure.\n<function=search>\n<parameter=q>\nx\n</parameter>\n</function>\n"
                          "<function=get_weather>\n</function>\nUse <function=rm> or <functional>.",
                          false, names, &kXmlTools);
    EXPECT_EQ(show(o.events),
              "C0[Sure.] S0[search] A0[{\"q\":\"x\"}] S1[get_weather] A1[{}] C0[Use <function=rm> or <functional>.] ");
}

TEST(ToolStream, Qwen35WhatIsNoCallIsContent) {
    const std::vector<std::string> names = {"get_weather", "search"};
    const std::string undeclared = "<tool_call>\n<function=rm>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>";
    auto o = stream("Sure. " + undeclared, false, names, &kXmlTools);
    EXPECT_EQ(show(o.events), "C0[Sure. " + undeclared + "] ");
    o = stream("<tool_call>\n<function=get weather>", false, names, &kXmlTools);
    EXPECT_EQ(o.n_calls, 0);
    // A block that is no call does not swallow the one after it.
    o = stream("<tool_call>\n<tool_call>\n<function=search>\n</function>\n</tool_call>", false, names, &kXmlTools);
    EXPECT_EQ(show(o.events), "C0[<tool_call>] S0[search] A0[{}] ");
    // a reply cut inside a call ends without more for it
    o = stream("<tool_call>\n<function=search>\n<parameter=q>\nab", false, names, &kXmlTools);
    EXPECT_EQ(show(o.events), "S0[search] A0[{\"q\":\"ab] ");
}
