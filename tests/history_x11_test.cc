// `ultrafast history` end to end under a real X server: Xvfb, the openbox window manager and
// xdotool (tools/dev.sh test installs them). Two windows are opened, switched between, typed
// into and clicked; the recorder's events, summaries, block list, file modes, sockets (nothing
// but the X connection) and its survival of the X server going away are checked. Skipped, with
// the reason, only where no X server can be started.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "history/segment_store.h"
#include "history_test_util.h"
#include "shared_data.h"

#ifdef UF_HAVE_XCB
#include <xcb/xcb.h>
#endif

namespace uf::history {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

using history_testing::AllText;
using history_testing::Slurp;

bool OnPath(const std::string& tool) {
  return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0;
}

// Starts argv with DISPLAY=display, output to log.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& display,
            const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!display.empty()) ::setenv("DISPLAY", display.c_str(), 1);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

void Stop(pid_t* pid, int sig = SIGTERM) {
  if (*pid <= 0) return;
  ::kill(*pid, sig);
  int status = 0;
  ::waitpid(*pid, &status, 0);
  *pid = -1;
}

// Exit status of a process, waiting up to timeout; -1 if it did not end (it is then killed).
int WaitFor(pid_t* pid, double timeout_s) {
  for (int i = 0; i < timeout_s * 100; ++i) {
    int status = 0;
    if (::waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  Stop(pid, SIGKILL);
  return -1;
}

// Inodes of the sockets in /proc/net/<table> (tcp, udp, unix, ...).
std::set<std::string> SocketInodes(const std::string& table) {
  std::set<std::string> out;
  std::ifstream in("/proc/net/" + table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    // unix: inode is the 7th field; tcp/udp: the 10th.
    const size_t at = table == "unix" ? 6 : 9;
    if (f.size() > at) out.insert(f[at]);
  }
  return out;
}

#ifdef UF_HAVE_XCB

class HistoryX11Test : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
    if (!fs::exists(binary_)) GTEST_SKIP() << "ultrafast binary not built at " << binary_;
    for (const char* tool : {"Xvfb", "openbox", "xdotool"}) {
      // tools/dev.sh test installs all three; a missing one is a broken set-up, not a skip,
      // except for Xvfb itself (no X server can be started).
      if (std::string(tool) == "Xvfb" && !OnPath(tool)) {
        GTEST_SKIP() << "Xvfb is not installed: cannot start an X server (tools/dev.sh test "
                        "installs xvfb, openbox and xdotool)";
      }
      ASSERT_TRUE(OnPath(tool)) << tool << " is missing: run tools/dev.sh test";
    }
    dir_ = fs::temp_directory_path() /
           ("uf_history_x11_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    log_ = (dir_ / "x.log").string();
    // ctest runs tests in parallel: a display another test took in the meantime makes Xvfb
    // exit at once, and the next free one is tried.
    bool started = false;
    for (int n = 90 + ::getpid() % 100, tries = 0; n < 400 && tries < 8 && !started; ++n) {
      if (fs::exists("/tmp/.X11-unix/X" + std::to_string(n)) ||
          fs::exists("/tmp/.X" + std::to_string(n) + "-lock")) {
        continue;
      }
      display_ = ":" + std::to_string(n);
      ++tries;
      started = StartX();
    }
    if (!started) GTEST_SKIP() << "Xvfb did not start: " << Slurp(log_);
    wm_ = Spawn({"openbox"}, display_, log_);
    ASSERT_TRUE(WaitForWindowManager()) << "openbox did not start: " << Slurp(log_);
  }

  void TearDown() override {
    Stop(&recorder_);
    Stop(&app_);
    Stop(&dbus_);
    ::unsetenv("DBUS_SESSION_BUS_ADDRESS");
    if (conn_ != nullptr) xcb_disconnect(conn_);
    Stop(&wm_);
    Stop(&xvfb_);
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }

  bool StartX() {
    xvfb_ = Spawn({"Xvfb", display_, "-screen", "0", "800x600x24", "-nolisten", "tcp"}, "", log_);
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(milliseconds(50));
      int status = 0;
      if (::waitpid(xvfb_, &status, WNOHANG) == xvfb_) {  // it exited: the display is taken
        xvfb_ = -1;
        return false;
      }
      xcb_connection_t* c = xcb_connect(display_.c_str(), nullptr);
      const bool ok = !xcb_connection_has_error(c);
      if (ok) {
        if (conn_ == nullptr) {
          conn_ = c;
          screen_ = xcb_setup_roots_iterator(xcb_get_setup(conn_)).data;
        } else {
          xcb_disconnect(c);
        }
        return true;
      }
      xcb_disconnect(c);
    }
    Stop(&xvfb_);
    return false;
  }

  xcb_atom_t Atom(const char* name) {
    auto* r = xcb_intern_atom_reply(
        conn_, xcb_intern_atom(conn_, 0, static_cast<uint16_t>(strlen(name)), name), nullptr);
    const xcb_atom_t a = r ? r->atom : static_cast<xcb_atom_t>(XCB_ATOM_NONE);
    free(r);
    return a;
  }

  bool WaitForWindowManager() {
    const xcb_atom_t check = Atom("_NET_SUPPORTING_WM_CHECK");
    for (int i = 0; i < 200; ++i) {
      auto* r = xcb_get_property_reply(
          conn_, xcb_get_property(conn_, 0, screen_->root, check, XCB_ATOM_WINDOW, 0, 1), nullptr);
      const bool found = r != nullptr && xcb_get_property_value_length(r) > 0;
      free(r);
      if (found) return true;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return false;
  }

  // A plain window with WM_CLASS "instance\0klass\0" and _NET_WM_NAME title.
  xcb_window_t OpenWindow(const std::string& instance, const std::string& klass,
                          const std::string& title) {
    const xcb_window_t w = xcb_generate_id(conn_);
    const uint32_t values[] = {screen_->white_pixel};
    xcb_create_window(conn_, XCB_COPY_FROM_PARENT, w, screen_->root, 10, 10, 300, 200, 1,
                      XCB_WINDOW_CLASS_INPUT_OUTPUT, screen_->root_visual, XCB_CW_BACK_PIXEL,
                      values);
    const std::string cls = instance + '\0' + klass + '\0';
    xcb_change_property(conn_, XCB_PROP_MODE_REPLACE, w, XCB_ATOM_WM_CLASS, XCB_ATOM_STRING, 8,
                        cls.size(), cls.data());
    xcb_change_property(conn_, XCB_PROP_MODE_REPLACE, w, Atom("_NET_WM_NAME"), Atom("UTF8_STRING"),
                        8, title.size(), title.data());
    xcb_change_property(conn_, XCB_PROP_MODE_REPLACE, w, XCB_ATOM_WM_NAME, XCB_ATOM_STRING, 8,
                        title.size(), title.data());
    xcb_map_window(conn_, w);
    xcb_flush(conn_);
    return w;
  }

  int Xdotool(const std::string& args) {
    return std::system(
        ("DISPLAY=" + display_ + " xdotool " + args + " >>" + log_ + " 2>&1").c_str());
  }
  void Activate(xcb_window_t w) {
    ASSERT_EQ(Xdotool("windowactivate --sync " + std::to_string(w)), 0) << Slurp(log_);
  }

  std::string Ultrafast(const std::string& args, int* code) {
    const std::string out = (dir_ / "cmd.out").string();
    const int status = std::system((binary_.string() + " " + args + " >" + out + " 2>&1").c_str());
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return Slurp(out);
  }

  std::vector<nlohmann::json> Events() {
    std::vector<nlohmann::json> out;
    for (const auto& seg : fs::directory_iterator(dir_ / "history" / "segments")) {
      std::ifstream in(seg.path() / "events.jsonl");
      for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a["ts"] < b["ts"]; });
    return out;
  }

  fs::path binary_, dir_;
  std::string display_, log_;
  pid_t xvfb_ = -1, wm_ = -1, recorder_ = -1, app_ = -1, dbus_ = -1;
  xcb_connection_t* conn_ = nullptr;
  xcb_screen_t* screen_ = nullptr;
};

TEST_F(HistoryX11Test, RecordsWindowsInputAndIdleAndSurvivesTheServerGoingAway) {
  const xcb_window_t alpha = OpenWindow("alpha", "Alpha", "Alpha notes");
  const xcb_window_t beta = OpenWindow("beta", "Beta", "Beta mail");
  const xcb_window_t secret = OpenWindow("gamma", "Gamma", "My secret plans");
  // openbox focuses windows as it maps them; let that settle before choosing the first one.
  std::this_thread::sleep_for(milliseconds(500));
  Activate(alpha);
  const fs::path history = dir_ / "history";
  recorder_ = Spawn({binary_.string(), "history", "record", "--dir", history.string(), "--display",
                     display_, "--afk-seconds", "2", "--block-title", "SECRET"},
                    "", (dir_ / "record.log").string());
  // Started: it has written its first events.
  for (int i = 0; i < 500 && !fs::exists(history / "recorder.pid"); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(700));

  // Nothing leaves the machine: every socket the recorder holds is a Unix socket (the X
  // connection, one), none is TCP or UDP.
  {
    const std::set<std::string> unix_sockets = SocketInodes("unix");
    std::set<std::string> inet;
    for (const char* t : {"tcp", "tcp6", "udp", "udp6", "raw", "raw6"}) {
      for (const std::string& i : SocketInodes(t)) inet.insert(i);
    }
    int sockets = 0;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(recorder_) + "/fd")) {
      std::error_code ec;
      const std::string target = fs::read_symlink(fd.path(), ec).string();
      if (target.rfind("socket:[", 0) != 0) continue;
      ++sockets;
      const std::string inode = target.substr(8, target.size() - 9);
      EXPECT_TRUE(unix_sockets.count(inode)) << "not a Unix socket: " << target;
      EXPECT_FALSE(inet.count(inode)) << "a network socket: " << target;
    }
    EXPECT_EQ(sockets, 1);
  }

  ASSERT_EQ(Xdotool("type --delay 20 hello"), 0);
  // Inside the active window: a click elsewhere would move the focus.
  ASSERT_EQ(Xdotool("mousemove --window " + std::to_string(alpha) + " 20 20 click 1"), 0);
  Activate(beta);
  std::this_thread::sleep_for(milliseconds(300));
  ASSERT_EQ(Xdotool("type --delay 20 abc"), 0);
  Activate(secret);
  std::this_thread::sleep_for(milliseconds(300));
  Activate(alpha);
  // Idle past --afk-seconds 2.
  std::this_thread::sleep_for(milliseconds(3500));

  // The X server goes away and comes back: the recorder waits and reconnects.
  Stop(&wm_);
  xcb_disconnect(conn_);
  conn_ = nullptr;
  Stop(&xvfb_);
  std::this_thread::sleep_for(milliseconds(1500));
  int status = 0;
  ASSERT_EQ(::waitpid(recorder_, &status, WNOHANG), 0) << "the recorder exited with the display";
  ASSERT_TRUE(StartX());
  std::this_thread::sleep_for(milliseconds(3500));
  ::kill(recorder_, SIGTERM);
  ASSERT_EQ(WaitFor(&recorder_, 10), 0) << Slurp(dir_ / "record.log");

  const std::vector<nlohmann::json> events = Events();
  std::vector<std::string> windows, states;
  int64_t keys = 0, clicks = 0;
  bool afk = false;
  for (const nlohmann::json& e : events) {
    if (e["kind"] == "window") {
      windows.push_back(e.value("blocked", false)
                            ? "(blocked)"
                            : e.value("app", "") + ":" + e.value("title", ""));
    }
    if (e["kind"] == "input") {
      keys += e["keys"].get<int64_t>();
      clicks += e["clicks"].get<int64_t>();
    }
    if (e["kind"] == "afk" && e["afk"] == true) afk = true;
    if (e["kind"] == "status") states.push_back(e["state"]);
  }
  const std::vector<std::string> want = {"Alpha:Alpha notes", "Beta:Beta mail", "(blocked)",
                                         "Alpha:Alpha notes"};
  // In this order; the window manager may add focus changes of its own in between (it hands
  // the focus on when it exits, and maps windows with a focus of their own).
  size_t at = 0;
  for (const std::string& w : windows) {
    if (at < want.size() && w == want[at]) ++at;
  }
  EXPECT_EQ(at, want.size()) << "windows: " << ::testing::PrintToString(windows) << "\n"
                             << Slurp(log_);
  EXPECT_GE(keys, 8);   // "hello" + "abc"; a key's release is not counted
  EXPECT_LE(keys, 12);  // counted once each, not once per device
  EXPECT_EQ(clicks, 1);
  EXPECT_TRUE(afk);
  EXPECT_EQ(states.front(), "started");
  EXPECT_NE(std::find(states.begin(), states.end(), "display_lost"), states.end());
  EXPECT_NE(std::find(states.begin(), states.end(), "display_back"), states.end());
  EXPECT_EQ(states.back(), "stopped");
  EXPECT_FALSE(fs::exists(history / "recorder.pid"));

  // The blocked title is nowhere, not even in the counts; keys are counts, never the keys.
  const std::string all = AllText(history);
  EXPECT_EQ(all.find("secret"), std::string::npos);
  EXPECT_EQ(all.find("hello"), std::string::npos);
  struct stat st;
  ASSERT_EQ(::stat(history.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& e : fs::recursive_directory_iterator(history)) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, e.is_directory() ? 0700u : 0600u) << e.path();
  }

  int code = 0;
  std::string out = Ultrafast("history summarize --dir " + history.string(), &code);
  ASSERT_EQ(code, 0) << out;
  std::string summaries;
  for (const auto& e : fs::directory_iterator(history / "summaries")) summaries += Slurp(e.path());
  EXPECT_NE(summaries.find("**Alpha** — Alpha notes"), std::string::npos) << summaries;
  EXPECT_NE(summaries.find("**Beta** — Beta mail"), std::string::npos) << summaries;
  EXPECT_NE(summaries.find("\"Alpha\""), std::string::npos) << summaries;  // front matter

  out = Ultrafast("history status --dir " + history.string(), &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("recording: no"), std::string::npos) << out;
  // The counts agree with the events (openbox may hand the focus to the blocked window again as
  // it exits, so there can be more than one).
  const auto blocked = std::count(windows.begin(), windows.end(), "(blocked)");
  EXPECT_NE(out.find("blocked " + std::to_string(blocked) + ","), std::string::npos) << out;
  EXPECT_NE(out.find("captured " + std::to_string(events.size() - blocked) + ","),
            std::string::npos)
      << out;

  out = Ultrafast("history purge --all --dir " + history.string(), &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_FALSE(fs::exists(history / "segments"));
  EXPECT_FALSE(fs::exists(history / "summaries"));
}

// A GTK form with a name field and a password field, for the AT-SPI check.
constexpr char kLoginForm[] = R"(import gi
gi.require_version("Gtk", "3.0")
from gi.repository import Gtk
w = Gtk.Window(title="Login form")
box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL)
user = Gtk.Entry()
password = Gtk.Entry()
password.set_visibility(False)
box.add(user)
box.add(password)
w.add(box)
w.connect("destroy", Gtk.main_quit)
w.show_all()
Gtk.main()
)";

TEST_F(HistoryX11Test, AtspiRecordsFocusedRolesNeverPasswordFieldsAndMasksText) {
  for (const char* tool : {"dbus-daemon", "/usr/bin/python3"}) {
    ASSERT_TRUE(OnPath(tool)) << tool << " is missing: run tools/dev.sh test";
  }
  ASSERT_TRUE(fs::exists("/usr/libexec/at-spi-bus-launcher"))
      << "at-spi2-core is missing: run tools/dev.sh test";
  // A D-Bus session of its own; the accessibility bus is started from it on demand.
  const std::string bus = "unix:path=" + (dir_ / "bus").string();
  dbus_ = Spawn({"dbus-daemon", "--session", "--nofork", "--address=" + bus}, "", log_);
  for (int i = 0; i < 500 && !fs::exists(dir_ / "bus"); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(dir_ / "bus")) << Slurp(log_);
  ::setenv("DBUS_SESSION_BUS_ADDRESS", bus.c_str(), 1);
  std::ofstream(dir_ / "login_form.py") << kLoginForm;
  app_ = Spawn({"/usr/bin/python3", (dir_ / "login_form.py").string()}, display_, log_);
  const fs::path found = dir_ / "found";
  std::string window;
  for (int i = 0; i < 100 && window.empty(); ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    std::system(("DISPLAY=" + display_ + " xdotool search --name 'Login form' >" + found.string() +
                 " 2>>" + log_)
                    .c_str());
    std::istringstream(Slurp(found)) >> window;
  }
  ASSERT_FALSE(window.empty()) << "the GTK form did not open: " << Slurp(log_);

  const fs::path history = dir_ / "history";
  recorder_ = Spawn({binary_.string(), "history", "record", "--dir", history.string(), "--display",
                     display_, "--atspi"},
                    "", (dir_ / "record.log").string());
  for (int i = 0; i < 500 && !fs::exists(history / "recorder.pid"); ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(1500));
  ASSERT_EQ(Xdotool("windowactivate --sync " + window), 0);
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_EQ(Xdotool("type --delay 20 alice"), 0);
  ASSERT_EQ(Xdotool("key Tab"), 0);
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_EQ(Xdotool("type --delay 20 hunter2"), 0);
  ASSERT_EQ(Xdotool("key Tab"), 0);
  std::this_thread::sleep_for(milliseconds(2500));
  // A crash (SIGKILL: no chance to flush or say "stopped") loses at most the last second: the
  // keys typed 2.5 s before (1.5 s of slack for a loaded machine) are all on disk.
  ::kill(recorder_, SIGKILL);
  const int code = WaitFor(&recorder_, 10);
  Stop(&app_);
  Stop(&dbus_);
  ASSERT_EQ(code, 128 + SIGKILL);

  int text_focus = 0, masked = 0;
  int64_t keys = 0;
  for (const nlohmann::json& e : Events()) {
    if (e["kind"] == "input") keys += e["keys"].get<int64_t>();
    if (e["kind"] != "focus") continue;
    EXPECT_EQ(e["role"].get<std::string>().find("password"), std::string::npos) << e.dump();
    if (e["role"] == "text") ++text_focus;
    if (e.value("text", "") == "[masked]") ++masked;
  }
  EXPECT_GE(text_focus, 1) << Slurp(dir_ / "record.log");
  EXPECT_GE(masked, 1);  // back in the name field, which now holds "alice"
  int64_t suppressed = 0;
  for (const auto& seg : fs::directory_iterator(history / "segments")) {
    suppressed +=
        nlohmann::json::parse(Slurp(seg.path() / "counts.json"))["suppressed"].get<int64_t>();
  }
  EXPECT_GE(suppressed, 1);  // the password field's focus
  EXPECT_EQ(keys, 14);       // "alice", Tab, "hunter2", Tab
  const std::string all = AllText(history);
  EXPECT_EQ(all.find("alice"), std::string::npos);
  EXPECT_EQ(all.find("hunter2"), std::string::npos);
  // The crashed recorder's pid file is left behind; status is not fooled by it.
  int status_code = 0;
  const std::string status = Ultrafast("history status --dir " + history.string(), &status_code);
  EXPECT_EQ(status_code, 0) << status;
  EXPECT_NE(status.find("recording: no"), std::string::npos) << status;
}

#else  // !UF_HAVE_XCB

TEST(HistoryX11Test, NeedsXcb) {
  GTEST_SKIP() << "built without the xcb development packages: no X11 collector to test "
                  "(tools/dev.sh installs them)";
}

#endif  // UF_HAVE_XCB

TEST(HistoryCliTest, AskAnswersFromSummariesWithCitations) {
  UF_REQUIRE_SHARED();
  const fs::path binary = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
  if (!fs::exists(binary)) GTEST_SKIP() << "ultrafast binary not built at " << binary;
  const fs::path model = "../shared/models/tiny-llama-256-q8_0.gguf";
  ASSERT_TRUE(fs::exists(model)) << "test data missing: " << model;
  const fs::path dir = fs::temp_directory_path() / ("uf_history_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    auto w = std::move(SegmentWriter::Open(dir.string())).value();
    Event e;
    e.kind = EventKind::kWindow;
    e.ts = 1796115600.0 + 30;
    e.app = "Alpha";
    e.title = "Alpha notes";
    ASSERT_TRUE(w->Write(e, Verdict::kKeep).ok());
  }
  auto run = [&](const std::string& args, int* code) {
    const fs::path out = dir / "out.txt";
    const int status =
        std::system((binary.string() + " " + args + " >" + out.string() + " 2>&1").c_str());
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return Slurp(out);
  };
  int code = 0;
  std::string out =
      run("history ask 'where was I?' -m " + model.string() + " --dir " + dir.string(), &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("history summarize"), std::string::npos) << out;  // says what to do

  out = run("history summarize -n 8 -t 2 -m " + model.string() + " --dir " + dir.string(), &code);
  ASSERT_EQ(code, 0) << out;
  const std::string md = Slurp(dir / "summaries" / "20261201T090000Z.md");
  EXPECT_NE(md.find("## Summary\n\n"), std::string::npos) << md;  // the model's prose section
  EXPECT_NE(md.find("## What happened"), std::string::npos) << md;

  out = run("history ask 'where was I?' -n 8 -t 2 -m " + model.string() + " --dir " + dir.string(),
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("Sources:\n  [S1] summaries/20261201T090000Z.md (2026-12-01T09:00:30Z to "),
            std::string::npos)
      << out;

  fs::remove_all(dir);
}

TEST(HistoryCliTest, SkillsAreOfferedAfterThreeDaysAndConfirmedByThePerson) {
  const fs::path binary = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
  if (!fs::exists(binary)) GTEST_SKIP() << "ultrafast binary not built at " << binary;
  const fs::path dir =
      fs::temp_directory_path() / ("uf_history_skills_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto run = [&](const std::string& args, int* code) {
    const fs::path out =
        fs::temp_directory_path() / ("uf_skills_out_" + std::to_string(::getpid()));
    const int status = std::system(
        (binary.string() + " " + args + " --dir " + dir.string() + " >" + out.string() + " 2>&1")
            .c_str());
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string text = Slurp(out);
    fs::remove(out);
    return text;
  };
  auto record_day = [&](int day) {
    auto w = std::move(SegmentWriter::Open(dir.string())).value();
    const double t = 1796115600.0 + day * 86400.0;
    const char* apps[] = {"Mail", "Browser", "Sheet", "Mail"};
    for (int i = 0; i < 4; ++i) {
      Event e;
      e.kind = EventKind::kWindow;
      e.ts = t + 30 * i;
      e.app = apps[i];
      e.title = "day " + std::to_string(day) + " item " + std::to_string(i);
      e.role = "normal";
      ASSERT_TRUE(w->Write(e, Verdict::kKeep).ok());
      Event in;
      in.kind = EventKind::kInput;
      in.ts = e.ts + 10;
      in.keys = 5;
      ASSERT_TRUE(w->Write(in, Verdict::kKeep).ok());
    }
  };
  int code = 0;
  record_day(0);
  record_day(1);
  std::string out = run("history skills", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("no workflow seen on 3 or more days"), std::string::npos) << out;
  record_day(2);
  out = run("history skills", &code);
  ASSERT_EQ(code, 0) << out;
  const std::string name = "mail-browser-sheet-8-steps";
  EXPECT_NE(out.find("offered: " + name + " (8 steps, seen on 3 days)"), std::string::npos) << out;
  const fs::path draft = dir / "skills" / "drafts" / name / "SKILL.md";
  ASSERT_TRUE(fs::exists(draft)) << out;
  EXPECT_NE(Slurp(draft).find("status: draft"), std::string::npos);

  out = run("history skills --confirm no-such-skill", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("no draft named"), std::string::npos) << out;
  out = run("history skills --confirm " + name, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_FALSE(fs::exists(draft));
  const std::string skill = Slurp(dir / "skills" / name / "SKILL.md");
  EXPECT_NE(skill.find("status: confirmed"), std::string::npos) << skill;
  EXPECT_NE(skill.find("1. Switch to **Mail** (normal)"), std::string::npos) << skill;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace uf::history
