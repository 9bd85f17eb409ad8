// Tool calls found while the reply is still being written, so the chat API can stream
// OpenAI `tool_calls` deltas: a call's index, id and function name first, then its
// arguments in fragments. tool_calls.h finds the calls in a finished reply; this is the
// streaming counterpart for the forms a tool-call grammar makes a model write:
//   Hermes / Qwen:  text <tool_call>{"name": "f", "arguments": {...}}</tool_call> text ...
//   Llama 3.x:      {"name": "f", "parameters": {...}}  (the reply, or <|python_tag|>{...})
//   Phi-4-mini:     [{"name": "f", "arguments": {...}}, ...]  (the reply, or inside
//                   <|tool_call|> ... <|/tool_call|>)
//   Gemma 4:        text <|tool_call>call:f{key:<|"|>v<|"|>}<tool_call|> ...  (its arguments
//                   stream converted to JSON as they are read, gemma4_args.h)
//   Qwen3.5:        text <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>
//                   \n</tool_call> ...  (the same: a string value streams as it is written,
//                   another when its </parameter> closes it, xml_calls.h; the <function=...>
//                   block also without its <tool_call>)
//
// The reply is read byte by byte by one state machine, so what comes out depends only on
// the text, never on how it was cut into pieces (a test feeds every chunking).
//
//   text ──<tool_call>──> {  "name": "f"  ──> CallStart(f)
//                            "arguments": {...} ──> Arguments fragments (raw JSON text)
//                         }  </tool_call> ──> text
//
// What is held back, and how long:
//   - in text: a trailing run of blanks (dropped when a call follows it or the reply ends
//     after a call, else sent before the next text) and a partial tag;
//   - a block (or, llama3, a reply whose first non-blank char is '{' or '[') until its
//     "name" is read (Gemma 4: until the name's '{'; Qwen3.5: until <function=NAME>'s
//     '>'): a declared tool's name makes it a
//     call; anything else (an undeclared name, no name, a name that is not a string, bad
//     JSON, the reply ending first) sends all of it as content the moment that is certain;
//   - arguments written before the name: until the name.
// Once a call started it stays one: its arguments stream as written, tracking nesting
// (braces, brackets, strings with escapes) so the fragments end exactly at the value's
// closing brace. Arguments written as a JSON string ("arguments": "{\"a\": 1}") stream
// decoded; a call with no arguments, or arguments that are neither an object nor a
// string, gets "{}" when its object closes. A reply cut off inside a call ends without
// more events for it. After a call's object, blanks, a closing ``` fence and stray '}'
// before the block's closing tag are dropped. In an array of calls each object is a call
// of its own; the separators are dropped.
//
// Differences from parse_tool_calls() on the finished reply, which can take back what a
// stream cannot: one non-call block (or array element) does not make the other calls
// content; in Hermes mode a bare JSON reply is content.
//
// Events split the text only at piece boundaries and at ASCII bytes, so pieces of whole
// UTF-8 characters give events of whole characters.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat/gemma4_args.h"
#include "text/chat/xml_calls.h"

namespace edgellm {

// What a streamed reply turns into, piece by piece.
struct ToolStreamEvent {
    enum class Kind { Content, CallStart, Arguments } kind;
    int index = 0;     // the call's index (CallStart, Arguments); 0 for Content
    std::string text;  // Content: text; CallStart: the function name; Arguments: a fragment
                       // of the arguments JSON text
};

class ToolCallStreamer {
  public:
    // names: the declared tools; llama3: the model may write bare {"name": ..., "parameters":
    // {...}} objects (Llama 3.x) or an array of them (Phi-4-mini) at the reply's start
    // instead of Hermes/Qwen <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    // blocks. Tagged blocks (<tool_call>, <|tool_call|>, Gemma 4's <|tool_call>) are
    // recognised in both. tools: the request's tools, whose parameters' types say what
    // Qwen3.5's raw values are (null: each value is read as one of any type).
    ToolCallStreamer(std::vector<std::string> names, bool llama3,
                     const nlohmann::ordered_json* tools = nullptr);
    // Feed the next piece of the reply; appends the events it makes final to *out (events
    // of one push of the same kind and call are merged; earlier events are left alone).
    void push(std::string_view piece, std::vector<ToolStreamEvent>* out);
    // The reply ended: flush what was held back (as content when it never became a call).
    void finish(std::vector<ToolStreamEvent>* out);
    int calls() const { return calls_; }  // calls started so far

    // A JSON string's body read byte by byte (after the opening quote), decoding escapes
    // (\uXXXX with surrogate pairs; a lone surrogate becomes U+FFFD).
    class StringDecoder {
      public:
        enum class Step { More, Done, Bad };  // Done: the closing quote was this byte
        Step feed(char c, std::string* out);
        void reset() { *this = StringDecoder(); }

      private:
        std::string esc_;    // an escape being read, from its backslash
        uint32_t high_ = 0;  // a high surrogate waiting for its low half
    };
    // The extent of one JSON value read byte by byte: nesting of objects and arrays,
    // strings with escapes, scalars (numbers, true, false, null) up to the next delimiter.
    // Lenient: brackets are counted, not matched.
    class ValueScanner {
      public:
        enum class Step {
            More,
            End,
            Before,
            Bad
        };  // End: this byte closed the value;
            // Before: the value ended before it
        Step feed(char c);
        void reset() { *this = ValueScanner(); }

      private:
        int depth_ = 0;
        bool started_ = false, in_string_ = false, escape_ = false, scalar_ = false;
    };

  private:
    enum class State {
        Text,         // outside calls
        Open,         // after <tool_call> / <|python_tag|>: blanks, then '{' (or a ``` fence, or
                      // the '[' of an array of calls)
        Fence,        // the rest of a ```json line
        KeyOrEnd,     // in the call object: a key or '}'
        Key,          // a key's string
        Colon,        // ':' after a key
        Value,        // the first byte of a value
        Name,         // the "name" string
        ArgsJson,     // the arguments value, raw JSON
        ArgsString,   // the arguments as a JSON string, decoded
        Skip,         // another key's value
        AfterValue,   // ',' or '}'
        AfterObject,  // a tagged call's object ended: up to its closing tag
        ArrayNext,    // a call in an array ended: ',' and the next, or ']'
        GemmaHead,    // after <|tool_call>: "call:" and the name, up to '{'
        GemmaArgs,    // the arguments in Gemma 4's notation, converted to JSON
        Xml,          // after <tool_call>: Qwen3.5's <function=NAME> and its parameters
    };
    // One byte in the current state; false when the byte was not used there (the state
    // changed and the byte goes to the new one).
    bool consume(char c);
    void step(char c);
    bool text(char c);
    bool after_object(char c);
    bool array_next(char c);
    bool gemma(char c);
    bool xml(char c);
    void hold(char c);
    void start_object(bool bare);
    void next_object();  // the per-object state, for the next object of a block or array
    void emit(ToolStreamEvent::Kind kind, std::string_view text);
    void args_out(std::string_view text);
    void commit();        // the name is a declared tool's: the call starts
    void not_a_call();    // what was held goes out as content; back to text
    bool bad(bool used);  // a syntax error: not a call, or the end of a started call
    void end_object();

    std::vector<std::string> names_;
    bool llama3_;
    int calls_ = 0;

    std::vector<ToolStreamEvent>* out_ = nullptr;
    size_t out_from_ = 0;  // events before this index are not merged into

    State state_ = State::Text;
    bool bare_start_;    // a bare {...} call may start here (llama3: reply start, after one)
    std::string lead_;   // Text: blanks held before what may be a call
    std::string tag_;    // Text / AfterObject: a partial opening tag or closing tag
    std::string_view close_;  // the closing tag of the block being read
    std::string raw_;    // a block not yet a call, as written (content if it never is one)
    bool bare_ = false;  // the object is a bare llama3 one (no closing tag after it)
    bool in_array_ = false;  // the object is an element of an array of calls
    bool fence_ok_ = false;
    bool started_ = false;  // the object's call started (CallStart sent)
    bool named_ = false, args_seen_ = false;
    std::string key_, name_;
    std::string args_held_;  // arguments read before the name
    StringDecoder str_;
    ValueScanner scan_;
    Gemma4Args gemma_;
    XmlToolTypes types_;
    XmlCall xml_{&types_};
};

}  // namespace edgellm
