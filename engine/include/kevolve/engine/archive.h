// The search's memory of good candidates: one elite set per island (the best few by
// fitness), a MAP-Elites grid over kernel features (source, threads per block,
// registers, shared memory, vector width), which keeps structurally different kernels
// alive even when one family dominates fitness, and each tune shape's champion (the
// smallest median there), which a per-shape dispatch table would pick. Only candidates
// that passed every rung enter it, so only they become parents.
#pragma once

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kevolve/core/candidate.h"

namespace kevolve {

struct Member {
  int64_t id = 0;
  std::shared_ptr<const CandidateSource> source;
  Assignment params;
  double fitness = 0;
  int island = 0;
  int generation = 0;
  std::string cell;  // MAP-Elites cell key
  std::map<std::string, double> times;  // median (us) per tune shape
};

class Archive {
 public:
  Archive(int islands, int elite_per_island) : islands_(islands), elite_(elite_per_island), elites_(islands) {}

  // Adds m to its island's elites (keeping the best elite_per_island), to its cell
  // (keeping the better) and, for each shape in m.times, as that shape's champion when
  // its median is smaller. Ties keep the earlier member (lower id): deterministic.
  void Add(const Member& m);
  // Ring migration: island i's best `migrants` join island (i+1) % islands.
  void Migrate(int migrants);

  // Tournament of size k among the island's elites; nullptr when the island is empty.
  const Member* Tournament(int island, int k, std::mt19937_64& rng) const;
  // A uniformly random occupied cell's elite; nullptr when empty.
  const Member* RandomCell(std::mt19937_64& rng) const;
  // The champion of a uniformly random tune shape; nullptr when no member has times.
  const Member* ShapeChampion(std::mt19937_64& rng) const;
  // Another member with the same source text as m (for crossover); nullptr if none.
  const Member* Partner(const Member& m, std::mt19937_64& rng) const;
  const Member* Best() const;

  size_t size() const { return cells_.size(); }
  bool empty() const { return cells_.empty(); }
  int islands() const { return islands_; }
  const std::vector<Member>& island(int i) const { return elites_[i]; }
  const std::map<std::string, Member>& cells() const { return cells_; }
  const std::map<std::string, Member>& champions() const { return champions_; }  // shape -> member

 private:
  static void Insert(std::vector<Member>* elites, const Member& m, size_t cap);
  int islands_;
  size_t elite_;
  std::vector<std::vector<Member>> elites_;  // per island, best first
  std::map<std::string, Member> cells_;
  std::map<std::string, Member> champions_;
};

// The MAP-Elites cell of a candidate: its source, log2 of threads per block, registers
// in steps of 32, shared memory in steps of 16 KiB, and its VEC parameter when it has one.
std::string CellKey(const std::string& source_name, int64_t threads, int registers, int64_t smem_bytes,
                    const Assignment& params);

}  // namespace kevolve
