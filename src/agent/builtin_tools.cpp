// llama-server's built-in agent tools: the tools themselves (the runtimes they act through
// are tool_runtime.h's). See the header for the tools' shapes and tool_limits for every
// bound.
#include "agent/builtin_tools.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "agent/shell_limits.h"
#include "agent/tool_runtime.h"
#include "agent/tool_search.h"
#include "sys/strings.h"
#include "sys/subprocess.h"

namespace edgellm::agent {

using Clock = std::chrono::steady_clock;
// The text helpers: src/sys.
using sys::is_valid_utf8;
using sys::RunResult;
using sys::to_valid_utf8;
using sys::trim;
using sys::utf8_complete_prefix;
using sys::utf8_cut;

namespace {

// ---- text ------------------------------------------------------------------------------

// Every string in j made valid UTF-8 (nlohmann's dump() throws on invalid bytes; file
// contents, command output and file names can hold any).
void make_valid_utf8(json* j) {
    if (j->is_string()) {
        auto& s = j->get_ref<std::string&>();
        if (!is_valid_utf8(s)) s = to_valid_utf8(s);
    } else if (j->is_structured()) {
        for (auto& v : *j) make_valid_utf8(&v);
    }
}

std::string base64_encode(std::string_view in) {
    static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const uint32_t v = (uint32_t)(unsigned char)in[i] << 16 |
                           (uint32_t)(unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        out += abc[v >> 18];
        out += abc[(v >> 12) & 63];
        out += abc[(v >> 6) & 63];
        out += abc[v & 63];
    }
    if (i < in.size()) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < in.size()) v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        out += abc[v >> 18];
        out += abc[(v >> 12) & 63];
        out += i + 1 < in.size() ? abc[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

// A file is binary when its first bytes hold a NUL (git's and grep's test).
bool looks_binary(std::string_view data) {
    return std::memchr(data.data(), 0, std::min(data.size(), tool_limits::binary_sniff)) != nullptr;
}

json tool_error(std::string message) {
    return json{{"error", std::move(message)}};
}

// ---- parameters ------------------------------------------------------------------------

// Reads a tool's params. Models sometimes send numbers and booleans as strings, which
// are taken ("5", "true"); anything else of the wrong type is a 400 naming the parameter.
class Params {
  public:
    explicit Params(const json& p) : p_(p) {}

    bool has(const char* key) const {
        auto it = p_.find(key);
        return it != p_.end() && !it->is_null();
    }

    std::optional<ApiError> string(const char* key, std::string* out, bool required) const {
        auto it = p_.find(key);
        if (it == p_.end() || it->is_null()) {
            if (!required) return std::nullopt;
            return bad_request("missing parameter \"" + std::string(key) + "\" (a string)");
        }
        if (!it->is_string())
            return bad_request("parameter \"" + std::string(key) + "\" must be a string");
        *out = it->get<std::string>();
        return std::nullopt;
    }

    // The search tools' "include" and "exclude" globs (see EntryFilter).
    std::optional<ApiError> globs(std::string* include, std::string* exclude) const {
        if (auto e = string("include", include, false)) return e;
        return string("exclude", exclude, false);
    }

    std::optional<ApiError> integer(const char* key, int64_t* out) const {
        auto it = p_.find(key);
        if (it == p_.end() || it->is_null()) return std::nullopt;
        if (it->is_number_integer()) {
            *out = it->get<int64_t>();
            return std::nullopt;
        }
        if (it->is_number_float()) {
            const double d = it->get<double>();
            if (d == (double)(int64_t)d) {
                *out = (int64_t)d;
                return std::nullopt;
            }
        }
        if (it->is_string()) {
            const std::string s = trim(it->get<std::string>());
            char* end = nullptr;
            errno = 0;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (!s.empty() && end && *end == '\0' && errno == 0) {
                *out = v;
                return std::nullopt;
            }
        }
        return bad_request("parameter \"" + std::string(key) + "\" must be an integer");
    }

    std::optional<ApiError> boolean(const char* key, bool* out) const {
        auto it = p_.find(key);
        if (it == p_.end() || it->is_null()) return std::nullopt;
        if (it->is_boolean()) {
            *out = it->get<bool>();
            return std::nullopt;
        }
        if (it->is_string() && (*it == "true" || *it == "false")) {
            *out = *it == "true";
            return std::nullopt;
        }
        if (it->is_number_integer() && (*it == 0 || *it == 1)) {
            *out = *it == 1;
            return std::nullopt;
        }
        return bad_request("parameter \"" + std::string(key) + "\" must be true or false");
    }

  private:
    const json& p_;
};

int clamp_int(int64_t v, int lo, int hi) {
    return (int)std::clamp<int64_t>(v, lo, hi);
}

// ---- the tools -------------------------------------------------------------------------

struct Env {
    const BuiltinToolCall& call;
    const json& params;  // an object
    const ToolRuntime& rt;
    const std::function<bool(const json&)>* stream;  // null: not streaming
};

using ToolFn = std::optional<ApiError> (*)(Env&, json* result);

// The usual failures of a path that should be a regular file, or nullopt.
std::optional<std::string> not_a_file(const FileStat& st, const std::string& path) {
    if (!st.error.empty()) return "cannot stat file: " + path + " (" + st.error + ")";
    if (!st.exists) return "cannot stat file: " + path + " (no such file)";
    if (st.is_dir) return "not a file: " + path + " is a directory";
    if (!st.is_file) return "not a regular file: " + path;
    return std::nullopt;
}

// The runtime's form of a path the request gave, or "" and *out the tool error saying why
// it may not be used (outside the working directory).
std::string resolved(const Env& env, const std::string& path, json* out) {
    std::string why;
    std::string abs = env.rt.resolve(path, &why);
    if (abs.empty()) *out = tool_error(why);
    return abs;
}

// Lines of text as std::getline gives them (no empty last line after a final '\n'; a
// CRLF line keeps its '\r').
template <typename F>
void for_each_line(std::string_view text, F&& f) {
    size_t pos = 0, lineno = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        if (!f(++lineno, text.substr(pos, nl - pos))) return;
        pos = nl + 1;
    }
}

// ---- read_file

std::optional<ApiError> read_file_run(Env& env, json* out) {
    const Params p(env.params);
    std::string path;
    int64_t start = 1, end = -1;
    bool loc = false;
    if (auto e = p.string("path", &path, true)) return e;
    if (auto e = p.integer("start_line", &start)) return e;
    if (auto e = p.integer("end_line", &end)) return e;
    if (auto e = p.boolean("append_loc", &loc)) return e;
    using namespace tool_limits;

    const std::string abs = resolved(env, path, out);
    if (abs.empty()) return std::nullopt;
    const FileStat st = env.rt.stat(abs);
    if (auto why = not_a_file(st, path)) {
        *out = tool_error(*why);
        return std::nullopt;
    }
    if (env.call.resp_type == "base64") {  // the web UI's way to fetch any file
        if (st.size > read_base64) {
            *out = tool_error("file too large (" + std::to_string(st.size) + " bytes, max " +
                              std::to_string(read_base64) + ")");
            return std::nullopt;
        }
        const ReadResult r = env.rt.read(abs, read_base64);
        if (!r.error.empty() || r.truncated) {
            *out =
                tool_error("failed to read file: " + path +
                           (r.error.empty() ? " (it grew past the limit)" : " (" + r.error + ")"));
            return std::nullopt;
        }
        *out = {{"base64", base64_encode(r.data)}, {"size_bytes", r.data.size()}};
        return std::nullopt;
    }
    const bool ranged = p.has("end_line") || start > 1;
    if (st.size > read_whole_file && !ranged) {
        *out = tool_error("file too large (" + std::to_string(st.size) + " bytes, max " +
                          std::to_string(read_whole_file) +
                          "); give start_line and end_line to read part of it");
        return std::nullopt;
    }
    const ReadResult r = env.rt.read(abs, read_scan);
    if (!r.error.empty()) {
        *out = tool_error("failed to read file: " + path + " (" + r.error + ")");
        return std::nullopt;
    }
    if (looks_binary(r.data)) {
        *out = tool_error("binary file: " + path + " (" + std::to_string(st.size) +
                          " bytes) is not shown as text");
        return std::nullopt;
    }
    if (start < 1) start = 1;
    std::string text;
    bool cut = false;
    size_t last_line = 0;
    for_each_line(r.data, [&](size_t n, std::string_view line) {
        last_line = n;
        if ((int64_t)n < start) return true;
        if (end >= 0 && (int64_t)n > end) return false;
        std::string piece = loc ? std::to_string(n) + "\u2192" : std::string();
        piece.append(line);
        piece += '\n';
        if (text.size() + piece.size() > read_text) {
            cut = true;
            return false;
        }
        text += piece;
        return true;
    });
    if (cut) text += "[output truncated]";
    // (lines past the scanned bytes were asked for)
    if (!cut && r.truncated && (end < 0 || (int64_t)last_line < end))
        text += "[stopped reading after " + std::to_string(read_scan) + " bytes]";
    *out = {{"plain_text_response", text}};
    return std::nullopt;
}

// ---- file_glob_search

std::optional<ApiError> glob_run(Env& env, json* out) {
    const Params p(env.params);
    std::string path, include, exclude, type = "file";
    int64_t max_depth = 0, limit = tool_limits::glob_results;
    if (auto e = p.string("path", &path, true)) return e;
    if (auto e = p.globs(&include, &exclude)) return e;
    if (auto e = p.string("type", &type, false)) return e;
    if (auto e = p.integer("max_depth", &max_depth)) return e;
    if (auto e = p.integer("limit", &limit)) return e;

    ListKind kind;
    if (type == "file")
        kind = ListKind::Files;
    else if (type == "dir")
        kind = ListKind::Dirs;
    else if (type == "all")
        kind = ListKind::All;
    else {
        *out = tool_error("invalid type: " + type + " (expected \"file\", \"dir\" or \"all\")");
        return std::nullopt;
    }
    if (limit < 1) {
        *out = tool_error("invalid limit: " + std::to_string(limit) + " (expected 1 or more)");
        return std::nullopt;
    }
    const size_t shown_max = (size_t)std::min<int64_t>(limit, tool_limits::glob_results);

    const std::string base = resolved(env, path, out);
    if (base.empty()) return std::nullopt;
    const Listing listing =
        env.rt.list(base, clamp_int(max_depth, 0, 1 << 20), kind, env.call.cancel);
    if (!listing.error.empty()) {
        *out = tool_error(listing.error + ": " + path);
        return std::nullopt;
    }
    const EntryFilter filter(include, exclude);
    size_t total = 0;
    std::string text;
    json entries = json::array();
    for (const ListEntry& e : listing.entries) {
        if (!filter.keeps(e.rel)) continue;
        if (++total > shown_max) continue;
        text += e.rel + (e.is_dir ? "/\n" : "\n");
        entries.push_back({{"path", e.rel}, {"type", e.is_dir ? "dir" : "file"}});
    }
    text += "\n---\nTotal matches: " + std::to_string(total) + "\n";
    if (total > shown_max)
        text += "[showing the first " + std::to_string(shown_max) + " of " + std::to_string(total) +
                "; narrow the pattern to see the others]\n";
    if (listing.truncated)
        text +=
            "[the listing is incomplete: it ran out of time or entries, or a directory "
            "could not be read]\n";
    // base: absolute, so a client (the web UI's picker) can join it with the entries
    *out = {{"plain_text_response", text}, {"entries", entries}, {"base", base}};
    return std::nullopt;
}

// ---- grep_search

std::optional<ApiError> grep_run(Env& env, json* out) {
    const Params p(env.params);
    std::string path, pattern, include, exclude;
    bool numbers = false, literal = false, icase = false;
    int64_t context = 0;
    if (auto e = p.string("path", &path, true)) return e;
    if (auto e = p.string("pattern", &pattern, true)) return e;
    if (auto e = p.globs(&include, &exclude)) return e;
    if (auto e = p.boolean("return_line_numbers", &numbers)) return e;
    if (auto e = p.boolean("literal", &literal)) return e;
    if (auto e = p.boolean("ignore_case", &icase)) return e;
    if (auto e = p.integer("context_lines", &context)) return e;
    using namespace tool_limits;
    const int ctx = clamp_int(context, 0, grep_context);
    const bool show_num = numbers || ctx > 0;

    LineMatcher m;
    if (const std::string why = m.compile(pattern, literal, icase); !why.empty()) {
        *out = tool_error("invalid regex: " + why);
        return std::nullopt;
    }

    // (file to read, path to show)
    std::vector<std::pair<std::string, std::string>> files;
    const std::string abs = resolved(env, path, out);
    if (abs.empty()) return std::nullopt;
    const FileStat st = env.rt.stat(abs);
    if (!st.error.empty()) {
        *out = tool_error("cannot stat " + path + " (" + st.error + ")");
        return std::nullopt;
    }
    bool listing_cut = false;
    if (st.is_file) {
        files.emplace_back(abs, path);
    } else if (st.is_dir) {
        const Listing l = env.rt.list(abs, 0, ListKind::Files, env.call.cancel);
        if (!l.error.empty()) {
            *out = tool_error(l.error + ": " + path);
            return std::nullopt;
        }
        listing_cut = l.truncated;
        const EntryFilter filter(include, exclude);
        for (const ListEntry& e : l.entries) {
            if (!filter.keeps(e.rel)) continue;
            files.emplace_back(abs + "/" + e.rel, e.rel);
        }
    } else {
        *out = tool_error("path does not exist: " + path);
        return std::nullopt;
    }

    std::string text;
    int total = 0;
    bool limit_hit = false, output_cut = false, stopped = false;
    size_t skipped = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(grep_seconds);
    auto emit = [&](const std::string& shown, size_t n, char sep, std::string_view line) {
        std::string s = shown + sep;
        if (show_num) s += std::to_string(n) + sep;
        if (line.size() > grep_line) {
            s.append(line.substr(0, utf8_cut(line, grep_line)));
            s += " [line cut]";
        } else {
            s.append(line);
        }
        s += '\n';
        if (text.size() + s.size() > grep_output) {
            output_cut = true;
            return;
        }
        text += s;
    };
    for (const auto& [file, shown] : files) {
        if (limit_hit || output_cut) break;
        if ((env.call.cancel && env.call.cancel->load()) || Clock::now() >= deadline) {
            stopped = true;
            break;
        }
        const ReadResult r = env.rt.read(file, grep_file);
        if (!r.error.empty()) continue;  // (vanished or unreadable: as grep -s)
        if (r.truncated || looks_binary(r.data)) {
            ++skipped;
            continue;
        }
        std::vector<std::string_view> lines;
        for_each_line(r.data, [&](size_t, std::string_view l) {
            if (!l.empty() && l.back() == '\r') l.remove_suffix(1);  // ("x$" matches "x\r\n")
            lines.push_back(l);
            return true;
        });
        for (size_t i = 0; i < lines.size() && !output_cut; ++i) {
            if (!m.match(lines[i])) continue;
            if (total == grep_matches) {
                limit_hit = true;
                break;
            }
            ++total;
            const size_t a = i >= (size_t)ctx ? i - ctx : 0;
            const size_t b = std::min(lines.size() - 1, i + ctx);
            for (size_t j = a; j <= b; ++j) emit(shown, j + 1, j == i ? ':' : '-', lines[j]);
            if (ctx > 0 && !output_cut) text += "--\n";
        }
    }
    text += "\n---\nTotal matches: " + std::to_string(total) + "\n";
    if (limit_hit)
        text += "[stopped at " + std::to_string(grep_matches) +
                " matches; narrow the path, pattern or include for the rest]\n";
    if (output_cut) text += "[output truncated at " + std::to_string(grep_output) + " bytes]\n";
    if (stopped) text += "[search stopped early: time budget or cancelled]\n";
    if (listing_cut) text += "[some files may be missing: the listing was incomplete]\n";
    if (skipped > 0)
        text += "[" + std::to_string(skipped) + " binary or oversized file(s) skipped]\n";
    *out = {{"plain_text_response", text}};
    return std::nullopt;
}

// ---- exec_shell_command

std::string exec_tail(const RunResult& r) {
    std::string t;
    if (r.truncated) t += "\n[output truncated]";
    t += "\n[exit code: " + std::to_string(r.exit_code) + "]";
    if (r.timed_out) t += " [exit due to timed out]";
    return t;
}

std::optional<ApiError> exec_run(Env& env, json* out) {
    const Params p(env.params);
    std::string command;
    int64_t timeout = tool_limits::exec_timeout_default, max_output = tool_limits::exec_output;
    if (auto e = p.string("command", &command, true)) return e;
    if (auto e = p.integer("timeout", &timeout)) return e;
    if (auto e = p.integer("max_output_size", &max_output)) return e;

    ExecRequest req;
    std::string unbounded;  // why the command cannot run with its bounds
    req.argv = env.rt.shell(command, &unbounded);
    req.timeout_s = clamp_int(timeout, 1, tool_limits::exec_timeout_max);
    req.max_output = (size_t)clamp_int(max_output, 1, (int)tool_limits::exec_output);
    req.cancel = env.call.cancel;

    auto finish_stream = [&](json done) {
        make_valid_utf8(&done);
        *out = done;
        (*env.stream)(done);
        return std::nullopt;
    };
    if (const std::string why = unbounded.empty() ? env.rt.check_working_dir() : unbounded;
        !why.empty()) {
        if (env.stream) return finish_stream({{"done", true}, {"error", why}});
        *out = tool_error(why);
        return std::nullopt;
    }

    if (!env.stream) {
        const RunResult r = env.rt.exec(req);
        if (!r.started()) {
            *out = tool_error(r.start_error);
        } else if (r.cancelled) {
            *out = tool_error("cancelled");
        } else {
            *out = {{"plain_text_response", to_valid_utf8(r.output) + exec_tail(r)}};
        }
        return std::nullopt;
    }

    // Streamed: whole characters per event (a character cut by a read waits for the rest).
    std::string carry;
    bool client_gone = false;
    req.on_chunk = [&](std::string_view bytes) {
        carry.append(bytes);
        const size_t k = utf8_complete_prefix(carry);
        if (k == 0) return true;
        const json ev = {{"chunk", to_valid_utf8(std::string_view(carry).substr(0, k))}};
        carry.erase(0, k);
        if (!(*env.stream)(ev)) client_gone = true;
        return !client_gone;
    };
    const RunResult r = env.rt.exec(req);
    if (client_gone) {
        *out = {{"done", true}, {"error", "the client closed the stream"}};
        return std::nullopt;
    }
    if (!r.started()) return finish_stream({{"done", true}, {"error", r.start_error}});
    if (r.cancelled) return finish_stream({{"done", true}, {"error", "cancelled"}});
    const json tail = {{"chunk", to_valid_utf8(carry) + exec_tail(r)}};
    if (!(*env.stream)(tail)) {
        *out = {{"done", true}, {"error", "the client closed the stream"}};
        return std::nullopt;
    }
    return finish_stream({{"done", true}});
}

// ---- write_file

std::optional<ApiError> write_run(Env& env, json* out) {
    const Params p(env.params);
    std::string path, content;
    if (auto e = p.string("path", &path, true)) return e;
    if (auto e = p.string("content", &content, true)) return e;
    const std::string abs = resolved(env, path, out);
    if (abs.empty()) return std::nullopt;
    const std::string why = env.rt.write(abs, content);
    if (!why.empty()) {
        *out = tool_error("failed to write file: " + path + " (" + why + ")");
        return std::nullopt;
    }
    *out = {{"result", "file written successfully"}, {"path", path}, {"bytes", content.size()}};
    return std::nullopt;
}

// ---- edit_file

// Typographic characters a model tends to write as ASCII, and that ASCII.
struct PlainForm {
    const char* utf8;
    char ascii;
};
const PlainForm kPlainForms[] = {
    {"\u2018", '\''}, {"\u2019", '\''}, {"\u201A", '\''}, {"\u201B", '\''},  // single quotes
    {"\u201C", '"'},  {"\u201D", '"'},  {"\u201E", '"'},  {"\u201F", '"'},   // double quotes
    {"\u2010", '-'},  {"\u2011", '-'},  {"\u2012", '-'},  {"\u2013", '-'},   // dashes
    {"\u2014", '-'},  {"\u2015", '-'},  {"\u2212", '-'},                     // (and minus)
    {"\u00A0", ' '},  {"\u2002", ' '},  {"\u2003", ' '},  {"\u2004", ' '},   // spaces
    {"\u2005", ' '},  {"\u2006", ' '},  {"\u2007", ' '},  {"\u2008", ' '},  {"\u2009", ' '},
    {"\u200A", ' '},  {"\u202F", ' '},  {"\u205F", ' '},  {"\u3000", ' '},
};

// Per line: trailing blanks dropped, kPlainForms as ASCII. The number of lines stays the
// same, so a match maps back to whole lines of the original.
std::string fuzzy_line(std::string_view line) {
    size_t end = line.size();
    while (end > 0 && (line[end - 1] == ' ' || line[end - 1] == '\t' || line[end - 1] == '\r'))
        --end;
    line = line.substr(0, end);
    std::string out;
    out.reserve(end);
    for (size_t i = 0; i < line.size();) {
        const PlainForm* hit = nullptr;
        if ((unsigned char)line[i] >= 0x80)
            for (const PlainForm& f : kPlainForms)
                if (line.substr(i).starts_with(f.utf8)) hit = &f;
        if (hit) {
            out += hit->ascii;
            i += std::strlen(hit->utf8);
        } else {
            out += line[i++];
        }
    }
    return out;
}

// Lines with their '\n' (the last may have none).
std::vector<std::string_view> split_keep_newlines(std::string_view s) {
    std::vector<std::string_view> lines;
    for (size_t pos = 0; pos < s.size();) {
        size_t nl = s.find('\n', pos);
        nl = nl == std::string_view::npos ? s.size() : nl + 1;
        lines.push_back(s.substr(pos, nl - pos));
        pos = nl;
    }
    return lines;
}

std::string fuzzy_text(std::string_view s) {
    std::string out;
    for (std::string_view line : split_keep_newlines(s)) {
        const bool nl = !line.empty() && line.back() == '\n';
        out += fuzzy_line(nl ? line.substr(0, line.size() - 1) : line);
        if (nl) out += '\n';
    }
    return out;
}

// Occurrences at every position (so "aa" occurs twice in "aaa": not unique).
size_t count_occurrences(std::string_view hay, std::string_view needle) {
    size_t n = 0;
    for (size_t pos = hay.find(needle); pos != std::string_view::npos;
         pos = hay.find(needle, pos + 1))
        ++n;
    return n;
}

struct Edit {
    size_t index = 0;  // in the request
    size_t pos = 0, len = 0;
    std::string old_text, new_text;
};

std::optional<ApiError> edit_run(Env& env, json* out) {
    const Params p(env.params);
    std::string path;
    if (auto e = p.string("path", &path, true)) return e;
    const auto it = env.params.find("edits");
    if (it == env.params.end() || it->is_null())
        return bad_request("missing parameter \"edits\" (an array of {old_text, new_text})");
    if (!it->is_array() || it->empty()) {
        *out = tool_error("\"edits\" must be a non-empty array");
        return std::nullopt;
    }
    std::vector<Edit> edits;
    for (const json& e : *it) {
        const std::string at = "edits[" + std::to_string(edits.size()) + "]";
        if (!e.is_object() || !e.contains("old_text") || !e["old_text"].is_string() ||
            !e.contains("new_text") || !e["new_text"].is_string())
            return bad_request(at + " must be an object with string old_text and new_text");
        Edit ed;
        ed.index = edits.size();
        ed.old_text = e["old_text"].get<std::string>();
        ed.new_text = e["new_text"].get<std::string>();
        if (ed.old_text.empty()) {
            *out = tool_error(at + ".old_text must not be empty");
            return std::nullopt;
        }
        edits.push_back(std::move(ed));
    }

    const std::string abs = resolved(env, path, out);
    if (abs.empty()) return std::nullopt;
    const FileStat st = env.rt.stat(abs);
    if (auto why = not_a_file(st, path)) {
        *out = tool_error(*why);
        return std::nullopt;
    }
    if (st.size > tool_limits::edit_file_size) {
        *out = tool_error("file too large to edit: " + path + " (" + std::to_string(st.size) +
                          " bytes)");
        return std::nullopt;
    }
    const ReadResult r = env.rt.read(abs, tool_limits::edit_file_size);
    if (!r.error.empty() || r.truncated) {
        *out = tool_error("failed to read file: " + path +
                          (r.error.empty() ? " (it grew past the limit)" : " (" + r.error + ")"));
        return std::nullopt;
    }
    const std::string& original = r.data;

    // Exact text when every old_text is there as is; otherwise all are matched in the
    // fuzzy form of the file (trailing blanks, typographic characters).
    bool fuzzy = false;
    for (const Edit& e : edits)
        if (original.find(e.old_text) == std::string::npos) fuzzy = true;
    const std::string base = fuzzy ? fuzzy_text(original) : std::string();
    const std::string_view hay = fuzzy ? std::string_view(base) : std::string_view(original);
    for (Edit& e : edits) {
        const std::string needle = fuzzy ? fuzzy_text(e.old_text) : e.old_text;
        const size_t n = needle.empty() ? 0 : count_occurrences(hay, needle);
        if (n == 0) {
            *out = tool_error("could not find edits[" + std::to_string(e.index) + "].old_text in " +
                              path + "; it must match the file's current text exactly");
            return std::nullopt;
        }
        if (n > 1) {
            *out = tool_error("edits[" + std::to_string(e.index) + "].old_text occurs " +
                              std::to_string(n) + " times in " + path +
                              "; it must be unique (add surrounding lines)");
            return std::nullopt;
        }
        e.pos = hay.find(needle);
        e.len = needle.size();
    }
    std::vector<Edit*> order;
    for (Edit& e : edits) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const Edit* a, const Edit* b) { return a->pos < b->pos; });
    for (size_t i = 1; i < order.size(); ++i) {
        if (order[i - 1]->pos + order[i - 1]->len > order[i]->pos) {
            *out = tool_error("edits[" + std::to_string(order[i - 1]->index) + "] and edits[" +
                              std::to_string(order[i]->index) + "] overlap in " + path +
                              "; merge them into one edit or edit separate parts");
            return std::nullopt;
        }
    }

    std::string result;
    if (!fuzzy) {
        size_t from = 0;
        for (const Edit* e : order) {
            result.append(original, from, e->pos - from);
            result += e->new_text;
            from = e->pos + e->len;
        }
        result.append(original, from, std::string::npos);
    } else {
        // Lines no edit touches come from the original as they were; the touched lines
        // from the fuzzy text with the replacements made.
        const auto orig_lines = split_keep_newlines(original);
        const auto base_lines = split_keep_newlines(base);
        std::vector<size_t> starts;  // offset of each line in base
        for (size_t off = 0; const auto& l : base_lines) {
            starts.push_back(off);
            off += l.size();
        }
        auto line_of = [&](size_t off) {
            return (size_t)(std::upper_bound(starts.begin(), starts.end(), off) - starts.begin()) -
                   1;
        };
        size_t next_line = 0;  // first original line not yet copied
        for (size_t i = 0; i < order.size();) {
            size_t first = line_of(order[i]->pos);
            size_t last = line_of(order[i]->pos + order[i]->len - 1);
            size_t j = i + 1;
            while (j < order.size() && line_of(order[j]->pos) <= last) {
                last = std::max(last, line_of(order[j]->pos + order[j]->len - 1));
                ++j;
            }
            for (size_t l = next_line; l < first; ++l) result.append(orig_lines[l]);
            size_t from = starts[first];
            for (size_t k = i; k < j; ++k) {
                result.append(base, from, order[k]->pos - from);
                result += order[k]->new_text;
                from = order[k]->pos + order[k]->len;
            }
            const size_t group_end = starts[last] + base_lines[last].size();
            result.append(base, from, group_end - from);
            next_line = last + 1;
            i = j;
        }
        for (size_t l = next_line; l < orig_lines.size(); ++l) result.append(orig_lines[l]);
    }
    if (result == original) {
        *out = tool_error("no changes made: the edits leave the file as it was");
        return std::nullopt;
    }
    const std::string why = env.rt.write(abs, result);
    if (!why.empty()) {
        *out = tool_error("failed to write file: " + path + " (" + why + ")");
        return std::nullopt;
    }
    *out = {
        {"result", "file edited successfully"}, {"path", path}, {"edits_applied", edits.size()}};
    return std::nullopt;
}

// ---- get_info

std::optional<ApiError> info_run(Env& env, json* out) {
    ExecRequest req;
    req.argv = {"uname", "-a"};
    req.timeout_s = 5;
    req.max_output = 4096;
    req.cancel = env.call.cancel;
    const RunResult r = env.rt.check_working_dir().empty() ? env.rt.exec(req) : RunResult{};
    const std::string os =
        r.started() && r.exit_code == 0 && !r.timed_out ? trim(r.output) : std::string("unknown");
    *out = {{"os", os}, {"cwd", env.rt.working_dir()}};
    return std::nullopt;
}

// ---- definitions (GET /tools): what the model is told

// What each tool does.
const char kReadFileAbout[] =
    "Return the text of a file, optionally only lines start_line..end_line (1-based, "
    "inclusive). With append_loc each line starts with its number and an arrow "
    "(\"12\u2192text\"). Files over 16 KiB need a line range.";

const char kFileGlobSearchAbout[] =
    "List the files (or directories) below a directory whose names match a glob. A "
    "pattern without '/' (\"*.cpp\") matches names at any depth; one with '/' "
    "(\"src/**/*.h\") matches paths relative to the directory, anywhere below it "
    "unless it starts with '/'. '*' stays within a name, '**' crosses directories, "
    "{a,b} gives alternatives. Inside a git work tree, files git ignores are left out; "
    "directories such as .git, node_modules and build are never searched (they are "
    "listed when directories are asked for). Directories show with a trailing '/'.";

const char kGrepSearchAbout[] =
    "Find the lines matching a regular expression in a file, or in the files below a "
    "directory (their paths shown relative to it). Extended regular expressions, plus "
    "\\d, \\w, \\s, \\b and (?:...); literal=true searches for the text as is. "
    "include/exclude are globs as in file_glob_search. Files git ignores, binary files "
    "and directories such as .git, node_modules and build are skipped. At most 100 "
    "matches.";

const char kExecShellCommandAbout[] =
    "Run a command with sh -c in the working directory and return what it printed "
    "(stdout and stderr together), followed by its exit code. It is killed, with every "
    "process it started, when the timeout passes.";

const char kWriteFileAbout[] =
    "Create or replace a file with the given content (missing parent "
    "directories are created). The file is replaced in one step, never "
    "left half written. For changes to part of a file use edit_file.";

const char kEditFileAbout[] =
    "Replace text in a file. Every old_text must occur exactly once in the current "
    "file, and no two may overlap (join neighbouring changes into one edit). Either all "
    "edits are made or none. Differences only in trailing blanks or typographic "
    "quotes and dashes are tolerated. To rewrite a whole file use write_file.";

const char kGetInfoAbout[] =
    "Describe where the tools run: the operating system (uname -a) and "
    "the working directory that relative paths and commands use.";

// One parameter of a tool as its definition shows it.
struct ParamDoc {
    const char* tool;
    const char* name;
    const char* type;
    std::string description;
    bool required = false;
    json items = nullptr;  // an array's items, when given
};

json prop(const char* type, std::string description) {
    return {{"type", type}, {"description", std::move(description)}};
}

// Every tool's parameters, tool by tool in the order its definition lists them (a required
// one is listed so in that order too). get_info has none.
const std::vector<ParamDoc>& param_docs() {
    using namespace tool_limits;
    static const json edit_item = {
        {"type", "object"},
        {"properties",
         {{"old_text", prop("string",
                            "Text to replace, exactly as in the file; it must "
                            "occur once and not overlap another edit's")},
          {"new_text", prop("string", "Its replacement")}}},
        {"required", json::array({"old_text", "new_text"})}};
    static const std::vector<ParamDoc> docs = {
        {"read_file", "path", "string", "File to read", true},
        {"read_file", "start_line", "integer", "First line, 1-based (default 1)"},
        {"read_file", "end_line", "integer", "Last line, inclusive (default: the last)"},
        {"read_file", "append_loc", "boolean", "Number each line (default false)"},
        {"file_glob_search", "path", "string", "Directory to search", true},
        {"file_glob_search", "include", "string", "Glob of the entries to return (default **)"},
        {"file_glob_search", "exclude", "string", "Glob of the entries to leave out"},
        {"file_glob_search", "type", "string", "\"file\" (default), \"dir\" or \"all\""},
        {"file_glob_search", "max_depth", "integer",
         "How deep to go: 1 = the directory's own entries (default 0: no limit)"},
        {"file_glob_search", "limit", "integer",
         "Most entries to return, at most " + std::to_string(glob_results) + " (default " +
             std::to_string(glob_results) + ")"},
        {"grep_search", "path", "string", "File or directory to search", true},
        {"grep_search", "pattern", "string", "Regular expression (or text, with literal)", true},
        {"grep_search", "include", "string", "Glob of the files to search (default **)"},
        {"grep_search", "exclude", "string", "Glob of the files to skip"},
        {"grep_search", "return_line_numbers", "boolean", "Show line numbers (default false)"},
        {"grep_search", "literal", "boolean", "Match pattern as plain text (default false)"},
        {"grep_search", "ignore_case", "boolean", "Ignore case (default false)"},
        {"grep_search", "context_lines", "integer",
         "Lines to show before and after each match (default 0)"},
        {"exec_shell_command", "command", "string", "The shell command", true},
        {"exec_shell_command", "timeout", "integer",
         "Seconds before it is killed (default " + std::to_string(exec_timeout_default) +
             ", at most " + std::to_string(exec_timeout_max) + ")"},
        {"exec_shell_command", "max_output_size", "integer",
         "Bytes of output kept (default and most " + std::to_string(exec_output) + ")"},
        {"write_file", "path", "string", "File to write", true},
        {"write_file", "content", "string", "The file's new content", true},
        {"edit_file", "path", "string", "File to edit", true},
        {"edit_file", "edits", "array", "The replacements, all found in the file as it is now",
         true, edit_item},
    };
    return docs;
}

}  // namespace

struct BuiltinTools::Tool {
    const char* name;
    const char* display_name;
    bool write;    // permissions.write: it changes files or runs commands
    bool streams;  // accepts "stream": true
    ToolFn run;
    const char* description;  // (its parameters: param_docs())
};

namespace {

// llama-server's order (GET /tools lists them so).
const BuiltinTools::Tool kTools[] = {
    {"read_file", "Read file", false, false, read_file_run, kReadFileAbout},
    {"file_glob_search", "File search", false, false, glob_run, kFileGlobSearchAbout},
    {"grep_search", "Grep search", false, false, grep_run, kGrepSearchAbout},
    {"exec_shell_command", "Execute shell command", true, true, exec_run, kExecShellCommandAbout},
    {"write_file", "Write file", true, false, write_run, kWriteFileAbout},
    {"edit_file", "Edit file", true, false, edit_run, kEditFileAbout},
    {"get_info", "Get Runtime Info", false, false, info_run, kGetInfoAbout},
};

// {"type": "function", "function": {name, description, parameters}}
json definition(const BuiltinTools::Tool& t) {
    json properties = json::object(), required = json::array();
    for (const ParamDoc& d : param_docs()) {
        if (std::string_view(d.tool) != t.name) continue;
        json& p = properties[d.name] = prop(d.type, d.description);
        if (!d.items.is_null()) p["items"] = d.items;
        if (d.required) required.push_back(d.name);
    }
    json params = {{"type", "object"}, {"properties", std::move(properties)}};
    if (!required.empty()) params["required"] = std::move(required);
    return {
        {"type", "function"},
        {"function",
         {{"name", t.name}, {"description", t.description}, {"parameters", std::move(params)}}}};
}

}  // namespace

BuiltinTools::BuiltinTools() = default;
BuiltinTools::~BuiltinTools() = default;

Result<std::unique_ptr<BuiltinTools>> BuiltinTools::create(const std::string& tools,
                                                           const std::string& runtime) {
    using R = Result<std::unique_ptr<BuiltinTools>>;
    std::unique_ptr<BuiltinTools> bt(new BuiltinTools());
    std::vector<std::string> wanted, unknown;
    for (size_t pos = 0; pos <= tools.size();) {
        size_t comma = tools.find(',', pos);
        if (comma == std::string::npos) comma = tools.size();
        const std::string name = trim(std::string_view(tools).substr(pos, comma - pos));
        if (!name.empty()) wanted.push_back(name);
        pos = comma + 1;
    }
    const bool all = std::find(wanted.begin(), wanted.end(), "all") != wanted.end();
    for (const std::string& name : wanted) {
        if (name == "all") continue;
        const bool known = std::any_of(std::begin(kTools), std::end(kTools),
                                       [&](const Tool& t) { return name == t.name; });
        if (!known && std::find(unknown.begin(), unknown.end(), name) == unknown.end())
            unknown.push_back(name);
    }
    if (!unknown.empty()) {
        std::string names, avail;
        for (const auto& u : unknown) names += (names.empty() ? "\"" : ", \"") + u + "\"";
        for (const Tool& t : kTools) avail += std::string(avail.empty() ? "" : ", ") + t.name;
        return R::fail("--tools: unknown tool" + std::string(unknown.size() > 1 ? "s " : " ") +
                       names + " (available: all, " + avail + ")");
    }
    for (const Tool& t : kTools)
        if (all || std::find(wanted.begin(), wanted.end(), t.name) != wanted.end())
            bt->tools_.push_back(&t);

    RuntimeSpec spec;
    if (auto e = parse_runtime(runtime, &spec)) return R::fail("--tools-runtime: " + e->message);
    if (spec.kind == RuntimeSpec::Spawn) {
        auto c = SpawnedContainer::start(spec.engine, spec.arg);
        if (!c) return R::fail(c.error());
        bt->container_ = std::move(*c);
    } else {
        bt->runtime_ = runtime;
    }
    return R(std::move(bt));
}

json BuiltinTools::list() const {
    json out = json::array();
    for (const Tool* t : tools_) {
        out.push_back({{"display_name", t->display_name},
                       {"tool", t->name},
                       {"type", "server"},
                       {"permissions", {{"write", t->write}}},
                       {"uses_cwd", true},
                       {"definition", definition(*t)}});
    }
    return out;
}

std::vector<std::string> BuiltinTools::writers() const {
    std::vector<std::string> names;
    for (const Tool* t : tools_)
        if (t->write) names.push_back(t->name);
    return names;
}

bool BuiltinTools::runs_commands_here() const {
    return has("exec_shell_command") && runtime_.empty() && !container_;
}

bool BuiltinTools::has(std::string_view name) const {
    return std::any_of(tools_.begin(), tools_.end(),
                       [&](const Tool* t) { return name == t->name; });
}

std::optional<ApiError> BuiltinTools::call(const BuiltinToolCall& c, json* result,
                                           const std::function<bool(const json&)>& stream) const {
    const Tool* tool = nullptr;
    for (const Tool* t : tools_)
        if (c.name == t->name) tool = t;
    if (!tool) {
        ApiError e = bad_request("unknown tool \"" + c.name + "\"");
        e.status = 404;
        return e;
    }
    if (stream && !tool->streams) {
        ApiError e = bad_request("tool \"" + c.name + "\" does not support stream = true");
        e.status = 404;
        return e;
    }
    static const json kNoParams = json::object();
    if (!c.params.is_null() && !c.params.is_object())
        return bad_request("\"params\" must be an object");
    const json& params = c.params.is_null() ? kNoParams : c.params;

    std::string spec_text = c.runtime.empty() ? runtime_ : c.runtime;
    if (c.runtime.empty() && container_) {
        auto s = container_->spec();
        if (!s) {
            json err = stream ? json{{"done", true}, {"error", s.error()}} : tool_error(s.error());
            make_valid_utf8(&err);
            if (stream) stream(err);
            *result = std::move(err);
            return std::nullopt;
        }
        spec_text = *s;
    }
    RuntimeSpec spec;
    if (auto e = parse_runtime(spec_text, &spec)) return e;
    std::unique_ptr<ToolRuntime> rt;
    if (auto e = make_runtime(spec, spec_text, c.cwd, &rt)) return e;

    // exec_shell_command: at most tool_limits::exec_concurrent at once; one more is refused
    // now (429) rather than left waiting behind commands that may take a minute each.
    struct Slot {
        std::atomic<int>* taken = nullptr;
        ~Slot() {
            if (taken) taken->fetch_sub(1);
        }
    } slot;
    if (tool->run == exec_run) {
        if (commands_running_.fetch_add(1) >= tool_limits::exec_concurrent) {
            commands_running_.fetch_sub(1);
            return ApiError{429,
                            "rate_limit_error",
                            "exec_shell_command: " + std::to_string(tool_limits::exec_concurrent) +
                                " commands are running already (the most at once); try again "
                                "when one has ended",
                            {}};
        }
        slot.taken = &commands_running_;
    }
    Env env{c, params, *rt, stream ? &stream : nullptr};
    json out;
    if (auto e = tool->run(env, &out)) return e;
    make_valid_utf8(&out);
    *result = std::move(out);
    return std::nullopt;
}

bool tool_glob_match(std::string_view pattern, std::string_view rel_path) {
    return EntryFilter(pattern, "").keeps(rel_path);
}

}  // namespace edgellm::agent
