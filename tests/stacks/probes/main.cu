// k.cu's kernel and a main that takes its address: nvcc compiles and links an executable that runs
__global__ void add_one(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

#include <cstdio>
int main() { printf("%p\n", (void *)add_one); return 0; }
