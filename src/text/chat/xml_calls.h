// Qwen3.5's tool calls (Qwen3-Coder's form, which llama.cpp also reads for Nemotron Nano 3):
//
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
//
// A parameter's value is the raw text between the newline after its tag and the newline
// before </parameter> (either newline may be missing). What the text means depends on the
// tool's schema for that parameter, as llama.cpp and vLLM read it: a parameter that can only
// be a string is the text as it is; one of other types is JSON when the text parses as a
// value of one of them (Python's True / False / None too: the template writes earlier calls'
// values with str()), else the text as a string.
//
// XmlCall reads a call byte by byte and writes its arguments as JSON text as soon as each
// part is certain, so a streamed call's arguments go out as the model writes them (a string
// value as it comes, another value when its </parameter> closes it) and a finished reply
// converts with the same code.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgellm/json_schema.h"
#include "text/chat/tool_calls.h"

namespace edgellm {

// The JSON types a parameter's schema allows, as bits.
inline constexpr uint8_t kXmlString = 1;
inline constexpr uint8_t kXmlInteger = 2;
inline constexpr uint8_t kXmlNumber = 4;
inline constexpr uint8_t kXmlBoolean = 8;
inline constexpr uint8_t kXmlNull = 16;
inline constexpr uint8_t kXmlObject = 32;
inline constexpr uint8_t kXmlArray = 64;
inline constexpr uint8_t kXmlAny = 127;

// The declared tools' parameters, by tool and parameter name: their types.
class XmlToolTypes {
  public:
    XmlToolTypes() = default;  // nothing known: every value is read as one of any type
    explicit XmlToolTypes(const nlohmann::ordered_json& tools);
    uint8_t types(const std::string& tool, const std::string& param) const;

  private:
    std::map<std::string, std::map<std::string, uint8_t>> tools_;
};

// The JSON text of a parameter's value written as `raw`, for a parameter of these types.
std::string xml_value_json(std::string_view raw, uint8_t types);

class XmlCall {
  public:
    // Named: this byte ended <function=NAME> (name() says which; the caller decides whether
    // it is a call); End: this byte closed </function> (the arguments are complete).
    enum class Step { More, Named, End, Bad };
    explicit XmlCall(const XmlToolTypes* types) : types_(types) {}
    // The next byte, from the '<' of "<function=" on; appends what is certain of the
    // arguments' JSON text to *out.
    Step feed(char c, std::string* out);
    const std::string& name() const { return name_; }
    void reset();

  private:
    enum class At { Open, Name, Between, Tag, Param, ValueStart, Value };
    Step end_value(std::string* out);
    void value_byte(char c, std::string* out);

    const XmlToolTypes* types_;
    At at_ = At::Open;
    std::string buf_;      // a tag, a name, or a value's tail that may be its closing tag
    std::string name_;
    std::string value_;    // a value that is not a string, whole before it is converted
    uint8_t value_types_ = kXmlAny;
    bool first_ = true;    // no parameter written yet
};

// The call at the start of s (after blanks): in *used how many bytes of s it took up to its
// </function>; nullopt when s does not start with a whole call of a declared tool.
std::optional<ToolCall> xml_tool_call(std::string_view s, const std::vector<std::string>& names,
                                      const XmlToolTypes& types, size_t* used);

// GBNF for the tool-call grammar.
//
// The rule of one tool's call, "<function=NAME>\n" its parameters "</function>\n", added to
// *rules (with the JSON values' rules in b): the parameters in the schema's order, the
// required ones always and the others when the model writes them, a string one as raw text
// (its enum's members when it has one), one of other types as JSON of its schema, one that
// may be both as raw text. *typed is cleared when that does not hold the values to their
// schemas (a string's pattern, format or length, a value that may be a string or something
// else with constraints, parameters without properties given a schema): those calls need
// a check once finished. index: the tool's place in the request's tools (for rule names and
// refusals). nullopt and *why when a value's schema cannot be enforced, or a parameter's
// name cannot be written in a tag.
std::optional<std::string> xml_call_rule(const nlohmann::ordered_json& function, size_t index,
                                         JsonSchemaGrammar& b, std::string* rules, bool* typed,
                                         SchemaRefusal* why);
// The rules the calls' rules use: x-raw (a value as raw text) and x-any-param (a parameter
// of any name, for a tool whose parameters declare none).
std::string xml_shared_rules();
// The rule `name` of any text that contains none of `words` (each starts with '<' and has
// no other '<'), added to *rules.
void gbnf_text_without(const std::vector<std::string_view>& words, const std::string& name,
                       std::string* rules);

// *why for a tool whose parameters' schema (at `at` inside it, a JSON path's tail) cannot
// be enforced, from the JSON Schema grammar's refusal `cause`: the path from the request's
// root and the tool named in the message.
void refuse_tool_schema(const SchemaRefusal& cause, size_t index, const std::string& name,
                        const std::string& at, SchemaRefusal* why);

}  // namespace edgellm
