// The runtime tests' generation parameters: greedy, n tokens, never stopped by an
// end-of-generation token (a reply of a known length).
#pragma once

#include "edgellm/session.h"

namespace edgellm::test {

inline GenerateParams greedy(int n) {
    GenerateParams p;
    p.n_predict = n;
    p.sampling.temperature = 0.0f;
    p.ignore_eos = true;
    return p;
}

}  // namespace edgellm::test
