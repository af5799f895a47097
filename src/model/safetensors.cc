#include "rankd/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "rankd/common/status.h"

namespace rankd::model {
namespace {

using Json = nlohmann::json;

absl::StatusOr<DType> ParseDType(absl::string_view s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  return absl::UnimplementedError(
      absl::StrCat("dtype ", s, " is not supported (F32, F16, BF16, F8_E4M3)"));
}

}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::map<std::string, TensorView>> SafetensorsFile::ParseImage(
    absl::Span<const uint8_t> bytes, absl::string_view source) {
  if (bytes.size() < 8) {
    return absl::DataLossError(
        absl::StrCat(source, ": truncated (", bytes.size(), " bytes, no 8-byte header length)"));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian, as are all supported hosts
  if (header_len > kMaxSafetensorsHeaderBytes || header_len > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat(source, ": header length ", header_len,
                                            " exceeds the file size ", bytes.size()));
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  Json header = Json::parse(header_begin, header_begin + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::DataLossError(absl::StrCat(source, ": header is not a JSON object"));
  }
  const uint8_t* data = bytes.data() + 8 + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;

  std::map<std::string, TensorView> tensors;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = absl::StrCat(source, ": tensor '", name, "'");
    if (!info.is_object())
      return absl::DataLossError(absl::StrCat(where, ": entry is not an object"));
    auto dt = info.find("dtype");
    auto sh = info.find("shape");
    auto off = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string() || sh == info.end() || !sh->is_array() ||
        off == info.end() || !off->is_array() || off->size() != 2) {
      return absl::DataLossError(
          absl::StrCat(where, ": needs dtype (string), shape (list), data_offsets ([begin, end])"));
    }
    TensorView t;
    t.name = name;
    auto dtype = ParseDType(dt->get<std::string>());
    if (!dtype.ok()) return Annotate(dtype.status(), where);
    t.dtype = *dtype;
    uint64_t numel = 1;
    for (const Json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) {
        return absl::DataLossError(absl::StrCat(where, ": shape has a bad dimension"));
      }
      t.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      if (numel > (1ull << 40))
        return absl::DataLossError(absl::StrCat(where, ": shape too large"));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      return absl::DataLossError(absl::StrCat(where, ": data_offsets must be unsigned integers"));
    }
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return absl::DataLossError(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                              ") lie outside the data section of ", data_size,
                                              " bytes (truncated file?)"));
    }
    if (end - begin != numel * DTypeSize(t.dtype)) {
      return absl::DataLossError(absl::StrCat(where, ": ", end - begin, " bytes for ",
                                              DTypeName(t.dtype), " ", t.ShapeString(),
                                              " (expected ", numel * DTypeSize(t.dtype), ")"));
    }
    t.data = data + begin;
    t.nbytes = end - begin;
    tensors.emplace(name, std::move(t));
  }
  return tensors;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat failed: ", std::strerror(errno)));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_size_ = static_cast<size_t>(st.st_size);
  if (file->map_size_ > 0) {
    void* m = ::mmap(nullptr, file->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
    file->map_ = m;
  }
  ::close(fd);
  RANKD_ASSIGN_OR_RETURN(
      file->tensors_,
      ParseImage(absl::MakeConstSpan(static_cast<const uint8_t*>(file->map_), file->map_size_),
                 path));
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

absl::StatusOr<std::vector<std::string>> SafetensorsModel::FilePaths(absl::string_view dir) {
  const std::string single = absl::StrCat(dir, "/model.safetensors");
  const std::string index_path = absl::StrCat(dir, "/model.safetensors.index.json");
  std::vector<std::string> shard_paths;
  if (std::filesystem::exists(index_path)) {
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    Json index = Json::parse(ss.str(), nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::DataLossError(absl::StrCat(index_path, ": needs an object 'weight_map'"));
    }
    std::set<std::string> shards;
    for (auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::DataLossError(
            absl::StrCat(index_path, ": weight_map['", name, "'] must be a file name in ", dir));
      }
      shards.insert(file.get<std::string>());
    }
    for (const auto& s : shards) shard_paths.push_back(absl::StrCat(dir, "/", s));
  } else if (std::filesystem::exists(single)) {
    shard_paths.push_back(single);
  } else {
    return absl::NotFoundError(absl::StrCat(dir, ": neither model.safetensors nor ",
                                            "model.safetensors.index.json found"));
  }
  return shard_paths;
}

absl::StatusOr<std::unique_ptr<SafetensorsModel>> SafetensorsModel::OpenDir(absl::string_view dir) {
  auto model = std::make_unique<SafetensorsModel>();
  model->dir_ = std::string(dir);
  RANKD_ASSIGN_OR_RETURN(const std::vector<std::string> shard_paths, FilePaths(dir));
  for (const auto& p : shard_paths) {
    RANKD_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
    for (const auto& [name, view] : file->tensors()) {
      if (!model->index_.emplace(name, &view).second) {
        return absl::DataLossError(absl::StrCat(p, ": tensor '", name, "' also in another shard"));
      }
    }
    model->files_.push_back(std::move(file));
  }
  return model;
}

absl::StatusOr<const TensorView*> SafetensorsModel::Find(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": tensor '", name, "' not found"));
  }
  return it->second;
}

bool SafetensorsModel::Has(absl::string_view name) const {
  return index_.find(name) != index_.end();
}

absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel * DTypeSize(t.dtype) != t.nbytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", t.name, "' has ", t.nbytes, " bytes for its shape"));
    }
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) {
    out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.nbytes));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed (disk full?)"));
  return absl::OkStatus();
}

float Bf16ToF32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float F8E4M3ToF32(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xf;
  const int mant = v & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  // Bias 7; exponent 0 holds the subnormals mant * 2^-9.
  return exp == 0 ? sign * std::ldexp(static_cast<float>(mant), -9)
                  : sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

uint16_t F32ToBf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

absl::Status ConvertToF32(const TensorView& t, absl::Span<float> out) {
  if (static_cast<int64_t>(out.size()) != t.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "': ", t.numel(),
                                                   " elements, destination holds ", out.size()));
  }
  const size_t n = out.size();
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), t.data, n * 4);
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = Bf16ToF32(v);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = F16ToF32(v);
      }
      break;
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = F8E4M3ToF32(t.data[i]);
      break;
  }
  return absl::OkStatus();
}

}  // namespace rankd::model
