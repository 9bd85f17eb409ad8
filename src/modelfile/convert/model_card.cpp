#include "modelfile/convert/model_card.h"

#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

namespace edgellm::convert {

using nlohmann::json;

namespace {

size_t indent_of(const std::string& l) {
    size_t i = 0;
    while (i < l.size() && l[i] == ' ') ++i;
    return i;
}

bool blank(const std::string& l) {
    const size_t i = indent_of(l);
    return i == l.size() || l[i] == '#';
}

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// A plain scalar's text without a trailing comment (" #").
std::string uncomment(const std::string& s) {
    const size_t c = s.find(" #");
    return trim(c == std::string::npos ? s : s.substr(0, c));
}

// A scalar as PyYAML's safe_load types it (YAML 1.1: yes/no/on/off are booleans).
json scalar(const std::string& raw) {
    const std::string s = trim(raw);
    if (s.size() >= 2 && s.front() == '\'' && s.back() == '\'') {
        std::string out;
        for (size_t i = 1; i + 1 < s.size(); ++i) {
            out += s[i];
            if (s[i] == '\'' && s[i + 1] == '\'') ++i;
        }
        return out;
    }
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
        std::string out;
        for (size_t i = 1; i + 1 < s.size(); ++i) {
            if (s[i] == '\\' && i + 2 < s.size()) {
                const char c = s[++i];
                out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
            } else {
                out += s[i];
            }
        }
        return out;
    }
    const std::string v = uncomment(s);
    static const std::regex kNull("~|null|Null|NULL|");
    static const std::regex kTrue("yes|Yes|YES|true|True|TRUE|on|On|ON");
    static const std::regex kFalse("no|No|NO|false|False|FALSE|off|Off|OFF");
    static const std::regex kInt("[-+]?(0|[1-9][0-9_]*)");
    static const std::regex kFloat(R"([-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?)");
    if (std::regex_match(v, kNull)) return nullptr;
    if (std::regex_match(v, kTrue)) return true;
    if (std::regex_match(v, kFalse)) return false;
    std::string digits;
    for (char c : v)
        if (c != '_') digits += c;
    if (std::regex_match(v, kInt)) return std::stoll(digits);
    if (std::regex_match(v, kFloat) && v.find_first_of("0123456789") != std::string::npos) return std::stod(digits);
    return v;
}

// "[a, b, c]"
json flow_list(const std::string& s) {
    json out = json::array();
    const std::string inner = trim(s.substr(1, s.rfind(']') - 1));
    if (inner.empty()) return out;
    std::string item;
    char quote = 0;
    for (char c : inner) {
        if (quote) {
            if (c == quote) quote = 0;
            item += c;
        } else if (c == '"' || c == '\'') {
            quote = c;
            item += c;
        } else if (c == ',') {
            out.push_back(scalar(item));
            item.clear();
        } else {
            item += c;
        }
    }
    out.push_back(scalar(item));
    return out;
}

// "key: rest" at the start of s (a key quoted or plain); false when s is not one.
bool split_key(const std::string& s, std::string* key, std::string* rest) {
    size_t colon = std::string::npos;
    if (!s.empty() && (s[0] == '"' || s[0] == '\'')) {
        const size_t close = s.find(s[0], 1);
        if (close == std::string::npos) return false;
        colon = close + 1 < s.size() && s[close + 1] == ':' ? close + 1 : std::string::npos;
        if (colon == std::string::npos) return false;
        *key = scalar(s.substr(0, close + 1)).get<std::string>();
    } else {
        for (size_t i = 0; i < s.size(); ++i)
            if (s[i] == ':' && (i + 1 == s.size() || s[i + 1] == ' ')) {
                colon = i;
                break;
            }
        if (colon == std::string::npos) return false;
        *key = trim(s.substr(0, colon));
    }
    *rest = trim(s.substr(colon + 1));
    return true;
}

class Parser {
  public:
    explicit Parser(std::vector<std::string> lines) : lines_(std::move(lines)) {}

    json mapping(size_t indent) {
        json out = json::object();
        while (skip_blank() && indent_of(lines_[i_]) == indent) {
            std::string key, rest;
            if (!split_key(lines_[i_].substr(indent), &key, &rest)) {
                ++i_;  // (not a key: passed over)
                continue;
            }
            ++i_;
            out[key] = value(rest, indent);
        }
        return out;
    }

  private:
    bool skip_blank() {
        while (i_ < lines_.size() && blank(lines_[i_])) ++i_;
        return i_ < lines_.size();
    }

    // The value after "key:" on a line of this indent.
    json value(const std::string& rest, size_t indent) {
        if (!rest.empty() && (rest[0] == '>' || rest[0] == '|')) return block_scalar(rest, indent);
        if (!rest.empty() && rest[0] == '[' && rest.find(']') != std::string::npos) return flow_list(rest);
        if (!rest.empty() && rest[0] == '{') return nullptr;  // (flow mappings: not read)
        if (!rest.empty() && rest[0] != '#') return scalar(rest);
        if (!skip_blank()) return nullptr;
        const size_t next = indent_of(lines_[i_]);
        const bool seq = lines_[i_].compare(next, 1, "-") == 0;
        if (seq && next >= indent) return sequence(next);
        if (next > indent) return mapping(next);
        return nullptr;
    }

    json sequence(size_t indent) {
        json out = json::array();
        while (skip_blank() && indent_of(lines_[i_]) == indent && lines_[i_].compare(indent, 1, "-") == 0) {
            const std::string item = trim(lines_[i_].substr(indent + 1));
            ++i_;
            std::string key, rest;
            if (split_key(item, &key, &rest)) {  // "- key: value" and the item's other keys
                json m = json::object();
                m[key] = value(rest, indent + 2);
                if (skip_blank() && indent_of(lines_[i_]) > indent) {
                    json more = mapping(indent_of(lines_[i_]));
                    m.update(more);
                }
                out.push_back(m);
            } else if (!item.empty() && item[0] == '[') {
                out.push_back(flow_list(item));
            } else {
                out.push_back(scalar(item));
            }
        }
        return out;
    }

    // "> ..." or "| ...": the indented lines after, folded into one (blank lines as line
    // breaks) or kept, with a final line break unless chomped ("-").
    json block_scalar(const std::string& header, size_t indent) {
        const bool folded = header[0] == '>', strip = header.find('-') != std::string::npos;
        std::string text;
        bool broken = true;  // (the last thing added ended a line)
        while (i_ < lines_.size() && (blank(lines_[i_]) || indent_of(lines_[i_]) > indent)) {
            const std::string l = trim(lines_[i_++]);
            if (l.empty()) {
                text += '\n';
                broken = true;
            } else if (folded) {
                text += (broken ? "" : " ") + l;
                broken = false;
            } else {
                text += l + "\n";
                broken = true;
            }
        }
        while (!text.empty() && text.back() == '\n') text.pop_back();
        if (!strip && !text.empty()) text += '\n';
        return text;
    }

    std::vector<std::string> lines_;
    size_t i_ = 0;
};

}  // namespace

json parse_front_matter(const std::string& yaml) {
    std::vector<std::string> lines;
    std::istringstream in(yaml);
    for (std::string l; std::getline(in, l);) {
        if (!l.empty() && l.back() == '\r') l.pop_back();
        lines.push_back(l);
    }
    return Parser(std::move(lines)).mapping(0);
}

std::optional<json> read_model_card(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::stringstream ss;
    ss << in.rdbuf();
    std::istringstream text(ss.str());
    std::string line, yaml;
    if (!std::getline(text, line) || (line != "---" && line != "---\r")) return std::nullopt;
    bool closed = false;
    while (std::getline(text, line)) {
        if (line == "---" || line == "---\r") {
            closed = true;
            break;
        }
        yaml += line + "\n";
    }
    (void)closed;  // (an unclosed front matter runs to the end, as llama.cpp reads it)
    // llama.cpp's two fixes: the Norway problem of "- no", tabs as two spaces
    for (size_t p; (p = yaml.find("- no\n")) != std::string::npos;) yaml.replace(p, 5, "- \"no\"\n");
    for (size_t p; (p = yaml.find('\t')) != std::string::npos;) yaml.replace(p, 1, "  ");
    const json j = parse_front_matter(yaml);
    if (!j.is_object()) return std::nullopt;
    return j;
}

}  // namespace edgellm::convert
