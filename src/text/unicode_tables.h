// The Unicode character data the WordPiece normalizer needs, as sorted tables generated
// from the Unicode Character Database (scripts/gen-unicode-tables.py writes
// unicode_tables.cpp). Read them through text/unicode.h.
#pragma once

#include <cstdint>
#include <span>

namespace edgellm::unicode::ucd {

// General category groups that matter to BERT's normalizer and pre-tokenizer.
enum class Group : uint8_t {
    Other = 0,
    Control = 1,      // Cc, Cf, Co, Cs (not Cn: unassigned code points are Other)
    Mark = 2,         // Mn, Mc, Me
    Punctuation = 3,  // Pc, Pd, Ps, Pe, Pi, Pf, Po
};

// Code points from `first` up to the next entry's first belong to `group`.
struct GroupStart {
    uint32_t first;
    Group group;
};

// Code points first..last decompose canonically (NFD) into a sequence starting with `base`.
struct Decomposition {
    uint32_t first, last, base;
};

// Code points first, first + step, ... up to last have the simple lowercase mapping
// cp + delta.
struct LowerRun {
    uint32_t first, last;
    int32_t delta;
    uint32_t step;
};

std::span<const GroupStart> groups();
std::span<const Decomposition> decompositions();
std::span<const LowerRun> lower_runs();
// The version of Unicode the tables come from.
const char* version();

}  // namespace edgellm::unicode::ucd
