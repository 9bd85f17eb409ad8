// Gemma 4 writes a tool call's arguments in a notation of its own, not JSON:
//
//   <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,tags:[<|"|>a<|"|>]}<tool_call|>
//
// keys bare (up to the ':'), strings between <|"|> marks (raw text, no escapes), numbers,
// true / false / null, objects and arrays with ',' between members. (Its template writes
// the arguments of earlier calls so, and llama.cpp's gemma4 parser reads them so.)
// Gemma4Args reads that notation byte by byte and writes the same value as JSON text as
// soon as each part of it is certain, so a streamed call's arguments go out as the model
// writes them and a finished reply converts with the same code.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace edgellm {

class Gemma4Args {
  public:
    // End: this byte closed the outermost object (the value is complete in *out).
    enum class Step { More, End, Bad };
    Step feed(char c, std::string* out);
    void reset() { *this = Gemma4Args(); }

  private:
    enum class At { Start, KeyOrClose, Key, Value, Mark, String, Word, AfterValue };
    Step close(char c, std::string* out);
    Step end_word(std::string* out);

    struct Level {
        char open;   // '{' or '['
        bool first;  // no member written yet (no ',' before the next one)
    };
    std::vector<Level> levels_;
    At at_ = At::Start;
    std::string buf_;  // a key, a word (number, true, ...), or a partial <|"|> mark
};

// The JSON text of the Gemma 4 arguments object at the start of s (after blanks), and in
// *used how many bytes of s it took; nullopt when s does not start with a whole, valid one.
std::optional<std::string> gemma4_args_to_json(std::string_view s, size_t* used);

// GBNF for the notation, for the tool-call grammar (rules named g-*; blanks are its tc-ws).
// The generic rules: g-value (any value), g-dict (any object), g-string, g-number.
extern const char* const kGemma4ValueRules;
// The rule for a value of this JSON schema, added to *rules under names starting with
// `name`: the keys of an object's properties (in any order, each at most as often as the
// model writes it) with values of their schemas, strings with their enum, integers,
// numbers, booleans, null, arrays of their items. What the notation or this rule cannot
// say (required keys, bounds, patterns, combinations) is left to a check of the finished
// call; a schema of none of these types is any value.
std::string gemma4_schema_rule(const nlohmann::ordered_json& schema, const std::string& name,
                               std::string* rules);

}  // namespace edgellm
