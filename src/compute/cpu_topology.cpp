#include "compute/cpu_topology.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>

namespace edgellm {

std::optional<std::vector<int>> parse_cpu_list(std::string_view s) {
    std::vector<int> out;
    size_t i = 0;
    auto number = [&](int* v) {
        if (i >= s.size() || !std::isdigit((unsigned char)s[i])) return false;
        long x = 0;
        while (i < s.size() && std::isdigit((unsigned char)s[i])) {
            x = x * 10 + (s[i++] - '0');
            if (x > 4095) return false;
        }
        *v = (int)x;
        return true;
    };
    while (i < s.size()) {
        int a, b;
        if (!number(&a)) return std::nullopt;
        b = a;
        if (i < s.size() && s[i] == '-') {
            ++i;
            if (!number(&b) || b < a) return std::nullopt;
        }
        for (int c = a; c <= b; ++c) out.push_back(c);
        if (i < s.size()) {
            if (s[i] != ',') return std::nullopt;
            ++i;
            if (i == s.size()) return std::nullopt;
        }
    }
    if (out.empty()) return std::nullopt;
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::optional<std::vector<int>> parse_cpu_mask(std::string_view s) {
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
    if (s.empty() || s.size() > 1024) return std::nullopt;
    std::vector<int> out;
    for (size_t k = 0; k < s.size(); ++k) {
        const char c = (char)std::tolower((unsigned char)s[s.size() - 1 - k]);
        int v;
        if (c >= '0' && c <= '9')
            v = c - '0';
        else if (c >= 'a' && c <= 'f')
            v = c - 'a' + 10;
        else
            return std::nullopt;
        for (int bit = 0; bit < 4; ++bit)
            if (v & (1 << bit)) out.push_back((int)(4 * k) + bit);
    }
    if (out.empty()) return std::nullopt;
    return out;
}

std::vector<int> big_cores(const std::string& sysfs_root) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(sysfs_root) / "devices" / "system" / "cpu";
    std::map<int, long> score;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() < 4 || name.rfind("cpu", 0) != 0 ||
            !std::all_of(name.begin() + 3, name.end(),
                         [](char c) { return std::isdigit((unsigned char)c); }))
            continue;
        const int id = std::stoi(name.substr(3));
        long v = -1;
        for (const char* f : {"cpu_capacity", "cpufreq/cpuinfo_max_freq"}) {
            std::ifstream in(e.path() / f);
            if (in >> v) break;
            v = -1;
        }
        if (v > 0) score[id] = v;
    }
    if (score.size() < 2) return {};
    long best = 0, worst = score.begin()->second;
    for (const auto& [id, v] : score) {
        best = std::max(best, v);
        worst = std::min(worst, v);
    }
    if (best == worst) return {};
    // Big cores: within 20 % of the fastest (RK3588's A76 clusters run at 2.4 and 2.256 GHz;
    // its A55s at 1.8 GHz are 25 % below).
    std::vector<int> out;
    for (const auto& [id, v] : score)
        if ((double)v >= 0.8 * (double)best) out.push_back(id);
    if (out.size() == score.size()) return {};
    return out;
}

std::string cpu_list_string(const std::vector<int>& cpus) {
    std::string out;
    for (size_t i = 0; i < cpus.size();) {
        size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
        if (!out.empty()) out += ",";
        out += std::to_string(cpus[i]);
        if (j > i) out += "-" + std::to_string(cpus[j]);
        i = j + 1;
    }
    return out;
}

}  // namespace edgellm
