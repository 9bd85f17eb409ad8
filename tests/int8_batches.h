// For tests of what batching must not change (a restored prefix continues bit for bit, a
// model's exact continuation): they run on the int8 kernel sets. amx-bf16's batches of
// more than 16 tokens (8 for weights in the file's layout) are bf16 sums, whose logits differ from one token's GEMV by
// rounding (Matmul.Bf16GemmIsTheRoundedProducts checks them), so on such a machine the
// test uses its int8 twin amx, and puts the set it found back after.
#pragma once

#include <string>

#include "kernels/kernels.h"

namespace edgellm::test {

class Int8Batches {
  public:
    Int8Batches() : was_(active_kernel_set()) {
        if (was_ == "amx-bf16") select_kernel_set("amx");
    }
    ~Int8Batches() { select_kernel_set(was_); }
    Int8Batches(const Int8Batches&) = delete;
    Int8Batches& operator=(const Int8Batches&) = delete;

  private:
    std::string was_;
};

}  // namespace edgellm::test
