#include "args.h"

#include <cmath>

#include <cerrno>
#include <cstdlib>

namespace edgellm::cli {

void ArgParser::flag(std::vector<std::string> names, std::string help) {
    specs_.push_back({std::move(names), false, "", std::move(help)});
}

void ArgParser::option(std::vector<std::string> names, std::string metavar, std::string help) {
    specs_.push_back({std::move(names), true, std::move(metavar), std::move(help)});
}

const ArgParser::Spec* ArgParser::find(const std::string& name) const {
    for (const Spec& s : specs_)
        for (const auto& n : s.names)
            if (n == name) return &s;
    return nullptr;
}

bool ArgParser::parse(const std::vector<std::string>& args, std::string* err) {
    for (size_t i = 0; i < args.size(); ++i) {
        std::string a = args[i];
        if (a == "-h" || a == "--help") {
            help_ = true;
            continue;
        }
        if (a.size() < 2 || a[0] != '-' || a == "--" || (a[1] >= '0' && a[1] <= '9')) {
            positional_.push_back(a);
            continue;
        }
        std::optional<std::string> inline_value;
        const size_t eq = a.find('=');
        if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
            inline_value = a.substr(eq + 1);
            a = a.substr(0, eq);
        }
        const Spec* s = find(a);
        if (!s) {
            *err = "unknown option " + a + " (see --help)";
            return false;
        }
        if (!s->has_value) {
            if (inline_value) {
                *err = "option " + a + " takes no value";
                return false;
            }
            values_[s->names[0]] = "1";
            continue;
        }
        if (inline_value) {
            values_[s->names[0]] = *inline_value;
            all_[s->names[0]].push_back(*inline_value);
        } else if (i + 1 < args.size()) {
            values_[s->names[0]] = args[++i];
            all_[s->names[0]].push_back(values_[s->names[0]]);
        } else {
            *err = "option " + a + " needs a value (" + s->metavar + ")";
            return false;
        }
    }
    return true;
}

bool ArgParser::has(const std::string& name) const {
    const Spec* s = find(name);
    return s && values_.count(s->names[0]);
}

std::optional<std::string> ArgParser::get(const std::string& name) const {
    const Spec* s = find(name);
    if (!s) return std::nullopt;
    auto it = values_.find(s->names[0]);
    if (it == values_.end()) return std::nullopt;
    return it->second;
}

std::vector<std::string> ArgParser::get_all(const std::string& name) const {
    const Spec* s = find(name);
    if (!s) return {};
    auto it = all_.find(s->names[0]);
    return it == all_.end() ? std::vector<std::string>{} : it->second;
}

std::string ArgParser::get_or(const std::string& name, const std::string& def) const {
    return get(name).value_or(def);
}

bool ArgParser::get_int(const std::string& name, int64_t lo, int64_t hi, int64_t* out,
                        std::string* err) const {
    const auto v = get(name);
    if (!v) return true;
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
        *err = name + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
               ", got \"" + *v + "\"";
        return false;
    }
    *out = x;
    return true;
}

bool ArgParser::get_float(const std::string& name, double lo, double hi, float* out,
                          std::string* err) const {
    const auto v = get(name);
    if (!v) return true;
    errno = 0;
    char* end = nullptr;
    const double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x) || x < lo || x > hi) {
        *err = name + " must be a number in " + std::to_string(lo).substr(0, 4) + ".." +
               std::to_string(hi).substr(0, 4) + ", got \"" + *v + "\"";
        return false;
    }
    *out = (float)x;
    return true;
}

std::string ArgParser::help() const {
    std::string out = "usage: " + usage_ + "\n\noptions:\n";
    for (const Spec& s : specs_) {
        std::string names;
        for (const auto& n : s.names) names += (names.empty() ? "" : ", ") + n;
        if (s.has_value) names += " " + s.metavar;
        out += "  " + names;
        out +=
            names.size() < 30 ? std::string(30 - names.size(), ' ') : "\n" + std::string(32, ' ');
        out += s.help + "\n";
    }
    out += "  -h, --help                    show this help\n";
    return out;
}

}  // namespace edgellm::cli
