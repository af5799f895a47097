#include "rankd/model/identity.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"
#include "rankd/model/safetensors.h"

namespace rankd::model {
namespace {

// The files read whole, where present.
constexpr const char* kWholeFiles[] = {"config.json",     "rankd.yaml",
                                       "tokenizer.json",  "tokenizer_config.json",
                                       "tokenizer.model", "model.safetensors.index.json"};

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// SHA-256 fed field by field, each with its length in front.
class Hasher {
 public:
  Hasher() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Add(const void* data, size_t size) {
    const uint64_t n = size;
    EVP_DigestUpdate(ctx_.get(), &n, sizeof(n));
    if (size > 0) EVP_DigestUpdate(ctx_.get(), data, size);
  }
  void Add(const std::string& s) { Add(s.data(), s.size()); }
  std::string Finish() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &size);
    return absl::BytesToHexString(
        absl::string_view(reinterpret_cast<const char*>(digest), 8));  // 16 hex digits
  }

 private:
  std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx_;
};

absl::Status ReadAt(int fd, const std::string& path, uint64_t offset, size_t size,
                    std::string* out) {
  out->resize(size);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, out->data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::DataLossError(absl::StrCat(
          path, ": cannot read ", size, " bytes at ", offset,
          n < 0 ? absl::StrCat(": ", std::strerror(errno)) : std::string(" (the file ends)")));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// A file open for reading, with its size.
class ReadOnlyFile {
 public:
  ~ReadOnlyFile() {
    if (fd_ >= 0) close(fd_);
  }
  absl::Status Open(const std::string& path) {
    fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    }
    struct stat st;
    if (fstat(fd_, &st) != 0) return absl::InternalError(absl::StrCat(path, ": fstat failed"));
    size_ = static_cast<uint64_t>(st.st_size);
    return absl::OkStatus();
  }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A .safetensors file's size, header and samples of its data.
absl::Status AddSafetensors(const std::string& path, Hasher* hash) {
  ReadOnlyFile file;
  RANKD_RETURN_IF_ERROR(file.Open(path));
  const int fd = file.fd();
  const uint64_t size = file.size();
  hash->Add(&size, sizeof(size));
  std::string bytes;
  RANKD_RETURN_IF_ERROR(ReadAt(fd, path, 0, 8, &bytes));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > kMaxSafetensorsHeaderBytes || header_len > size - 8) {
    return absl::DataLossError(
        absl::StrCat(path, ": header length ", header_len, " exceeds the file size ", size));
  }
  RANKD_RETURN_IF_ERROR(ReadAt(fd, path, 8, header_len, &bytes));
  hash->Add(bytes);
  const uint64_t data_begin = 8 + header_len, data_size = size - data_begin;
  const uint64_t sample = std::min<uint64_t>(kIdentitySampleBytes, data_size);
  for (int i = 0; i < kIdentitySamples && sample > 0; ++i) {
    const uint64_t at = data_begin + (data_size - sample) * i / (kIdentitySamples - 1);
    RANKD_RETURN_IF_ERROR(ReadAt(fd, path, at, sample, &bytes));
    hash->Add(bytes);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ModelIdentity(const std::string& dir) {
  Hasher hash;
  for (const char* name : kWholeFiles) {
    const std::string path = absl::StrCat(dir, "/", name);
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    ReadOnlyFile file;
    RANKD_RETURN_IF_ERROR(file.Open(path));
    std::string bytes;
    RANKD_RETURN_IF_ERROR(ReadAt(file.fd(), path, 0, static_cast<size_t>(file.size()), &bytes));
    hash.Add(std::string(name));
    hash.Add(bytes);
  }
  RANKD_ASSIGN_OR_RETURN(const std::vector<std::string> files, SafetensorsModel::FilePaths(dir));
  for (const std::string& path : files) {
    hash.Add(std::filesystem::path(path).filename().string());
    RANKD_RETURN_IF_ERROR(AddSafetensors(path, &hash));
  }
  return absl::StrCat("sha256:", hash.Finish());
}

}  // namespace rankd::model
