// Which (query tile, key tile) pairs the Hopper attention backward visits, in which order each key-tile CTA walks its
// query tiles, and in which order the CTAs add their dq contributions to one query tile. Host and device code: the
// launcher and the tests use the same functions as the kernel.
//
// A CTA owns key tile n (kBlockN keys) of one sequence and walks the query tiles m (kBlockM rows) that meet it. Every
// contribution to dq of tile m is added in a fixed order, the same on every run, so dq is bitwise reproducible. The
// order is the one in which the CTAs reach tile m when they all start at once: CTA n starts its walk at m_begin(n)
// (the query tile on its diagonal when rotating, else its first tile) and wraps around, so tile m is reached first by
// the CTAs whose walk starts at or before m, highest n first, then by those that wrapped, highest n first. Causal
// masks put m_begin(n) at the first tile already: no wrap, and tile m is reached by n_hi(m), n_hi(m) - 1, ... in turn.
// Segmented (BwdItems), the key tiles of a pair form two segments with their own dq accumulator, each ranked apart.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TIGON_HD __host__ __device__ __forceinline__
#else
#define TIGON_HD inline
#endif

namespace tigon::attention::sm90 {

// One sequence's mask (include/tigon/attention.h): key j is visible from query row i when j < len_k,
// j <= i + shift + right (right >= 0) and j >= i + shift - left (left >= 0), with shift = len_k - len_q.
struct BandTiles {
  int len_q, len_k, shift, left, right;
  int block_m, block_n;
  bool rotate;  // walks start on the diagonal (non-causal masks with few enough key tiles to be resident at once)

  TIGON_HD int first_key(int i) const { return left >= 0 ? (i + shift - left > 0 ? i + shift - left : 0) : 0; }
  TIGON_HD int end_key(int i) const {
    if (right < 0) return len_k;
    const int64_t e = int64_t(i) + shift + right + 1;
    return e < len_k ? int(e) : len_k;
  }
  TIGON_HD int m_tiles() const { return (len_q + block_m - 1) / block_m; }
  TIGON_HD int n_tiles() const { return (len_k + block_n - 1) / block_n; }
  TIGON_HD int last_row(int m) const {
    return m * block_m + block_m - 1 < len_q ? m * block_m + block_m - 1 : len_q - 1;
  }
  TIGON_HD int last_key(int n) const {
    return n * block_n + block_n - 1 < len_k ? n * block_n + block_n - 1 : len_k - 1;
  }

  // Query tile m and key tile n hold a visible pair (tiles inside both lengths): some key of n is below the last
  // row's end and some key of n is at or past the first row's start. Monotone in each argument, so the tiles one
  // tile meets are a contiguous range.
  TIGON_HD bool reaches_end(int m, int n) const { return n * block_n < end_key(last_row(m)); }       // n: T..F, m: F..T
  TIGON_HD bool reaches_start(int m, int n) const { return last_key(n) >= first_key(m * block_m); }  // n: F..T, m: T..F
  TIGON_HD bool meet(int m, int n) const {
    return m >= 0 && m < m_tiles() && n >= 0 && n < n_tiles() && reaches_end(m, n) && reaches_start(m, n);
  }

  // The query tiles [lo, hi] that key tile n meets (hi < lo: none), by binary search on the two monotone halves.
  TIGON_HD void m_range(int n, int& lo, int& hi) const {
    int a = 0, b = m_tiles();  // first m with reaches_end
    while (a < b) {
      const int mid = (a + b) / 2;
      if (reaches_end(mid, n))
        b = mid;
      else
        a = mid + 1;
    }
    lo = a;
    a = -1, b = m_tiles() - 1;  // last m with reaches_start
    while (a < b) {
      const int mid = (a + b + 1) / 2;
      if (reaches_start(mid, n))
        a = mid;
      else
        b = mid - 1;
    }
    hi = a;
  }
  // The key tiles [lo, hi] that query tile m meets (hi < lo: none).
  TIGON_HD void n_range(int m, int& lo, int& hi) const {
    int a = 0, b = n_tiles();  // first n with reaches_start
    while (a < b) {
      const int mid = (a + b) / 2;
      if (reaches_start(m, mid))
        b = mid;
      else
        a = mid + 1;
    }
    lo = a;
    a = -1, b = n_tiles() - 1;  // last n with reaches_end
    while (a < b) {
      const int mid = (a + b + 1) / 2;
      if (reaches_end(m, mid))
        a = mid;
      else
        b = mid - 1;
    }
    hi = a;
  }

  // Where key tile n's walk over [lo, hi] starts: the query tile holding row block_n * n - shift (the diagonal)
  // when rotating, clamped into the range; else lo. Nondecreasing in n.
  TIGON_HD int m_begin(int n, int lo, int hi) const {
    if (!rotate) return lo;
    const int64_t row = int64_t(n) * block_n - shift;
    const int diag = row <= 0 ? 0 : int(row / block_m);
    return diag < lo ? lo : (diag > hi ? hi : diag);
  }
  TIGON_HD int m_begin(int n) const {
    int lo, hi;
    m_range(n, lo, hi);
    return m_begin(n, lo, hi);
  }
  // The step'th query tile of key tile n's walk (step < hi - lo + 1).
  TIGON_HD static int walk(int step, int begin, int lo, int hi) {
    const int m = begin + step;
    return m <= hi ? m : m - (hi - lo + 1);
  }

  // Key tile n's place among the contributions to query tile m's dq (0: first), for n in m's range [lo, hi]: the
  // tiles whose walk starts at or before m (a prefix [lo, split] of the range), highest first, then the others,
  // highest first.
  TIGON_HD int rank(int m, int n, int lo, int hi) const {
    int split = hi;
    if (rotate) {  // last n in [lo, hi] with m_begin(n) <= m
      int a = lo - 1, b = hi;
      while (a < b) {
        const int mid = (a + b + 1) / 2;
        if (m_begin(mid) <= m)
          a = mid;
        else
          b = mid - 1;
      }
      split = a;
    }
    return n <= split ? split - n : (split - lo + 1) + (hi - n);
  }
};

// The deterministic mode's two segments of a band's key tiles that does not rotate: key tiles [0, split) and
// [split, n_tiles) add to dq apart, each in its own order and accumulator. The second segment's key tiles meet only
// query tiles [m1, m_tiles), so its accumulator holds tiles1 = m_tiles - m1 per (query head, sequence), about a
// quarter of the first's. The last quarter of the key tiles (the shortest causal walks) goes last: a split at half
// leaves the longest walks of the first segment to end alone more often (a schedule model of causal shapes, 2k to
// 16k: 2% over the ideal at 3/4, 4% at 1/2, 8% with one segment).
struct BwdSegments {
  int split = 0;  // 0: one segment
  int m1 = 0;
  int64_t tiles1 = 0;

  static BwdSegments of(const BandTiles& t) {
    const int n_tiles = t.n_tiles(), split = n_tiles - n_tiles / 4;
    if (split >= n_tiles) return {};
    int lo, hi;
    t.m_range(split, lo, hi);  // the lowest query tile of any key tile past the split (lo grows with n)
    if (lo > hi || lo >= t.m_tiles()) return {};
    return {split, lo, t.m_tiles() - lo};
  }
};

// The backward's work items, one CTA each, per (key tile, key/value head, sequence), in block order (blocks start
// in this order):
//   ordered (deterministic dq): (key/value head, sequence) pairs one after the other, each pair's key tiles from the
//     last down, so that a CTA waits only for CTAs that started before it (and, when rotating, for the rest of its
//     pair, all resident at once). Causal walks are then longest at the end of the launch: the last pair's key tile
//     0 starts last and runs alone. Segmented, the first segment of every pair's key tiles (the long walks) comes
//     first, each pair's from the last down, then the second segment the same way: the last wave is short walks,
//     and a CTA still waits only for its segment's higher key tiles, which started before it;
//   unordered (dq added in any order): nothing waits; key tile 0 of every pair first, then key tile 1, ... (causal
//     walks are longest for the first key tiles, so the longest items start first and the last wave is short ones).
struct BwdItems {
  int n_blocks, pairs;
  bool ordered, rotate;
  int segment_split = 0;  // ordered, not rotating: key tiles [0, split) and [split, n_blocks) order dq apart; 0: none

  TIGON_HD int64_t count() const { return int64_t(n_blocks) * pairs; }
  TIGON_HD int split() const { return segment_split > 0 && segment_split < n_blocks ? segment_split : n_blocks; }
  TIGON_HD int segment(int n) const { return n >= split() ? 1 : 0; }
  // A query tile's key tiles [lo, hi] narrowed to those of segment seg (the contributions ranked together).
  TIGON_HD void clip(int seg, int& lo, int& hi) const {
    const int s = split();
    if (seg == 0 && hi >= s) hi = s - 1;
    if (seg == 1 && lo < s) lo = s;
  }
  TIGON_HD void at(int64_t item, int& pair, int& n) const {
    if (ordered) {  // segment 0 of every pair, then segment 1 of every pair
      const int s = split();
      const int64_t first = int64_t(s) * pairs;
      const int64_t i = item < first ? item : item - first;
      const int len = item < first ? s : n_blocks - s, end = item < first ? s : n_blocks;
      pair = int(i / len);
      n = end - 1 - int(i - int64_t(pair) * len);
    } else {
      n = int(item / pairs);
      pair = int(item - int64_t(n) * pairs);
    }
  }
};

}  // namespace tigon::attention::sm90

#undef TIGON_HD
