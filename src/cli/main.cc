#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "ultrafast: not yet implemented\n");
  return 1;
}
