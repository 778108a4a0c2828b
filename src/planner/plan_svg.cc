// The latency/throughput chart of `ultrafast plan --svg`: per-user tok/s (what a user feels)
// against aggregate tok/s per device (what the operator sells), one curve per profile, batch
// sizes marked. Log axes, because profiles differ by orders of magnitude.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "planner/planner.h"

namespace uf::planner {
namespace {

constexpr int kWidth = 760, kHeight = 480;
constexpr int kLeft = 80, kRight = 190, kTop = 40, kBottom = 60;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                   "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '&') {
      out += "&amp;";
    } else {
      out += c;
    }
  }
  return out;
}

// Log-axis range covering [lo, hi] in whole decades.
void Decades(double lo, double hi, double* a, double* b) {
  *a = std::floor(std::log10(std::max(lo, 1e-9)));
  *b = std::ceil(std::log10(std::max(hi, 1e-9)));
  if (*b <= *a) *b = *a + 1;
}

}  // namespace

std::string PlanSvg(const PlanReport& r) {
  double x_lo = 1e300, x_hi = 0, y_lo = 1e300, y_hi = 0;
  for (const HardwarePlan& h : r.hardware) {
    for (const PlanRow& row : h.rows) {
      x_lo = std::min(x_lo, row.per_device_tok_s);
      x_hi = std::max(x_hi, row.per_device_tok_s);
      y_lo = std::min(y_lo, row.per_user_tok_s);
      y_hi = std::max(y_hi, row.per_user_tok_s);
    }
  }
  double xa, xb, ya, yb;
  Decades(x_lo, x_hi, &xa, &xb);
  Decades(y_lo, y_hi, &ya, &yb);
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double v) { return kLeft + (std::log10(v) - xa) / (xb - xa) * pw; };
  auto py = [&](double v) { return kTop + ph - (std::log10(v) - ya) / (yb - ya) * ph; };

  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
                "height=\"100%%\" fill=\"white\"/>\n",
                kWidth, kHeight);
  out += buf;
  std::snprintf(buf, sizeof buf,
                "<text x=\"%d\" y=\"20\" font-size=\"14\">%s (%s), context %lld: per-user speed "
                "against throughput per device</text>\n",
                kLeft, Escape(r.model.name).c_str(), Escape(r.model.weight_type).c_str(),
                static_cast<long long>(r.options.context));
  out += buf;
  // Decade grid lines and labels.
  for (double d = xa; d <= xb + 1e-9; d += 1) {
    const double x = kLeft + (d - xa) / (xb - xa) * pw;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                  x, kTop, x, kTop + ph, x, kTop + ph + 16, std::pow(10.0, d));
    out += buf;
  }
  for (double d = ya; d <= yb + 1e-9; d += 1) {
    const double y = kTop + ph - (d - ya) / (yb - ya) * ph;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                  kLeft, y, kLeft + pw, y, kLeft - 6, y + 4, std::pow(10.0, d));
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">aggregate tok/s per device "
                "(log)</text>\n<text x=\"18\" y=\"%.1f\" transform=\"rotate(-90 18 %.1f)\" "
                "text-anchor=\"middle\">per-user tok/s (log)</text>\n",
                kLeft + pw / 2, kHeight - 20, kTop + ph / 2, kTop + ph / 2);
  out += buf;
  for (size_t i = 0; i < r.hardware.size(); ++i) {
    const HardwarePlan& h = r.hardware[i];
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    std::string points;
    for (const PlanRow& row : h.rows) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", px(row.per_device_tok_s),
                    py(row.per_user_tok_s));
      points += buf;
    }
    out += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
           "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
    for (const PlanRow& row : h.rows) {
      std::snprintf(buf, sizeof buf,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/><text x=\"%.1f\" "
                    "y=\"%.1f\" font-size=\"9\" fill=\"%s\">%lld</text>\n",
                    px(row.per_device_tok_s), py(row.per_user_tok_s), color,
                    px(row.per_device_tok_s) + 4, py(row.per_user_tok_s) - 4, color,
                    static_cast<long long>(row.batch));
      out += buf;
    }
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"4\" fill=\"%s\"/><text "
                  "x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                  kLeft + pw + 14, kTop + 10 + 18.0 * i, color, kLeft + pw + 30,
                  kTop + 15 + 18.0 * i, Escape(h.hw.name).c_str());
    out += buf;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace uf::planner
