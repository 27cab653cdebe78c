#include "kevolve/engine/archive.h"

#include <algorithm>

namespace kevolve {

namespace {

bool Better(const Member& a, const Member& b) {
  if (a.fitness != b.fitness) return a.fitness > b.fitness;
  return a.id < b.id;
}

}  // namespace

void Archive::Insert(std::vector<Member>* elites, const Member& m, size_t cap) {
  for (const auto& e : *elites)
    if (e.id == m.id) return;
  auto it = std::lower_bound(elites->begin(), elites->end(), m, Better);
  elites->insert(it, m);
  if (elites->size() > cap) elites->pop_back();
}

void Archive::Add(const Member& m) {
  Insert(&elites_[static_cast<size_t>(m.island) % elites_.size()], m, elite_);
  auto it = cells_.find(m.cell);
  if (it == cells_.end() || Better(m, it->second)) cells_[m.cell] = m;
  for (const auto& [shape, us] : m.times) {
    auto c = champions_.find(shape);
    if (c == champions_.end() || us < c->second.times.at(shape) ||
        (us == c->second.times.at(shape) && m.id < c->second.id))
      champions_[shape] = m;
  }
}

void Archive::Migrate(int migrants) {
  if (islands_ < 2) return;
  std::vector<std::vector<Member>> moving(islands_);
  for (int i = 0; i < islands_; ++i)
    for (int k = 0; k < migrants && k < static_cast<int>(elites_[i].size()); ++k) moving[i].push_back(elites_[i][k]);
  for (int i = 0; i < islands_; ++i) {
    int to = (i + 1) % islands_;
    for (Member m : moving[i]) {
      m.island = to;
      Insert(&elites_[to], m, elite_);
    }
  }
}

const Member* Archive::Tournament(int island, int k, std::mt19937_64& rng) const {
  const auto& e = elites_[static_cast<size_t>(island) % elites_.size()];
  if (e.empty()) return nullptr;
  const Member* best = nullptr;
  for (int i = 0; i < k; ++i) {
    const Member* c = &e[std::uniform_int_distribution<size_t>(0, e.size() - 1)(rng)];
    if (!best || Better(*c, *best)) best = c;
  }
  return best;
}

const Member* Archive::RandomCell(std::mt19937_64& rng) const {
  if (cells_.empty()) return nullptr;
  auto it = cells_.begin();
  std::advance(it, std::uniform_int_distribution<size_t>(0, cells_.size() - 1)(rng));
  return &it->second;
}

const Member* Archive::ShapeChampion(std::mt19937_64& rng) const {
  if (champions_.empty()) return nullptr;
  auto it = champions_.begin();
  std::advance(it, std::uniform_int_distribution<size_t>(0, champions_.size() - 1)(rng));
  return &it->second;
}

const Member* Archive::Partner(const Member& m, std::mt19937_64& rng) const {
  std::vector<const Member*> same;
  for (const auto& [key, c] : cells_)
    if (c.id != m.id && c.source->text == m.source->text) same.push_back(&c);
  for (const auto& isl : elites_)
    for (const auto& c : isl)
      if (c.id != m.id && c.source->text == m.source->text) same.push_back(&c);
  if (same.empty()) return nullptr;
  return same[std::uniform_int_distribution<size_t>(0, same.size() - 1)(rng)];
}

const Member* Archive::Best() const {
  const Member* best = nullptr;
  for (const auto& [key, c] : cells_)
    if (!best || Better(c, *best)) best = &c;
  return best;
}

std::string CellKey(const std::string& source_name, int64_t threads, int registers, int64_t smem_bytes,
                    const Assignment& params) {
  int tlog = 0;
  while ((int64_t{1} << (tlog + 1)) <= threads) ++tlog;
  std::string key = source_name + "|t" + std::to_string(tlog) + "|r" + std::to_string(registers / 32) + "|s" +
                    std::to_string(smem_bytes / 16384);
  if (auto it = params.find("VEC"); it != params.end()) key += "|v" + std::to_string(it->second);
  return key;
}

}  // namespace kevolve
