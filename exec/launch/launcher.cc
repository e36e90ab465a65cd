#include "exec/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>

#include "core/text.h"

namespace alpasim::exec::launch {
namespace {

/// Kills and reaps every child still running (pid > 0), with its whole process group (each
/// child leads its own), so a wrapper script's own children die too.
void kill_all(std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (p > 0) {
      ::kill(-p, SIGKILL);
      ::kill(p, SIGKILL);  // in case it had not yet made its group
    }
  }
  for (pid_t& p : pids) {
    if (p > 0) {
      int status = 0;
      while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
      }
      p = -1;
    }
  }
}

std::string with_log(const std::string& msg, const std::string& log_path) {
  const std::string tail = tail_of_file(log_path, 8);
  if (tail.empty()) return msg;
  return msg + "; last lines of " + log_path + ":\n" + tail;
}

}  // namespace

std::string tail_of_file(const std::string& path, int max_lines) {
  std::ifstream f(path);
  if (!f) return "";
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(f, line)) {
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > max_lines) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

core::Result<std::vector<std::string>> own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  if (!f) return core::unavailable("/proc/self/cmdline: cannot read (the launcher needs Linux /proc)");
  std::ostringstream s;
  s << f.rdbuf();
  const std::string raw = s.str();
  std::vector<std::string> argv;
  std::size_t start = 0;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\0') {
      argv.push_back(raw.substr(start, i - start));
      start = i + 1;
    }
  }
  if (start < raw.size()) argv.push_back(raw.substr(start));
  if (argv.empty()) return core::unavailable("/proc/self/cmdline: empty");
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return core::unavailable(std::string("/proc/self/exe: cannot read the link (") + std::strerror(errno) + ")");
  argv[0] = std::string(exe, static_cast<std::size_t>(n));
  return argv;
}

core::Status run_children(const std::vector<ChildSpec>& children, double timeout_s, double interval_s, Clock& clock) {
  std::vector<pid_t> pids(children.size(), -1);
  for (std::size_t r = 0; r < children.size(); ++r) {
    const ChildSpec& c = children[r];
    if (c.argv.empty()) {
      kill_all(pids);
      return core::invalid_argument("rank " + std::to_string(r) + ": expected a command line, got none");
    }
    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (!c.env.count(key)) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : c.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (const auto& a : c.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int log = ::open(c.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) {
      kill_all(pids);
      return core::unavailable(c.log_path + ": cannot create the log of rank " + std::to_string(r) + " (" +
                               std::strerror(errno) + ")");
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(log);
      kill_all(pids);
      return core::unavailable(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      // Its own group means no terminal Ctrl-C: die with the launcher instead (any cause,
      // kept across execve), and at once if the launcher is already gone.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::dup2(log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      static const char msg[] = "alpa-exec launcher: execve failed\n";
      const ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here: no window where a kill of the group misses it
    ::close(log);
    pids[r] = pid;
  }
  const double deadline = clock.now_s() + timeout_s;
  std::size_t running = children.size();
  while (running > 0) {
    for (std::size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got == 0) continue;
      const pid_t pid = pids[r];
      pids[r] = -1;
      --running;
      if (got < 0) {
        kill_all(pids);
        return core::internal_error("rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                                    "): waitpid failed (" + std::strerror(errno) + ")");
      }
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      std::string what = "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") ";
      if (WIFEXITED(status)) {
        what += "exited with status " + std::to_string(WEXITSTATUS(status));
      } else if (WIFSIGNALED(status)) {
        what += "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
      } else {
        what += "stopped abnormally";
      }
      std::string others;
      for (std::size_t k = 0; k < pids.size(); ++k) {
        if (pids[k] > 0) others += (others.empty() ? "" : ", ") + std::to_string(k);
      }
      kill_all(pids);
      if (!others.empty()) what += "; killed ranks " + others;
      return core::internal_error(with_log(what, children[r].log_path));
    }
    if (running == 0) break;
    if (clock.now_s() >= deadline) {
      std::string still;
      for (std::size_t k = 0; k < pids.size(); ++k) {
        if (pids[k] > 0) still += (still.empty() ? "" : ", ") + std::to_string(k);
      }
      kill_all(pids);
      return core::unavailable("ranks " + still + " still running after " + core::format_fixed(timeout_s, 1) +
                               " s: killed them all");
    }
    clock.sleep_s(interval_s);
  }
  return core::ok_status();
}

}  // namespace alpasim::exec::launch
