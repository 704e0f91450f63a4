// The Hopper attention backward's tile order (src/attention/attention_bwd_sm90_order.h), checked on the CPU against
// brute force: the tile ranges are exactly the meeting pairs, each query tile's dq contributions get ranks 0..k-1,
// a schedule of CTAs started in block order (a few resident at a time) always finishes: no wait is ever on a CTA
// that cannot run; and the work items cover every (pair, key tile) once, in the order each mode needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "attention/attention_bwd_sm90_order.h"

namespace {

using tigon::attention::sm90::BandTiles;
using tigon::attention::sm90::BwdItems;
using tigon::attention::sm90::BwdSegments;

std::vector<BandTiles> cases() {
  std::vector<BandTiles> out;
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < 400; ++i) {
    BandTiles t{};
    t.len_q = pick(0, 700);
    t.len_k = i % 3 == 0 ? t.len_q : pick(0, 700);
    t.shift = t.len_k - t.len_q;
    const int kind = i % 5;  // full, causal, sliding window, left window only, odd band
    t.left = kind == 2 || kind == 3 ? pick(0, 300) : (kind == 4 ? pick(0, 40) : -1);
    t.right = kind == 1 || kind == 2 ? 0 : (kind == 4 ? pick(0, 40) : -1);
    t.block_m = 64;
    t.block_n = 128;
    t.rotate = t.right < 0 && i % 2 == 0;
    out.push_back(t);
  }
  return out;
}

bool brute_meet(const BandTiles& t, int m, int n) {
  for (int i = m * t.block_m; i < std::min(t.len_q, (m + 1) * t.block_m); ++i)
    for (int j = n * t.block_n; j < std::min(t.len_k, (n + 1) * t.block_n); ++j)
      if (j >= t.first_key(i) && j < t.end_key(i)) return true;
  return false;
}

TEST(AttentionBwdOrder, RangesAreTheMeetingTiles) {
  for (const BandTiles& t : cases()) {
    for (int n = 0; n < t.n_tiles(); ++n) {
      int lo, hi;
      t.m_range(n, lo, hi);
      for (int m = 0; m < t.m_tiles(); ++m) {
        ASSERT_EQ(t.meet(m, n), m >= lo && m <= hi) << "m " << m << " n " << n << " len " << t.len_q << "/" << t.len_k;
        // meet() may keep a pair with no visible element (then fully masked), never drop one that has some
        if (brute_meet(t, m, n)) ASSERT_TRUE(t.meet(m, n)) << "m " << m << " n " << n;
      }
    }
    for (int m = 0; m < t.m_tiles(); ++m) {
      int lo, hi;
      t.n_range(m, lo, hi);
      for (int n = 0; n < t.n_tiles(); ++n) ASSERT_EQ(t.meet(m, n), n >= lo && n <= hi);
    }
  }
}

TEST(AttentionBwdOrder, RanksOfATileArePermutation) {
  for (const BandTiles& t : cases()) {
    for (int m = 0; m < t.m_tiles(); ++m) {
      int lo, hi;
      t.n_range(m, lo, hi);
      std::vector<int> ranks;
      for (int n = lo; n <= hi; ++n) ranks.push_back(t.rank(m, n, lo, hi));
      std::sort(ranks.begin(), ranks.end());
      for (int r = 0; r < int(ranks.size()); ++r) ASSERT_EQ(ranks[r], r) << "m " << m;
      if (t.rotate) continue;
      const BwdItems items{t.n_tiles(), 1, true, false, BwdSegments::of(t).split};  // a permutation per segment
      for (int seg : {0, 1}) {
        int slo = lo, shi = hi;
        items.clip(seg, slo, shi);
        ranks.clear();
        for (int n = slo; n <= shi; ++n) ranks.push_back(t.rank(m, n, slo, shi));
        std::sort(ranks.begin(), ranks.end());
        for (int r = 0; r < int(ranks.size()); ++r) ASSERT_EQ(ranks[r], r) << "m " << m << " segment " << seg;
      }
    }
  }
}

// One pair's CTAs start in the ordered items' order (key tiles n_tiles - 1 down to 0; segmented, each segment so), at
// most `slots` at once; each walks its query tiles and may add to tile m only when all contributions ranked before
// it in its segment are in.
bool schedule_finishes(const BandTiles& t, int slots, bool segmented) {
  const int N = t.n_tiles();
  const BwdItems items{N, 1, true, t.rotate, segmented ? BwdSegments::of(t).split : 0};
  std::vector<int> added(2 * t.m_tiles(), 0), step(N, 0), lo(N), hi(N), begin(N);
  for (int n = 0; n < N; ++n) {
    t.m_range(n, lo[n], hi[n]);
    begin[n] = t.m_begin(n, lo[n], hi[n]);
  }
  int next = 0, done = 0;
  std::vector<int> resident;
  while (done < N) {
    while (int(resident.size()) < slots && next < N) {
      int pair, n;
      items.at(next++, pair, n);
      resident.push_back(n);
    }
    bool progress = false;
    for (size_t r = 0; r < resident.size();) {
      const int n = resident[r], steps = std::max(0, hi[n] - lo[n] + 1);
      if (step[n] < steps) {
        const int m = BandTiles::walk(step[n], begin[n], lo[n], hi[n]);
        int nlo, nhi;
        t.n_range(m, nlo, nhi);
        const int seg = items.segment(n);
        items.clip(seg, nlo, nhi);
        int& in = added[seg * t.m_tiles() + m];
        if (in == t.rank(m, n, nlo, nhi)) ++in, ++step[n], progress = true;
      }
      if (step[n] >= steps) {
        resident.erase(resident.begin() + r), ++done, progress = true;
      } else {
        ++r;
      }
    }
    if (!progress) return false;
  }
  return true;
}

TEST(AttentionBwdOrder, CTAsStartedInBlockOrderAlwaysFinish) {
  for (const BandTiles& t : cases()) {
    // rotated walks need the whole pair resident (the launcher only rotates then); others any number of slots
    for (int slots : t.rotate ? std::vector<int>{std::max(1, t.n_tiles())} : std::vector<int>{1, 2, 3, 16})
      for (bool segmented : t.rotate ? std::vector<bool>{false} : std::vector<bool>{false, true})
        ASSERT_TRUE(schedule_finishes(t, slots, segmented))
            << "len " << t.len_q << "/" << t.len_k << " left " << t.left << " right " << t.right << " slots " << slots
            << " segmented " << segmented;
  }
}

TEST(AttentionBwdOrder, ItemsCoverEveryKeyTileOnceInTheirModesOrder) {
  for (bool ordered : {true, false}) {
    for (int n_blocks : {1, 3, 32}) {
      for (int pairs : {1, 5, 64}) {
        const BwdItems items{n_blocks, pairs, ordered, false};
        ASSERT_EQ(items.count(), int64_t(n_blocks) * pairs);
        std::vector<int> seen(size_t(n_blocks) * pairs, 0);
        std::vector<int> last_n(pairs, -1);
        int last_pair = -1, prev_n = -1;
        for (int64_t item = 0; item < items.count(); ++item) {
          int pair = -1, n = -1;
          items.at(item, pair, n);
          ASSERT_TRUE(pair >= 0 && pair < pairs && n >= 0 && n < n_blocks);
          ++seen[size_t(pair) * n_blocks + n];
          if (ordered) {  // pairs one after the other, each from its last key tile down (the waits' order)
            ASSERT_GE(pair, last_pair);
            if (pair == last_pair) ASSERT_EQ(n, prev_n - 1);
            if (pair != last_pair) ASSERT_EQ(n, n_blocks - 1);
          } else {  // key tile 0 of every pair first (the longest causal walks start first)
            ASSERT_GE(n, prev_n);
            ASSERT_GT(n, last_n[pair]);
          }
          last_pair = pair, prev_n = n, last_n[pair] = n;
        }
        for (int c : seen) ASSERT_EQ(c, 1);
      }
    }
  }
}

// Segmented: segment 0 (key tiles [0, split)) of every pair, then segment 1, each pair's key tiles of a segment from
// its last down.
TEST(AttentionBwdOrder, SegmentedItemsLaunchTheFirstSegmentFirst) {
  for (int n_blocks : {1, 2, 3, 4, 32, 33}) {
    for (int pairs : {1, 5, 64}) {
      const int want = n_blocks - n_blocks / 4;
      const BwdItems items{n_blocks, pairs, true, false, want};
      const int split = items.split();
      ASSERT_EQ(split, want);
      std::vector<int> seen(size_t(n_blocks) * pairs, 0);
      int last_seg = 0, last_pair = -1, prev_n = -1;
      for (int64_t item = 0; item < items.count(); ++item) {
        int pair = -1, n = -1;
        items.at(item, pair, n);
        ASSERT_TRUE(pair >= 0 && pair < pairs && n >= 0 && n < n_blocks);
        ++seen[size_t(pair) * n_blocks + n];
        const int seg = items.segment(n);
        ASSERT_GE(seg, last_seg);
        if (seg != last_seg) last_pair = -1;
        const int end = seg == 0 ? split : n_blocks;
        ASSERT_GE(pair, last_pair);
        ASSERT_EQ(n, pair == last_pair ? prev_n - 1 : end - 1);
        last_seg = seg, last_pair = pair, prev_n = n;
      }
      for (int c : seen) ASSERT_EQ(c, 1);
      for (int n = 0; n < n_blocks; ++n) {  // clip keeps a range's part in n's segment
        int lo = 0, hi = n_blocks - 1;
        items.clip(items.segment(n), lo, hi);
        ASSERT_TRUE(n >= lo && n <= hi && items.segment(lo) == items.segment(n) &&
                    items.segment(hi) == items.segment(n));
      }
    }
  }
}

// The second segment's accumulator holds query tiles [m1, m_tiles): every tile its key tiles meet.
TEST(AttentionBwdOrder, SecondSegmentMeetsOnlyItsAccumulatorsTiles) {
  int segmented = 0;
  for (const BandTiles& t : cases()) {
    if (t.rotate) continue;
    const BwdSegments g = BwdSegments::of(t);
    if (g.split == 0) continue;
    ++segmented;
    ASSERT_EQ(g.tiles1, t.m_tiles() - g.m1);
    ASSERT_TRUE(g.split > 0 && g.split < t.n_tiles() && g.m1 >= 0 && g.m1 < t.m_tiles());
    for (int n = g.split; n < t.n_tiles(); ++n)
      for (int m = 0; m < t.m_tiles(); ++m)
        if (t.meet(m, n)) ASSERT_GE(m, g.m1) << "n " << n << " len " << t.len_q << "/" << t.len_k;
  }
  ASSERT_GT(segmented, 50);
}

}  // namespace
