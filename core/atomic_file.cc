#include "core/atomic_file.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace alpasim::core {
namespace {

Status write_error(const std::filesystem::path& path, int err) {
  return invalid_argument(path.string() + ": cannot write file: " + std::strerror(err));
}

// Writes all of `data` to `fd`; errno-style code, 0 on success.
int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

}  // namespace

Status write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  const std::filesystem::path dir =
      path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  // mkstemp: a fresh name in the same folder (same file system, so rename is atomic).
  std::string temp = (dir / ("." + path.filename().string() + ".tmp.XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) return write_error(path, errno);
  (void)::fchmod(fd, 0644);  // mkstemp makes 0600; outputs are ordinary files
  int err = write_all(fd, contents);
  if (err == 0) {
    const char* fail = std::getenv("ALPASIM_TEST_FAIL_WRITE");
    if (fail != nullptr && path.filename() == fail) err = ENOSPC;
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(temp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(temp.c_str());
    return write_error(path, err);
  }
  // Make the rename itself durable.
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return Status();
}

}  // namespace alpasim::core
