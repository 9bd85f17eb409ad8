// <immintrin.h> for the AVX-512 and AMX translation units, without GCC 12's false positives
// in its AVX-512 parts (-Wuninitialized, -Wmaybe-uninitialized on _mm512_undefined_*).
// Only the system header: nothing of ours may be inline here, as these files are compiled
// with different ISA flags and one inline definition would serve them all.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
