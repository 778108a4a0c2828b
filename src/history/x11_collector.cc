#include "history/x11_collector.h"

#ifdef UF_HAVE_XCB

#include <poll.h>
#include <xcb/screensaver.h>
#include <xcb/xcb.h>
#include <xcb/xcb_ewmh.h>
#include <xcb/xcb_icccm.h>
#include <xcb/xinput.h>

#include <cstdlib>
#include <cstring>

namespace uf::history {

namespace {

// Titles longer than this are cut: nobody reads past it, and it bounds what a hostile title costs.
constexpr size_t kMaxTitleBytes = 512;
// _NET_ACTIVE_WINDOW is None for a moment between two windows; only a None that lasts this
// long (the desktop has the focus) is reported.
constexpr double kNoneDebounceSeconds = 1.0;

class X11Collector final : public Collector {
 public:
  X11Collector(const Clock* clock) : clock_(clock) {}
  ~X11Collector() override {
    if (ewmh_ready_) xcb_ewmh_connection_wipe(&ewmh_);
    if (conn_ != nullptr) xcb_disconnect(conn_);
  }

  Status Connect(const std::string& display) {
    int screen_num = 0;
    conn_ = xcb_connect(display.empty() ? nullptr : display.c_str(), &screen_num);
    if (xcb_connection_has_error(conn_)) {
      const char* env = std::getenv("DISPLAY");
      return UnavailableError("cannot connect to X display '" +
                              (display.empty() ? std::string(env ? env : "") : display) + "'");
    }
    screen_num_ = screen_num;
    xcb_screen_iterator_t it = xcb_setup_roots_iterator(xcb_get_setup(conn_));
    for (int i = 0; i < screen_num && it.rem > 0; ++i) xcb_screen_next(&it);
    root_ = it.data->root;

    xcb_intern_atom_cookie_t* cookies = xcb_ewmh_init_atoms(conn_, &ewmh_);
    if (!xcb_ewmh_init_atoms_replies(&ewmh_, cookies, nullptr)) {
      return UnavailableError("cannot read the EWMH atoms");
    }
    ewmh_ready_ = true;
    role_atom_ = InternAtom("WM_WINDOW_ROLE");

    const xcb_query_extension_reply_t* xi = xcb_get_extension_data(conn_, &xcb_input_id);
    if (xi == nullptr || !xi->present) return UnavailableError("the X server lacks XInput");
    xi_opcode_ = xi->major_opcode;
    xcb_input_xi_query_version_reply_t* version =
        xcb_input_xi_query_version_reply(conn_, xcb_input_xi_query_version(conn_, 2, 2), nullptr);
    if (version == nullptr || version->major_version < 2) {
      std::free(version);
      return UnavailableError("the X server lacks XInput 2");
    }
    std::free(version);
    const xcb_query_extension_reply_t* ss = xcb_get_extension_data(conn_, &xcb_screensaver_id);
    if (ss == nullptr || !ss->present) {
      return UnavailableError("the X server lacks MIT-SCREEN-SAVER (idle time)");
    }

    const uint32_t mask = XCB_EVENT_MASK_PROPERTY_CHANGE;
    xcb_change_window_attributes(conn_, root_, XCB_CW_EVENT_MASK, &mask);
    // Raw events carry a key code, which is dropped unread: only their number is kept.
    struct {
      xcb_input_event_mask_t head;
      uint32_t bits;
    } select = {{XCB_INPUT_DEVICE_ALL_MASTER, 1},
                XCB_INPUT_XI_EVENT_MASK_RAW_KEY_PRESS | XCB_INPUT_XI_EVENT_MASK_RAW_BUTTON_PRESS};
    xcb_input_xi_select_events(conn_, root_, 1, &select.head);
    xcb_flush(conn_);
    if (xcb_connection_has_error(conn_)) return UnavailableError("the X connection failed");
    ReadActive(&initial_);
    return OkStatus();
  }

  Status Poll(double timeout_s, std::vector<Event>* out) override {
    for (Event& e : initial_) out->push_back(std::move(e));
    initial_.clear();
    pollfd pfd = {xcb_get_file_descriptor(conn_), POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(timeout_s * 1000));
    int64_t keys = 0, clicks = 0;
    while (xcb_generic_event_t* ev = xcb_poll_for_event(conn_)) {
      const uint8_t type = ev->response_type & 0x7f;
      if (type == XCB_PROPERTY_NOTIFY) {
        const auto* p = reinterpret_cast<xcb_property_notify_event_t*>(ev);
        if (p->window == root_ && p->atom == ewmh_._NET_ACTIVE_WINDOW) {
          ReadActive(out);
        } else if (p->window == active_ && active_ != XCB_NONE &&
                   (p->atom == ewmh_._NET_WM_NAME || p->atom == XCB_ATOM_WM_NAME)) {
          out->push_back(Describe(active_));
        }
      } else if (type == XCB_GE_GENERIC) {
        const auto* ge = reinterpret_cast<xcb_ge_generic_event_t*>(ev);
        if (ge->extension == xi_opcode_ && ge->event_type == XCB_INPUT_RAW_KEY_PRESS) {
          ++keys;
        } else if (ge->extension == xi_opcode_ && ge->event_type == XCB_INPUT_RAW_BUTTON_PRESS) {
          // Buttons 4-7 are the scroll wheel, not clicks.
          const auto* b = reinterpret_cast<const xcb_input_raw_button_press_event_t*>(ev);
          if (b->detail < 4 || b->detail > 7) ++clicks;
        }
      }
      std::free(ev);
    }
    if (keys > 0 || clicks > 0) {
      Event e;
      e.kind = EventKind::kInput;
      e.ts = clock_->Now();
      e.keys = keys;
      e.clicks = clicks;
      out->push_back(std::move(e));
    }
    if (none_since_ > 0 && clock_->Now() - none_since_ >= kNoneDebounceSeconds) {
      none_since_ = 0;
      Event e;
      e.kind = EventKind::kWindow;
      e.ts = clock_->Now();
      e.role = "desktop";
      out->push_back(std::move(e));
    }
    if (xcb_connection_has_error(conn_)) return UnavailableError("the X connection was lost");
    return OkStatus();
  }

  StatusOr<double> IdleSeconds() override {
    xcb_screensaver_query_info_reply_t* info =
        xcb_screensaver_query_info_reply(conn_, xcb_screensaver_query_info(conn_, root_), nullptr);
    if (info == nullptr) return UnavailableError("MIT-SCREEN-SAVER query failed");
    const double idle = info->ms_since_user_input / 1000.0;
    std::free(info);
    return idle;
  }

 private:
  xcb_atom_t InternAtom(const char* name) {
    xcb_intern_atom_reply_t* r = xcb_intern_atom_reply(
        conn_, xcb_intern_atom(conn_, 0, static_cast<uint16_t>(std::strlen(name)), name), nullptr);
    const xcb_atom_t atom = r != nullptr ? r->atom : static_cast<xcb_atom_t>(XCB_ATOM_NONE);
    std::free(r);
    return atom;
  }

  std::string StringProperty(xcb_window_t w, xcb_atom_t atom) {
    if (atom == XCB_ATOM_NONE) return {};
    xcb_get_property_reply_t* r = xcb_get_property_reply(
        conn_,
        xcb_get_property(conn_, 0, w, atom, XCB_GET_PROPERTY_TYPE_ANY, 0, kMaxTitleBytes / 4),
        nullptr);
    std::string s;
    if (r != nullptr && r->format == 8) {
      s.assign(static_cast<const char*>(xcb_get_property_value(r)),
               xcb_get_property_value_length(r));
    }
    std::free(r);
    return s.substr(0, s.find('\0'));
  }

  // The window's state as a kWindow event.
  Event Describe(xcb_window_t w) {
    Event e;
    e.kind = EventKind::kWindow;
    e.ts = clock_->Now();
    xcb_ewmh_get_utf8_strings_reply_t name;
    if (xcb_ewmh_get_wm_name_reply(&ewmh_, xcb_ewmh_get_wm_name(&ewmh_, w), &name, nullptr)) {
      e.title.assign(name.strings, name.strings_len);
      xcb_ewmh_get_utf8_strings_reply_wipe(&name);
    } else {
      xcb_icccm_get_text_property_reply_t text;
      if (xcb_icccm_get_wm_name_reply(conn_, xcb_icccm_get_wm_name(conn_, w), &text, nullptr)) {
        e.title.assign(text.name, text.name_len);
        xcb_icccm_get_text_property_reply_wipe(&text);
      }
    }
    if (e.title.size() > kMaxTitleBytes) e.title.resize(kMaxTitleBytes);
    xcb_icccm_get_wm_class_reply_t cls;
    if (xcb_icccm_get_wm_class_reply(conn_, xcb_icccm_get_wm_class(conn_, w), &cls, nullptr)) {
      e.app = cls.class_name != nullptr ? cls.class_name : "";
      xcb_icccm_get_wm_class_reply_wipe(&cls);
    }
    e.role = StringProperty(w, role_atom_);
    if (e.role.empty()) {
      xcb_ewmh_get_atoms_reply_t types;
      if (xcb_ewmh_get_wm_window_type_reply(&ewmh_, xcb_ewmh_get_wm_window_type(&ewmh_, w), &types,
                                            nullptr)) {
        if (types.atoms_len > 0) {
          e.role = types.atoms[0] == ewmh_._NET_WM_WINDOW_TYPE_DIALOG ? "dialog" : "normal";
        }
        xcb_ewmh_get_atoms_reply_wipe(&types);
      }
    }
    if (e.role.empty()) e.role = "normal";
    return e;
  }

  void ReadActive(std::vector<Event>* out) {
    xcb_window_t w = XCB_NONE;
    if (!xcb_ewmh_get_active_window_reply(&ewmh_, xcb_ewmh_get_active_window(&ewmh_, screen_num_),
                                          &w, nullptr)) {
      w = XCB_NONE;
    }
    if (w == XCB_NONE) {
      if (none_since_ == 0) none_since_ = clock_->Now();
      return;
    }
    none_since_ = 0;
    if (w != active_) {
      // Title changes of the active window (a browser's tab, an editor's file) come from it.
      const uint32_t mask = XCB_EVENT_MASK_PROPERTY_CHANGE;
      xcb_change_window_attributes(conn_, w, XCB_CW_EVENT_MASK, &mask);
      active_ = w;
    }
    out->push_back(Describe(w));
  }

  const Clock* clock_;
  xcb_connection_t* conn_ = nullptr;
  int screen_num_ = 0;
  xcb_window_t root_ = XCB_NONE;
  xcb_window_t active_ = XCB_NONE;
  xcb_ewmh_connection_t ewmh_;
  bool ewmh_ready_ = false;
  xcb_atom_t role_atom_ = XCB_ATOM_NONE;
  uint8_t xi_opcode_ = 0;
  double none_since_ = 0.0;
  std::vector<Event> initial_;
};

}  // namespace

bool X11CollectorBuilt() { return true; }

StatusOr<std::unique_ptr<Collector>> ConnectX11(const std::string& display, const Clock* clock) {
  auto c = std::make_unique<X11Collector>(clock);
  UF_RETURN_IF_ERROR(c->Connect(display));
  return std::unique_ptr<Collector>(std::move(c));
}

}  // namespace uf::history

#else  // !UF_HAVE_XCB

namespace uf::history {

bool X11CollectorBuilt() { return false; }

StatusOr<std::unique_ptr<Collector>> ConnectX11(const std::string&, const Clock*) {
  return UnimplementedError(
      "this build has no X11 collector: install libxcb-ewmh-dev libxcb-icccm4-dev "
      "libxcb-xinput-dev libxcb-screensaver0-dev (tools/dev.sh does) and rebuild");
}

}  // namespace uf::history

#endif
