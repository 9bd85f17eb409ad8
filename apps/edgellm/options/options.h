// The edgellm binary's options: ONE table of rows (llama.cpp's common_arg), each with its
// names, value, help, environment variable, the commands that take it, the help section it
// is listed in, and the parser that stores its value in the command's Settings. The
// commands' ArgParsers, their --help and docs/options.md are made from it.
//
// Adding an option is adding a row to one of the table_*.cpp files. A command parses its
// arguments with parse_options(): the rows of its scope are applied in table order (after the
// whole command line has been read; a row that refines another comes after it), then its
// cross-option checks (checks.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "settings.h"

namespace edgellm::cli {

// The commands a row applies to: a bit each.
enum Scope : uint32_t {
    kServe = 1u << 0,   // serve; without kRouter, a router passes it to each model's process
    kRouter = 1u << 1,  // serve without -m (a router) keeps it; alone: the router's only
    kRun = 1u << 2,
    kBench = 1u << 3,
    kLogits = 1u << 4,
    kPerplexity = 1u << 5,
    kInspect = 1u << 6,
    kTokenize = 1u << 7,
    kDetokenize = 1u << 8,
    kQuantize = 1u << 9,
    kSynth = 1u << 10,
    kAccept = 1u << 11,
    kConvert = 1u << 12,
};
constexpr uint32_t kServeAll = kServe | kRouter;  // what serve's command line takes

// The help sections, in the order they are listed.
enum class Group {
    Model,
    Input,
    Output,
    Context,
    Kv,
    Cpu,
    Sampling,
    Grammar,
    Chat,
    Server,
    Speculative,
    Router,
    Measure,
    Compat,
};
const char* group_title(Group g);

// What a row needs besides itself; refused by name without it (checks.cpp).
enum class Needs {
    Nothing,
    Speculation,  // serve: -md or --spec-type with a drafter
    DraftModel,   // serve: -md
    PlainBench,   // bench's pp/tg tests (not --draft, --spec-type, --grammar, --json-schema)
};

// One option as the command line gave it.
struct Arg {
    std::string name;                 // as messages name it: the row's label, else its first name
    std::string value;                // the last value given ("1" for a flag)
    std::vector<std::string> values;  // every value given, in order
    std::vector<size_t> positions;    // where each was in the arguments

    // The value as an integer in [lo, hi] / a finite number in [lo, hi] / any finite
    // number; false with "<name> must be ..." in *err.
    bool integer(int64_t lo, int64_t hi, int64_t* out, std::string* err) const;
    bool number(double lo, double hi, float* out, std::string* err) const;
    bool finite(float* out, std::string* err) const;
};

// Parses the argument into the settings; false with the reason (exit 2).
using Apply = std::function<bool(const Arg& a, Settings& s, std::string* err)>;

// A row. The table's parts list them with designated initializers, the fields a row does
// not need left out.
struct Option {
    std::vector<std::string> names = {};  // short and long names and aliases
    std::string metavar = {};             // the value's name; "" for a flag
    uint32_t scope = 0;                   // the commands that take it (Scope bits)
    Group group = Group::Model;           // its help section
    std::string help = {};
    Apply apply = {};                   // null: accepted, nothing stored
    const char* label = nullptr;        // the name messages use, when not names[0]
    const char* note = nullptr;         // serve logs "<label>: <note>" when it is given
    Needs needs = Needs::Nothing;       // refused without it
    const char* contradicts = nullptr;  // "<label> and <contradicts> contradict each other"
    const char* env = nullptr;          // the environment variable the default comes from
    const char* message_name() const { return label ? label : names[0].c_str(); }
};

// The table: its parts (table_*.cpp) in application order.
const std::vector<Option>& option_table();
std::vector<Option> model_options();
std::vector<Option> context_options();
std::vector<Option> generation_options();
std::vector<Option> server_options();
std::vector<Option> speculative_options();
std::vector<Option> compat_options();
std::vector<Option> tool_options();

// --api-key's comma-separated keys (also $EDGELLM_API_KEY's) appended to *keys.
void add_api_keys(const std::string& list, std::vector<std::string>* keys);

// The row of a command's (any of the scope bits) named `name`; null when none.
const Option* find_option(uint32_t scope, const std::string& name);

// ---- parsers for rows (values.cpp) ----
Apply store(void (*set)(Settings&, const std::string&));  // the text, unchecked
Apply set_flag(void (*set)(Settings&));
Apply integer(int64_t lo, int64_t hi, void (*set)(Settings&, int64_t));
Apply number(double lo, double hi, void (*set)(Settings&, float));
Apply finite(void (*set)(Settings&, float));  // any finite number
// A size (parse_bytes: "32K", "8MiB") in [lo, hi] bytes.
Apply bytes(int64_t lo, int64_t hi, void (*set)(Settings&, int64_t));
Apply kv_type(void (*set)(Settings&, TensorType));
// One of `words`; else "<name> takes <listed>, got "<value>"" / "<name> must be <listed>".
Apply takes(std::vector<std::string> words, std::string listed,
            void (*set)(Settings&, const std::string&));
Apply must_be(std::vector<std::string> words, std::string listed,
              void (*set)(Settings&, const std::string&));
// none or cpu; else "<name> <value>: edgellm runs <what>on the CPU (none or cpu)".
Apply cpu_only(const char* what);
Apply refuse(const char* reason);  // always an error: "<name>: <reason>"
// "a,b, c" -> {"a", "b", "c"}: sorted, blanks and duplicates dropped.
std::vector<std::string> split_list(const std::string& text);
// "1500000000", "1.7G", "1700M", "1.5GiB": bytes (suffixes as powers of 1024, as llama.cpp
// and ollama read them); nullopt when not a positive size.
std::optional<int64_t> parse_bytes(const std::string& text);
// "f16", "q8_0", ... -> the KV cache type (any of kv_cache_types()).
std::optional<TensorType> parse_kv_type(const std::string& s);
std::string kv_type_names();  // comma-separated
// "1 2 3" -> ids; false with a reason for anything that is not a non-negative integer.
bool parse_token_ids(const std::string& s, std::vector<int32_t>* out, std::string* err);
// GBNF text, or a JSON schema's text (schema), compiled; null with "<where>: reason" in *err.
std::shared_ptr<const Grammar> compile_grammar_text(const std::string& text, bool schema,
                                                    const std::string& where, std::string* err);
bool read_text_file(const std::string& path, std::string* out);

// ---- the commands (help.cpp) ----
std::string file_type_names();  // quantize's and synth's TYPEs, comma-separated
std::string shape_names();      // synth's --shape NAMEs, comma-separated
std::string hf_arch_names();    // config.json architectures convert takes, comma-separated
struct CommandInfo {
    const char* name;
    uint32_t scope;  // its Scope bits: the rows it takes
    std::string usage;
    bool (*check)(Settings& s, std::string* err);  // its cross-option checks (checks.cpp)
    // Arguments that are not options: read by the command, else "unexpected argument".
    bool takes_arguments = false;
};
const std::vector<CommandInfo>& commands();
const CommandInfo& command_info(const std::string& name);
std::string command_help(const CommandInfo& c);  // `edgellm <command> --help`
std::string options_markdown();                  // docs/options.md

// Parse a command's arguments into *s: on a usage error print "edgellm CMD: reason" and give
// 2 (an argument that is not an option, too, unless the command takes_arguments); on --help
// print the help and give 0; nullopt when the command should go on.
std::optional<int> parse_options(const std::string& command, const std::vector<std::string>& args,
                                 Settings* s);

// ---- cross-option checks and derived settings (checks.cpp) ----
// Whether every address of a --host list is this machine's loopback (127.0.0.0/8, ::1,
// localhost); 0.0.0.0, ::, a name and "" are not.
bool loopback_only(const std::string& hosts);
bool check_serve(Settings& s, std::string* err);
bool check_run(Settings& s, std::string* err);
bool check_bench(Settings& s, std::string* err);
bool check_perplexity(Settings& s, std::string* err);
bool check_nothing(Settings& s, std::string* err);
// The load options: -nr, and --repack-cache DIR, else the default cache directory for
// models with 64 MiB or more of repacked weights (--no-repack-cache: none).
LoadOptions load_options(const Settings& s);
// bench --draft / --spec-type's settings, read when bench runs those tests.
struct BenchSpeculation {
    std::string draft_model;
    bool ngram = false;
    int draft_n_max = 3;       // the draft model's most per step (--draft-max)
    int ngram_n_max = 16;      // lookup's (--draft-max when given)
    int n_max = 3, n_min = 0;  // (n_max: the larger of those in use)
    float p_min = 0.0f;
    bool adaptive = true;
};
bool bench_speculation(const Settings& s, BenchSpeculation* out, std::string* err);

}  // namespace edgellm::cli
