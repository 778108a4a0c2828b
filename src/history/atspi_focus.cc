#include "history/atspi_focus.h"

#ifdef UF_HAVE_ATSPI

#include <atspi/atspi.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "history/privacy.h"

namespace uf::history {

namespace {

std::string Take(gchar* s) {
  std::string out = s != nullptr ? s : "";
  g_free(s);
  return out;
}

class AtspiWatcher final : public FocusWatcher {
 public:
  explicit AtspiWatcher(const Clock* clock) : clock_(clock) {}

  ~AtspiWatcher() override {
    if (thread_.joinable()) {
      stop_ = true;
      // Wakes the loop's poll; a wake-up sent before it polls makes that poll return at once.
      g_main_context_wakeup(nullptr);
      thread_.join();
    }
  }

  Status Start() {
    thread_ = std::thread([this] { Loop(); });
    std::unique_lock lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_; });
    if (!started_.ok()) {
      lock.unlock();
      thread_.join();
      return started_;
    }
    return OkStatus();
  }

  void Drain(std::vector<Event>* out) override {
    std::lock_guard lock(mu_);
    for (Event& e : pending_) out->push_back(std::move(e));
    pending_.clear();
  }

 private:
  // Every AT-SPI call happens on this thread, which runs its GLib main loop.
  void Loop() {
    Status s = OkStatus();
    AtspiEventListener* listener = nullptr;
    if (atspi_init() > 1) {
      s = UnavailableError("AT-SPI2 could not start (no accessibility bus?)");
    } else {
      listener = atspi_event_listener_new(&AtspiWatcher::OnFocus, this, nullptr);
      GError* error = nullptr;
      if (!atspi_event_listener_register(listener, "object:state-changed:focused", &error)) {
        s = UnavailableError(std::string("AT-SPI2 focus events: ") +
                             (error != nullptr ? error->message : "cannot listen"));
        if (error != nullptr) g_error_free(error);
      }
    }
    {
      std::lock_guard lock(mu_);
      started_ = s;
      ready_ = true;
    }
    ready_cv_.notify_all();
    while (s.ok() && !stop_) g_main_context_iteration(nullptr, /*may_block=*/TRUE);
    if (listener != nullptr) g_object_unref(listener);
    atspi_exit();
  }

  static void OnFocus(AtspiEvent* event, void* self) {
    static_cast<AtspiWatcher*>(self)->Focus(event);
    g_boxed_free(ATSPI_TYPE_EVENT, event);
  }

  void Focus(AtspiEvent* event) {
    if (event->detail1 != 1 || event->source == nullptr) return;  // focus lost
    Event e;
    e.kind = EventKind::kFocus;
    e.ts = clock_->Now();
    e.role = Take(atspi_accessible_get_role_name(event->source, nullptr));
    AtspiAccessible* app = atspi_accessible_get_application(event->source, nullptr);
    if (app != nullptr) {
      e.app = Take(atspi_accessible_get_name(app, nullptr));
      g_object_unref(app);
    }
    if (!IsPasswordRole(e.role)) {
      e.name = Take(atspi_accessible_get_name(event->source, nullptr));
      // Only whether there is text; the text itself is never fetched.
      AtspiText* text = atspi_accessible_get_text_iface(event->source);
      if (text != nullptr) {
        if (atspi_text_get_character_count(text, nullptr) > 0) e.text = "[masked]";
        g_object_unref(text);
      }
    }
    std::lock_guard lock(mu_);
    // Toolkits often report one focus change twice.
    if (!pending_.empty() && pending_.back().role == e.role && pending_.back().app == e.app &&
        pending_.back().name == e.name) {
      return;
    }
    pending_.push_back(std::move(e));
  }

  const Clock* clock_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable ready_cv_;
  bool ready_ = false;
  std::atomic<bool> stop_{false};
  Status started_;
  std::vector<Event> pending_;
};

}  // namespace

bool AtspiBuilt() { return true; }

StatusOr<std::unique_ptr<FocusWatcher>> FocusWatcher::Start(const Clock* clock) {
  auto w = std::make_unique<AtspiWatcher>(clock);
  UF_RETURN_IF_ERROR(w->Start());
  return std::unique_ptr<FocusWatcher>(std::move(w));
}

}  // namespace uf::history

#else  // !UF_HAVE_ATSPI

namespace uf::history {

bool AtspiBuilt() { return false; }

StatusOr<std::unique_ptr<FocusWatcher>> FocusWatcher::Start(const Clock*) {
  return UnimplementedError(
      "--atspi is not built in: install libatspi2.0-dev (tools/dev.sh does) and rebuild");
}

}  // namespace uf::history

#endif
