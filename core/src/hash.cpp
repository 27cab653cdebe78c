#include "kevolve/core/hash.h"

#include <openssl/evp.h>

#include <array>
#include <stdexcept>

namespace kevolve {

std::string Sha256Hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("EVP_Digest(sha256) failed");
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

}  // namespace kevolve
