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

}  // namespace edgellm
