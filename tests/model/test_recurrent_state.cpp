// A sequence's recurrent state (model/recurrent_state.h) on its own: its layout (a window and
// a matrix per recurrent layer, nothing for the others), the copy a checkpoint keeps, and the
// bytes a file keeps, refused when they are of another layout or damaged.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "model/recurrent_state.h"

using namespace edgellm;

namespace {

// Qwen3.5-like: layers 0-2 recurrent with a window and a matrix, layer 3 attention.
RecurrentLayout deltanet_like() {
    RecurrentLayout l;
    l.layers = {1, 1, 1, 0};
    l.conv_rows = 3;
    l.conv_channels = 40;
    l.heads = 2;
    l.head_k = 4;
    l.head_v = 5;
    return l;
}

void fill(RecurrentState& s, float base) {
    for (int64_t il = 0; il < 3; ++il) {
        for (int64_t i = 0; i < s.layout().conv_floats(); ++i) s.conv(il)[i] = base + (float)(il * 1000 + i);
        for (int64_t i = 0; i < s.layout().matrix_floats(); ++i) s.matrix(il)[i] = -base - (float)(il * 1000 + i);
    }
}

}  // namespace

TEST(RecurrentState, EachRecurrentLayerHasItsOwnWindowAndMatrix) {
    const RecurrentLayout l = deltanet_like();
    EXPECT_EQ(l.n_recurrent(), 3);
    EXPECT_EQ(l.bytes(), 3u * (3 * 40 + 2 * 4 * 5) * sizeof(float));
    RecurrentState s(l);
    EXPECT_EQ(s.bytes(), l.bytes());
    // every float of the state belongs to exactly one layer's window or matrix
    std::set<const float*> seen;
    for (int64_t il = 0; il < 3; ++il) {
        for (int64_t i = 0; i < l.conv_floats(); ++i) EXPECT_TRUE(seen.insert(s.conv(il) + i).second);
        for (int64_t i = 0; i < l.matrix_floats(); ++i) EXPECT_TRUE(seen.insert(s.matrix(il) + i).second);
    }
    EXPECT_EQ(seen.size(), s.floats().size());
    // a new state is the one before position 0
    for (float v : s.floats()) EXPECT_EQ(v, 0.0f);
    fill(s, 1.0f);
    s.clear();
    for (float v : s.floats()) EXPECT_EQ(v, 0.0f);
}

TEST(RecurrentState, AModelWithoutRecurrentLayersHasNone) {
    HParams h;
    h.n_layer = 4;
    EXPECT_EQ(recurrent_layout(h).bytes(), 0u);
    h.recurrent_layers = {1, 0, 1, 0};
    h.conv_kernel = 3;
    h.conv_channels = 16;
    const RecurrentLayout l = recurrent_layout(h);
    EXPECT_EQ(l.n_recurrent(), 2);
    EXPECT_EQ(l.conv_rows, 2);
    EXPECT_EQ(l.bytes(), 2u * 2 * 16 * sizeof(float));
    EXPECT_EQ(h.n_head_kv_at(0), 0);  // (a recurrent layer has no KV heads)
}

// A checkpoint: the floats copied out, the state going on, the copy put back.
TEST(RecurrentState, ACopyTakenAndPutBackRestoresEveryLayer) {
    RecurrentState s(deltanet_like());
    fill(s, 1.0f);
    std::vector<float> copy;
    s.save(&copy);
    const std::vector<float> before(s.floats().begin(), s.floats().end());
    fill(s, 7.0f);
    ASSERT_TRUE(s.load(copy));
    EXPECT_EQ(std::vector<float>(s.floats().begin(), s.floats().end()), before);
    // a copy of another size is refused and changes nothing
    copy.pop_back();
    fill(s, 7.0f);
    const std::vector<float> now(s.floats().begin(), s.floats().end());
    EXPECT_FALSE(s.load(copy));
    EXPECT_EQ(std::vector<float>(s.floats().begin(), s.floats().end()), now);
}

TEST(RecurrentState, SnapshotBytesRestoreOnlyIntoTheSameLayout) {
    RecurrentState s(deltanet_like());
    fill(s, 3.0f);
    std::vector<uint8_t> blob = {1, 2, 3};  // (appended after what is there)
    s.snapshot(&blob);
    ASSERT_EQ(blob.size(), 3 + s.snapshot_bytes());
    const std::span<const uint8_t> mine(blob.data() + 3, blob.size() - 3);
    RecurrentState t(deltanet_like());
    EXPECT_EQ(t.restore(mine), "");
    EXPECT_EQ(std::vector<float>(t.floats().begin(), t.floats().end()),
              std::vector<float>(s.floats().begin(), s.floats().end()));

    RecurrentLayout other = deltanet_like();
    other.conv_rows = 2;
    RecurrentState u(other);
    EXPECT_NE(u.restore(mine).find("different model"), std::string::npos);
    RecurrentState v(deltanet_like());
    fill(v, 5.0f);
    EXPECT_NE(v.restore(mine.first(mine.size() - 4)).find("too short"), std::string::npos);
    for (float x : v.floats()) EXPECT_EQ(x, 0.0f);  // (left as before position 0)
    std::vector<uint8_t> junk(mine.begin(), mine.end());
    junk[0] ^= 0xff;
    EXPECT_NE(v.restore(junk).find("not a saved recurrent state"), std::string::npos);
}
