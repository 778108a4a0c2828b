// UF_CHECK: broken invariants abort with a message. Recoverable errors use Status instead.
#pragma once

#include <sstream>

namespace uf::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `UF_CHECK(x) << "msg"` compile to nothing when x holds.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace uf::internal

#define UF_CHECK(cond)                     \
  (cond) ? (void)0                         \
         : ::uf::internal::Voidify() &     \
               ::uf::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define UF_CHECK_EQ(a, b) UF_CHECK((a) == (b)) << (a) << " vs " << (b) << " "
#define UF_CHECK_NE(a, b) UF_CHECK((a) != (b)) << (a) << " vs " << (b) << " "
#define UF_CHECK_LT(a, b) UF_CHECK((a) < (b)) << (a) << " vs " << (b) << " "
#define UF_CHECK_LE(a, b) UF_CHECK((a) <= (b)) << (a) << " vs " << (b) << " "
#define UF_CHECK_GT(a, b) UF_CHECK((a) > (b)) << (a) << " vs " << (b) << " "
#define UF_CHECK_GE(a, b) UF_CHECK((a) >= (b)) << (a) << " vs " << (b) << " "

#ifndef NDEBUG
#define UF_DCHECK(cond) UF_CHECK(cond)
#else
#define UF_DCHECK(cond) \
  while (false) UF_CHECK(cond)
#endif
