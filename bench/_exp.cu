// TEMPORARY experiment - deleted after use.
#include "src/bench_common.h"
using namespace bench;
static double mf(size_t sz, int n) { int64_t t0 = now_ns(); for (int i = 0; i < n; i++) { void *p; CHECK(cudaMalloc(&p, sz)); CHECK(cudaFree(p)); } return (now_ns() - t0) / 1e3 / n; }
int main() {
  CHECK(cudaSetDevice(0)); CHECK(cudaFree(nullptr));
  int64_t t0 = now_ns(); void *p; CHECK(cudaMalloc(&p, 1 << 20)); int64_t t1 = now_ns(); CHECK(cudaFree(p)); int64_t t2 = now_ns();
  printf("first malloc %.1f free %.1f us\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3);
  for (int r = 0; r < 3; r++) printf("clean 1MiB: %.2f us\n", median_of_batches(9, [] { return mf(1 << 20, 200); }));
  printf("clean 2MiB: %.2f us\n", median_of_batches(9, [] { return mf(2 << 20, 200); }));
  printf("clean 4MiB: %.2f us\n", median_of_batches(9, [] { return mf(4 << 20, 200); }));
  void *small; CHECK(cudaMalloc(&small, 256));
  printf("with 256B live 1MiB: %.2f us\n", median_of_batches(9, [] { return mf(1 << 20, 200); }));
  CHECK(cudaFree(small));
  printf("after free 1MiB: %.2f us\n", median_of_batches(9, [] { return mf(1 << 20, 200); }));
  void *big; CHECK(cudaMalloc(&big, 1ull << 30));
  printf("with 1GiB live 1MiB: %.2f us\n", median_of_batches(9, [] { return mf(1 << 20, 200); }));
  return 0;
}
